// The Mamba-2 case of the GPU tests: device memory of a small pool, random realistic inputs, the
// params over them, and the float64 reference step (the interface run_replay_vs_eager uses).
#pragma once

#include <stdexcept>

#include "replay_driver.cuh"

namespace rtest {

using namespace replayssm;

template <class Policy>
struct mamba2_case {
  using T = typename Policy::input_type;
  using policy_t = Policy;
  using ref_state = std::vector<double>;
  using step_t = ref::mamba2_step;
  static constexpr int P = Policy::rule::headdim, N = Policy::rule::dstate;
  static constexpr int L = Policy::buffer_len;
  static constexpr int commit_interval = Policy::commit_interval;

  ref::mamba2_config cfg;
  ref::mamba2_weights w;
  int batch = 0, num_slots = 0;
  dev_array<float> A, dt_bias, D, pool_r, pool_e, bdt;
  /// Pairs: the serving copy of pool_r's checkpoints (poisoned until a load or a commit writes).
  dev_array<typename Policy::serving_type> serving_r{1};
  /// 8-bit copies: their row scales (`serving_scales_per_head` per head and slot; poisoned too).
  dev_array<float> serving_scale_r{1};
  dev_array<T> x, dt, B, C, z, out_r, out_e, bx, bB;
  dev_array<int32_t> cursor;
  dev_array<uint32_t> arrivals;
  std::vector<T> hx, hdt, hB, hC, hz, hout_r, hout_e;
  /// Set before allocate(): decode_step gets a workspace (the split replay step,
  /// mamba2_params::workspace) for up to `ws_rows` batch rows; every launch's params carry it.
  bool use_workspace = false;
  /// The params' split_min_batch when use_workspace (0: the split step at any batch).
  int split_min_batch = 0;
  int ws_rows = 0;
  dev_array<float> ws;
  /// Set before allocate(): the inputs x, dt, B, C and z start this many elements into their
  /// arrays (1: no row is 16-byte aligned, the kernels' element-by-element paths).
  int input_offset = 0;

  mamba2_case(int H, int G, bool with_z) {
    cfg = ref::mamba2_config{H, P, N, G, true, with_z, true};
  }
  size_t state_elems() const { return size_t(cfg.nheads) * P * N; }
  // The device layout per head (rows x row_len) and the columns one 8-bit copy scale covers.
  int heads() const { return cfg.nheads; }
  size_t serving_scales_per_slot() const {
    return size_t(heads()) * mamba2_params<Policy>::serving_scales_per_head;
  }
  int rows_per_head() const { return P; }
  int row_len() const { return N; }
  static constexpr int scale_seg = N;

