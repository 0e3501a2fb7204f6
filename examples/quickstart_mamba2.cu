// Quick start: a Mamba-2 decode loop on ReplaySSM, checked against the float64 reference.
//
// The engine owns the memory: a checkpoint pool, an input buffer and a cursor per slot. Each
// decode step appends the step's inputs and computes its output from checkpoint + buffer without
// writing state; every K-th step of a slot commits its buffer into its checkpoint, inside the same
// launch. Without a GPU, the example says so and runs the parts that need none.
#include <cmath>
#include <cstdio>
#include <random>
#include <replayssm/replayssm.cuh>
#include <vector>

#include "example_util.cuh"

namespace rs = replayssm;

// One layer's policy: Mamba-2 head dim 64, state dim 128, fp32 inputs (so outputs compare to
// fp32 rounding), a 16-step buffer committed every 16 steps.
using policy = rs::replay_policy<rs::rules::mamba2<64, 128, float>, 16, 16>;
constexpr int H = 8, G = 2, P = 64, N = 128, SLOTS = 4, BATCH = 3, STEPS = 64;

int main() {
  std::printf("ReplaySSM %s quick start: Mamba-2, %d heads x %d x %d, %d groups, K = %d\n",
              rs::version_string(), H, P, N, G, policy::commit_interval);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ua(-4.f, 1.f);

  rs::ref::mamba2_config cfg{H, P, N, G, true, true, true};
  rs::ref::mamba2_weights w;
  std::vector<float> A(H), dt_bias(H), D(H);
  for (int h = 0; h < H; ++h) {
    A[h] = -std::exp(ua(rng)), dt_bias[h] = 0.5f * nd(rng), D[h] = 1.f + 0.1f * nd(rng);
    w.A.push_back(A[h]), w.dt_bias.push_back(dt_bias[h]), w.D.push_back(D[h]);
  }

  // The host checks run without a GPU: a wrong runtime shape is reported, not launched.
  {
    rs::mamba2_params<policy> bad;
    bad.nheads = H, bad.ngroups = 3, bad.headdim = P, bad.dstate = N;
    const rs::result r = rs::decode_step(bad, nullptr);
    std::printf("host check of a bad launch: %s (%s)\n", rs::to_string(r.code), r.message);
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    // What runs without a GPU: the float64 reference, replay math against eager math.
    std::printf(
        "No CUDA GPU found: skipping the GPU decode loop. Running the float64 "
        "reference's replay-vs-eager check instead.\n");
    std::vector<double> state(size_t(H) * P * N, 0.1), ckpt = state, y, y_replay;
    std::vector<rs::ref::mamba2_step> window;
    double worst = 0;
    for (int t = 0; t < STEPS; ++t) {
      rs::ref::mamba2_step s;
      for (int i = 0; i < H * P; ++i) s.x.push_back(nd(rng)), s.z.push_back(nd(rng));
      for (int h = 0; h < H; ++h) s.dt.push_back(ua(rng));
      for (int i = 0; i < G * N; ++i) s.B.push_back(nd(rng)), s.C.push_back(nd(rng));
      rs::ref::mamba2_eager_step(cfg, w, s, state, y);
      window.push_back(s);
      rs::ref::mamba2_replay_output(cfg, w, ckpt, window, y_replay);
      for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - y_replay[i]));
      if (int(window.size()) == policy::commit_interval) {
        rs::ref::mamba2_commit(cfg, w, ckpt, window);
        window.clear();
      }
    }
    std::printf("%d steps, commits every %d: max |replay - eager| = %.2e (float64)\n", STEPS,
                policy::commit_interval, worst);
    return worst < 1e-9 ? 0 : 1;
  }

  // --- Engine-owned memory: pool, buffer, cursors (allocated once, zeroed arrivals). ---
  constexpr int L = policy::buffer_len;
  const size_t S = size_t(H) * P * N;
  float *pool, *buf_dt, *x, *dt, *B, *C, *z, *out;
  float *buf_x, *buf_B;
  int32_t *cursor, *slot_idx;
  uint32_t* arrivals;
  CHECK_CUDA(cudaMalloc(&pool, SLOTS * S * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_x, size_t(SLOTS) * L * H * P * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_B, size_t(SLOTS) * L * G * N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_dt, size_t(SLOTS) * L * H * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&cursor, SLOTS * sizeof(int32_t)));
  CHECK_CUDA(cudaMalloc(&arrivals, SLOTS * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(arrivals, 0, SLOTS * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&x, BATCH * H * P * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&z, BATCH * H * P * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&out, BATCH * H * P * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dt, BATCH * H * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&B, BATCH * G * N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&C, BATCH * G * N * sizeof(float)));
  float* dA = device_copy(A);
  float* dbias = device_copy(dt_bias);
  float* dD = device_copy(D);
  // Rows 0 and 2 are sequences in slots 3 and 1; row 1 is padding (null slot -1).
  slot_idx = device_copy(std::vector<int32_t>{3, -1, 1});

  // --- The params: views over that memory, passed by value to every launch. ---
  rs::mamba2_params<policy> p;
  p.nheads = H, p.ngroups = G, p.headdim = P, p.dstate = N;
  p.weights = {dA, dbias, dD, /*dt_softplus=*/true};
  p.in.x = x, p.in.x_batch_stride = H * P, p.in.x_head_stride = P;
  p.in.dt = dt, p.in.dt_batch_stride = H, p.in.dt_head_stride = 1;
  p.in.B = B, p.in.B_batch_stride = G * N, p.in.B_group_stride = N;
  p.in.C = C, p.in.C_batch_stride = G * N, p.in.C_group_stride = N;
  p.in.z = z, p.in.z_batch_stride = H * P, p.in.z_head_stride = P;
  p.in.out = out, p.in.out_batch_stride = H * P, p.in.out_head_stride = P;
  p.rows = {slot_idx, /*null_slot=*/-1, BATCH};
  p.state = {pool, int64_t(S), int64_t(P) * N, N, SLOTS};
  p.buffer = {buf_x, buf_B, buf_dt};
  p.cursors = {cursor, arrivals};

  // Prefill's result: load a state into each live slot (cursor -> 0).
  std::vector<std::vector<double>> ref_state(2, std::vector<double>(S));
  std::vector<float> init(2 * S);
  for (size_t i = 0; i < init.size(); ++i)
    init[i] = 0.3f * nd(rng), ref_state[i / S][i % S] = init[i];
  float* src = device_copy(init);
  int32_t* live = device_copy(std::vector<int32_t>{3, 1});
  rs::mamba2_params<policy> lp = p;
  lp.rows = {live, -1, 2};
  rs::result r = rs::load_state(lp, rs::state_pool_ref{src, int64_t(S), int64_t(P) * N, N, 2}, 0);
  if (!r) return std::printf("load_state: %s\n", r.message), 1;

  double worst = 0;
  std::vector<float> hx(BATCH * H * P), hz(hx.size()), hdt(BATCH * H), hB(BATCH * G * N),
      hC(hB.size());
  std::vector<float> hout(hx.size());
  for (int t = 0; t < STEPS; ++t) {
    for (auto* v : {&hx, &hz, &hB, &hC})
      for (auto& e : *v) e = nd(rng);
    for (auto& e : hdt) e = ua(rng);
    CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(z, hz.data(), hz.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dt, hdt.data(), hdt.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(B, hB.data(), hB.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(C, hC.data(), hC.size() * 4, cudaMemcpyHostToDevice));
    if (!(r = rs::decode_step(p, 0))) return std::printf("decode_step: %s\n", r.message), 1;
    CHECK_CUDA(cudaMemcpy(hout.data(), out, hout.size() * 4, cudaMemcpyDeviceToHost));
    for (int row : {0, 2}) {  // the float64 reference of each live sequence
      rs::ref::mamba2_step s;
      s.x.assign(hx.begin() + row * H * P, hx.begin() + (row + 1) * H * P);
      s.z.assign(hz.begin() + row * H * P, hz.begin() + (row + 1) * H * P);
      s.dt.assign(hdt.begin() + row * H, hdt.begin() + (row + 1) * H);
      s.B.assign(hB.begin() + row * G * N, hB.begin() + (row + 1) * G * N);
      s.C.assign(hC.begin() + row * G * N, hC.begin() + (row + 1) * G * N);
      std::vector<double> y;
      rs::ref::mamba2_eager_step(cfg, w, s, ref_state[row / 2], y);
      double num = 0, den = 0;
      for (int i = 0; i < H * P; ++i) {
        const double d = hout[row * H * P + i] - y[i];
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
