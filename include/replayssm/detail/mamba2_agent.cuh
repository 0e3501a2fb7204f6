// Block-level Mamba-2 agent and its __global__ entry.
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

/// One block works on `Policy::tile` rows of one head of one batch row.
template <class Policy, op Op>
struct mamba2_agent {
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using params_t = mamba2_params<Policy>;
  static constexpr int P = rule::headdim;
  static constexpr int N = rule::dstate;
  static constexpr int TR = Policy::tile;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  // Steps staged in shared memory at once: buffered steps plus the current one.
  static constexpr int S = (Op == op::eager) ? 1 : L;
  using tile_t = keep_major_tile<TR, N, NT>;
  static_assert(P % TR == 0,
                "mamba2: the policy's Tile (rows of headdim per block) must divide headdim.");
  static_assert(TR <= NT, "mamba2: the policy's Tile must not exceed BlockThreads.");

  struct shared_storage {
    float B[S][N];   // B_j, group vectors
    float x[S][TR];  // x_j, this block's rows
    float dt[S];     // dt_j after bias and softplus
    float w[S];      // replay weights exp(L_j) dt_j (B_j . C)
    float C[N];
    float y[TR];
    float decay;     // exp(sum_j A dt_j)
  };

  shared_storage& s;

  static REPLAYSSM_DEVICE int64_t buf_step(int64_t slot, int j) { return slot * L + j; }

