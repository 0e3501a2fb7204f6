// The split replay step of Gated DeltaNet decode: the state-independent part of a
// replay (non-commit) step, computed by a small kernel before the decode grid, which then reads
// it from `gdn_params::workspace` after pdl_wait (programmatic dependent launch, sm_90+). Also
// the pieces gdn_agent shares with it (the backward sweep, the step's normalisation factors), so
// that both compute exactly the same thing.
//
// For row b, value head hv (k head hk), n buffered steps plus the current step (index n), with
// k_j = raw k_j * kscale_j (the current step's factor computed here as the agent does) and the
// current q normalised and scaled, one warp sweeps backwards from r = q, j = n .. 0:
//   c_j = beta_j (k_j . r),   r = exp(g_j) (r - c_j k_j)
// so that o = h_c^T r + sum_j c_j v_j, then the decode epilogue.
// Workspace layout: `[batch][num_v_heads][head_k_dim + BufferLen]` floats: r (head_k_dim), then
// c_0 .. c_n (positions after n are not written).
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/tile.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// The backward sweep by one warp over steps j = m-1 .. 0 (k[j] normalised, g and beta per
/// step): r = q, then c[j] = beta_j k_j . r and r <- exp(g_j) (r - c[j] k_j); r is written to
/// `r_out` (may alias q). Only the steps j < n0 and the drafts n0 + k with bit k of `mask` set
/// take part (a token tree's path; decode: n0 = m); the others count as absent (c[j] = 0). Call
/// from all lanes of one warp (gdn_agent, gdn_coef_kernel). gdn_verify_sweep::sweep (the split
/// verification's sweep kernel) runs the same operations per lane in the same order from staged
/// exp(g); the two are kept apart because folding them into one step function changed the SASS
/// of the fused and decode kernels (NOTES Next -22 (d): measure before merging them).
template <int KD>
REPLAYSSM_DEVICE void gdn_sweep(const float (*k)[KD], const float* g, const float* beta,
                                const float* q, float* r_out, float* c, int m, int n0,
                                uint32_t mask) {
  constexpr int RPL = (KD + 31) / 32;  // elements per lane
  const int lane = threadIdx.x & 31;
  float r[RPL];
#pragma unroll
  for (int e = 0; e < RPL; ++e) r[e] = (lane + 32 * e < KD) ? q[lane + 32 * e] : 0.f;
  for (int j = m - 1; j >= 0; --j) {
    if (j >= n0 && !((mask >> (j - n0)) & 1u)) {  // not on this draft's path
      if (lane == 0) c[j] = 0.f;
      continue;
    }
    float d = 0.f;
#pragma unroll
    for (int e = 0; e < RPL; ++e)
      if (lane + 32 * e < KD) d = fmaf(k[j][lane + 32 * e], r[e], d);
    d = warp_sum(d);
    const float alpha = expf(g[j]);
    const float bc = beta[j] * d;
#pragma unroll
    for (int e = 0; e < RPL; ++e)
      if (lane + 32 * e < KD) r[e] = alpha * fmaf(-bc, k[j][lane + 32 * e], r[e]);
    if (lane == 0) c[j] = bc;
  }
#pragma unroll
  for (int e = 0; e < RPL; ++e)
    if (lane + 32 * e < KD) r_out[lane + 32 * e] = r[e];
}

/// A step's normalisation factors from its raw q and k (`q`, `k`: KD floats), by one warp: the
/// q factor (times the q scale) and the k factor, returned to lane 0 (the other lanes get the
/// same values). The one formula of the library (gdn_agent's decode and drafts, gdn_coef_kernel).
template <int KD, class Params>
REPLAYSSM_DEVICE void gdn_step_factors(const Params& p, const float* q, const float* k,
                                       float& qscale, float& kscale) {
  const int lane = threadIdx.x & 31;
  float qq = 0.f, kk = 0.f;
  for (int e = lane; e < KD; e += 32) {
    qq = fmaf(q[e], q[e], qq);
    kk = fmaf(k[e], k[e], kk);
  }
  qq = warp_sum(qq);
  kk = warp_sum(kk);
  const float scale = p.scale != 0.f ? p.scale : rsqrtf(float(KD));
  qscale = (p.l2norm_qk ? 1.f / sqrtf(qq + 1e-6f) : 1.f) * scale;
  kscale = p.l2norm_qk ? 1.f / sqrtf(kk + 1e-6f) : 1.f;
}

