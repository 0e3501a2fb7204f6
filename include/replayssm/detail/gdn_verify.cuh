// The split verification of Gated DeltaNet (verify_step with `params.workspace`, for the
// policies `gdn_verify_split_supported` accepts; every other verification keeps the fused
// gdn_agent path unchanged).
//
// Why (bench/experiments/mma_verify_gdn): the standalone prototype of this structure (a sweep
// grid, then a 4-warp readout grid launched with programmatic dependent launch) ran the T = 4
// verification of batch 256, Hk 16, Hv 64, K = V = 128, 15 buffered steps in 481 us (FMA, 4
// warps, PDL) against the library's fused verification's 626 us. Measured here (H200, v16,
// bench_spec spec/gdn/Hv64_Hk16_ws, batch 256): verification at 15 buffered steps T = 2 / 4 / 8
// 388 / 497 / 859 us against the fused 589 / 633 / 1340; rows that all fold 1065 / 1181 / 1832
// against 1142 / 1151 / 1800 (the fold runs the fused path after the sweep grid).
//
// Two grids, the second launched with programmatic dependent launch (sm_90+):
// 1. gdn_verify_sweep_kernel, one block of 128 threads per (value head hv, batch row b): for a
//    row that does not fold (n < K buffered steps), it stages exactly what process_verify stages
//    (the buffered steps' raw k and factors, g and beta of hv; the drafts' raw q and k, g and
//    beta), computes the drafts' factors with gdn_step_factors (as draft_norms), normalises, and
//    runs each draft's backward sweep with gdn_sweep (one warp per draft, `sweep(d, n + d + 1, n,
//    path[d])` of the fused path), so that r_d and c_d are bit-identical to the fused path's.
//    Workspace layout: `[batch][num_v_heads][MaxDraft][head_k_dim + BufferLen]` floats: r_d
//    (head_k_dim), then c_d[j] for j <= n + d (0 off d's path; later positions not written).
//    The blocks of a k head's first value head append the drafts' raw k and factors to the
//    buffer (where process_verify appends them from).
// 2. gdn_verify_readout_kernel, one block of 128 threads per (value head hv, batch row b): the
//    128 x 128 fp32 state tile (the fused agent's tile) is requested first, as run_item requests
//    it; then a folding row (n >= K) runs the fused gdn_agent<Policy, op::verify,
//    MaxDraft>::process_verify on it unchanged (its own cursor read, fold, arrival, cursor and
//    every append; the sweep grid skipped the row). Otherwise: the v rows of the buffered steps
//    and drafts, pdl_wait, r_d and c_d from the workspace (all requested together into shared
//    memory, mostly by cp.async: no per-thread chains of dependent loads around the tile's 128
//    registers), then per draft the fused path's own readout: o_d = tile.contract(r_d) +
//    sum_{j <= n + d} c_d[j] v_j (same order), and the drafts' v, g, beta appended. The cursor does
//    not move (as in the fused path for non-folding rows). Outputs and buffer end up bit-identical
//    to the fused path's.
//
// Races: the sweep grid reads every listed row's cursor and triggers only after that read passed
// a block barrier (its blocks of folding rows exit, which counts as a trigger), so the readout
// blocks that fold (and set their row's cursor at the end) start after every cursor read. The
// sweep grid touches folding rows not at all; it writes buffer.k / kscale only at the drafts'
// positions of non-folding rows, which no readout block reads; the readout reads the workspace
// only after pdl_wait.
#pragma once

#include <replayssm/detail/gdn_agent.cuh>
#include <replayssm/detail/validate.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// Whether `verify_step` of `Policy` runs the split verification when `params.workspace` is set
/// (and the launch does not branch): an fp32 checkpoint (precision::fp32: no serving copy, no
/// scales), the kv layout, head_k_dim == head_v_dim == 128, one tile per value head
/// (`Tile == head_v_dim`), 128 threads per block, no pipeline, BufferLen <= 32.
template <class Policy>
struct gdn_verify_split_supported {
  using rule = typename Policy::rule;
  static constexpr bool value =
      std::is_same<typename Policy::master_type, float>::value && !Policy::has_serving_copy &&
      !Policy::scaled_state && rule::layout == state_layout::kv && rule::head_k_dim == 128 &&
      rule::head_v_dim == 128 && Policy::tile == rule::head_v_dim && Policy::block_threads == 128 &&
      Policy::pipeline_stages < 2 && Policy::buffer_len <= 32;
};