  void allocate(int b, int slots, std::mt19937_64& rng) {
    batch = b;
    num_slots = slots;
    const int H = cfg.nheads, G = cfg.ngroups;
    std::uniform_real_distribution<double> ua(-4, 1), ub(-1, 1), ud(0.5, 1.5);
    w.A.resize(H);
    w.dt_bias.resize(H);
    w.D.resize(H);
    std::vector<float> fa(H), fb(H), fd(H);
    for (int h = 0; h < H; ++h) {
      fa[h] = -std::exp(float(ua(rng)));
      fb[h] = float(ub(rng));
      fd[h] = float(ud(rng));
      w.A[h] = fa[h];
      w.dt_bias[h] = fb[h];
      w.D[h] = fd[h];
    }
    A = dev_array<float>(H);
    A.upload(fa);
    dt_bias = dev_array<float>(H);
    dt_bias.upload(fb);
    D = dev_array<float>(H);
    D.upload(fd);
    pool_r = dev_array<float>(slots * state_elems());
    if constexpr (Policy::has_serving_copy) {
      serving_r = dev_array<typename Policy::serving_type>(slots * state_elems());
      serving_r.poison();
    }
    if constexpr (Policy::scaled_copy) {
      serving_scale_r = dev_array<float>(size_t(slots) * serving_scales_per_slot());
      serving_scale_r.poison();
    }
    pool_e = dev_array<float>(slots * state_elems());
    bx = dev_array<T>(size_t(slots) * L * H * P);
    bB = dev_array<T>(size_t(slots) * L * G * N);
    bdt = dev_array<float>(size_t(slots) * L * H);
    cursor = dev_array<int32_t>(slots);
    if (use_workspace) {  // NaN: whatever decode reads, the coefficient kernel must write first
      ws_rows = 4 * std::max(b, slots);
      ws = dev_array<float>(size_t(mamba2_params<Policy>::workspace_elems(ws_rows, H)));
      ws.poison();
    }
    arrivals = dev_array<uint32_t>(slots);
    for (auto* a : {&pool_r, &pool_e, &bdt}) a->junk(rng);
    bx.junk(rng);
    bB.junk(rng);
    cursor.junk(rng);
    RTEST_CUDA(cudaMemset(arrivals.ptr, 0, arrivals.bytes()));
    hx.assign(size_t(b) * H * P, T{});
    hz = hx;
    hdt.assign(size_t(b) * H, T{});
    hB.assign(size_t(b) * G * N, T{});
    hC = hB;
    x = dev_array<T>(input_offset + hx.size());
    z = dev_array<T>(input_offset + hz.size());
    dt = dev_array<T>(input_offset + hdt.size());
    B = dev_array<T>(input_offset + hB.size());
    C = dev_array<T>(input_offset + hC.size());
    out_r = dev_array<T>(hx.size());
    out_e = dev_array<T>(hx.size());
  }
  /// Every slot's memory a launch may write: checkpoints, buffers, cursors, arrivals and, for
  /// a pair, the serving copy (and an 8-bit copy's row scales) after them.
  std::vector<rtest::slot_region> slot_regions() const {
    const int H = cfg.nheads, G = cfg.ngroups;
    std::vector<rtest::slot_region> r{{pool_r.ptr, state_elems() * 4},
                                      {pool_e.ptr, state_elems() * 4},
                                      {bx.ptr, size_t(L) * H * P * sizeof(T)},
                                      {bB.ptr, size_t(L) * G * N * sizeof(T)},
                                      {bdt.ptr, size_t(L) * H * 4},
                                      {cursor.ptr, 4},
                                      {arrivals.ptr, 4}};
    if constexpr (Policy::has_serving_copy)
      r.push_back({serving_r.ptr, state_elems() * sizeof(typename Policy::serving_type)});
    if constexpr (Policy::scaled_copy)
      r.push_back({serving_scale_r.ptr, serving_scales_per_slot() * 4});
    return r;
  }
  ref_state random_state(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 0.5);
    ref_state s(state_elems());
    for (auto& v : s) v = float(nd(rng));
    return s;
  }
  std::vector<float> to_device_layout(const ref_state& s) const { return {s.begin(), s.end()}; }
  ref_state from_device_layout(const float* d) const { return {d, d + state_elems()}; }
  float* eager_slot(int slot) { return pool_e.ptr + size_t(slot) * state_elems(); }

