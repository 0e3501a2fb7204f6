/// @file policy.cuh
/// @brief Compile-time configuration: rules, precision pairs and the replay policy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <replayssm/detail/config.cuh>
#include <type_traits>

namespace replayssm {

/// @brief How a Gated DeltaNet state tile is stored in the engine's pool.
enum class state_layout {
  kv,  ///< `[slots, HV, K, V]`, V contiguous (flash-linear-attention)
  vk,  ///< `[slots, HV, V, K]`, K contiguous (the transposed layout some engines use)
};

namespace rules {

/// @brief Mamba-2 (SSD) decode rule: state `[headdim P, dstate N]` per head, N contiguous.
/// @tparam HeadDim P, the head dimension (a multiple of the tile rows).
/// @tparam DState N, the state dimension (16, 32, 64 or 128).
/// @tparam Input element type of the step inputs x, dt, B, C, z and of the output
///         (`float`, `__nv_bfloat16` or `__half`); buffered inputs keep this type, so replay
///         sees exactly what eager sees.
template <int HeadDim, int DState, class Input = __nv_bfloat16>
struct mamba2 {
  static constexpr int headdim = HeadDim;  ///< P
  static constexpr int dstate = DState;    ///< N
  using input_type = Input;                ///< type of step inputs and outputs
  static constexpr int default_tile = HeadDim < 64 ? HeadDim : 64;  ///< rows of P per block
  static constexpr int default_threads = 256;  ///< measured best on H200 (bench/NOTES.md)
  static constexpr int default_stages = 0;     ///< 0: one work item per block (see replay_policy)
  static_assert(DState == 16 || DState == 32 || DState == 64 || DState == 128,
                "mamba2: DState must be 16, 32, 64 or 128 (one warp covers a state row).");
  static_assert(HeadDim > 0 && HeadDim % 4 == 0,
                "mamba2: HeadDim must be a positive multiple of 4.");
};

/// @brief Gated DeltaNet decode rule: state `[K, V]` per value head (or `[V, K]`, see Layout).
/// @tparam KDim head_k_dim (16, 32, 64 or 128).
/// @tparam VDim head_v_dim (a multiple of the tile columns).
/// @tparam Input element type of q, k, v and of the output; g and beta are `float`.
/// @tparam Layout storage order of each state tile in the engine's pool.
template <int KDim, int VDim, class Input = __nv_bfloat16, state_layout Layout = state_layout::kv>
struct gated_deltanet {
  static constexpr int head_k_dim = KDim;                       ///< K
  static constexpr int head_v_dim = VDim;                       ///< V
  using input_type = Input;                                     ///< type of q, k, v and the output
  static constexpr state_layout layout = Layout;                ///< storage order of the state
  static constexpr int default_tile = VDim < 128 ? VDim : 128;  ///< V columns per block
  static constexpr int default_threads = 128;  ///< measured best on H200 (bench/NOTES.md)
  static constexpr int default_stages = 0;     ///< 0: one work item per block (see replay_policy)
  static_assert(KDim == 16 || KDim == 32 || KDim == 64 || KDim == 128,
                "gated_deltanet: KDim must be 16, 32, 64 or 128.");
  static_assert(VDim > 0 && VDim % 4 == 0,
                "gated_deltanet: VDim must be a positive multiple of 4.");
};

}  // namespace rules

namespace precision {
/// @brief One fp32 checkpoint that serves outputs and commits alike.
struct fp32 {
  using master_type = float;                       ///< checkpoint that commits read and write
  using serving_type = float;                      ///< checkpoint that output steps read
  static constexpr bool has_serving_copy = false;  ///< no separate copy: outputs read the master
  static constexpr bool scaled_copy = false;       ///< 8-bit copies carry per-row scales
  static constexpr bool scaled_state = false;      ///< 8-bit checkpoints carry per-row scales
};
/// @brief One low-precision checkpoint (`__nv_bfloat16`, `__half`, or 8-bit `__nv_fp8_e4m3` /
/// `int8_t` with an fp32 scale per tile row, `state_scale`) that commits read, fold in fp32 and
/// write back rounded: what engines do today with a 16-bit state, and the contrast to the pairs.
/// Rounding enters every commit and compounds.
template <class T>
struct single {
  using master_type = T;                           ///< checkpoint that commits read and write
  using serving_type = T;                          ///< checkpoint that output steps read (the same)
  static constexpr bool has_serving_copy = false;  ///< no separate copy: outputs read the master
  static constexpr bool scaled_copy = false;       ///< no copy, so no copy scales
  static constexpr bool scaled_state = sizeof(T) == 1;  ///< 8-bit: codes x per-row scale
};
/// @brief A pair: an fp32 master that only commits read and write, and a low-precision serving
/// copy (`__nv_bfloat16`, `__half`, or 8-bit `__nv_fp8_e4m3` / `int8_t` with an fp32 scale per
/// tile row, computed at commit) that output steps read. A commit folds into the master and
/// regenerates the copy in the same launch, so the copy's rounding reaches outputs but never a
/// later state.
template <class T>
struct pair {
  using master_type = float;                           ///< fp32 master that commits read and write
  using serving_type = T;                              ///< serving copy that output steps read
  static constexpr bool has_serving_copy = true;       ///< outputs read the copy, not the master
  static constexpr bool scaled_copy = sizeof(T) == 1;  ///< 8-bit: codes x per-row scale
  static constexpr bool scaled_state = false;          ///< the fp32 master carries no scales
};
using bf16 = single<__nv_bfloat16>;     ///< one bf16 checkpoint
using fp16 = single<__half>;            ///< one fp16 checkpoint
using fp8 = single<__nv_fp8_e4m3>;      ///< one fp8 e4m3 checkpoint with row scales
using int8 = single<int8_t>;            ///< one int8 checkpoint with row scales
using fp32_bf16 = pair<__nv_bfloat16>;  ///< fp32 master + bf16 serving copy
using fp32_fp16 = pair<__half>;         ///< fp32 master + fp16 serving copy
using fp32_fp8 = pair<__nv_fp8_e4m3>;   ///< fp32 master + fp8 e4m3 copy with row scales
using fp32_int8 = pair<int8_t>;         ///< fp32 master + int8 copy with row scales
}  // namespace precision

namespace detail {
/// The types a checkpoint or a serving copy can be stored in: fp32, bf16, fp16, and the 8-bit
/// codes with row scales (fp8 e4m3, int8).
template <class S>
constexpr bool is_state_storage =
    std::is_same<S, float>::value || std::is_same<S, __nv_bfloat16>::value ||
    std::is_same<S, __half>::value || std::is_same<S, __nv_fp8_e4m3>::value ||
    std::is_same<S, int8_t>::value;
}  // namespace detail

/// @brief The policy: everything ReplaySSM fixes at compile time, in one type.
///
/// @tparam Rule the recurrence (`rules::mamba2<...>` or `rules::gated_deltanet<...>`).
/// @tparam BufferLen L, the capacity of each slot's input buffer in steps.
/// @tparam CommitInterval K: a decode step that brings a slot's steps to K or more (its n buffered
///         steps plus itself: n + 1 >= K) commits the buffer into the checkpoint in the same
///         launch. K = 1 is eager.
/// @tparam Precision the checkpoint's storage: `precision::fp32` (the default), a single
///         low-precision checkpoint (`precision::bf16`, `fp16`, `fp8` (e4m3), `int8`) or a pair
///         (`precision::fp32_bf16`, `fp32_fp16`, `fp32_fp8`, `fp32_int8`); the 8-bit ones keep an
///         fp32 scale per tile row (`state_scale` for singles, `serving_scale` for pairs).
/// @tparam Tile rows of P (Mamba-2) or columns of V (Gated DeltaNet) handled by one block.
/// @tparam BlockThreads threads per block (a multiple of 32).
/// @tparam PipelineStages 0: eager and decode launch one block per work item; >= 2: persistent
///         blocks that keep the state tiles of the next `PipelineStages - 1` items in flight
///         (cp.async into shared memory, PipelineStages state tiles per block).
///
/// @code
/// using layer_policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16>;
/// @endcode
template <class Rule, int BufferLen, int CommitInterval, class Precision = precision::fp32,
          int Tile = Rule::default_tile, int BlockThreads = Rule::default_threads,
          int PipelineStages = Rule::default_stages>
struct replay_policy {
  using rule = Rule;                                      ///< the recurrence
  using input_type = typename Rule::input_type;           ///< type of step inputs and outputs
  using precision = Precision;                            ///< the precision pair
  using master_type = typename Precision::master_type;    ///< checkpoint type (commits)
  static constexpr int buffer_len = BufferLen;            ///< L
  static constexpr int commit_interval = CommitInterval;  ///< K
  static constexpr int tile = Tile;                       ///< rows of P / columns of V per block
  static constexpr int block_threads = BlockThreads;      ///< threads per block
  static constexpr int pipeline_stages = PipelineStages;  ///< 0, or state tiles in flight per block