/// Threads of a sweep block (one block per (value head, batch row)): one warp per draft.
constexpr int gdn_verify_sweep_threads = 128;

/// The sweep grid of the split verification (see the file comment): grid (num_v_heads, batch).
template <class Policy, int MaxDraft>
struct gdn_verify_sweep {
  using T = typename Policy::input_type;
  using params_t = gdn_params<Policy>;
  static constexpr int KD = Policy::rule::head_k_dim;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NT = gdn_verify_sweep_threads;
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static_assert(MaxDraft >= 1 && MaxDraft <= 32 && MaxDraft <= NT && L <= NT,
                "gated_deltanet split verification: MaxDraft and BufferLen must be at most 32.");

  struct shared_storage {
    alignas(16) float k[L][KD];         // the buffered steps' k, then the drafts' (normalised)
    alignas(16) float q[MaxDraft][KD];  // the drafts' q (normalised, scaled)
    float g[L], beta[L], ksc[L];
    float qscale[MaxDraft];
    uint32_t path[MaxDraft];   // the drafts on each draft's path (bit k: draft k)
    int32_t parent[MaxDraft];  // trees: the drafts' parents (spec.parent of row b)
    int n, nd;
  };
  static_assert(sizeof(shared_storage) <= 48 * 1024,
                "gated_deltanet split verification: the sweep block stages BufferLen + MaxDraft "
                "rows of head_k_dim floats, over 48 KiB; lower BufferLen or MaxDraft.");

  /// draft_path<MaxDraft>(p.spec, b, d) (run_item.cuh), the same walk, with row b's parents
  /// staged in `parent` (entries 0..d, all it reads; `tree`: p.spec.parent, null for chains).
  static REPLAYSSM_DEVICE uint32_t staged_path(const int32_t* parent, const int32_t* tree, int d) {
    if (!tree) return d >= 31 ? ~0u : (2u << d) - 1u;
    uint32_t mask = 0;
    for (int k = d; k >= 0;) {
      mask |= 1u << k;
      const int up = parent[k];
      k = up < k ? up : -1;
    }
    return mask;
  }

