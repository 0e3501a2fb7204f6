// The split replay step of Mamba-2 decode: the state-independent part of a
// replay (non-commit) step, computed once per batch row by a small kernel before the decode
// grid, which then reads it from `mamba2_params::workspace` after cudaGridDependencySynchronize
// (programmatic dependent launch, sm_90+).
//
// For row b, head h (group g), n buffered steps plus the current step q = n:
//   w_q    = exp(sum_{i > q} A dt_i) dt_q (B_q . C)   (q = 0..n)
//   decay0 = exp(sum_{i = 0..n} A dt_i)
// so that y[p] = decay0 (h_c[p, :] . C) + sum_q w_q x_q[p] + D x_cur[p], then y *= silu(z[p]).
// Workspace layout: `[batch][nheads][BufferLen + 1]` floats, w_0..w_n then decay0 at BufferLen.
// The coefficient kernel also appends the current step's B (as given) and dt (after bias and
// softplus) at buffer position n, which it reads anyway: the stream kernel's replay rows
// (mamba2_stream.cuh) then hold neither across their barrier. (The split item kernel appends the
// same bits again, after its pdl_wait.)
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

/// dt of a step as every Mamba-2 kernel applies and buffers it: the raw input plus dt_bias[h],
/// through softplus when asked. The one formula of the library (mamba2_agent's decode and drafts,
/// mamba2_coef_kernel), so the split step sees exactly the fused step's dt.
template <class Params>
REPLAYSSM_DEVICE float mamba2_step_dt(const Params& p, float raw, int h) {
  float dt = raw;
  if (p.weights.dt_bias) dt += p.weights.dt_bias[h];
  if (p.weights.dt_softplus) dt = softplus(dt);
  return dt;
}

/// Threads of a coefficient block (one block per batch row).
constexpr int mamba2_coef_threads = 256;

/// Head h's dt over batch row b's window (slot `slot`, H heads): the n buffered values into
/// dtq[0 .. n - 1] (0 beyond); returns the current step's, by mamba2_step_dt.
template <class Policy, int L>
REPLAYSSM_DEVICE float mamba2_window_dt(const mamba2_params<Policy>& p, int b, int64_t slot, int n,
                                        int h, int H, float (&dtq)[L]) {
#pragma unroll
  for (int q = 0; q < L; ++q) dtq[q] = q < n ? p.buffer.dt[(slot * L + q) * H + h] : 0.f;
  return mamba2_step_dt(p, to_float(p.in.dt[b * p.in.dt_batch_stride + h * p.in.dt_head_stride]),
                        h);
}

/// A committing row's coefficients (mamba2_coef_row with Commits): per head, thread per head,
///   c_j = dt_j exp(A sum_{i > j} dt_i) (j = 0..n),   exp(A sum_{j <= n} dt_j) at index L,
/// formed exactly as mamba2_agent::scale_window does (the same backward fmaf walk over the same
/// dt values: buffered, and the current one by mamba2_step_dt), so that the stream kernel's
/// commit (mamba2_stream_agent::commit) folds with the fused path's coefficients, bit for bit.
/// Nothing is appended to the buffer (the window restarts).
template <class Policy>
REPLAYSSM_DEVICE void mamba2_commit_coefs(const mamba2_params<Policy>& p, int b, int64_t slot,
                                          int n) {
  constexpr int L = Policy::buffer_len;
  const int H = p.nheads;
  for (int h = threadIdx.x; h < H; h += mamba2_coef_threads) {
    float dtq[L];
    const float dt_cur = mamba2_window_dt(p, b, slot, n, h, H, dtq);
    const float A = p.weights.A[h];
    float* out = p.workspace + (int64_t(b) * H + h) * (L + 1);
    float later = 0.f;  // A * (sum of dt over the steps after q)
#pragma unroll
    for (int q = L - 1; q >= 0; --q) {
      if (q <= n) {
        const float dq = q < n ? dtq[q] : dt_cur;
        out[q] = dq * expf(later);
        later = fmaf(A, dq, later);
      }
    }
    out[L] = expf(later);
  }
}

