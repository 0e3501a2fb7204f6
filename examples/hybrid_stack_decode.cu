// A stack of SSM layers of a real model shape decoding a batch for many tokens, eager vs replay:
// the nearest this repository comes to end to end. Only the SSM layers run (no attention, MLP
// or sampling), so the tokens/s printed are an upper bound set by the SSM state traffic alone.
//
//   hybrid_stack_decode [mamba2|gdn] [layers] [batch] [tokens]
//   defaults: mamba2 -> 40 layers of Nemotron-3-Super-like H128 P64 N128 G8;
//             gdn    -> 36 layers of Qwen3.5-122B-like Hk16 Hv64 K=V=128; batch 256, 1000 tokens.
//
// Each token runs as one CUDA graph per input set (all layers' launches captured once), the way
// engines run decode; the replay cursors live on the device, so commits happen inside the graphs.
// The replay run passes every decode_step one workspace shared by all layers (the split replay
// step, README "Memory"; the layers run one after another, so one is enough); HYBRID_WORKSPACE=0
// runs the fused kernel instead.
// Both runs see the same inputs (a ring of 8 random input sets), so at the end the replay
// state (materialized) must equal the eager state of the same layer and slot to fp32 rounding:
// the example checks that and exits non-zero otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <replayssm/replayssm.cuh>
#include <string>
#include <vector>

#include "example_util.cuh"

namespace rs = replayssm;
using T = __nv_bfloat16;
constexpr int K = 16, INPUT_SETS = 8;

__global__ void fill(float* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    p[i] = lo + (hi - lo) * float(x >> 40) * (1.0f / 16777216.0f);
  }
}
__global__ void fill_bf16(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 7) * 0xD1B54A32D192ED03ull ^ seed;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    p[i] = __float2bfloat16(lo + (hi - lo) * float(x >> 40) * (1.0f / 16777216.0f));
  }
}
template <class X>
X* alloc(size_t n) {
  X* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(X)) != cudaSuccess) {
    std::printf("out of device memory allocating %.2f GB\n", n * sizeof(X) / 1e9);
    std::exit(1);
  }
  return p;
}
void check(const rs::result& r, const char* what) {
  if (!r) std::printf("%s: %s\n", what, r.message), std::exit(1);
}

// One stack: per layer a state pool (eager) or a checkpoint pool + buffer + cursors (replay).
template <class Stack>
int run(Stack& s, int layers, int batch, int tokens) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  float ms[2] = {0, 0};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int replay = 0; replay < 2; ++replay) {
    // One token through every layer, captured once per input set as a CUDA graph, as engines
    // run decode: the cursors live on the device, so the commits of each layer happen inside
    // the replayed graphs at the right steps with no host decision.
    std::vector<cudaGraphExec_t> graphs(INPUT_SETS);
    for (int set = 0; set < INPUT_SETS; ++set) {
      cudaGraph_t g;
      CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int l = 0; l < layers; ++l) check(s.step(replay, l, set, stream), "step");
      CHECK_CUDA(cudaStreamEndCapture(stream, &g));
      CHECK_CUDA(cudaGraphInstantiate(&graphs[set], g, 0));
      CHECK_CUDA(cudaGraphDestroy(g));
    }
    s.reset_states();
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaEventRecord(a, stream));
    for (int t = 0; t < tokens; ++t) CHECK_CUDA(cudaGraphLaunch(graphs[t % INPUT_SETS], stream));
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&ms[replay], a, b));
    for (auto& g : graphs) CHECK_CUDA(cudaGraphExecDestroy(g));
    if (!replay) s.keep_eager_result();
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  const double err = s.compare_layer0();
  const double gb_eager = s.eager_bytes() / 1e9, gb_replay = s.replay_bytes() / 1e9;
  std::printf("%s, %d layers, batch %d, %d tokens (SSM layers only, CUDA graphs)\n", s.name(),
              layers, batch, tokens);
  std::printf("  eager : %8.1f ms, %8.0f tokens/s, state memory %.1f GB\n", ms[0],
              batch * tokens / (ms[0] * 1e-3), gb_eager);
  std::printf("  replay: %8.1f ms, %8.0f tokens/s, checkpoint + buffer %.1f GB (K = %d, %s)\n",
              ms[1], batch * tokens / (ms[1] * 1e-3), gb_replay, K,
              s.ws ? "split step, workspace" : "fused kernel, no workspace");
  std::printf("  speed-up %.2fx; layer 0 state, replay vs eager after %d tokens: rel. err %.2e\n",
              ms[0] / ms[1], tokens, err);
  std::printf(
      "  (attention, MLP and sampling are not modelled: real end-to-end gains are smaller)\n");
  return err < 1e-4 ? 0 : 1;
}

