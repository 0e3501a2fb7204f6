// The Gated DeltaNet case of the GPU tests: device memory of a small pool, random realistic inputs,
// the params over them, and the float64 reference step (the interface run_replay_vs_eager uses).
#pragma once

#include <stdexcept>

#include "replay_driver.cuh"

namespace rtest {

using namespace replayssm;

template <class Policy>
struct gdn_case {
  using T = typename Policy::input_type;
  using policy_t = Policy;
  using ref_state = std::vector<double>;  // [Hv][K][V]
  using step_t = ref::gdn_step;
  static constexpr int KD = Policy::rule::head_k_dim, VD = Policy::rule::head_v_dim;
  static constexpr bool kv = Policy::rule::layout == state_layout::kv;
  static constexpr int L = Policy::buffer_len;
  static constexpr int commit_interval = Policy::commit_interval;

  ref::gdn_config cfg;
  int batch = 0, num_slots = 0;
  dev_array<float> pool_r, pool_e, bks, bg, bbeta, g, beta;
  /// Pairs: the serving copy of pool_r's checkpoints (poisoned until a load or a commit writes).
  dev_array<typename Policy::serving_type> serving_r{1};
  /// 8-bit copies: their row scales (`serving_scales_per_head` per head and slot; poisoned too).
  dev_array<float> serving_scale_r{1};
  dev_array<T> q, k, v, out_r, out_e, bk, bv;
  dev_array<int32_t> cursor;
  dev_array<uint32_t> arrivals;
  std::vector<T> hq, hk, hv, hout_r, hout_e;
  std::vector<float> hg, hbeta;
  /// Set before allocate(): decode_step gets a workspace (the split replay step,
  /// gdn_params::workspace) for up to `ws_rows` batch rows; every launch's params carry it.
  bool use_workspace = false;
  /// The params' split_min_batch when use_workspace (0: the split step at any batch).
  int split_min_batch = 0;
  /// Set before allocate(): the inputs q, k, v, g and beta start this many elements into their
  /// arrays (1: no row is 8- or 16-byte aligned, the kernels' element-by-element paths).
  int input_offset = 0;
  int ws_rows = 0;
  dev_array<float> ws;

  gdn_case(int Hk, int Hv) { cfg = ref::gdn_config{Hk, Hv, KD, VD, true, 0.0}; }
  size_t state_elems() const { return size_t(cfg.num_v_heads) * KD * VD; }
  // The device layout per head, rows x row_len with the contiguous dimension last, and the
  // columns one 8-bit copy scale covers (a tile's columns of V in kv, a whole row in vk).
  int heads() const { return cfg.num_v_heads; }
  size_t serving_scales_per_slot() const {
    return size_t(heads()) * gdn_params<Policy>::serving_scales_per_head;
  }
  int rows_per_head() const { return kv ? KD : VD; }
  int row_len() const { return kv ? VD : KD; }
  static constexpr int scale_seg = kv ? Policy::tile : KD;

