/// @file status.cuh
/// @brief The result every ReplaySSM host launcher returns.
#pragma once

#include <replayssm/detail/config.cuh>

namespace replayssm {

/// @brief What went wrong, as a category. `message` of @ref result says exactly what.
enum class status : int {
  success = 0,         ///< launched (or nothing to do)
  null_pointer,        ///< a required pointer is null
  misaligned_pointer,  ///< a pointer or stride does not allow the kernel's vector accesses
  bad_shape,           ///< a runtime shape is invalid (negative, zero where not allowed, too large)
  policy_mismatch,     ///< a runtime shape does not match the compile-time shape of the policy
  bad_stride,          ///< a stride is invalid (overlapping rows, negative)
  too_many_slots,      ///< the pool has more slots than the index type can address
  cuda_error,          ///< the CUDA runtime reported an error at launch (message: its
                       ///< cudaGetErrorString). The launcher's cudaGetLastError() also reports
                       ///< and clears an error left pending by earlier, unrelated work.
};

/// @brief Outcome of a host launcher: a category and a static, human-readable message.
/// @note `message` points to a string literal; it never needs freeing.
struct result {
  status code = status::success;    ///< category
  const char* message = "success";  ///< what is wrong, naming the parameter
  /// @brief True when the call succeeded.
  constexpr explicit operator bool() const { return code == status::success; }
  /// @brief True when the call succeeded.
  constexpr bool ok() const { return code == status::success; }
};

/// @brief Name of a status category.
inline const char* to_string(status s) {
  switch (s) {
    case status::success:
      return "success";
    case status::null_pointer:
      return "null_pointer";
    case status::misaligned_pointer:
      return "misaligned_pointer";
    case status::bad_shape:
      return "bad_shape";
    case status::policy_mismatch:
      return "policy_mismatch";
    case status::bad_stride:
      return "bad_stride";
    case status::too_many_slots:
      return "too_many_slots";
    case status::cuda_error:
      return "cuda_error";
  }
  return "unknown";
}

}  // namespace replayssm
