// Quick start: a Gated DeltaNet decode loop on ReplaySSM, checked against the float64 reference.
//
// The engine owns the memory: a checkpoint pool, an input buffer and a cursor per slot. Each
// decode step appends the step's inputs and computes its output from checkpoint + buffer (the
// backward sweep) without writing state; every K-th step of a slot commits its buffer into its
// checkpoint, inside the same launch. Without a GPU, the example says so and runs the parts that
// need none.
#include <cmath>
#include <cstdio>
#include <random>
#include <replayssm/replayssm.cuh>
#include <vector>

#include "example_util.cuh"

namespace rs = replayssm;

// One layer's policy: Gated DeltaNet head_k_dim 128, head_v_dim 128, fp32 inputs (so outputs
// compare to fp32 rounding), state layout [K][V], a 16-step buffer committed every 16 steps.
using policy = rs::replay_policy<rs::rules::gated_deltanet<128, 128, float>, 16, 16>;
// HK q/k heads, HV value heads (grouped: value head h reads q/k head h / (HV / HK)).
constexpr int HK = 2, HV = 4, KD = 128, VD = 128, SLOTS = 4, BATCH = 3, STEPS = 64;

int main() {
  std::printf(
      "ReplaySSM %s quick start: Gated DeltaNet, %d q/k heads, %d value heads, %d x %d, "
      "K = %d\n",
      rs::version_string(), HK, HV, KD, VD, policy::commit_interval);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ua(-3.f, 1.f);
  // Gates as the models make them: g = -exp(A_log) softplus(a + dt_bias) (a log gate, alpha =
  // exp(g)), beta = sigmoid(b). Rounded to fp32, the values the kernel reads.
  auto log_gate = [&] {
    const double a_log = ua(rng), a = nd(rng);
    return float(-std::exp(a_log) * rs::ref::softplus(a - 2.0));
  };
  auto sigmoid_beta = [&] { return float(1.0 / (1.0 + std::exp(-double(nd(rng))))); };

  rs::ref::gdn_config cfg{HK, HV, KD, VD, /*l2norm_qk=*/true, /*scale=*/0.0};

  // The host checks run without a GPU: a wrong runtime shape is reported, not launched.
  {
    rs::gdn_params<policy> bad;
    bad.num_k_heads = HK, bad.num_v_heads = 3, bad.head_k_dim = KD, bad.head_v_dim = VD;
    const rs::result r = rs::decode_step(bad, nullptr);
    std::printf("host check of a bad launch: %s (%s)\n", rs::to_string(r.code), r.message);
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    // What runs without a GPU: the float64 reference, replay math (the backward sweep) against
    // eager math.
    std::printf(
        "No CUDA GPU found: skipping the GPU decode loop. Running the float64 "
        "reference's replay-vs-eager check instead.\n");
    std::vector<double> state(size_t(HV) * KD * VD, 0.1), ckpt = state, y, y_replay;
    std::vector<rs::ref::gdn_step> window;
    double worst = 0;
    for (int t = 0; t < STEPS; ++t) {
      rs::ref::gdn_step s;
      for (int i = 0; i < HK * KD; ++i) s.q.push_back(nd(rng)), s.k.push_back(nd(rng));
      for (int i = 0; i < HV * VD; ++i) s.v.push_back(nd(rng));
      for (int h = 0; h < HV; ++h) s.g.push_back(log_gate()), s.beta.push_back(sigmoid_beta());
      rs::ref::gdn_eager_step(cfg, s, state, y);
      window.push_back(s);
      rs::ref::gdn_replay_output(cfg, ckpt, window, y_replay);
      for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - y_replay[i]));
      if (int(window.size()) == policy::commit_interval) {
        rs::ref::gdn_commit(cfg, ckpt, window);
        window.clear();
      }
    }
    std::printf("%d steps, commits every %d: max |replay - eager| = %.2e (float64)\n", STEPS,
                policy::commit_interval, worst);
    return worst < 1e-9 ? 0 : 1;
  }

  // --- Engine-owned memory: pool, buffer, cursors (allocated once, zeroed arrivals). ---
  constexpr int L = policy::buffer_len;
  const size_t S = size_t(HV) * KD * VD;  // one slot's state, [HV][KD][VD]
  float *pool, *buf_k, *buf_kscale, *buf_v, *buf_g, *buf_beta;
  float *q, *k, *v, *g, *beta, *out;
  int32_t *cursor, *slot_idx;
  uint32_t* arrivals;
  CHECK_CUDA(cudaMalloc(&pool, SLOTS * S * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_k, size_t(SLOTS) * L * HK * KD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_kscale, size_t(SLOTS) * L * HK * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_v, size_t(SLOTS) * L * HV * VD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_g, size_t(SLOTS) * L * HV * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_beta, size_t(SLOTS) * L * HV * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&cursor, SLOTS * sizeof(int32_t)));
  CHECK_CUDA(cudaMalloc(&arrivals, SLOTS * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(arrivals, 0, SLOTS * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&q, BATCH * HK * KD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&k, BATCH * HK * KD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&v, BATCH * HV * VD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&out, BATCH * HV * VD * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&g, BATCH * HV * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&beta, BATCH * HV * sizeof(float)));
  // Rows 0 and 2 are sequences in slots 3 and 1; row 1 is padding (null slot -1).
  slot_idx = device_copy(std::vector<int32_t>{3, -1, 1});

  // --- The params: views over that memory, passed by value to every launch. ---
  rs::gdn_params<policy> p;
  p.num_k_heads = HK, p.num_v_heads = HV, p.head_k_dim = KD, p.head_v_dim = VD;
  p.l2norm_qk = true, p.scale = 0.f;  // scale 0: head_k_dim^-1/2
  p.in.q = q, p.in.q_batch_stride = HK * KD, p.in.q_head_stride = KD;
  p.in.k = k, p.in.k_batch_stride = HK * KD, p.in.k_head_stride = KD;
  p.in.v = v, p.in.v_batch_stride = HV * VD, p.in.v_head_stride = VD;
  p.in.g = g, p.in.g_batch_stride = HV;
  p.in.beta = beta, p.in.beta_batch_stride = HV;
  p.in.out = out, p.in.out_batch_stride = HV * VD, p.in.out_head_stride = VD;
  p.rows = {slot_idx, /*null_slot=*/-1, BATCH};
  p.state = {pool, int64_t(S), int64_t(KD) * VD, VD, SLOTS};  // layout kv: [K][V] per head
  p.buffer = {buf_k, buf_kscale, buf_v, buf_g, buf_beta};
  p.cursors = {cursor, arrivals};

  // Prefill's result: load a state into each live slot (cursor -> 0).
  std::vector<std::vector<double>> ref_state(2, std::vector<double>(S));
  std::vector<float> init(2 * S);
  for (size_t i = 0; i < init.size(); ++i)
    init[i] = 0.3f * nd(rng), ref_state[i / S][i % S] = init[i];
  float* src = device_copy(init);
  int32_t* live = device_copy(std::vector<int32_t>{3, 1});
  rs::gdn_params<policy> lp = p;
  lp.rows = {live, -1, 2};
  rs::result r =
      rs::load_state(lp, rs::state_pool_ref{src, int64_t(S), int64_t(KD) * VD, VD, 2}, 0);
  if (!r) return std::printf("load_state: %s\n", r.message), 1;

  double worst = 0;
  std::vector<float> hq(BATCH * HK * KD), hk(hq.size()), hv(BATCH * HV * VD), hg(BATCH * HV),
      hbeta(hg.size());
  std::vector<float> hout(hv.size());
  for (int t = 0; t < STEPS; ++t) {
    for (auto* a : {&hq, &hk, &hv})
      for (auto& e : *a) e = nd(rng);
    for (auto& e : hg) e = log_gate();
    for (auto& e : hbeta) e = sigmoid_beta();
    CHECK_CUDA(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, hk.data(), hk.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, hv.data(), hv.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(g, hg.data(), hg.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(beta, hbeta.data(), hbeta.size() * 4, cudaMemcpyHostToDevice));
    if (!(r = rs::decode_step(p, 0))) return std::printf("decode_step: %s\n", r.message), 1;
    CHECK_CUDA(cudaMemcpy(hout.data(), out, hout.size() * 4, cudaMemcpyDeviceToHost));
    for (int row : {0, 2}) {  // the float64 reference of each live sequence
      rs::ref::gdn_step s;
      s.q.assign(hq.begin() + row * HK * KD, hq.begin() + (row + 1) * HK * KD);
      s.k.assign(hk.begin() + row * HK * KD, hk.begin() + (row + 1) * HK * KD);
      s.v.assign(hv.begin() + row * HV * VD, hv.begin() + (row + 1) * HV * VD);
      s.g.assign(hg.begin() + row * HV, hg.begin() + (row + 1) * HV);
      s.beta.assign(hbeta.begin() + row * HV, hbeta.begin() + (row + 1) * HV);
      std::vector<double> y;
      rs::ref::gdn_eager_step(cfg, s, ref_state[row / 2], y);
      double num = 0, den = 0;
      for (int i = 0; i < HV * VD; ++i) {
        const double d = hout[row * HV * VD + i] - y[i];
        num += d * d, den += y[i] * y[i];
      }
      worst = std::fmax(worst, std::sqrt(num / den));
    }
  }
  int32_t cur = 0;
  CHECK_CUDA(cudaMemcpy(&cur, cursor + 3, 4, cudaMemcpyDeviceToHost));
  std::printf(
      "GPU: %d decode steps on 2 sequences + 1 null row, %d in-launch commits each, "
      "cursor now %d; max relative error vs float64 = %.2e\n",
      STEPS, STEPS / policy::commit_interval, cur, worst);
  const bool ok = worst < 2e-5;
  std::printf("%s\n", ok ? "OK" : "FAILED: error above fp32 rounding");
  return ok ? 0 : 1;
}