// What both stacks share: per-layer pools, cursors, the initial and the eager final state. The
// derived stack provides params(layer, input set) for its rule.
template <class Derived>
struct stack_common {
  int L, B;
  size_t S;                   // state elements per sequence
  std::vector<float*> pools;  // eager states and replay checkpoints: one run at a time
  int32_t* cursor;
  uint32_t* arrivals;
  float *init, *eager0;
  float* ws = nullptr;  // the split replay step's workspace (one for all layers), or null
  int64_t ws_size = 0;  // its floats
  stack_common(int layers, int batch, size_t state_elems) : L(layers), B(batch), S(state_elems) {
    for (int l = 0; l < L; ++l) pools.push_back(alloc<float>(B * S));
    cursor = alloc<int32_t>(size_t(L) * B);
    arrivals = alloc<uint32_t>(size_t(L) * B);
    cudaMemset(arrivals, 0, size_t(L) * B * 4);
    init = alloc<float>(B * S);
    eager0 = alloc<float>(B * S);
  }
  /// Allocates the workspace (`elems` floats) unless HYBRID_WORKSPACE=0.
  void use_workspace(int64_t elems) {
    const char* e = std::getenv("HYBRID_WORKSPACE");
    if (!(e && e[0] == '0')) ws = alloc<float>(size_t(elems)), ws_size = elems;
  }
  double eager_bytes() const { return double(L) * B * S * 4; }
  void reset_states() {
    for (int l = 0; l < L; ++l) {
      cudaMemcpy(pools[l], init, B * S * 4, cudaMemcpyDeviceToDevice);
      cudaMemset(cursor + size_t(l) * B, 0, B * 4);
    }
  }
  rs::result step(bool replay, int l, int set, cudaStream_t stream) {
    const auto p = static_cast<Derived*>(this)->params(l, set);
    return replay ? rs::decode_step(p, stream) : rs::eager_step(p, stream);
  }
  void keep_eager_result() { cudaMemcpy(eager0, pools[0], B * S * 4, cudaMemcpyDeviceToDevice); }
  /// Layer 0's replay state (materialized) against the eager run's, relative L2 error.
  double compare_layer0() {
    const auto p = static_cast<Derived*>(this)->params(0, 0);
    float* cur = alloc<float>(B * S);
    check(
        rs::materialize(
            p, rs::state_pool_ref{cur, int64_t(S), p.state.head_stride, p.state.row_stride, B}, 0),
        "materialize");
    std::vector<float> a(B * S), e(B * S);
    cudaMemcpy(a.data(), cur, B * S * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(e.data(), eager0, B * S * 4, cudaMemcpyDeviceToHost);
    cudaFree(cur);
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i)
      num += double(a[i] - e[i]) * (a[i] - e[i]), den += double(e[i]) * e[i];
    return std::sqrt(num / den);
  }
};