  void allocate(int b, int slots, std::mt19937_64& rng) {
    batch = b;
    num_slots = slots;
    const int Hk = cfg.num_k_heads, Hv = cfg.num_v_heads;
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
    bk = dev_array<T>(size_t(slots) * L * Hk * KD);
    bks = dev_array<float>(size_t(slots) * L * Hk);
    bv = dev_array<T>(size_t(slots) * L * Hv * VD);
    bg = dev_array<float>(size_t(slots) * L * Hv);
    bbeta = dev_array<float>(size_t(slots) * L * Hv);
    cursor = dev_array<int32_t>(slots);
    arrivals = dev_array<uint32_t>(slots);
    if (use_workspace) {  // NaN: whatever decode reads, the coefficient kernel must write first
      ws_rows = 4 * std::max(b, slots);
      ws = dev_array<float>(size_t(gdn_params<Policy>::workspace_elems(ws_rows, Hv)));
      ws.poison();
    }
    for (auto* a : {&pool_r, &pool_e, &bks, &bg, &bbeta}) a->junk(rng);
    bk.junk(rng);
    bv.junk(rng);
    cursor.junk(rng);
    RTEST_CUDA(cudaMemset(arrivals.ptr, 0, arrivals.bytes()));
    hq.assign(size_t(b) * Hk * KD, T{});
    hk = hq;
    hv.assign(size_t(b) * Hv * VD, T{});
    hg.assign(size_t(b) * Hv, 0.f);
    hbeta = hg;
    q = dev_array<T>(input_offset + hq.size());
    k = dev_array<T>(input_offset + hk.size());
    v = dev_array<T>(input_offset + hv.size());
    g = dev_array<float>(input_offset + hg.size());
    beta = dev_array<float>(input_offset + hbeta.size());
    out_r = dev_array<T>(hv.size());
    out_e = dev_array<T>(hv.size());
  }
  /// Every slot's memory (download_slot_memory): checkpoints, buffers, cursor, arrivals and, for
  /// pairs, the serving copy (and an 8-bit copy's row scales), as mamba2_case's.
  std::vector<rtest::slot_region> slot_regions() const {
    const int Hk = cfg.num_k_heads, Hv = cfg.num_v_heads;
    std::vector<rtest::slot_region> r{{pool_r.ptr, state_elems() * 4},
                                      {pool_e.ptr, state_elems() * 4},
                                      {bk.ptr, size_t(L) * Hk * KD * sizeof(T)},
                                      {bks.ptr, size_t(L) * Hk * 4},
                                      {bv.ptr, size_t(L) * Hv * VD * sizeof(T)},
                                      {bg.ptr, size_t(L) * Hv * 4},
                                      {bbeta.ptr, size_t(L) * Hv * 4},
                                      {cursor.ptr, 4},
                                      {arrivals.ptr, 4}};
    if constexpr (Policy::has_serving_copy)
      r.push_back({serving_r.ptr, state_elems() * sizeof(typename Policy::serving_type)});
    if constexpr (Policy::scaled_copy)
      r.push_back({serving_scale_r.ptr, serving_scales_per_slot() * 4});
    return r;
  }
  ref_state random_state(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 0.3);
    ref_state s(state_elems());
    for (auto& x : s) x = float(nd(rng));
    return s;
  }
  // Device layout: [Hv][K][V] (kv) or [Hv][V][K] (vk).
  size_t dev_index(int h, int i, int j) const {
    return kv ? (size_t(h) * KD + i) * VD + j : (size_t(h) * VD + j) * KD + i;
  }
  std::vector<float> to_device_layout(const ref_state& s) const {
    std::vector<float> d(state_elems());
    for (int h = 0; h < cfg.num_v_heads; ++h)
      for (int i = 0; i < KD; ++i)
        for (int j = 0; j < VD; ++j)
          d[dev_index(h, i, j)] = float(s[(size_t(h) * KD + i) * VD + j]);
    return d;
  }
  ref_state from_device_layout(const float* d) const {
    ref_state s(state_elems());
    for (int h = 0; h < cfg.num_v_heads; ++h)
      for (int i = 0; i < KD; ++i)
        for (int j = 0; j < VD; ++j) s[(size_t(h) * KD + i) * VD + j] = d[dev_index(h, i, j)];
    return s;
  }
  float* eager_slot(int slot) { return pool_e.ptr + size_t(slot) * state_elems(); }

