// Host-side checks shared by the launchers.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <replayssm/cache.cuh>
#include <replayssm/status.cuh>

namespace replayssm {
namespace detail {

inline constexpr result fail(status s, const char* message) { return result{s, message}; }
inline constexpr result ok() { return result{}; }

inline bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

/// Checks a state pool whose tiles are `rows x cols` per head, `heads` heads per slot: rows load
/// four elements at a time (16 bytes of fp32, 8 of a 16-bit type).
template <class T>
inline result check_pool(const basic_pool_ref<T>& pool, int heads, int rows, int cols,
                         const char* what_null, const char* what_align, const char* what_stride) {
  if (pool.data == nullptr) return fail(status::null_pointer, what_null);
  if (!aligned(pool.data, 4 * sizeof(T)) || pool.row_stride % 4 || pool.head_stride % 4 ||
      pool.slot_stride % 4)
    return fail(status::misaligned_pointer, what_align);
  if (pool.num_slots <= 0) return fail(status::bad_shape, "state pool: num_slots must be positive");
  if (pool.row_stride < cols || pool.head_stride < int64_t(rows) * pool.row_stride ||
      pool.slot_stride < int64_t(heads) * pool.head_stride)
    return fail(status::bad_stride, what_stride);
  return ok();
}

/// Checks the row scales of an 8-bit checkpoint or copy: `per_head` scales per head, `heads`
/// heads per slot, at least `num_slots` slots. The messages name the failing array.
/// Checks a split step's workspace (null: none, nothing to check): 4-byte aligned and
/// `size` >= the `needed` floats, so a launch never writes past what the caller allocated.
inline result check_workspace(const float* ws, int64_t size, int64_t needed, const char* what_align,
                              const char* what_size) {
  if (ws == nullptr) return ok();
  if (!aligned(ws, alignof(float))) return fail(status::misaligned_pointer, what_align);
  if (size < needed) return fail(status::bad_shape, what_size);
  return ok();
}

inline result check_scales(const scale_pool_ref& sc, int heads, int per_head, int32_t num_slots,
                           const char* what_null, const char* what_align, const char* what_stride,
                           const char* what_slots) {
  if (sc.data == nullptr) return fail(status::null_pointer, what_null);
  if (!aligned(sc.data, 4)) return fail(status::misaligned_pointer, what_align);
  if (sc.head_stride < per_head || sc.slot_stride < int64_t(heads) * sc.head_stride)
    return fail(status::bad_stride, what_stride);
  if (sc.num_slots < num_slots) return fail(status::bad_shape, what_slots);
  return ok();
}

/// Checks the batch rows against the pool they index.
inline result check_rows(const batch_ref& rows, int32_t num_slots) {
  if (rows.batch < 0) return fail(status::bad_shape, "batch must not be negative");
  if (rows.batch > 65535)
    return fail(status::bad_shape,
                "batch above 65535 rows per launch is not supported; split the launch");
  if (rows.null_slot >= 0 && rows.null_slot < num_slots)
    return fail(status::bad_shape,
                "null_slot lies inside [0, num_slots): a real slot would be skipped");
  if (rows.slot_idx == nullptr && rows.batch > num_slots)
    return fail(status::too_many_slots,
                "batch exceeds num_slots while slot_idx is null (row b uses slot b)");
  return ok();
}

inline result check_cursors(const cursor_ref& c) {
  if (c.cursor == nullptr) return fail(status::null_pointer, "cursors.cursor is null");
  if (c.arrivals == nullptr) return fail(status::null_pointer, "cursors.arrivals is null");
  return ok();
}

/// Whether two of the non-null `ptrs` are the same address. The launchers pass the arrays a
/// launch writes (checkpoints, serving copies, scales, buffers, cursors): two of them at one
/// address is a slip (one array passed twice) whose writes would silently overwrite each other.
/// Equal base addresses only: arrays carved from one allocation at different offsets, or
/// interleaved through their strides, are valid layouts and are not compared as ranges.
template <size_t N>
inline bool shares_base(const void* const (&ptrs)[N]) {
  for (size_t i = 0; i < N; ++i)
    for (size_t j = i + 1; j < N; ++j)
      if (ptrs[i] != nullptr && ptrs[i] == ptrs[j]) return true;
  return false;
}

/// materialize and eager_draft_step write the caller's state buffer `other` by batch row, not by
/// slot: pointed at the checkpoint pool or a pair's serving copy (`serving`, null without one)
/// they would overwrite other slots' checkpoints. `what` is the error message.
inline result check_caller_buffer(const void* other, const void* state, const void* serving,
                                  const char* what) {
  if (other == state || (serving != nullptr && other == serving))
    return fail(status::bad_stride, what);
  return ok();
}

/// A branching launch's `branch.ckpt_of` is written with the cursors: it needs its own array.
/// `what` is the error message.
inline result check_branch_map(const int32_t* ckpt_of, const cursor_ref& c, const char* what) {
  if (ckpt_of != nullptr && (ckpt_of == c.cursor || static_cast<const void*>(ckpt_of) ==
                                                        static_cast<const void*>(c.arrivals)))
    return fail(status::bad_stride, what);
  return ok();
}

inline result check_launch() {
  const cudaError_t e = cudaGetLastError();  // (clears it: the message is all the caller gets)
  if (e != cudaSuccess) return fail(status::cuda_error, cudaGetErrorString(e));
  return ok();
}

/// Whether `kernel`, as it runs on the current device, was compiled from PTX of virtual
/// architecture 90 or newer, so that its pdl_wait / pdl_trigger are the real grid-dependency
/// instructions. A kernel JIT-compiled on a Hopper GPU from older PTX (say compute_80) has them
/// compiled out: launched with programmatic serialization, its blocks could read what the
/// previous kernel has not yet written. (A failed query counts as not capable.)
template <class... KernelArgs>
bool pdl_capable(void (*kernel)(KernelArgs...)) {
  cudaFuncAttributes a = {};
  if (cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel)) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.ptxVersion >= 90;
}

/// Launches `kernel<<<grid, threads, 0, stream>>>(args...)` with programmatic stream
/// serialization (sm_90 programmatic dependent launch): its blocks may start once every block of
/// the previous launch on `stream` has triggered (or exited), and wait for that launch's writes
/// in pdl_wait. Captured into CUDA graphs as a programmatic edge. A kernel built from PTX older
/// than compute_90 (pdl_capable false) is launched in plain stream order instead: same results,
/// no overlap. `what` names the launch in the error returned when it fails (no sticky error is
/// left behind).
template <class... KernelArgs, class... Args>
result launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, unsigned threads,
                        cudaStream_t stream, const char* what, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_capable(kernel) ? 1 : 0;
  if (cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...) != cudaSuccess) {
    (void)cudaGetLastError();  // as check_launch: leave no sticky launch error behind
    return fail(status::cuda_error, what);
  }
  return check_launch();
}

/// Grid of a persistent kernel: as many blocks as fit on the device at once (at most `items`).
/// Raises the kernel's dynamic shared memory limit first. Host calls only (no stream work), so
/// this is safe during CUDA graph capture.
template <class Kernel>
result persistent_grid(Kernel kernel, int threads, size_t dyn_smem, int items, int& grid) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return fail(status::cuda_error, "cannot query the current device");
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dyn_smem)) !=
      cudaSuccess)
    return fail(status::cuda_error,
                "the pipelined kernel's shared memory (PipelineStages state "
                "tiles) exceeds the device's limit: use fewer stages or a "
                "smaller Tile");
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dyn_smem) !=
          cudaSuccess ||
      per_sm < 1)
    return fail(status::cuda_error, "the pipelined kernel does not fit on a multiprocessor");
  grid = sms * per_sm < items ? sms * per_sm : items;
  return ok();
}

}  // namespace detail
}  // namespace replayssm
