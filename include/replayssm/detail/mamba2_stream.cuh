// The stream kernel of the Mamba-2 split replay step (decode with `params.workspace`), for the
// policies `mamba2_stream_supported` accepts; the others keep the split item kernel
// (mamba2_agent with Split = true).
//
// Why (bench/NOTES.md v10): the split item kernel carries the commit path and the fused tile
// structure (x rows staged in shared memory, a block barrier, `contract` with a barrier), held at
// 64 registers with 40 bytes of spills, and measured 351 us per replay step (Mamba-2 H128 fp32,
// batch 256, H200) where the prototype's stream kernel (bench/experiments/split_replay, kernel B)
// took 277 us with no shared memory and no barrier.
//
// What: one block per (batch row, head), the head's P rows over the block's warps, R = P / warps
// rows per warp. A lane owns 4 consecutive elements (one 16-byte fp32 or 8-byte 16-bit fragment)
// of each of its warp's rows, so one warp load is one state row of N = 128; lane q <= n owns step
// q's x values of those R rows (q < n buffered, q = n the current step). A replay row
// (n + 1 < K) reads its cursor, requests its state rows, the x values and the current dt and B,
// passes one block barrier (the cursor arrival, as in the fused path: every thread has used its
// read of n), appends dt and B, waits for the coefficient grid (`pdl_wait`), then requests its
// row's weights w_0..w_n and decay from the workspace (mamba2_split.cuh) together with C, D and
// z (one latency; holding them across the wait cost spills at 64 registers) and forms, per lane
// and row,
//   decay (h[p, 4 lane ..] . C[4 lane ..]) + (w_lane + [lane == n] D) x_lane[p],
// reduced over the warp by one transposing sum (no shared memory); y *= silu(z); lane n appends
// x. The buffer ends up exactly as the fused path leaves it (x, B as given; dt after bias and
// softplus, same formula), and the cursor advances by the same per-slot arrival protocol
// (run_item.cuh; blocks per slot: nheads, which is the fused kernel's count with one tile per
// head). The summation order differs from the fused path (fp32 rounding only).
//
// A committing row (n + 1 >= K) runs the fused agent's path in the same block (its own cursor
// read, arrival and fold), so a launch is still coefficient grid + one decode grid. Not a third
// grid for the commits after this one: by then this grid has advanced the replay rows' cursors
// (a row at n = K - 2 would read K - 1 and commit twice), and a grid of batch * nheads blocks
// that mostly exit at once would cost an estimated tens of microseconds per step (unmeasured). The two paths share the
// kernel's register allocation (64, the fused path's spills stay in the commit branch; the
// stream branch alone needs <= 64 with no spills).
#pragma once

#include <type_traits>

#include <replayssm/detail/mamba2_agent.cuh>

namespace replayssm {
namespace detail {

/// Whether the split replay step of `Policy` (decode with a workspace) uses mamba2_stream_agent:
/// dstate 128 (a warp load is one state row), one tile per head (`Tile == HeadDim`, the default
/// for headdim 64), headdim a multiple of the block's warps with R = P / warps a power of two
/// <= 32 whose x values are whole 16-byte chunks, K <= 32 (lane q owns step q), a serving state
/// of fp32, bf16 or fp16 (not 8-bit), one item per block.
template <class Policy>
struct mamba2_stream_supported {
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using S = typename Policy::serving_type;
  static constexpr int warps = Policy::block_threads / 32;
  static constexpr int R = rule::headdim / warps;
  static constexpr bool value =
      rule::dstate == 128 && Policy::tile == rule::headdim && rule::headdim % warps == 0 &&
      R >= 1 && R <= 32 && (R & (R - 1)) == 0 && (R * int(sizeof(T))) % 16 == 0 &&
      Policy::commit_interval <= 32 && Policy::pipeline_stages < 2 && !Policy::scaled_copy &&
      !Policy::scaled_state &&
      (std::is_same<S, float>::value || std::is_same<S, __nv_bfloat16>::value ||
       std::is_same<S, __half>::value);
};

/// The decode grid of the split replay step for stream-supported policies: one work item per
/// (batch row, head), run by item_kernel (its launch bounds and static shared memory are those of
/// the fused agent, which commit rows use). Replay rows stream (stream()); committing rows take
/// the fused agent's path unchanged.
template <class Policy, bool Branch>
struct mamba2_stream_agent {
  using fused = mamba2_agent<Policy, op::decode, 1, Branch, false>;  ///< commit rows
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using policy = Policy;
  using params_t = mamba2_params<Policy>;
  static constexpr op operation = op::decode;
  static constexpr int P = rule::headdim;
  static constexpr int N = rule::dstate;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int warps = NT / 32;
  static constexpr int R = P / warps;  ///< headdim rows per warp
  static constexpr int chunks = R * int(sizeof(T)) / 16;  ///< 16-byte chunks of a lane's x values
  static constexpr bool branching = Branch;
  static constexpr int tiles_per_head = 1;
  static constexpr int min_blocks_per_sm = fused::min_blocks_per_sm;
  static_assert(mamba2_stream_supported<Policy>::value,
                "mamba2_stream_agent: policy not supported (see mamba2_stream_supported)");
  static_assert(fused::tiles_per_head == 1, "mamba2_stream_agent: one tile per head");
  using shared_storage = typename fused::shared_storage;  ///< used by commit rows only

