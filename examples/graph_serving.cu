// Serving with CUDA graphs: one Mamba-2 decode step and one speculative round (verify + accept),
// each captured once and replayed 1000 times while sequences join and leave the batch, checked
// against the float64 reference after every replay.
//
// What an engine does between replays is only device memory: new inputs, the slot-index array
// (which sequence sits in which batch row, -1 for an empty row) and, for speculative rounds, the
// draft counts and accepted counts. Cursors live on the device, so each sequence commits its
// buffer at its own step inside the same graph, with no host decision. A sequence that joins gets
// its prefill state with load_state (outside the graph, like prefill); one that leaves just frees
// its slot. Without a GPU, the example says so and exits 0.
//   graph_serving [replays, default 1000]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <replayssm/replayssm.cuh>
#include <vector>

#include "example_util.cuh"

namespace rs = replayssm;

// fp32 inputs so outputs compare to fp32 rounding; K = 16, room for a full window plus two
// drafts of up to MAX_DRAFT tokens (the policy checks BufferLen >= K - 1 + 2 * MaxDraft).
constexpr int MAX_DRAFT = 4, K = 16, L = K - 1 + 2 * MAX_DRAFT;
using policy = rs::replay_policy<rs::rules::mamba2<64, 128, float>, L, K>;
constexpr int H = 16, G = 2, P = 64, N = 128, BATCH = 6, SLOTS = 10;
constexpr int ROWS = BATCH * MAX_DRAFT;  // input/output rows: draft t of row b is b * MAX_DRAFT + t
constexpr size_t S = size_t(H) * P * N;  // state elements per slot

struct sequence {
  int slot;
  std::vector<double> state;  // the float64 reference's state of this sequence
};

