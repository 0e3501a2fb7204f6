// The device memory of a benchmark case: a slot pool rotated over >= 1 GiB of slots, buffers,
// cursors and random realistic inputs (for `in_rows` input rows per batch row), and the params
// over them. Shared by the benchmarks.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>

#include "bench_common.cuh"

namespace rbench {

using namespace replayssm;
using T = __nv_bfloat16;

// Slot pool rotated over `sets` disjoint random slot sets of `batch` rows each.
struct rotation {
  int batch, sets;
  dev_array<int32_t> slot_idx;  // [sets][batch]
  rotation(int b, int s) : batch(b), sets(s), slot_idx(size_t(b) * s) {
    std::vector<int32_t> h(size_t(b) * s);
    std::iota(h.begin(), h.end(), 0);
    std::shuffle(h.begin(), h.end(), std::mt19937_64(42));
    RBENCH_CHECK(cudaMemcpy(slot_idx.ptr, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  const int32_t* set(int i) const { return slot_idx.ptr + size_t(i % sets) * batch; }
  int num_slots() const { return batch * sets; }
};

/// The checkpoint storage of a setup for any precision scheme: the pool (a pair's masters), a
/// pair's serving copy and the row scales of an 8-bit checkpoint or copy, filled with realistic
/// values; `apply` points a launch's params at them.
template <class Params>
struct checkpoints {
  using policy = typename Params::policy;
  static constexpr int per_head = Params::serving_scales_per_head;
  int heads, slots;
  size_t elems;  // per slot
  dev_array<typename policy::master_type> pool;
  dev_array<typename policy::serving_type> serving;
  dev_array<float> scales;
  checkpoints(int h, int num_slots, size_t slot_elems, uint64_t seed, float lo, float hi,
              uint64_t scale_seed)
      : heads(h),
        slots(num_slots),
        elems(slot_elems),
        pool(size_t(num_slots) * slot_elems),
        serving(policy::has_serving_copy ? size_t(num_slots) * slot_elems : 0),
        scales(policy::scaled_copy || policy::scaled_state ? size_t(num_slots) * h * per_head : 0) {
    rbench::fill_random(pool, seed, lo, hi);
    rbench::fill_random(serving, seed, lo, hi);
    rbench::fill_random(scales, scale_seed, 0.001f, 0.002f);
  }
  void apply(Params& p, int64_t head_stride, int64_t row_stride) const {
    p.state = {pool.ptr, int64_t(elems), head_stride, row_stride, slots};
    if constexpr (policy::has_serving_copy)
      p.serving = {serving.ptr, int64_t(elems), head_stride, row_stride, slots};
    const scale_pool_ref sc{scales.ptr, int64_t(heads) * per_head, per_head, slots};
    if constexpr (policy::scaled_copy) p.serving_scale = sc;
    if constexpr (policy::scaled_state) p.state_scale = sc;
  }
  // Bytes of one slot's checkpoint (a pair's master) and of what output steps read.
  double state_bytes() const { return double(sizeof(typename policy::master_type)) * elems; }
  double serving_bytes() const { return double(sizeof(typename policy::serving_type)) * elems; }
};

/// Whether a setup passes its workspace (the split replay step) to decode launches unless a
/// benchmark says otherwise: yes, unless REPLAYSSM_BENCH_WORKSPACE=0.
inline bool workspace_by_default() {
  const char* e = std::getenv("REPLAYSSM_BENCH_WORKSPACE");
  return !(e && e[0] == '0');
}

template <class Policy>
struct mamba2_setup {
  static constexpr int P = Policy::rule::headdim, N = Policy::rule::dstate, L = Policy::buffer_len;
  int H, G, batch;
  rotation rot;
  checkpoints<mamba2_params<Policy>> ckpt;
  dev_array<float> A, dt_bias, D, bdt;
  dev_array<T> x, dt, B, C, z, out, bx, bB;
  dev_array<int32_t> cursor;
  dev_array<uint32_t> arrivals;
  /// The split replay step's workspace (mamba2_params::workspace), passed to every
  /// launch unless REPLAYSSM_BENCH_WORKSPACE=0 or the benchmark sets use_workspace (decode_step
  /// alone reads it).
  dev_array<float> ws;
  bool use_workspace = workspace_by_default();
  size_t state_elems() const { return size_t(H) * P * N; }
  mamba2_setup(int h, int g, int b, int in_rows = 1)
      : H(h),
        G(g),
        batch(b),
        rot(b, rbench::rotation_sets(size_t(b) * h * P * N * 4)),
        ckpt(h, rot.num_slots(), size_t(h) * P * N, 1, -0.5f, 0.5f, 30),
        A(h),
        dt_bias(h),
        D(h),
        bdt(size_t(rot.num_slots()) * L * h),
        x(size_t(b) * in_rows * h * P),
        dt(size_t(b) * in_rows * h),
        B(size_t(b) * in_rows * g * N),
        C(size_t(b) * in_rows * g * N),
        z(size_t(b) * in_rows * h * P),
        out(size_t(b) * in_rows * h * P),
        bx(size_t(rot.num_slots()) * L * h * P),
        bB(size_t(rot.num_slots()) * L * g * N),
        cursor(rot.num_slots()),
        arrivals(rot.num_slots()),
        ws(size_t(mamba2_params<Policy>::workspace_elems(b, h))) {
    rbench::fill_random(A, 2, -8.f, -0.05f);
    rbench::fill_random(dt_bias, 3, -1.f, 1.f);
    rbench::fill_random(D, 4, 0.5f, 1.5f);
    rbench::fill_random(bdt, 5, 0.01f, 0.5f);
    rbench::fill_random(x, 6, -2.f, 2.f);
    rbench::fill_random(dt, 7, -4.f, 1.f);
    rbench::fill_random(B, 8, -2.f, 2.f);
    rbench::fill_random(C, 9, -2.f, 2.f);
    rbench::fill_random(z, 10, -2.f, 2.f);
    rbench::fill_random(bx, 11, -2.f, 2.f);
    rbench::fill_random(bB, 12, -2.f, 2.f);
    RBENCH_CHECK(cudaMemset(cursor.ptr, 0, cursor.n * 4));
    RBENCH_CHECK(cudaMemset(arrivals.ptr, 0, arrivals.n * 4));
  }
  mamba2_params<Policy> params(int set) const {
    mamba2_params<Policy> p;
    p.nheads = H;
    p.ngroups = G;
    p.headdim = P;
    p.dstate = N;
    p.weights = {A.ptr, dt_bias.ptr, D.ptr, true};
    p.in.x = x.ptr;
    p.in.x_batch_stride = H * P;
    p.in.x_head_stride = P;
    p.in.dt = dt.ptr;
    p.in.dt_batch_stride = H;
    p.in.dt_head_stride = 1;
    p.in.B = B.ptr;
    p.in.B_batch_stride = G * N;
    p.in.B_group_stride = N;
    p.in.C = C.ptr;
    p.in.C_batch_stride = G * N;
    p.in.C_group_stride = N;
    p.in.z = z.ptr;
    p.in.z_batch_stride = H * P;
    p.in.z_head_stride = P;
    p.in.out = out.ptr;
    p.in.out_batch_stride = H * P;
    p.in.out_head_stride = P;
    p.rows = {rot.set(set), -1, batch};
    ckpt.apply(p, int64_t(P) * N, N);
    p.buffer = {bx.ptr, bB.ptr, bdt.ptr};
    p.cursors = {cursor.ptr, arrivals.ptr};
    if (use_workspace) p.workspace = ws.ptr, p.workspace_size = int64_t(ws.n);
    return p;
  }
  // Bytes one row must move: state (the checkpoint, or a pair's master; the copy output steps
  // read), one buffered step, the step's own inputs and output.
  double state_bytes() const { return ckpt.state_bytes(); }
  double serving_bytes() const { return ckpt.serving_bytes(); }
  double step_buffer_bytes() const { return sizeof(T) * (H * P + G * N) + 4.0 * H; }
  double io_bytes() const { return sizeof(T) * (3.0 * H * P + H + 2.0 * G * N); }
};

template <class Policy>
struct gdn_setup {
  static constexpr int KD = Policy::rule::head_k_dim, VD = Policy::rule::head_v_dim;
  static constexpr int L = Policy::buffer_len;
  int H, G, batch;  // H = num_v_heads, G = num_k_heads
  rotation rot;
  checkpoints<gdn_params<Policy>> ckpt;
  dev_array<float> g, beta, bks, bg, bbeta;
  dev_array<T> q, k, v, out, bk, bv;
  dev_array<int32_t> cursor;
  dev_array<uint32_t> arrivals;
  /// The split replay step's workspace (gdn_params::workspace), passed to every
  /// launch unless REPLAYSSM_BENCH_WORKSPACE=0 or the benchmark sets use_workspace (decode_step
  /// alone reads it).
  dev_array<float> ws;
  bool use_workspace = workspace_by_default();
  size_t state_elems() const { return size_t(H) * KD * VD; }
  gdn_setup(int hv, int hk, int b, int in_rows = 1)
      : H(hv),
        G(hk),
        batch(b),
        rot(b, rbench::rotation_sets(size_t(b) * hv * KD * VD * 4)),
        ckpt(hv, rot.num_slots(), size_t(hv) * KD * VD, 21, -0.3f, 0.3f, 31),
        g(size_t(b) * in_rows * hv),
        beta(size_t(b) * in_rows * hv),
        bks(size_t(rot.num_slots()) * L * hk),
        bg(size_t(rot.num_slots()) * L * hv),
        bbeta(size_t(rot.num_slots()) * L * hv),
        q(size_t(b) * in_rows * hk * KD),
        k(size_t(b) * in_rows * hk * KD),
        v(size_t(b) * in_rows * hv * VD),
        out(size_t(b) * in_rows * hv * VD),
        bk(size_t(rot.num_slots()) * L * hk * KD),
        bv(size_t(rot.num_slots()) * L * hv * VD),
        cursor(rot.num_slots()),
        arrivals(rot.num_slots()),
        ws(size_t(gdn_params<Policy>::workspace_elems(b, hv))) {
    rbench::fill_random(g, 22, -3.f, -0.01f);
    rbench::fill_random(beta, 23, 0.05f, 0.95f);
    rbench::fill_random(bks, 24, 0.05f, 0.2f);
    rbench::fill_random(bg, 25, -3.f, -0.01f);
    rbench::fill_random(bbeta, 26, 0.05f, 0.95f);
    rbench::fill_random(q, 27, -2.f, 2.f);
    rbench::fill_random(k, 28, -2.f, 2.f);
    rbench::fill_random(v, 29, -2.f, 2.f);
    rbench::fill_random(bk, 30, -2.f, 2.f);
    rbench::fill_random(bv, 31, -2.f, 2.f);
    RBENCH_CHECK(cudaMemset(cursor.ptr, 0, cursor.n * 4));
    RBENCH_CHECK(cudaMemset(arrivals.ptr, 0, arrivals.n * 4));
  }
  gdn_params<Policy> params(int set) const {
    gdn_params<Policy> p;
    p.num_k_heads = G;
    p.num_v_heads = H;
    p.head_k_dim = KD;
    p.head_v_dim = VD;
    p.in.q = q.ptr;
    p.in.q_batch_stride = G * KD;
    p.in.q_head_stride = KD;
    p.in.k = k.ptr;
    p.in.k_batch_stride = G * KD;
    p.in.k_head_stride = KD;
    p.in.v = v.ptr;
    p.in.v_batch_stride = H * VD;
    p.in.v_head_stride = VD;
    p.in.g = g.ptr;
    p.in.g_batch_stride = H;
    p.in.beta = beta.ptr;
    p.in.beta_batch_stride = H;
    p.in.out = out.ptr;
    p.in.out_batch_stride = H * VD;
    p.in.out_head_stride = VD;
    p.rows = {rot.set(set), -1, batch};
    ckpt.apply(p, int64_t(KD) * VD, VD);
    p.buffer = {bk.ptr, bks.ptr, bv.ptr, bg.ptr, bbeta.ptr};
    p.cursors = {cursor.ptr, arrivals.ptr};
    if (use_workspace) p.workspace = ws.ptr, p.workspace_size = int64_t(ws.n);
    return p;
  }
  double state_bytes() const { return ckpt.state_bytes(); }
  double serving_bytes() const { return ckpt.serving_bytes(); }
  double step_buffer_bytes() const { return sizeof(T) * (G * KD + H * VD) + 4.0 * (G + 2 * H); }
  double io_bytes() const { return sizeof(T) * (2.0 * G * KD + 2.0 * H * VD) + 8.0 * H; }
};

// Setups are large: keep one alive per (shape, batch) and reuse it across modes.
template <class Setup, class... Args>
Setup& cached_setup(Args... args) {
  static std::unique_ptr<Setup> cache;
  static std::vector<int> key;
  const std::vector<int> k{args...};
  if (!cache || key != k) {
    cache.reset();  // free before allocating the next
    cache = std::make_unique<Setup>(args...);
    key = k;
    RBENCH_CHECK(cudaDeviceSynchronize());
  }
  return *cache;
}

}  // namespace rbench