  shared_storage& s;

  static REPLAYSSM_HD int heads(const params_t& p) { return p.nheads; }  ///< heads per row
  /// The pool output steps read: a pair's serving copy, else the checkpoint (as run_item).
  static REPLAYSSM_DEVICE const auto& serving_pool(const params_t& p) {
    if constexpr (Policy::has_serving_copy)
      return p.serving;
    else
      return p.state;
  }

  /// Work item (b, h): null rows touch nothing; committing rows run the fused path; replay rows
  /// stream. Every block of a row reads the same cursor (no block of the slot arrives before it
  /// has read it), so all of a row's blocks take the same path.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int h, int /*t*/,
                            const state_pool_ref& other) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    const int n = buffered_steps<op::decode, K, L>(p.cursors.cursor[slot]);
    if (n + 1 >= K) {
      fused{s}.run(p, b, h, 0, other);  // reads the slot and cursor again: the same values
      return;
    }
    stream(p, b, h, slot, n);
  }

  /// A replay row's item: the state rows, x values, dt and B requested before any is used; the
  /// barrier and arrival; the dt and B appends; after pdl_wait the weights, C, D and z; the
  /// output, the x append and the cursor. Call from all threads.
  REPLAYSSM_DEVICE void stream(const params_t& p, int b, int h, int64_t slot, int n) {
    const int H = p.nheads, G = p.ngroups;
    const int g = h / (H / G);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int p0 = warp * R;
    ckpt_slots ck{slot, slot};
    if constexpr (Branch) {  // as run_item: a corrupt index touches nothing (the whole row agrees)
      ck.rd = p.branch.ckpt_of[slot];
      const int64_t w = p.branch.write_idx ? p.branch.write_idx[b] : -1;
      ck.wr = w >= 0 ? w : ck.rd;
      if (ck.rd < 0 || ck.rd >= p.state.num_slots || ck.wr < 0 || ck.wr >= p.state.num_slots)
        return;
    }

    // 1. The state rows p0 .. p0 + R - 1 (what outputs read: a pair's serving copy), streamed.
    float4 hs[R];
    {
      const auto& pool = serving_pool(p);
      const auto* st = pool.data + ck.rd * pool.slot_stride + h * pool.head_stride +
                       int64_t(p0) * pool.row_stride + lane * 4;
#pragma unroll
      for (int r = 0; r < R; ++r) hs[r] = load_state4(st + r * pool.row_stride);
    }

    // 2. The x values (lane q <= n: step q's values of the warp's rows, as given in type T) and
    // the current step's dt (thread 0) and B (the group's first head, one element per thread),
    // which are appended exactly as the fused path appends them.
    uint4 xr[chunks];
#pragma unroll
    for (int k = 0; k < chunks; ++k) xr[k] = make_uint4(0u, 0u, 0u, 0u);
    if (lane < n) {  // buffered rows: 16-byte aligned (validated), R a whole number of chunks
      const uint4* src = reinterpret_cast<const uint4*>(
          p.buffer.x + ((slot * L + lane) * H + h) * int64_t(P) + p0);
#pragma unroll
      for (int k = 0; k < chunks; ++k) xr[k] = __ldg(src + k);
    } else if (lane == n) {  // the current step: any alignment
      const T* src = p.in.x + b * p.in.x_batch_stride + h * p.in.x_head_stride + p0;
      T* e = reinterpret_cast<T*>(xr);
#pragma unroll
      for (int i = 0; i < R; ++i) e[i] = src[i];
    }
    T dt_raw = T();  // (bias and softplus at the append: no wait before the barrier)
    if (threadIdx.x == 0) dt_raw = p.in.dt[b * p.in.dt_batch_stride + h * p.in.dt_head_stride];
    const bool lead = h % (H / G) == 0;
    T b_cur = T();
    if (lead && threadIdx.x < N)
      b_cur = p.in.B[b * p.in.B_batch_stride + g * p.in.B_group_stride + threadIdx.x];

    // 3. The cursor arrival: every thread has used its read of the cursor (and checkpoint index)
    // before this barrier (run_item.cuh slot_arrival); the atomic overlaps the rest.
    __syncthreads();
    slot_arrival arrival;
    arrival.arrive(p.cursors.arrivals, slot);
    // Append the current step's B (as given) and dt (after bias and softplus, computed exactly as
    // the fused path and the coefficient kernel compute it) at position n now: their registers
    // are free before the output's peak. (Nothing this launch reads lives there.) x below.
    const int64_t at = slot * L + n;
    if (threadIdx.x == 0) p.buffer.dt[at * H + h] = mamba2_step_dt(p, to_float(dt_raw), h);
    if (lead && threadIdx.x < N) p.buffer.B[(at * G + g) * N + threadIdx.x] = b_cur;

    // 4. The coefficient grid's results (it has completed and its writes are visible), requested
    // with C, D and z: one latency after the wait, none of their registers held across it.
    pdl_wait();
    const float* ws = p.workspace + (int64_t(b) * H + h) * (L + 1);
    float w = lane <= n ? ws[lane] : 0.f;
    const float decay = ws[L];
    float4 c;
    {
      const T* Cg = p.in.C + b * p.in.C_batch_stride + g * p.in.C_group_stride + lane * 4;
      c = make_float4(to_float(Cg[0]), to_float(Cg[1]), to_float(Cg[2]), to_float(Cg[3]));
    }
    using sum = transpose_sum<R, 32>;  // afterwards lane l holds row p0 + sum::index(l)
    const int r_out = sum::index(lane);
    float gate = 0.f;
    if (p.in.z && sum::leader(lane))
      gate = to_float(p.in.z[b * p.in.z_batch_stride + h * p.in.z_head_stride + p0 + r_out]);
    if (lane == n && p.weights.D) w += p.weights.D[h];  // D x_cur rides on the current weight

    // 5. Per-row partial sums of this lane, reduced over the warp.
    float v[R];
    {
      const T* e = reinterpret_cast<const T*>(xr);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float d = fmaf(hs[r].x, c.x, fmaf(hs[r].y, c.y, fmaf(hs[r].z, c.z, hs[r].w * c.w)));
        v[r] = fmaf(decay, d, w * to_float(e[r]));
      }
    }
    sum::run(v);
    if (sum::leader(lane)) {
      float y = v[0];
      if (p.in.z) y *= silu(gate);
      p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + p0 + r_out] =
          from_float<T>(y);
    }

    // 6. Append the current step's x at position n (exactly as given).
    if (lane == n) {
      uint4* dst = reinterpret_cast<uint4*>(p.buffer.x + (at * H + h) * int64_t(P) + p0);
#pragma unroll
      for (int k = 0; k < chunks; ++k) dst[k] = xr[k];
    }

    // 7. The slot's last block sets cursor n + 1 (and, branching, keeps ckpt_of at rd).
    arrival.finish(p.cursors.cursor, p.cursors.arrivals, slot, uint32_t(H), n + 1,
                   Branch ? p.branch.ckpt_of : nullptr, ck.rd);
  }
};

}  // namespace detail
}  // namespace replayssm