  /// Row b, value head hv. Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, int b, int hv) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads, per_k = Hv / Hk;
    const int hk = hv / per_k;
    const int64_t slot = p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
    if (slot == p.rows.null_slot) return;  // (exit = implicit trigger)
    if (threadIdx.x == 0) {                // n and nd exactly as process_verify reads them
      int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
      const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
      if (nd > L - n) nd = L - n;  // only a corrupt cursor gets here
      s.n = n;
      s.nd = nd;
    }
    __syncthreads();
    const int n = s.n, nd = s.nd;
    // A folding row: the readout grid's fused path does it all (its blocks set the cursor at the
    // end, which is why every cursor read of this grid precedes its trigger).
    if (n >= K) return;
    pdl_trigger();
    const int64_t r0 = int64_t(b) * MaxDraft;
    {  // All rows requested at once: the buffered raw k (16-byte aligned, validated), the drafts'.
      staged_rows<NB, KD, NT, T> kq;
      strided_rows<MaxDraft, KD, NT, T> qd, kd;
      kq.load(p.buffer.k + (slot * L * Hk + hk) * int64_t(KD), int64_t(Hk) * KD, n);
      qd.load(p.in.q + r0 * p.in.q_batch_stride + hk * p.in.q_head_stride, p.in.q_batch_stride, nd);
      kd.load(p.in.k + r0 * p.in.k_batch_stride + hk * p.in.k_head_stride, p.in.k_batch_stride, nd);
      float gq = 0.f, bq = 0.f, kscq = 0.f;
      int32_t par = -1;
      const int j = threadIdx.x;
      if (p.spec.parent && j < nd) par = p.spec.parent[r0 + j];
      if (j < n) {
        gq = p.buffer.g[(slot * L + j) * Hv + hv];
        bq = p.buffer.beta[(slot * L + j) * Hv + hv];
        kscq = p.buffer.kscale[(slot * L + j) * Hk + hk];
      } else if (j < n + nd) {
        gq = p.in.g[(r0 + j - n) * p.in.g_batch_stride + hv];
        bq = p.in.beta[(r0 + j - n) * p.in.beta_batch_stride + hv];
      }
      kq.store(s.k, n);
      kd.store(s.k + n, nd);
      qd.store(s.q, nd);
      if (j < n + nd) {
        s.g[j] = gq;
        s.beta[j] = bq;
      }
      if (j < n) s.ksc[j] = kscq;
      if (j < nd) s.parent[j] = par;
    }
    __syncthreads();
    // The drafts' paths (draft_path's walk over the staged parents: one memory latency for the
    // tree, not one per level). Read by the sweeps, after the barriers below.
    if (int(threadIdx.x) < nd)
      s.path[threadIdx.x] = staged_path(s.parent, p.spec.parent, threadIdx.x);
    // The drafts' factors, one warp per draft (gdn_agent::draft_norms).
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int d = warp; d < nd; d += NT / 32) {
      float qs, ks;
      gdn_step_factors<KD>(p, s.q[d], s.k[n + d], qs, ks);
      if (lane == 0) {
        s.qscale[d] = qs;
        s.ksc[n + d] = ks;
      }
    }
    __syncthreads();
    // Append the drafts' raw k and factors after the buffered steps (process_verify appends them
    // from tile 0 of the k head's first value head: once per (row, k head)).
    if (hv % per_k == 0) {
      for (int i = threadIdx.x; i < nd * KD; i += NT)
        p.buffer.k[((slot * L + n + i / KD) * Hk + hk) * KD + i % KD] =
            from_float<T>(s.k[n + i / KD][i % KD]);
      if (int(threadIdx.x) < nd)
        p.buffer.kscale[(slot * L + n + threadIdx.x) * Hk + hk] = s.ksc[n + threadIdx.x];
    }
    __syncthreads();  // (the raw k is read above before it is normalised in place)
    const int m = n + nd;
    for (int i = threadIdx.x; i < m * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
    for (int i = threadIdx.x; i < nd * KD; i += NT) s.q[i / KD][i % KD] *= s.qscale[i / KD];
    __syncthreads();
    // Draft d's sweep over the buffered steps and the drafts on its path: r_d and c_d straight
    // into the workspace (the fused path's sweep(d, n + d + 1, n, path[d])).
    for (int d = warp; d < nd; d += NT / 32) {
      float* ws = p.workspace + ((int64_t(b) * Hv + hv) * MaxDraft + d) * (KD + L);
      gdn_sweep<KD>(s.k, s.g, s.beta, s.q[d], ws, ws + KD, n + d + 1, n, s.path[d]);
    }
  }
};

template <class Policy, int MaxDraft>
REPLAYSSM_KERNEL void __launch_bounds__(gdn_verify_sweep_threads)
    gdn_verify_sweep_kernel(const gdn_params<Policy> p) {
  using sweep = gdn_verify_sweep<Policy, MaxDraft>;
  __shared__ typename sweep::shared_storage smem;
  sweep::run(smem, p, int(blockIdx.y), int(blockIdx.x));
}

/// The readout grid of the split verification (see the file comment): grid (num_v_heads,
/// batch), Policy::block_threads (128) threads, the fused verify agent's shared storage.
template <class Policy, int MaxDraft>
struct gdn_verify_readout {
  using fused = gdn_agent<Policy, op::verify, MaxDraft>;
  using T = typename Policy::input_type;
  using params_t = gdn_params<Policy>;
  using shared_storage = typename fused::shared_storage;
  using tile_t = typename fused::tile_t;
  static constexpr int KD = fused::KD, VD = fused::VD, VT = fused::VT, NT = fused::NT;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static_assert(gdn_verify_split_supported<Policy>::value && VT == VD && NT == 128,
                "gated_deltanet split verification: unsupported policy (see "
                "gdn_verify_split_supported)");
  /// Resident blocks per SM the registers must allow: as the fused verification (3, 168
  /// registers, up to 4 drafts; unbounded above).
  static constexpr int min_blocks_per_sm = fused::min_blocks_per_sm;