/// Threads of a coefficient block (one block per (batch row, k head)): one warp per value head
/// of the k head (looping when there are more).
constexpr int gdn_coef_threads = 128;
/// Coefficient blocks per SM the kernel is compiled for (launch bounds). The grid is
/// (num_k_heads, batch): 4096 blocks at batch 256 and 16 k heads, 31 per SM on 132 SMs, run in
/// rounds before the decode grid passes pdl_wait, so blocks per SM set the replay step's
/// overhead: 12 (40 registers) for 16-bit inputs at K, L <= 16, which have no spills there
/// (sm_90; unbounded: 54 registers, 9 blocks per SM, 4 rounds at batch 256 instead of 3);
/// others are unbounded (spills of 8-20 B at 40). 16 per SM (2 rounds) needs 32 registers and
/// spills into the sweep loop: measure before taking it (bench/experiments/gdn_hv32_study.md).
template <class Policy>
constexpr int gdn_coef_min_blocks =
    sizeof(typename Policy::input_type) == 2 && Policy::commit_interval <= 16 &&
            Policy::buffer_len <= 16
        ? 12
        : 9;

/// The coefficient block's shared memory: the k head's normalised k rows and current q (shared
/// by its value heads), and each warp's g and beta.
template <class Policy>
struct gdn_coef_storage {
  static constexpr int KD = Policy::rule::head_k_dim, L = Policy::buffer_len;
  static constexpr int NW = gdn_coef_threads / 32;
  alignas(16) float k[L][KD];  // k_0 .. k_n (n <= L - 1), normalised
  alignas(16) float q[KD];     // the current q, normalised and scaled
  float ksc[L];
  float g[NW][L], beta[NW][L];
  float qscale;
  int n;
};