  step_t random_step(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 1);
    std::uniform_real_distribution<double> ua(-3.0, 1.0);
    step_t s;
    const int Hk = cfg.num_k_heads, Hv = cfg.num_v_heads;
    s.q.resize(Hk * KD);
    s.k.resize(Hk * KD);
    s.v.resize(Hv * VD);
    s.g.resize(Hv);
    s.beta.resize(Hv);
    for (auto& x : s.q) x = rtest::draw<T>(rng, nd);
    for (auto& x : s.k) x = rtest::draw<T>(rng, nd);
    for (auto& x : s.v) x = rtest::draw<T>(rng, nd);
    // Gates as the models make them: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b);
    // a slow-decay share keeps the state's memory long.
    for (auto& x : s.g) x = float(-std::exp(ua(rng)) * ref::softplus(nd(rng) - 2.0));
    for (auto& x : s.beta) x = float(1.0 / (1.0 + std::exp(-nd(rng))));
    return s;
  }
  void set_row(int b, const step_t& s) {
    const int Hk = cfg.num_k_heads, Hv = cfg.num_v_heads;
    for (int i = 0; i < Hk * KD; ++i) {
      hq[b * Hk * KD + i] = rtest::host_from_float<T>(float(s.q[i]));
      hk[b * Hk * KD + i] = rtest::host_from_float<T>(float(s.k[i]));
    }
    for (int i = 0; i < Hv * VD; ++i)
      hv[b * Hv * VD + i] = rtest::host_from_float<T>(float(s.v[i]));
    for (int h = 0; h < Hv; ++h) {
      hg[b * Hv + h] = float(s.g[h]);
      hbeta[b * Hv + h] = float(s.beta[h]);
    }
  }
  void upload_inputs() {
    q.upload(hq, input_offset);
    k.upload(hk, input_offset);
    v.upload(hv, input_offset);
    g.upload(hg, input_offset);
    beta.upload(hbeta, input_offset);
  }

  /// Rows of `rows` states at d, in the case's layout (fp32, or S for typed checkpoints).
  template <class S = float>
  basic_pool_ref<S> rows_pool(S* d, int rows) const {
    return kv ? basic_pool_ref<S>{d, int64_t(state_elems()), int64_t(KD) * VD, VD, rows}
              : basic_pool_ref<S>{d, int64_t(state_elems()), int64_t(KD) * VD, KD, rows};
  }
  gdn_params<Policy> params(float* pool, const int32_t* slot_idx, int rows, int32_t null_slot,
                            T* out) const {
    const int Hk = cfg.num_k_heads, Hv = cfg.num_v_heads;
    gdn_params<Policy> p;
    p.num_k_heads = Hk;
    p.num_v_heads = Hv;
    p.head_k_dim = KD;
    p.head_v_dim = VD;
    p.l2norm_qk = true;
    p.scale = 0.f;
    p.in.q = q.ptr + input_offset;
    p.in.q_batch_stride = Hk * KD;
    p.in.q_head_stride = KD;
    p.in.k = k.ptr + input_offset;
    p.in.k_batch_stride = Hk * KD;
    p.in.k_head_stride = KD;
    p.in.v = v.ptr + input_offset;
    p.in.v_batch_stride = Hv * VD;
    p.in.v_head_stride = VD;
    p.in.g = g.ptr + input_offset;
    p.in.g_batch_stride = Hv;
    p.in.beta = beta.ptr + input_offset;
    p.in.beta_batch_stride = Hv;
    p.in.out = out;
    p.in.out_batch_stride = Hv * VD;
    p.in.out_head_stride = VD;
    p.rows = {slot_idx, null_slot, rows};
    // (Low-precision checkpoints: the caller points p.state at a pool of that type.)
    if constexpr (std::is_same<typename Policy::master_type, float>::value)
      p.state = rows_pool(pool, num_slots);
    if constexpr (Policy::has_serving_copy)  // the replay pool's copy (eager pools have none)
      p.serving = rows_pool(serving_r.ptr, num_slots);
    if constexpr (Policy::scaled_copy)
      p.serving_scale = {serving_scale_r.ptr, int64_t(serving_scales_per_slot()),
                         int64_t(decltype(p)::serving_scales_per_head), num_slots};
    p.buffer = {bk.ptr, bks.ptr, bv.ptr, bg.ptr, bbeta.ptr};
    p.cursors = {cursor.ptr, arrivals.ptr};
    if (use_workspace) {
      if (rows > ws_rows) throw std::runtime_error("gdn_case: workspace smaller than rows");
      p.workspace = ws.ptr;
      p.workspace_size = int64_t(ws.n);
      p.split_min_batch = split_min_batch;  // 0: the split step at the tests' small batches too
    }
    return p;
  }
  void ref_step(ref_state& s, const step_t& st, std::vector<double>& y) const {
    ref::gdn_eager_step(cfg, st, s, y);
  }
  size_t out_row_elems() const { return size_t(cfg.num_v_heads) * VD; }
};

}  // namespace rtest