  static_assert(CommitInterval >= 1, "replay_policy: the commit interval K must be at least 1.");
  static_assert(CommitInterval <= BufferLen,
                "replay_policy: the commit interval K must not exceed the buffer length L, or a "
                "full buffer would have to drop inputs. Raise BufferLen or lower CommitInterval.");
  static_assert(BufferLen <= 64,
                "replay_policy: BufferLen above 64 is not supported (the replay "
                "staging lives in shared memory).");
  static_assert(BlockThreads % 32 == 0 && BlockThreads >= 32 && BlockThreads <= 512,
                "replay_policy: BlockThreads must be a multiple of 32 between 32 and 512.");
  static_assert(PipelineStages == 0 || (PipelineStages >= 2 && PipelineStages <= 4),
                "replay_policy: PipelineStages must be 0 (no pipeline) or 2 to 4.");
  using serving_type = typename Precision::serving_type;                 ///< type output steps read
  static constexpr bool has_serving_copy = Precision::has_serving_copy;  ///< a pair
  static constexpr bool scaled_copy = Precision::scaled_copy;    ///< an 8-bit copy with scales
  static constexpr bool scaled_state = Precision::scaled_state;  ///< an 8-bit checkpoint
  static_assert(detail::is_state_storage<master_type>,
                "replay_policy: checkpoints are fp32, bf16, fp16, fp8 e4m3 or int8 "
                "(precision::fp32, bf16, fp16, fp8, int8, or a pair: fp32_bf16, fp32_fp16, "
                "fp32_fp8, fp32_int8).");
  static_assert(std::is_same<serving_type, master_type>::value ||
                    std::is_same<serving_type, __nv_bfloat16>::value ||
                    std::is_same<serving_type, __half>::value ||
                    std::is_same<serving_type, __nv_fp8_e4m3>::value ||
                    std::is_same<serving_type, int8_t>::value,
                "replay_policy: serving copies are bf16, fp16, fp8 e4m3 or int8.");
  static_assert(PipelineStages == 0 || std::is_same<Precision, ::replayssm::precision::fp32>::value,
                "replay_policy: the pipelined kernels (PipelineStages >= 2) stage fp32 state "
                "only; use PipelineStages = 0 with a low-precision checkpoint.");
};

/// @brief Policy of the eager step (K = 1, no buffer) for a rule: the baseline kernels use it.
template <class Rule, int Tile = Rule::default_tile, int BlockThreads = Rule::default_threads,
          int PipelineStages = Rule::default_stages>
using eager_policy = replay_policy<Rule, 1, 1, precision::fp32, Tile, BlockThreads, PipelineStages>;

}  // namespace replayssm