  /// r_d into s.q[d] and c_d[j] (j <= n + d) into s.c[d], as the fused sweep leaves them there:
  /// asynchronous 4-byte copies from the workspace (the sweep grid's words, unchanged), all in
  /// flight at once. Call after pdl_wait; cp_async_wait_all and a barrier before use.
  static REPLAYSSM_DEVICE void copy_workspace(shared_storage& s, const params_t& p, int b, int hv,
                                              int n, int nd) {
    const float* ws = p.workspace + (int64_t(b) * p.num_v_heads + hv) * MaxDraft * (KD + L);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd * KD; i += NT)
      cp_async4(&s.q[i / KD][i % KD], ws + (i / KD) * (KD + L) + i % KD);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd * L; i += NT) {
      const int d = i / L, j = i % L;
      if (j <= n + d) cp_async4(&s.c[d][j], ws + d * (KD + L) + KD + j);
    }
  }

  /// Row b, value head hv. Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, int b, int hv) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    // The state tile first, as run_item requests it (fp32 checkpoint, not branching: the master
    // at the row's own slot), before the cursor read it does not depend on.
    tile_t tile;
    tile.load(fused::tile_ptr(p.state, slot, hv, 0), p.state.row_stride);
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    // The draft count: read-only, __ldg (ptxas issues it after the branch below all the same; a
    // plain load, or this one placed after the branch, cost the fold path a 4-byte spill with
    // 16-bit inputs at MaxDraft 2 and 4; the fold path reads its own).
    int nd = __ldg(p.spec.num_draft + b);
    if (n >= K) {  // a folding row: the fused verification, unchanged (the sweep grid skipped it)
      fused{s}.process_verify(p, b, hv, 0, slot, tile, ckpt_slots{slot, slot});
      return;
    }
    const int Hv = p.num_v_heads;
    nd = draft_count<MaxDraft>(nd);
    if (nd > L - n) nd = L - n;  // (as process_verify; not reached for n < K <= L - 2 MaxDraft)
    const int64_t r0 = int64_t(b) * MaxDraft;
    // Staged into shared memory with every request in flight at once (one memory latency, not
    // one per row; cp.async holds no register, and the registers around the 128-register tile
    // are few): the v rows of the buffered steps and the drafts (this block's columns: the whole
    // head) as given (type T, in `vr`: s.v for fp32 inputs, else the storage of s.k, which this
    // path does not use), the drafts' g and beta (for the appends), all requested before the
    // wait; after it, r_d and c_d from the workspace. Only the drafts' 16-bit v rows (any
    // alignment: no cp.async) pass through registers.
    using row_t = T[VT];
    static_assert(sizeof(s.k) >= sizeof(row_t) * L, "the v rows fit in s.k");
    row_t* vr;
    if constexpr (std::is_same<T, float>::value)
      vr = s.v;
    else
      vr = reinterpret_cast<row_t*>(&s.k[0][0]);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd; i += NT) {
      cp_async4(&s.g[n + i], p.in.g + (r0 + i) * p.in.g_batch_stride + hv);
      cp_async4(&s.beta[n + i], p.in.beta + (r0 + i) * p.in.beta_batch_stride + hv);
    }
    {
      constexpr int E = 16 / sizeof(T), C = VT / E;  // elements of a 16-byte chunk, chunks a row
      static_assert(VT % E == 0, "the v rows are whole 16-byte chunks");
      const T* vbuf = p.buffer.v + (slot * L * Hv + hv) * int64_t(VD);  // (16-byte aligned)
#pragma unroll 1  // (issue only: nothing waits in between)
      for (int c = threadIdx.x; c < n * C; c += NT)
        cp_async16(&vr[c / C][(c % C) * E], vbuf + (c / C) * (int64_t(Hv) * VD) + (c % C) * E);
    }
    const T* vin = p.in.v + r0 * p.in.v_batch_stride + hv * p.in.v_head_stride;
    if constexpr (std::is_same<T, float>::value) {
#pragma unroll 1
      for (int i = threadIdx.x; i < nd * VT; i += NT)
        cp_async4(&vr[n + i / VT][i % VT], vin + (i / VT) * p.in.v_batch_stride + i % VT);
      pdl_wait();  // the sweep grid has completed and its writes are visible
      copy_workspace(s, p, b, hv, n, nd);
    } else {
      strided_rows<MaxDraft, VT, NT, T> vd;
      vd.load(vin, p.in.v_batch_stride, nd);
      pdl_wait();  // the sweep grid has completed and its writes are visible
      copy_workspace(s, p, b, hv, n, nd);
#pragma unroll
      for (int it = 0; it < vd.iters; ++it) {
        const int i = threadIdx.x + it * NT;
        if (i < nd * VT) vr[n + i / VT][i % VT] = vd.v[it];
      }
    }
    cp_async_wait_all();
    __syncthreads();
    // The fused path's readout, draft by draft, with v_j[v] = to_float(vr[j][v]) (what the fused
    // path stages in s.v: the same floats, the same order).
    for (int d = 0; d < nd; ++d) {
      tile.contract(s.q[d], s.o, s.scratch);  // (ends with a barrier)
      if (threadIdx.x < VT) {
        float o = s.o[threadIdx.x];
        for (int j = 0; j <= n + d; ++j) o = fmaf(s.c[d][j], to_float(vr[j][threadIdx.x]), o);
        const int64_t r = r0 + d;
        p.in.out[r * p.in.out_batch_stride + hv * p.in.out_head_stride + threadIdx.x] =
            from_float<T>(o);
      }
      __syncthreads();  // the next draft reuses o
    }
    // Append the drafts' v, g and beta (exactly as the fused path: v through float and back).
    for (int i = threadIdx.x; i < nd * VT; i += NT)
      p.buffer.v[((slot * L + n + i / VT) * Hv + hv) * VD + i % VT] =
          from_float<T>(to_float(vr[n + i / VT][i % VT]));
    if (int(threadIdx.x) < nd) {
      p.buffer.g[(slot * L + n + threadIdx.x) * Hv + hv] = s.g[n + threadIdx.x];
      p.buffer.beta[(slot * L + n + threadIdx.x) * Hv + hv] = s.beta[n + threadIdx.x];
    }
  }
};