struct mamba2_stack : stack_common<mamba2_stack> {
  using policy = rs::replay_policy<rs::rules::mamba2<64, 128, T>, K, K>;
  int H = 128, G = 8;
  std::vector<T*> bx, bB;
  std::vector<float*> bdt;
  float *A, *dt_bias, *D;
  T *x, *dt, *Bm, *C, *z, *out;
  mamba2_stack(int layers, int batch) : stack_common(layers, batch, size_t(128) * 64 * 128) {
    for (int l = 0; l < L; ++l) {
      bx.push_back(alloc<T>(size_t(B) * K * H * 64));
      bB.push_back(alloc<T>(size_t(B) * K * G * 128));
      bdt.push_back(alloc<float>(size_t(B) * K * H));
    }
    A = alloc<float>(H), dt_bias = alloc<float>(H), D = alloc<float>(H);
    fill<<<64, 256>>>(A, H, 1, -8.f, -0.05f);
    fill<<<64, 256>>>(dt_bias, H, 2, -1.f, 1.f);
    fill<<<64, 256>>>(D, H, 3, 0.5f, 1.5f);
    fill<<<1024, 256>>>(init, B * S, 4, -0.3f, 0.3f);
    const size_t xs = size_t(INPUT_SETS) * B * H * 64, bs = size_t(INPUT_SETS) * B * G * 128;
    x = alloc<T>(xs), z = alloc<T>(xs), out = alloc<T>(size_t(B) * H * 64);
    dt = alloc<T>(size_t(INPUT_SETS) * B * H), Bm = alloc<T>(bs), C = alloc<T>(bs);
    fill_bf16<<<1024, 256>>>(x, xs, 5, -2.f, 2.f);
    fill_bf16<<<1024, 256>>>(z, xs, 6, -2.f, 2.f);
    fill_bf16<<<1024, 256>>>(dt, size_t(INPUT_SETS) * B * H, 7, -4.f, 1.f);
    fill_bf16<<<1024, 256>>>(Bm, bs, 8, -2.f, 2.f);
    fill_bf16<<<1024, 256>>>(C, bs, 9, -2.f, 2.f);
    use_workspace(rs::mamba2_params<policy>::workspace_elems(B, H));
  }
  const char* name() const { return "Mamba-2 H128 P64 N128 G8"; }
  double replay_bytes() const {
    return eager_bytes() + double(L) * B * K * ((H * 64 + G * 128) * 2.0 + H * 4.0 + 8.0 / K);
  }
  rs::mamba2_params<policy> params(int l, int set) const {
    rs::mamba2_params<policy> p;
    p.nheads = H, p.ngroups = G, p.headdim = 64, p.dstate = 128;
    p.weights = {A, dt_bias, D, true};
    const size_t xo = size_t(set) * B * H * 64, bo = size_t(set) * B * G * 128;
    p.in.x = x + xo, p.in.x_batch_stride = H * 64, p.in.x_head_stride = 64;
    p.in.z = z + xo, p.in.z_batch_stride = H * 64, p.in.z_head_stride = 64;
    p.in.dt = dt + size_t(set) * B * H, p.in.dt_batch_stride = H;
    p.in.B = Bm + bo, p.in.B_batch_stride = G * 128, p.in.B_group_stride = 128;
    p.in.C = C + bo, p.in.C_batch_stride = G * 128, p.in.C_group_stride = 128;
    p.in.out = out, p.in.out_batch_stride = H * 64, p.in.out_head_stride = 64;
    p.rows = {nullptr, -1, B};
    p.state = {pools[l], int64_t(S), 64 * 128, 128, B};
    p.buffer = {bx[l], bB[l], bdt[l]};
    p.cursors = {cursor + size_t(l) * B, arrivals + size_t(l) * B};
    p.workspace = ws, p.workspace_size = ws_size;
    return p;
  }
};