/// The workspace of (row b, k head hk): r and c_j of its value heads, exactly as gdn_agent's
/// fused decode computes them (same staging arithmetic, gdn_step_factors, gdn_sweep).
template <class Policy>
REPLAYSSM_DEVICE void gdn_coef_item(const gdn_params<Policy>& p, int b, int hk,
                                    gdn_coef_storage<Policy>& s) {
  constexpr int KD = Policy::rule::head_k_dim, L = Policy::buffer_len;
  constexpr int K = Policy::commit_interval, NT = gdn_coef_threads;
  constexpr int NW = gdn_coef_storage<Policy>::NW;
  using T = typename Policy::input_type;
  const int Hk = p.num_k_heads, Hv = p.num_v_heads, per_k = Hv / Hk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t slot = p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  if (slot == p.rows.null_slot) return;  // (exit = implicit trigger)
  // Every load of this block is requested before any is used, in two batches: the current q, k,
  // g and beta here, with the cursor read (they need only b); the buffered k rows, k factors, g
  // and beta once n is known. This grid runs before the decode grid's replay rows can pass
  // pdl_wait (its blocks launch only once every block here has triggered, and at batch 256 the
  // grid is several rounds of blocks per SM), so its length is the replay step's overhead
  // (bench/experiments/gdn_hv32_study.md: one dependent load per loop before, ~7 round trips).
  constexpr int QPT = (KD + NT - 1) / NT;  // current q / k elements per thread
  float qv[QPT];
  T kcv[QPT];
#pragma unroll
  for (int e = 0; e < QPT; ++e) {
    const int i = int(threadIdx.x) + e * NT;
    if (i < KD) {
      qv[e] = to_float(p.in.q[b * p.in.q_batch_stride + hk * p.in.q_head_stride + i]);
      kcv[e] = p.in.k[b * p.in.k_batch_stride + hk * p.in.k_head_stride + i];
    }
  }
  // The current g and beta of the warp's first value head (every lane: one broadcast load).
  float g_cur = 0.f, beta_cur = 0.f;
  if (warp < per_k) {
    g_cur = p.in.g[b * p.in.g_batch_stride + hk * per_k + warp];
    beta_cur = p.in.beta[b * p.in.beta_batch_stride + hk * per_k + warp];
  }
  // n exactly as the decode agent reads it. The decode grid's last block of this slot rewrites
  // the cursor, and with PDL decode blocks start once every block here has triggered (or
  // exited): the read is complete (its value passed a barrier) before the trigger.
  if (threadIdx.x == 0) s.n = buffered_steps<op::decode, K, L>(p.cursors.cursor[slot]);
  __syncthreads();
  const int n = s.n, m = n + 1;
  if (n + 1 >= K) return;  // a committing row: the decode kernel's fused path does it all
  pdl_trigger();
  // Nothing read below is written by the decode grid: it appends at position n only, and so
  // does this block (k, its factor, g and beta of the current step: the values the decode grid's
  // split item kernel appends again, the same bits; a row whose checkpoint index is out of range
  // gets them past its cursor, where nothing reads them before the next step rewrites them).
  // The buffered k rows (replay rows: n <= K - 2) by 16-byte chunks where a row is whole chunks
  // (buffer.k is 16-byte aligned, validated), else element by element.
  constexpr bool vec = (KD * sizeof(T)) % 16 == 0;
  constexpr int CE = vec ? 16 / int(sizeof(T)) : 1;  // elements per chunk
  constexpr int CPR = KD / CE;                       // chunks per row
  constexpr int RMAX = K >= 2 ? K - 2 : 0;           // the most buffered rows of a replay row
  constexpr int KC = RMAX * CPR > 0 ? (RMAX * CPR + NT - 1) / NT : 1;  // chunks per thread
  using chunk_t = std::conditional_t<vec, uint4, T>;
  const T* kb = p.buffer.k + (int64_t(slot) * L * Hk + hk) * KD;  // step j at + j * Hk * KD
  chunk_t kr[KC];
#pragma unroll
  for (int c = 0; c < KC; ++c) {
    const int i = int(threadIdx.x) + c * NT;  // chunk i: row i / CPR, elements (i % CPR) CE ..
    if (i < n * CPR) {
      const T* src = kb + int64_t(i / CPR) * Hk * KD + (i % CPR) * CE;
      if constexpr (vec)
        kr[c] = __ldg(reinterpret_cast<const uint4*>(src));
      else
        kr[c] = src[0];
    }
  }
  constexpr int SPT = RMAX > 0 ? (RMAX + NT - 1) / NT : 1;  // buffered k factors per thread
  float kscv[SPT];
#pragma unroll
  for (int e = 0; e < SPT; ++e) {
    const int j = int(threadIdx.x) + e * NT;
    if (j < n) kscv[e] = p.buffer.kscale[(slot * L + j) * Hk + hk];
  }
  // The buffered g and beta of the warp's first value head (lane j: step j, then j + 32 ..).
  constexpr int GPL = RMAX > 0 ? (RMAX + 31) / 32 : 1;
  float gv[GPL], bv[GPL];
#pragma unroll
  for (int e = 0; e < GPL; ++e) {
    const int j = lane + 32 * e;
    if (warp < per_k && j < n) {
      const int hv = hk * per_k + warp;
      gv[e] = p.buffer.g[(slot * L + j) * Hv + hv];
      bv[e] = p.buffer.beta[(slot * L + j) * Hv + hv];
    }
  }
  // Staging, as before: k rows as floats, the current q and k (k also appended at position n,
  // as given; the stream kernel's replay rows do not append it: gdn_stream.cuh), the factors,
  // and g and beta of the warp's first value head (the current ones appended at position n).
#pragma unroll
  for (int c = 0; c < KC; ++c) {
    const int i = int(threadIdx.x) + c * NT;
    if (i < n * CPR) {
      float* dst = &s.k[i / CPR][(i % CPR) * CE];
      if constexpr (vec) {
#pragma unroll
        for (int e = 0; e < CE; ++e) dst[e] = frag_get<T>(kr[c], e);
      } else {
        dst[0] = to_float(kr[c]);
      }
    }
  }
  const int64_t at = slot * L + n;
#pragma unroll
  for (int e = 0; e < QPT; ++e) {
    const int i = int(threadIdx.x) + e * NT;
    if (i < KD) {
      s.q[i] = qv[e];
      s.k[n][i] = to_float(kcv[e]);
      p.buffer.k[(at * Hk + hk) * KD + i] = kcv[e];
    }
  }
#pragma unroll
  for (int e = 0; e < SPT; ++e) {
    const int j = int(threadIdx.x) + e * NT;
    if (j < n) s.ksc[j] = kscv[e];
  }
  if (warp < per_k) {
#pragma unroll
    for (int e = 0; e < GPL; ++e) {
      const int j = lane + 32 * e;
      if (j < n) {
        s.g[warp][j] = gv[e];
        s.beta[warp][j] = bv[e];
      }
    }
    if (lane == 0) {  // the current g and beta appended at position n, as given
      const int hv = hk * per_k + warp;
      s.g[warp][n] = g_cur;
      s.beta[warp][n] = beta_cur;
      p.buffer.g[at * Hv + hv] = g_cur;
      p.buffer.beta[at * Hv + hv] = beta_cur;
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    float qs, ks;
    gdn_step_factors<KD>(p, s.q, s.k[n], qs, ks);
    if (threadIdx.x == 0) {
      s.qscale = qs;
      s.ksc[n] = ks;
      p.buffer.kscale[at * Hk + hk] = ks;  // (the fused path's function, the same floats)
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < m * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
  for (int i = threadIdx.x; i < KD; i += NT) s.q[i] *= s.qscale;
  __syncthreads();
  // One warp per value head of this k head: its g and beta (the first staged above), then its
  // sweep.
  for (int w = warp; w < per_k; w += NW) {
    const int hv = hk * per_k + w;
    if (w != warp) {  // (more value heads than warps: this warp's next one)
      __syncwarp();   // the previous sweep has read this warp's g and beta
      for (int j = lane; j < m; j += 32) {
        s.g[warp][j] =
            j < n ? p.buffer.g[(slot * L + j) * Hv + hv] : p.in.g[b * p.in.g_batch_stride + hv];
        s.beta[warp][j] = j < n ? p.buffer.beta[(slot * L + j) * Hv + hv]
                                : p.in.beta[b * p.in.beta_batch_stride + hv];
        if (j == n) {  // the current g and beta appended at position n, as given
          p.buffer.g[at * Hv + hv] = s.g[warp][j];
          p.buffer.beta[at * Hv + hv] = s.beta[warp][j];
        }
      }
    }
    __syncwarp();
    float* ws = p.workspace + (int64_t(b) * Hv + hv) * (KD + L);
    gdn_sweep<KD>(s.k, s.g[warp], s.beta[warp], s.q, ws, ws + KD, m, m, 0u);
  }
}

/// Grid (num_k_heads, batch), gdn_coef_threads threads.
template <class Policy>
REPLAYSSM_KERNEL void __launch_bounds__(gdn_coef_threads, gdn_coef_min_blocks<Policy>)
    gdn_coef_kernel(const gdn_params<Policy> p) {
  static_assert(sizeof(gdn_coef_storage<Policy>) <= 48 * 1024,
                "gated_deltanet: the split step's coefficient block exceeds 48 KiB of shared "
                "memory");
  __shared__ gdn_coef_storage<Policy> smem;
  gdn_coef_item<Policy>(p, blockIdx.y, blockIdx.x, smem);
}

}  // namespace detail
}  // namespace replayssm