template <class Policy, int MaxDraft>
REPLAYSSM_KERNEL void __launch_bounds__(Policy::block_threads,
                                        gdn_verify_readout<Policy, MaxDraft>::min_blocks_per_sm)
    gdn_verify_readout_kernel(const gdn_params<Policy> p) {
  using readout = gdn_verify_readout<Policy, MaxDraft>;
  static_assert(sizeof(typename readout::shared_storage) <= 48 * 1024,
                "ReplaySSM: the verification block's staging exceeds 48 KiB of static shared "
                "memory; lower BufferLen or MaxDraft.");
  __shared__ typename readout::shared_storage smem;
  readout::run(smem, p, int(blockIdx.y), int(blockIdx.x));
}

/// The split verification for validated params (workspace checked, not branching): the sweep
/// grid, then the readout grid with programmatic stream serialization (its blocks may start, and
/// request their state, once every sweep block has read its cursor and triggered). Two stream
/// launches, no synchronisation, no allocation: capturable in a CUDA graph.
template <class Policy, int MaxDraft>
result launch_gdn_verify_split(const gdn_params<Policy>& p, cudaStream_t stream) {
  if (p.rows.batch == 0) return ok();
  gdn_verify_sweep_kernel<Policy, MaxDraft><<<dim3(unsigned(p.num_v_heads), unsigned(p.rows.batch)),
                                              gdn_verify_sweep_threads, 0, stream>>>(p);
  if (auto r = check_launch(); !r) return r;
  return launch_dependent(gdn_verify_readout_kernel<Policy, MaxDraft>,
                          dim3(unsigned(p.num_v_heads), unsigned(p.rows.batch)),
                          Policy::block_threads, stream,
                          "gated_deltanet: the split verification's readout launch failed "
                          "(cudaLaunchKernelEx with programmatic stream serialization)",
                          p);
}

}  // namespace detail
}  // namespace replayssm