struct gdn_stack : stack_common<gdn_stack> {
  using policy = rs::replay_policy<rs::rules::gated_deltanet<128, 128, T>, K, K>;
  int Hk = 16, Hv = 64;
  std::vector<float*> bks, bg, bbeta;
  std::vector<T*> bk, bv;
  float *g, *beta;
  T *q, *k, *v, *out;
  gdn_stack(int layers, int batch) : stack_common(layers, batch, size_t(64) * 128 * 128) {
    for (int l = 0; l < L; ++l) {
      bk.push_back(alloc<T>(size_t(B) * K * Hk * 128));
      bks.push_back(alloc<float>(size_t(B) * K * Hk));
      bv.push_back(alloc<T>(size_t(B) * K * Hv * 128));
      bg.push_back(alloc<float>(size_t(B) * K * Hv));
      bbeta.push_back(alloc<float>(size_t(B) * K * Hv));
    }
    fill<<<1024, 256>>>(init, B * S, 14, -0.3f, 0.3f);
    const size_t qs = size_t(INPUT_SETS) * B * Hk * 128, vs = size_t(INPUT_SETS) * B * Hv * 128;
    q = alloc<T>(qs), k = alloc<T>(qs), v = alloc<T>(vs), out = alloc<T>(size_t(B) * Hv * 128);
    g = alloc<float>(size_t(INPUT_SETS) * B * Hv), beta = alloc<float>(size_t(INPUT_SETS) * B * Hv);
    fill_bf16<<<1024, 256>>>(q, qs, 15, -2.f, 2.f);
    fill_bf16<<<1024, 256>>>(k, qs, 16, -2.f, 2.f);
    fill_bf16<<<1024, 256>>>(v, vs, 17, -2.f, 2.f);
    fill<<<1024, 256>>>(g, size_t(INPUT_SETS) * B * Hv, 18, -3.f, -0.01f);
    fill<<<1024, 256>>>(beta, size_t(INPUT_SETS) * B * Hv, 19, 0.05f, 0.95f);
    use_workspace(rs::gdn_params<policy>::workspace_elems(B, Hv));
  }
  const char* name() const { return "Gated DeltaNet Hk16 Hv64 K=V=128"; }
  double replay_bytes() const {
    return eager_bytes() +
           double(L) * B * K * ((Hk * 128 + Hv * 128) * 2.0 + (Hk + 2 * Hv) * 4.0 + 8.0 / K);
  }
  rs::gdn_params<policy> params(int l, int set) const {
    rs::gdn_params<policy> p;
    p.num_k_heads = Hk, p.num_v_heads = Hv, p.head_k_dim = 128, p.head_v_dim = 128;
    const size_t qo = size_t(set) * B * Hk * 128, vo = size_t(set) * B * Hv * 128;
    p.in.q = q + qo, p.in.q_batch_stride = Hk * 128, p.in.q_head_stride = 128;
    p.in.k = k + qo, p.in.k_batch_stride = Hk * 128, p.in.k_head_stride = 128;
    p.in.v = v + vo, p.in.v_batch_stride = Hv * 128, p.in.v_head_stride = 128;
    p.in.g = g + size_t(set) * B * Hv, p.in.g_batch_stride = Hv;
    p.in.beta = beta + size_t(set) * B * Hv, p.in.beta_batch_stride = Hv;
    p.in.out = out, p.in.out_batch_stride = Hv * 128, p.in.out_head_stride = 128;
    p.rows = {nullptr, -1, B};
    p.state = {pools[l], int64_t(S), 128 * 128, 128, B};
    p.buffer = {bk[l], bks[l], bv[l], bg[l], bbeta[l]};
    p.cursors = {cursor + size_t(l) * B, arrivals + size_t(l) * B};
    p.workspace = ws, p.workspace_size = ws_size;
    return p;
  }
};

int main(int argc, char** argv) {
  const std::string rule = argc > 1 ? argv[1] : "mamba2";
  const bool gdn = rule == "gdn";
  if (!gdn && rule != "mamba2")
    return std::printf("usage: %s [mamba2|gdn] [layers] [batch] [tokens]\n", argv[0]), 2;
  auto arg = [&](int i, int fallback) {  // a missing, empty or non-positive argument: the default
    const int v = argc > i ? std::atoi(argv[i]) : 0;
    return v > 0 ? v : fallback;
  };
  const int layers = arg(2, gdn ? 36 : 40);
  const int batch = arg(3, 256);
  const int tokens = arg(4, 1000);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf(
        "No CUDA GPU found: this example times GPU kernels and has nothing to run without "
        "one (it needs about %.0f GB of device memory at these settings).\n",
        1.15 * layers * batch * 4.0 * (1 << 20) / 1e9);
    return 0;
  }
  if (gdn) {
    gdn_stack s(layers, batch);
    return run(s, layers, batch, tokens);
  }
  mamba2_stack s(layers, batch);
  return run(s, layers, batch, tokens);
}