/// The coefficients of batch row b (one block). `dots`: dynamic shared memory of
/// `ngroups * BufferLen` floats. Every load of a phase is requested before any is used (one
/// memory latency per phase, not one per dot or per head: this kernel runs while the decode
/// grid's first blocks wait for it). The formulas are those of mamba2_agent::replay_rows; the
/// summation order differs, so the split step agrees with the fused one to fp32 rounding.
/// `Commits`: the decode grid's committing rows take the coefficients from here too
/// (mamba2_commit_coefs; mamba2_stream_agent::stream_commit); without it they are skipped.
template <class Policy, bool Commits = false>
REPLAYSSM_DEVICE void mamba2_coef_row(const mamba2_params<Policy>& p, int b, float* dots) {
  using T = typename Policy::input_type;
  constexpr int N = Policy::rule::dstate;
  constexpr int L = Policy::buffer_len;
  constexpr int K = Policy::commit_interval;
  constexpr int NT = mamba2_coef_threads;
  constexpr int vec = 16 / int(sizeof(T));  // elements of a 16-byte chunk
  constexpr int cpd = N / vec;               // chunks per dot: consecutive lanes share a dot
  constexpr int per_thread = 4;              // chunks a thread requests at once
  static_assert(cpd >= 1 && cpd <= 32 && (cpd & (cpd - 1)) == 0,
                "mamba2 split step: a dot's 16-byte chunks must fit a warp (dstate / (16 / "
                "sizeof(input)) a power of two <= 32)");
  __shared__ int n_shared;
  const int64_t slot = p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  if (slot == p.rows.null_slot) return;  // (exit = implicit trigger)
  // n exactly as the decode agent reads it. The decode grid's last block of this slot rewrites
  // the cursor, and with PDL decode blocks start once every block here has triggered (or
  // exited): the read is complete (its value passed a barrier) before the trigger.
  if (threadIdx.x == 0) n_shared = buffered_steps<op::decode, K, L>(p.cursors.cursor[slot]);
  __syncthreads();
  const int n = n_shared;
  pdl_trigger();
  if (n + 1 >= K) {  // a committing row: the decode kernel folds (its c_j from here, Commits)
    if constexpr (Commits) mamba2_commit_coefs<Policy>(p, b, slot, n);
    return;
  }
  const int H = p.nheads, G = p.ngroups, m = n + 1;

  // Phase 1: B_q . C for every (group, step q <= n). Item i = chunk i % cpd of dot i / cpd; dot
  // d = (group d / m, step d % m). Buffered B rows are 16-byte aligned (validated); the current
  // step's B and C have any alignment and load element by element.
  const int total = G * m * cpd;
  for (int base = 0; base < total; base += NT * per_thread) {  // (uniform across the block)
    uint4 braw[per_thread], craw[per_thread];
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
      const int i = base + k * NT + int(threadIdx.x);
      if (i < total) {
        const int d = i / cpd, c = (i % cpd) * vec, g = d / m, j = d % m;
        T* bv = reinterpret_cast<T*>(&braw[k]);
        T* cv = reinterpret_cast<T*>(&craw[k]);
        if (j < n) {
          braw[k] = __ldg(reinterpret_cast<const uint4*>(p.buffer.B + ((slot * L + j) * G + g) * N + c));
        } else {
          const T* Bc = p.in.B + b * p.in.B_batch_stride + g * p.in.B_group_stride + c;
#pragma unroll
          for (int e = 0; e < vec; ++e) bv[e] = Bc[e];
        }
        const T* Cc = p.in.C + b * p.in.C_batch_stride + g * p.in.C_group_stride + c;
#pragma unroll
        for (int e = 0; e < vec; ++e) cv[e] = Cc[e];
      }
    }
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
      const int i = base + k * NT + int(threadIdx.x);
      float sum = 0.f;
      if (i < total) {
        const T* bv = reinterpret_cast<const T*>(&braw[k]);
        const T* cv = reinterpret_cast<const T*>(&craw[k]);
#pragma unroll
        for (int e = 0; e < vec; ++e) sum = fmaf(to_float(bv[e]), to_float(cv[e]), sum);
      }
#pragma unroll
      for (int off = cpd / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (i < total && i % cpd == 0) {
        const int d = i / cpd;
        dots[(d / m) * L + d % m] = sum;
      }
      // The current step's B appended at position n, as given (the decode grid's replay rows
      // do not: nothing in either grid reads it there; 16-byte aligned, validated).
      if (i < total && (i / cpd) % m == n) {
        const int d = i / cpd, c = (i % cpd) * vec;
        *reinterpret_cast<uint4*>(p.buffer.B + ((slot * L + n) * G + d / m) * N + c) = braw[k];
      }
    }
  }
  __syncthreads();

  // Phase 2: a thread per head (consecutive heads in consecutive lanes: coalesced dt rows)
  // loads its decay inputs at once, then walks the steps backwards:
  //   w_q = (B_q . C) dt_q exp(sum_{i > q} A dt_i),   decay0 = exp(sum_{i <= n} A dt_i).
  const int per_group = H / G;
  for (int h = threadIdx.x; h < H; h += NT) {
    float dtq[L];
    const float dt_cur = mamba2_window_dt(p, b, slot, n, h, H, dtq);
    const float A = p.weights.A[h];
    const float* dot = dots + (h / per_group) * L;
    float* out = p.workspace + (int64_t(b) * H + h) * (L + 1);
    float log_decay = 0.f;  // sum of A dt over the steps after q
#pragma unroll
    for (int q = L - 1; q >= 0; --q) {
      if (q <= n) {
        const float dq = q < n ? dtq[q] : dt_cur;
        out[q] = dot[q] * dq * expf(log_decay);
        log_decay += A * dq;
      }
    }
    out[L] = expf(log_decay);
    p.buffer.dt[(slot * L + n) * H + h] = dt_cur;  // the current step's dt appended at n
  }
}

/// One block per batch row; dynamic shared memory `ngroups * BufferLen` floats.
template <class Policy, bool Commits = false>
REPLAYSSM_KERNEL void __launch_bounds__(mamba2_coef_threads)
    mamba2_coef_kernel(const mamba2_params<Policy> p) {
  extern __shared__ float mamba2_coef_dots[];
  mamba2_coef_row<Policy, Commits>(p, blockIdx.x, mamba2_coef_dots);
}

}  // namespace detail
}  // namespace replayssm