int main(int argc, char** argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 1000;
  std::printf("ReplaySSM %s: CUDA graphs with continuous batching (Mamba-2 %d heads, K = %d)\n",
              rs::version_string(), H, K);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("No CUDA GPU found: this example needs one (nothing to run without it).\n");
    return 0;
  }
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ua(-4.f, 1.f);
  const rs::ref::mamba2_config cfg{H, P, N, G, /*dt_softplus=*/true, /*has_z=*/true, true};
  rs::ref::mamba2_weights w;
  std::vector<float> A(H), dt_bias(H), D(H);
  for (int h = 0; h < H; ++h) {
    A[h] = -std::exp(ua(rng)), dt_bias[h] = 0.5f * nd(rng), D[h] = 1.f + 0.1f * nd(rng);
    w.A.push_back(A[h]), w.dt_bias.push_back(dt_bias[h]), w.D.push_back(D[h]);
  }

  // --- Engine-owned memory (allocated once; graphs capture these addresses). ---
  float *pool, *buf_x, *buf_B, *buf_dt, *x, *z, *dt, *B, *C, *out, *prefill;
  int32_t *cursor, *slot_idx, *join_idx, *num_draft, *accepted;
  uint32_t* arrivals;
  CHECK_CUDA(cudaMalloc(&pool, SLOTS * S * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_x, size_t(SLOTS) * L * H * P * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_B, size_t(SLOTS) * L * G * N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf_dt, size_t(SLOTS) * L * H * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&cursor, SLOTS * sizeof(int32_t)));
  CHECK_CUDA(cudaMalloc(&arrivals, SLOTS * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(arrivals, 0, SLOTS * sizeof(uint32_t)));
  for (float** v : {&x, &z, &out}) CHECK_CUDA(cudaMalloc(v, size_t(ROWS) * H * P * sizeof(float)));
  for (float** v : {&B, &C}) CHECK_CUDA(cudaMalloc(v, size_t(ROWS) * G * N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dt, size_t(ROWS) * H * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&prefill, S * sizeof(float)));
  for (int32_t** v : {&slot_idx, &num_draft, &accepted})
    CHECK_CUDA(cudaMalloc(v, BATCH * sizeof(int32_t)));
  CHECK_CUDA(cudaMalloc(&join_idx, sizeof(int32_t)));
  float* dA = device_copy(A);
  float* dbias = device_copy(dt_bias);
  float* dD = device_copy(D);
  if (!dA || !dbias || !dD) return std::printf("allocation failed\n"), 1;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  // One params struct serves decode (rows 0..BATCH-1 of the inputs) and the speculative round
  // (row b's draft t at input row b * MAX_DRAFT + t).
  rs::mamba2_params<policy> p;
  p.nheads = H, p.ngroups = G, p.headdim = P, p.dstate = N;
  p.weights = {dA, dbias, dD, /*dt_softplus=*/true};
  p.in.x = x, p.in.x_batch_stride = H * P, p.in.x_head_stride = P;
  p.in.z = z, p.in.z_batch_stride = H * P, p.in.z_head_stride = P;
  p.in.dt = dt, p.in.dt_batch_stride = H, p.in.dt_head_stride = 1;
  p.in.B = B, p.in.B_batch_stride = G * N, p.in.B_group_stride = N;
  p.in.C = C, p.in.C_batch_stride = G * N, p.in.C_group_stride = N;
  p.in.out = out, p.in.out_batch_stride = H * P, p.in.out_head_stride = P;
  p.rows = {slot_idx, /*null_slot=*/-1, BATCH};
  p.state = {pool, int64_t(S), int64_t(P) * N, N, SLOTS};
  p.buffer = {buf_x, buf_B, buf_dt};
  p.cursors = {cursor, arrivals};
  p.spec = {num_draft, accepted};

  // --- Continuous batching on the host side: which sequence is in which row and slot. ---
  std::vector<std::optional<sequence>> rows(BATCH);
  std::vector<int> free_slots;
  for (int s = SLOTS - 1; s >= 0; --s) free_slots.push_back(s);
  auto join = [&](int row) -> bool {  // prefill's result loaded into a free slot (cursor -> 0)
    sequence q{free_slots.back(), std::vector<double>(S)};
    free_slots.pop_back();
    std::vector<float> init(S);
    for (size_t i = 0; i < S; ++i) q.state[i] = init[i] = 0.3f * nd(rng);
    rs::mamba2_params<policy> lp = p;
    lp.rows = {join_idx, -1, 1};
    if (cudaMemcpyAsync(prefill, init.data(), S * 4, cudaMemcpyHostToDevice, stream) ||
        cudaMemcpyAsync(join_idx, &q.slot, 4, cudaMemcpyHostToDevice, stream) ||
        !rs::load_state(lp, rs::state_pool_ref{prefill, int64_t(S), int64_t(P) * N, N, 1}, stream) ||
        cudaStreamSynchronize(stream))
      return false;
    rows[row] = std::move(q);
    return true;
  };
  auto churn = [&]() -> bool {  // one sequence leaves, another joins an empty row
    std::vector<int> live, empty;
    for (int b = 0; b < BATCH; ++b) (rows[b] ? live : empty).push_back(b);
    const int leaving = live[rng() % live.size()];
    free_slots.insert(free_slots.begin(), rows[leaving]->slot);
    rows[leaving].reset();
    return join(empty[rng() % empty.size()]);
  };
  for (int b = 0; b < BATCH - 2; ++b)
    if (!join(b)) return std::printf("load_state failed\n"), 1;

  // Host copies of one replay's inputs, and the float64 reference step of one input row.
  std::vector<float> hx(ROWS * H * P), hz(hx.size()), hdt(ROWS * H), hB(ROWS * G * N), hC(hB.size());
  std::vector<float> hout(hx.size());
  std::vector<int32_t> hslots(BATCH);
  auto fill_inputs = [&]() -> cudaError_t {
    for (auto* v : {&hx, &hz, &hB, &hC})
      for (auto& e : *v) e = nd(rng);
    for (auto& e : hdt) e = ua(rng);
    for (int b = 0; b < BATCH; ++b) hslots[b] = rows[b] ? rows[b]->slot : -1;
    cudaError_t e = cudaSuccess;
    const std::pair<float*, const std::vector<float>*> uploads[] = {
        {x, &hx}, {z, &hz}, {dt, &hdt}, {B, &hB}, {C, &hC}};
    for (const auto& [dst, src] : uploads)
      if (!e) e = cudaMemcpyAsync(dst, src->data(), src->size() * 4, cudaMemcpyHostToDevice, stream);
    if (!e) e = cudaMemcpyAsync(slot_idx, hslots.data(), BATCH * 4, cudaMemcpyHostToDevice, stream);
    // Poison the outputs: a row the kernels should not touch stays NaN.
    if (!e) e = cudaMemsetAsync(out, 0xff, hout.size() * 4, stream);
    return e;
  };
  auto ref_step = [&](std::vector<double>& state, int r, std::vector<double>& y) {
    rs::ref::mamba2_step s;
    s.x.assign(hx.begin() + r * H * P, hx.begin() + (r + 1) * H * P);
    s.z.assign(hz.begin() + r * H * P, hz.begin() + (r + 1) * H * P);
    s.dt.assign(hdt.begin() + r * H, hdt.begin() + (r + 1) * H);
    s.B.assign(hB.begin() + r * G * N, hB.begin() + (r + 1) * G * N);
    s.C.assign(hC.begin() + r * G * N, hC.begin() + (r + 1) * G * N);
    rs::ref::mamba2_eager_step(cfg, w, s, state, y);
  };
  double worst = 0;
  bool untouched = true;
  auto check_row = [&](int r, const std::vector<double>& y) {
    double num = 0, den = 0;
    for (int i = 0; i < H * P; ++i) {
      const double d = hout[size_t(r) * H * P + i] - y[i];
      num += d * d, den += y[i] * y[i];
    }
    worst = std::fmax(worst, std::isnan(num) ? INFINITY : std::sqrt(num / den));
  };
  auto check_poisoned = [&](int r) {
    for (int i = 0; i < H * P; ++i) untouched &= std::isnan(hout[size_t(r) * H * P + i]);
  };

  // --- 1. A decode step, captured once. ---
  cudaGraph_t graph;
  cudaGraphExec_t decode_graph, round_graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const rs::result captured = rs::decode_step(p, stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  if (!captured) return std::printf("decode_step: %s\n", captured.message), 1;
  CHECK_CUDA(cudaGraphInstantiate(&decode_graph, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  int joins = 0;
  for (int r = 0; r < replays; ++r) {
    if (r % 37 == 36) {
      if (!churn()) return std::printf("load_state failed\n"), 1;
      ++joins;
    }
    CHECK_CUDA(fill_inputs());
    CHECK_CUDA(cudaGraphLaunch(decode_graph, stream));
    CHECK_CUDA(cudaMemcpyAsync(hout.data(), out, hout.size() * 4, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> y;
    for (int b = 0; b < BATCH; ++b) {
      if (!rows[b]) {
        check_poisoned(b);
        continue;
      }
      ref_step(rows[b]->state, b, y);
      check_row(b, y);
    }
  }
  std::printf("decode graph: %d replays, %d joins/leaves, max relative error vs float64 %.2e\n",
              replays, joins, worst);

  // --- 2. A speculative round (verify every draft position, then accept), captured once. In an
  // engine the target model and its sampler sit between the two launches in the same graph and
  // write `accepted` on the device; here the accepted counts are drawn before the replay. The
  // verification gets a workspace (verify_workspace_elems floats, engine-owned like the rest):
  // the split verification, two kernels joined by a programmatic edge in the graph. ---
  float* workspace;
  const int64_t ws_elems = rs::mamba2_params<policy>::verify_workspace_elems(BATCH, G, MAX_DRAFT);
  CHECK_CUDA(cudaMalloc(&workspace, size_t(ws_elems) * sizeof(float)));
  rs::mamba2_params<policy> pv = p;
  pv.workspace = workspace, pv.workspace_size = ws_elems;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const rs::result verified = rs::verify_step<MAX_DRAFT>(pv, stream);
  const rs::result kept = rs::accept(p, stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  if (!verified || !kept)
    return std::printf("verify/accept: %s\n", (!verified ? verified : kept).message), 1;
  CHECK_CUDA(cudaGraphInstantiate(&round_graph, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  const double decode_worst = worst;
  worst = 0;
  long drafts = 0, kept_tokens = 0;
  std::vector<int32_t> hnd(BATCH), hacc(BATCH);
  for (int r = 0; r < replays; ++r) {
    if (r % 37 == 36 && !churn()) return std::printf("load_state failed\n"), 1;
    for (int b = 0; b < BATCH; ++b) {
      hnd[b] = 1 + int(rng() % MAX_DRAFT);     // the last accepted token plus up to 3 drafts
      hacc[b] = int(rng() % (hnd[b] + 1));     // verified prefix: 0..num_draft tokens
    }
    CHECK_CUDA(fill_inputs());
    CHECK_CUDA(cudaMemcpyAsync(num_draft, hnd.data(), BATCH * 4, cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaMemcpyAsync(accepted, hacc.data(), BATCH * 4, cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaGraphLaunch(round_graph, stream));
    CHECK_CUDA(cudaMemcpyAsync(hout.data(), out, hout.size() * 4, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> y;
    for (int b = 0; b < BATCH; ++b) {
      for (int t = 0; t < MAX_DRAFT; ++t)
        if (!rows[b] || t >= hnd[b]) check_poisoned(b * MAX_DRAFT + t);
      if (!rows[b]) continue;
      // Each draft position's output is the sequence's state advanced along drafts 0..t; only
      // the accepted prefix becomes the sequence.
      std::vector<double> probe = rows[b]->state;
      for (int t = 0; t < hnd[b]; ++t) {
        ref_step(probe, b * MAX_DRAFT + t, y);
        check_row(b * MAX_DRAFT + t, y);
        if (t + 1 == hacc[b]) rows[b]->state = probe;
      }
      drafts += hnd[b], kept_tokens += hacc[b];
    }
  }
  std::printf(
      "speculative-round graph: %d replays, %ld draft positions verified, %ld accepted; max "
      "relative error vs float64 %.2e\n",
      replays, drafts, kept_tokens, worst);
  worst = std::fmax(worst, decode_worst);
  const bool ok = worst < 2e-5 && untouched;
  if (!untouched) std::printf("FAILED: an empty row's or unused draft position's output was written\n");
  std::printf("%s\n", ok ? "OK" : "FAILED: error above fp32 rounding");
  for (void* ptr : {(void*)pool, (void*)buf_x, (void*)buf_B, (void*)buf_dt, (void*)cursor,
                    (void*)arrivals, (void*)x, (void*)z, (void*)out, (void*)B, (void*)C, (void*)dt,
                    (void*)prefill, (void*)slot_idx, (void*)num_draft, (void*)accepted,
                    (void*)join_idx, (void*)dA, (void*)dbias, (void*)dD, (void*)workspace})
    CHECK_CUDA(cudaFree(ptr));
  CHECK_CUDA(cudaGraphExecDestroy(decode_graph));
  CHECK_CUDA(cudaGraphExecDestroy(round_graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return ok ? 0 : 1;
}