  REPLAYSSM_DEVICE void run(const params_t& p, int b, int h, int t, const state_pool_ref& other) {
    const int64_t slot = p.rows.slot_idx ? p.rows.slot_idx[b] : b;
    if (slot == p.rows.null_slot) return;
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const uint32_t blocks_per_slot = uint32_t(H) * (P / TR);
    float* ckpt = p.state.data + slot * p.state.slot_stride + h * p.state.head_stride +
                  row0 * p.state.row_stride;

    tile_t tile;
    if (Op == op::load) {
      tile.load(other.data + b * other.slot_stride + h * other.head_stride + row0 * other.row_stride,
                other.row_stride);
      tile.store(ckpt, p.state.row_stride);
      if (h == 0 && t == 0 && threadIdx.x == 0) p.cursors.cursor[slot] = 0;
      return;
    }
    tile.load(ckpt, p.state.row_stride);  // in flight while the inputs are staged

    const int n = (Op == op::eager) ? 0 : p.cursors.cursor[slot];
    if (Op == op::flush && n == 0) return;  // nothing buffered: the checkpoint is current
    constexpr bool has_current = (Op == op::eager || Op == op::decode);
    const bool commit = (Op != op::decode) || (n + 1 >= K);
    const int m = n + (has_current ? 1 : 0);
    const float A = p.weights.A[h];

    // Stage the buffered steps 0..n-1.
    for (int i = threadIdx.x; i < n * N; i += NT) {
      const int j = i / N, c = i % N;
      s.B[j][c] = to_float(p.buffer.B[(buf_step(slot, j) * p.ngroups + g) * N + c]);
    }
    for (int i = threadIdx.x; i < n * TR; i += NT) {
      const int j = i / TR, r = i % TR;
      s.x[j][r] = to_float(p.buffer.x[(buf_step(slot, j) * H + h) * P + row0 + r]);
    }
    for (int j = threadIdx.x; j < n; j += NT) s.dt[j] = p.buffer.dt[buf_step(slot, j) * H + h];
    // Stage the current step at position n.
    float x_cur = 0.f;  // held by threads r < TR
    if (has_current) {
      const T* Bc = p.in.B + b * p.in.B_batch_stride + g * p.in.B_group_stride;
      const T* Cc = p.in.C + b * p.in.C_batch_stride + g * p.in.C_group_stride;
      for (int c = threadIdx.x; c < N; c += NT) {
        s.B[n][c] = to_float(Bc[c]);
        s.C[c] = to_float(Cc[c]);
      }
      if (threadIdx.x < TR) {
        x_cur = to_float(p.in.x[b * p.in.x_batch_stride + h * p.in.x_head_stride + row0 + threadIdx.x]);
        s.x[n][threadIdx.x] = x_cur;
      }
      if (threadIdx.x == 0) {
        float dt = to_float(p.in.dt[b * p.in.dt_batch_stride + h * p.in.dt_head_stride]);
        if (p.weights.dt_bias) dt += p.weights.dt_bias[h];
        if (p.weights.dt_softplus) dt = softplus(dt);
        s.dt[n] = dt;
      }
    }
    __syncthreads();

    if (commit) {
      for (int j = 0; j < m; ++j) tile.rank1(expf(A * s.dt[j]), s.B[j], s.x[j], s.dt[j]);
      if (Op == op::materialize) {
        tile.store(other.data + b * other.slot_stride + h * other.head_stride +
                       row0 * other.row_stride,
                   other.row_stride);
        return;
      }
      tile.store(ckpt, p.state.row_stride);
      if (has_current) tile.contract(s.C, s.y, nullptr);
    } else {
      // Replay: y = exp(sum A dt) (h_c C) + sum_j exp(L_j) dt_j (B_j . C) x_j.
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
      for (int j = warp; j < m; j += NT / 32) {
        float d = 0.f;
        for (int c = lane; c < N; c += 32) d = fmaf(s.B[j][c], s.C[c], d);
        d = warp_sum(d);
        if (lane == 0) s.w[j] = d * s.dt[j];
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float acc = 0.f;  // sum of A dt_i over i > j
        for (int j = m - 1; j >= 0; --j) {
          s.w[j] *= expf(acc);
          acc = fmaf(A, s.dt[j], acc);
        }
        s.decay = expf(acc);
      }
      tile.contract(s.C, s.y, nullptr);  // its barrier also publishes w and decay
      if (threadIdx.x < TR) {
        float y = s.decay * s.y[threadIdx.x];
        for (int j = 0; j < m; ++j) y = fmaf(s.w[j], s.x[j][threadIdx.x], y);
        s.y[threadIdx.x] = y;
      }
      // Append the current step to the buffer (the inputs exactly as given).
      if (threadIdx.x < TR)
        p.buffer.x[(buf_step(slot, n) * H + h) * P + row0 + threadIdx.x] =
            p.in.x[b * p.in.x_batch_stride + h * p.in.x_head_stride + row0 + threadIdx.x];
      if (t == 0) {
        if (threadIdx.x == 0) p.buffer.dt[buf_step(slot, n) * H + h] = s.dt[n];
        if (h % (H / p.ngroups) == 0) {
          const T* Bc = p.in.B + b * p.in.B_batch_stride + g * p.in.B_group_stride;
          for (int c = threadIdx.x; c < N; c += NT)
            p.buffer.B[(buf_step(slot, n) * p.ngroups + g) * N + c] = Bc[c];
        }
      }
    }

    if (has_current && threadIdx.x < TR) {
      const int r = threadIdx.x;
      float y = s.y[r];
      if (p.weights.D) y = fmaf(p.weights.D[h], x_cur, y);
      if (p.in.z)
        y *= silu(to_float(p.in.z[b * p.in.z_batch_stride + h * p.in.z_head_stride + row0 + r]));
      p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + r] = from_float<T>(y);
    }
    if (Op == op::decode || Op == op::flush)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot, blocks_per_slot,
                            commit ? 0 : n + 1);
  }
};

template <class Policy, op Op>
REPLAYSSM_KERNEL void __launch_bounds__(Policy::block_threads)
    mamba2_kernel(const mamba2_params<Policy> p, const state_pool_ref other) {
  using agent_t = mamba2_agent<Policy, Op>;
  __shared__ typename agent_t::shared_storage smem;
  constexpr int tiles = Policy::rule::headdim / Policy::tile;
  agent_t{smem}.run(p, blockIdx.y, blockIdx.x / tiles, blockIdx.x % tiles, other);
}

}  // namespace detail
}  // namespace replayssm