  step_t random_step(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 1);
    std::uniform_real_distribution<double> udt(-4, 1);
    step_t s;
    const int H = cfg.nheads, G = cfg.ngroups;
    s.x.resize(H * P);
    s.z.resize(H * P);
    s.dt.resize(H);
    s.B.resize(G * N);
    s.C.resize(G * N);
    for (auto& v : s.x) v = rtest::draw<T>(rng, nd);
    for (auto& v : s.z) v = rtest::draw<T>(rng, nd);
    for (auto& v : s.dt) v = rtest::draw<T>(rng, udt);
    for (auto& v : s.B) v = rtest::draw<T>(rng, nd);
    for (auto& v : s.C) v = rtest::draw<T>(rng, nd);
    return s;
  }
  void set_row(int b, const step_t& s) {
    const int H = cfg.nheads, G = cfg.ngroups;
    for (int i = 0; i < H * P; ++i) {
      hx[b * H * P + i] = rtest::host_from_float<T>(float(s.x[i]));
      hz[b * H * P + i] = rtest::host_from_float<T>(float(s.z[i]));
    }
    for (int h = 0; h < H; ++h) hdt[b * H + h] = rtest::host_from_float<T>(float(s.dt[h]));
    for (int i = 0; i < G * N; ++i) {
      hB[b * G * N + i] = rtest::host_from_float<T>(float(s.B[i]));
      hC[b * G * N + i] = rtest::host_from_float<T>(float(s.C[i]));
    }
  }
  void upload_inputs() {
    x.upload(hx, input_offset);
    z.upload(hz, input_offset);
    dt.upload(hdt, input_offset);
    B.upload(hB, input_offset);
    C.upload(hC, input_offset);
  }

  /// Rows of `rows` states at d, in the case's layout (fp32, or S for typed checkpoints).
  template <class S = float>
  basic_pool_ref<S> rows_pool(S* d, int rows) const {
    return {d, int64_t(state_elems()), int64_t(P) * N, N, rows};
  }
  mamba2_params<Policy> params(float* pool, const int32_t* slot_idx, int rows, int32_t null_slot,
                               T* out) const {
    const int H = cfg.nheads, G = cfg.ngroups;
    mamba2_params<Policy> p;
    p.nheads = H;
    p.ngroups = G;
    p.headdim = P;
    p.dstate = N;
    p.weights = {A.ptr, dt_bias.ptr, cfg.has_D ? D.ptr : nullptr, true};
    p.in.x = x.ptr + input_offset;
    p.in.x_batch_stride = H * P;
    p.in.x_head_stride = P;
    p.in.dt = dt.ptr + input_offset;
    p.in.dt_batch_stride = H;
    p.in.dt_head_stride = 1;
    p.in.B = B.ptr + input_offset;
    p.in.B_batch_stride = G * N;
    p.in.B_group_stride = N;
    p.in.C = C.ptr + input_offset;
    p.in.C_batch_stride = G * N;
    p.in.C_group_stride = N;
    if (cfg.has_z) {
      p.in.z = z.ptr + input_offset;
      p.in.z_batch_stride = H * P;
      p.in.z_head_stride = P;
    }
    p.in.out = out;
    p.in.out_batch_stride = H * P;
    p.in.out_head_stride = P;
    p.rows = {slot_idx, null_slot, rows};
    // (Low-precision checkpoints: the caller points p.state at a pool of that type.)
    if constexpr (std::is_same<typename Policy::master_type, float>::value)
      p.state = rows_pool(pool, num_slots);
    if constexpr (Policy::has_serving_copy)  // the replay pool's copy (eager pools have none)
      p.serving = rows_pool(serving_r.ptr, num_slots);
    if constexpr (Policy::scaled_copy)
      p.serving_scale = {serving_scale_r.ptr, int64_t(serving_scales_per_slot()),
                         int64_t(decltype(p)::serving_scales_per_head), num_slots};
    p.buffer = {bx.ptr, bB.ptr, bdt.ptr};
    p.cursors = {cursor.ptr, arrivals.ptr};
    if (use_workspace) {
      if (rows > ws_rows) throw std::runtime_error("mamba2_case: workspace smaller than rows");
      p.workspace = ws.ptr;
      p.workspace_size = int64_t(ws.n);
      p.split_min_batch = split_min_batch;  // 0: the split step at the tests' small batches too
    }
    return p;
  }
  void ref_step(ref_state& s, const step_t& st, std::vector<double>& y) const {
    ref::mamba2_eager_step(cfg, w, st, s, y);
  }
  size_t out_row_elems() const { return size_t(cfg.nheads) * P; }
};

}  // namespace rtest
