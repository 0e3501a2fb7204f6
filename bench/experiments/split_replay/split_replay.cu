// Split replay prototype: does a Mamba-2 replay (non-commit) decode step reach the read-only
// bandwidth floor once the state-independent work (B.C dots, decay weights) moves to its own small
// kernel? See README.md next to this file. Standalone: no library headers, no Google Benchmark.
//
// Build (from the repository root, one line):
// clang-format off
//   nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -o .dev3/split_replay bench/experiments/split_replay/split_replay.cu
// clang-format on
// Run: .dev3/split_replay [batch = 256] [timed launches = 30]

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common.cuh"  // CHECK, bf16 packs, transposed_sum, fills, timer, host copies, table

namespace {

// Shape: Mamba-2 H128 (Nemotron-3-Super-like), buffer of L = K = 16 steps.
constexpr int H = 128;       // nheads
constexpr int P = 64;        // headdim
constexpr int N = 128;       // dstate
constexpr int G = 8;         // ngroups
constexpr int HPG = H / G;   // heads per group
constexpr int L = 16;        // buffer length; coef holds L weights per (row, head)
constexpr int n_timed = 15;  // buffered steps in the timed runs: the replay step before a commit
constexpr int num_sets = 4;  // disjoint state pools rotated through, so L2 never holds the state

// Everything one replay step touches. The workspace (coef, decay) is per batch row.
struct replay_args {
  int batch;
  const int32_t* slot_idx;  // [batch] row -> slot
  const int32_t* cursor;    // [slots] buffered steps n (read only here: the advance is not modeled)
  const float* state;       // [slots][H][P][N] fp32 checkpoints
  bf16* buf_x;              // [slots][L][H][P]
  bf16* buf_B;              // [slots][L][G][N]
  float* buf_dt;            // [slots][L][H], after bias and softplus
  const bf16* x;            // [batch][H][P] current step
  const bf16* B;            // [batch][G][N]
  const bf16* C;            // [batch][G][N]
  const bf16* z;            // [batch][H][P]
  const bf16* dt;           // [batch][H] raw (before bias and softplus)
  const float* A;           // [H]
  const float* dt_bias;     // [H]
  const float* D;           // [H]
  float* coef;              // [batch][H][L]: w_q = exp(L_q) dt_q (B_q . C), q = 0..n (n = current)
  float* decay;             // [batch][H]: exp(sum of A dt over all n + 1 steps)
  float* y;                 // [batch][H][P] fp32 output (the library writes the input type)
};

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ float softplus(float v) { return v > 20.f ? v : log1pf(expf(v)); }
__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }
__device__ __forceinline__ int clamp_cursor(int n) { return n < 0 ? 0 : (n > L - 1 ? L - 1 : n); }

// ---------------------------------------------------------------------------------------------
// Kernel A: the state-independent part, once per row for all its groups and heads.
//
// One block per row (256 threads, a single wave even at batch 512, so the PDL trigger below fires
// early). Phase 1: the (n + 1) x G dots B_q . C, 16 lanes per dot, each lane 8 elements of 8
// steps; phase 2: one thread per head scans its decays and writes its 16 weights and decay.

constexpr int coef_threads = 256;
static_assert(coef_threads == 2 * 8 * 16 && H <= coef_threads, "thread mapping of coef_kernel");

__global__ void __launch_bounds__(coef_threads) coef_kernel(replay_args a) {
  // Trigger at the start: it only lets the dependent stream kernel be *scheduled* (once every block
  // of this grid has triggered or exited); its cudaGridDependencySynchronize still waits for this
  // grid to complete and flush its writes. So the stream kernel's blocks can request their state
  // tiles while this kernel runs; a trigger at the end would serialise the two again.
  cudaTriggerProgrammaticLaunchCompletion();

  __shared__ float bc[G][L];  // B_q . C per group and step
  const int row = blockIdx.x, t = threadIdx.x;
  const int64_t slot = a.slot_idx[row];
  const int n = clamp_cursor(a.cursor[slot]);

  // All loads first. Dots: group g, elements sub*8.., steps q0..q0+7.
  const int sub = t & 15, g = (t >> 4) & 7, q0 = (t >> 7) * 8;
  const int64_t in_bc = (int64_t(row) * G + g) * N + sub * 8;
  const bf16_pack<8> c = load_pack<8>(a.C + in_bc);
  bf16_pack<8> b[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int q = q0 + k;
    b[k] = q < n    ? load_pack<8>(a.buf_B + ((slot * L + q) * G + g) * N + sub * 8)
           : q == n ? load_pack<8>(a.B + in_bc)
                    : zero_pack<8>();
  }
  // Heads: thread t < H owns head t (lanes = consecutive heads: coalesced dt rows).
  const int h = t;
  float dtq[L];
  float raw = 0.f, bias = 0.f, A = 0.f;
  if (h < H) {
#pragma unroll
    for (int q = 0; q < L; ++q) dtq[q] = q < n ? a.buf_dt[(slot * L + q) * H + h] : 0.f;
    raw = load_bf16(a.dt + int64_t(row) * H + h);
    bias = a.dt_bias[h];
    A = a.A[h];
  }

  float d[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(b[k][e], c[e], s);
    d[k] = s;
  }
  const float dot = transposed_sum<8, 16>(d, t);  // step q0 + sub / 2
  if ((sub & 1) == 0) bc[g][q0 + sub / 2] = dot;
  __syncthreads();

  if (h < H) {
    const float dt_cur = softplus(raw + bias);
    const int hg = h / HPG;
    float w[L];
    float log_decay = 0.f;  // sum of A dt over the steps after q (q = n: the current step)
#pragma unroll
    for (int q = L - 1; q >= 0; --q) {
      const float dq = q < n ? dtq[q] : (q == n ? dt_cur : 0.f);
      w[q] = expf(log_decay) * dq * bc[hg][q];
      log_decay = fmaf(A, dq, log_decay);
    }
    float4* out = reinterpret_cast<float4*>(a.coef + (int64_t(row) * H + h) * L);
#pragma unroll
    for (int i = 0; i < L / 4; ++i)
      out[i] = make_float4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    a.decay[int64_t(row) * H + h] = expf(log_decay);
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel B: stream the state. One block per (row, head); warp w owns headdim rows
// p0 = w * R .. p0 + R - 1 (R = 8: 256 threads, R = 4: 512 threads). A lane owns 16-byte
// fragment `lane` of each of its R rows (a warp load = one contiguous 512-byte state row), and
// lane q <= n owns step q's x for the R rows (one 16- or 8-byte load; q = n is the current step).
// Every lane's per-row partial sums
//   decay0 (h_c[p, 4 lane..] . C[4 lane..]) + w_lane x_lane[p]   (+ D x_cur[p] in lane n)
// are reduced across the warp in one transposed sum: no shared memory, no block barrier.

template <int R>
__device__ __forceinline__ void stream_body(const replay_args& a) {
  static_assert(P % R == 0 && N == 4 * 32, "a warp row is 32 fragments of 4 floats");
  const int h = blockIdx.x, row = blockIdx.y, g = h / HPG;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = warp * R;
  const int64_t slot = a.slot_idx[row];

  // 1. State tile rows, streamed (evict-first: read once per step).
  const float4* st =
      reinterpret_cast<const float4*>(a.state + ((slot * H + h) * P + p0) * N) + lane;
  float4 hs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) hs[r] = __ldcs(st + r * (N / 4));

  // 2. Everything else that does not depend on kernel A, in the same wave.
  const int n = clamp_cursor(a.cursor[slot]);
  const int64_t in_head = (int64_t(row) * H + h) * P;
  const bf16_pack<4> c = load_pack<4>(a.C + (int64_t(row) * G + g) * N + lane * 4);
  bf16_pack<R> xq = zero_pack<R>();
  if (lane < n)
    xq = load_pack<R>(a.buf_x + ((slot * L + lane) * H + h) * P + p0);
  else if (lane == n)
    xq = load_pack<R>(a.x + in_head + p0);
  constexpr int lanes_per_row = 32 / R;  // after the transposed sum, lane l holds row l / this
  const int r_out = lane / lanes_per_row;
  const float z = load_bf16(a.z + in_head + p0 + r_out);
  const float D = a.D[h];
  // The current step's dt and (group's first head) B, appended to the buffer at the end.
  const bool lead = (h % HPG) == 0;
  float raw_dt = 0.f, bias = 0.f;
  bf16_pack<8> b_cur = zero_pack<8>();
  if (warp == 0) {
    if (lane == 0) {
      raw_dt = load_bf16(a.dt + int64_t(row) * H + h);
      bias = a.dt_bias[h];
    }
    if (lead && lane < N / 8) b_cur = load_pack<8>(a.B + (int64_t(row) * G + g) * N + lane * 8);
  }

  // 3. Kernel A's results. With PDL this block may have started while kernel A still runs: the
  // state loads above are already in flight when it waits here. (No-op without PDL.)
  cudaGridDependencySynchronize();
  float w = lane <= n ? a.coef[(int64_t(row) * H + h) * L + lane] : 0.f;
  if (lane == n) w += D;  // D x_cur rides on the current step's weight
  const float decay0 = a.decay[int64_t(row) * H + h];

  // 4. Partial sums per row, reduced across the warp.
  const float c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
  float v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float s = fmaf(hs[r].x, c0, fmaf(hs[r].y, c1, fmaf(hs[r].z, c2, hs[r].w * c3)));
    v[r] = fmaf(decay0, s, w * xq[r]);
  }
  const float y = transposed_sum<R, 32>(v, lane);
  if (lane % lanes_per_row == 0) a.y[in_head + p0 + r_out] = y * silu(z);

  // 5. Append the current step at position n (the library does this on every replay step).
  const int64_t at = slot * L + n;
  if (lane == n) store_pack<R>(a.buf_x + (at * H + h) * P + p0, xq);
  if (warp == 0) {
    if (lane == 0) a.buf_dt[at * H + h] = softplus(raw_dt + bias);
    if (lead && lane < N / 8) store_pack<8>(a.buf_B + (at * G + g) * N + lane * 8, b_cur);
  }
}

// The compiler's own register choice (no spills) ...
template <int R>
__global__ void __launch_bounds__(32 * (P / R)) stream_kernel(replay_args a) {
  stream_body<R>(a);
}
// ... and a cap for MinBlocks resident blocks per SM.
template <int R, int MinBlocks>
__global__ void __launch_bounds__(32 * (P / R), MinBlocks) stream_kernel_capped(replay_args a) {
  stream_body<R>(a);
}

// ---------------------------------------------------------------------------------------------
// Baseline: the read-only floor. Block i reads the i-th 32 KB head tile of a state set with the
// same 16-byte streaming loads and warp-row layout as stream_kernel<8>, writes one float.

constexpr int floor_threads = 256;

__global__ void __launch_bounds__(floor_threads)
    read_floor_kernel(const float* state, float* sink) {
  constexpr int per_thread = P * N / 4 / floor_threads;
  const float4* p =
      reinterpret_cast<const float4*>(state + int64_t(blockIdx.x) * P * N) + threadIdx.x;
  float4 v[per_thread];
#pragma unroll
  for (int i = 0; i < per_thread; ++i) v[i] = __ldcs(p + i * floor_threads);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) s += __shfl_xor_sync(full_mask, s, o);
  __shared__ float part[floor_threads / 32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int i = 0; i < floor_threads / 32; ++i) total += part[i];
    sink[blockIdx.x] = total;
  }
}

// ---------------------------------------------------------------------------------------------
// Random fills (counter-based, so any size fills in place on the device).

// Buffered dt as the library keeps it: softplus(raw + dt_bias[h]), raw ~ U(-4, 1).
__global__ void fill_buffered_dt_kernel(float* p, size_t n, uint64_t seed, const float* dt_bias) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = softplus(-4.f + 5.f * uniform01(seed, i) + dt_bias[i % H]);
}

// ---------------------------------------------------------------------------------------------
// Host side

void launch_coef(const replay_args& a, cudaStream_t s) {
  coef_kernel<<<a.batch, coef_threads, 0, s>>>(a);
  CHECK(cudaGetLastError());
}

template <int R, void (*Kernel)(replay_args)>
void launch_stream(const replay_args& a, cudaStream_t s, bool pdl) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(H, a.batch);
  cfg.blockDim = dim3(32 * (P / R));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1]{};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, Kernel, a));
}

double host_softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

struct host_inputs {
  std::vector<uint16_t> x, B, C, z, dt;
  std::vector<float> A, dt_bias, D;
  std::vector<int32_t> slot;  // set 0's rows
};

/// Runs `launch` on set 0 with the output poisoned, then checks a sample of (row, head) outputs
/// against a float64 reference built from the device data, the whole output for NaN, and the
/// appended step of the sampled slots. Returns false on any failure.
template <class F>
bool check_pass(const char* label, const replay_args& a, const host_inputs& in,
                const std::vector<int>& n_of_row, const std::vector<std::pair<int, int>>& sample,
                std::vector<float>* y_out, F&& launch) {
  const size_t y_count = size_t(a.batch) * H * P;
  CHECK(cudaMemset(a.y, 0xff, y_count * sizeof(float)));  // all-ones bits: NaN
  CHECK(cudaDeviceSynchronize());  // the launches go to a non-blocking stream
  launch();
  CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = to_host(a.y, y_count);
  size_t nan_count = 0;
  for (float v : y) nan_count += std::isnan(v) ? 1 : 0;

  double max_rel = 0.0;
  size_t append_bad = 0;
  int worst_n = -1;
  std::set<int> bad_n;  // buffered-step counts n of the failing samples (a diagnostic)
  for (const auto& [b, h] : sample) {
    const int n = n_of_row[b], g = h / HPG;
    const int64_t slot = in.slot[b];
    const auto st = to_host(a.state + (slot * H + h) * P * N, size_t(P) * N);
    const auto bx = rows_to_host(
        reinterpret_cast<const uint16_t*>(a.buf_x) + (slot * L * H + h) * P, P, size_t(H) * P, L);
    const auto bB = rows_to_host(
        reinterpret_cast<const uint16_t*>(a.buf_B) + (slot * L * G + g) * N, N, size_t(G) * N, L);
    const auto bdt = rows_to_host(a.buf_dt + slot * L * H + h, 1, H, L);
    const uint16_t* xc = &in.x[(size_t(b) * H + h) * P];
    const uint16_t* Bc = &in.B[(size_t(b) * G + g) * N];
    const uint16_t* Cc = &in.C[(size_t(b) * G + g) * N];
    const uint16_t* zc = &in.z[(size_t(b) * H + h) * P];
    const double dt_cur =
        host_softplus(double(host_bf16(in.dt[size_t(b) * H + h])) + in.dt_bias[h]);

    // Step q's dt, B row and x row (q = n: the current inputs).
    auto dt_of = [&](int q) { return q < n ? double(bdt[q]) : dt_cur; };
    auto B_of = [&](int q, int k) {
      return double(host_bf16(q < n ? bB[size_t(q) * N + k] : Bc[k]));
    };
    auto x_of = [&](int q, int p) {
      return double(host_bf16(q < n ? bx[size_t(q) * P + p] : xc[p]));
    };

    std::vector<double> w(n + 1);
    double log_decay = 0.0;
    for (int q = n; q >= 0; --q) {
      double bc = 0.0;
      for (int k = 0; k < N; ++k) bc += B_of(q, k) * double(host_bf16(Cc[k]));
      w[q] = std::exp(log_decay) * dt_of(q) * bc;
      log_decay += double(in.A[h]) * dt_of(q);
    }
    const double decay0 = std::exp(log_decay);
    double err = 0.0, scale = 0.0;
    for (int p = 0; p < P; ++p) {
      double hc = 0.0;
      for (int k = 0; k < N; ++k) hc += double(st[size_t(p) * N + k]) * double(host_bf16(Cc[k]));
      double ref = decay0 * hc + double(in.D[h]) * x_of(n, p);
      for (int q = 0; q <= n; ++q) ref += w[q] * x_of(q, p);
      const double zv = double(host_bf16(zc[p]));
      ref *= zv / (1.0 + std::exp(-zv));
      const double got = y[(size_t(b) * H + h) * P + p];
      err = std::max(err, std::fabs(got - ref));
      scale = std::max(scale, std::fabs(ref));
    }
    const double rel = err / std::max(scale, 1e-30);
    if (rel > max_rel) worst_n = n;
    max_rel = std::max(max_rel, rel);
    if (rel > 1e-4 && bad_n.empty()) {
      // First failing sample: kernel A's weights next to the reference's, to tell A from B.
      const auto cw = to_host(a.coef + (int64_t(b) * H + h) * L, size_t(L));
      const auto cd = to_host(a.decay + int64_t(b) * H + h, size_t(1));
      std::printf("    row %d head %d slot %lld n %d: decay device %.6e host %.6e\n", b, h,
                  static_cast<long long>(slot), n, cd[0], decay0);
      for (int q = 0; q < L; ++q)
        std::printf("      w[%2d] device %+.6e host %+.6e\n", q, cw[q], q <= n ? w[q] : 0.0);
    }
    if (rel > 1e-4) bad_n.insert(n);

    // The append: x and B bit for bit, dt after softplus.
    for (int p = 0; p < P; ++p) append_bad += bx[size_t(n) * P + p] != xc[p];
    for (int k = 0; k < N; ++k) append_bad += bB[size_t(n) * N + k] != Bc[k];
    append_bad += std::fabs(bdt[n] - dt_cur) > 1e-5 * std::fabs(dt_cur);
  }
  const bool ok = nan_count == 0 && append_bad == 0 && max_rel <= 1e-4 && std::isfinite(max_rel);
  std::printf(
      "  %-34s max rel err %.2e over %zu (row, head) pairs, NaN outputs %zu, bad appends %zu: %s\n",
      label, max_rel, sample.size(), nan_count, append_bad, ok ? "ok" : "FAIL");
  if (!ok) {
    std::printf("    worst sample at n = %d; n of the samples above 1e-4:", worst_n);
    for (int n : bad_n) std::printf(" %d", n);
    std::printf("\n");
  }
  if (y_out) *y_out = y;
  return ok;
}

struct stream_variant {
  const char* name;
  int rows;  // headdim rows per warp
  void (*launch)(const replay_args&, cudaStream_t, bool pdl);
  const void* kernel;
};

}  // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 256;
  const int reps = argc > 2 ? std::max(20, std::atoi(argv[2])) : 30;
  if (batch < 1 || batch > 65535) {
    std::fprintf(stderr,
                 "usage: %s [batch 1..65535, default 256] [timed launches >= 20, default 30]\n",
                 argv[0]);
    return 2;
  }
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf(
      "device %s, %d SMs; Mamba-2 H%d P%d N%d G%d, fp32 state, bf16 inputs, batch %d, "
      "%d buffered steps, %d state sets\n",
      prop.name, prop.multiProcessorCount, H, P, N, G, batch, n_timed, num_sets);

  // ---- Allocation and random data (never zeros) ----
  std::vector<void*> owned;
  const int64_t slots = int64_t(num_sets) * batch;
  const size_t state_per_set = size_t(batch) * H * P * N;
  float* state = dev_alloc<float>(size_t(slots) * H * P * N, owned);
  bf16* buf_x = dev_alloc<bf16>(size_t(slots) * L * H * P, owned);
  bf16* buf_B = dev_alloc<bf16>(size_t(slots) * L * G * N, owned);
  float* buf_dt = dev_alloc<float>(size_t(slots) * L * H, owned);
  int32_t* cursor = dev_alloc<int32_t>(size_t(slots), owned);
  int32_t* slot_idx = dev_alloc<int32_t>(size_t(slots), owned);
  bf16* x = dev_alloc<bf16>(size_t(batch) * H * P, owned);
  bf16* z = dev_alloc<bf16>(size_t(batch) * H * P, owned);
  bf16* Bin = dev_alloc<bf16>(size_t(batch) * G * N, owned);
  bf16* Cin = dev_alloc<bf16>(size_t(batch) * G * N, owned);
  bf16* dt = dev_alloc<bf16>(size_t(batch) * H, owned);
  float* A = dev_alloc<float>(H, owned);
  float* dt_bias = dev_alloc<float>(H, owned);
  float* D = dev_alloc<float>(H, owned);
  float* coef = dev_alloc<float>(size_t(batch) * H * L, owned);
  float* decay = dev_alloc<float>(size_t(batch) * H, owned);
  float* y = dev_alloc<float>(size_t(batch) * H * P, owned);
  float* sink = dev_alloc<float>(size_t(batch) * H, owned);

  std::mt19937_64 rng(20261129);
  host_inputs in;
  {
    std::uniform_real_distribution<float> u(-4.f, 1.f);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int h = 0; h < H; ++h) {
      in.A.push_back(-std::exp(u(rng)));
      in.dt_bias.push_back(0.5f * nd(rng));
      in.D.push_back(1.f + 0.1f * nd(rng));
    }
    CHECK(cudaMemcpy(A, in.A.data(), H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dt_bias, in.dt_bias.data(), H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(D, in.D.data(), H * sizeof(float), cudaMemcpyHostToDevice));
  }
  fill_normal(state, size_t(slots) * H * P * N, 1, 0.f, 0.3f);
  fill_normal(buf_x, size_t(slots) * L * H * P, 2, 0.f, 1.f);
  fill_normal(buf_B, size_t(slots) * L * G * N, 3, 0.f, 1.f);
  fill_buffered_dt_kernel<<<2048, 256>>>(buf_dt, size_t(slots) * L * H, 4, dt_bias);
  CHECK(cudaGetLastError());
  fill_normal(x, size_t(batch) * H * P, 5, 0.f, 1.f);
  fill_normal(z, size_t(batch) * H * P, 6, 0.f, 1.f);
  fill_normal(Bin, size_t(batch) * G * N, 7, 0.f, 1.f);
  fill_normal(Cin, size_t(batch) * G * N, 8, 0.f, 1.f);
  fill_uniform(dt, size_t(batch) * H, 9, -4.f, 1.f);

  // Set k's rows use a shuffled permutation of slots [k batch, (k + 1) batch).
  std::vector<int32_t> slot_host(slots);
  for (int k = 0; k < num_sets; ++k) {
    auto first = slot_host.begin() + int64_t(k) * batch;
    std::iota(first, first + batch, int32_t(int64_t(k) * batch));
    std::shuffle(first, first + batch, rng);
  }
  CHECK(cudaMemcpy(slot_idx, slot_host.data(), slots * sizeof(int32_t), cudaMemcpyHostToDevice));
  auto set_cursors = [&](const std::vector<int>& n_of_row0) {  // set 0 per row, other sets n_timed
    std::vector<int32_t> c(slots, n_timed);
    for (int b = 0; b < batch; ++b) c[slot_host[b]] = n_of_row0[b];
    CHECK(cudaMemcpy(cursor, c.data(), slots * sizeof(int32_t), cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());  // pageable copies may return before the data lands
  };
  const std::vector<int> n_uniform(batch, n_timed);
  set_cursors(n_uniform);
  CHECK(cudaDeviceSynchronize());

  replay_args sets[num_sets];
  for (int k = 0; k < num_sets; ++k)
    sets[k] = replay_args{batch,  slot_idx + int64_t(k) * batch,
                          cursor, state,
                          buf_x,  buf_B,
                          buf_dt, x,
                          Bin,    Cin,
                          z,      dt,
                          A,      dt_bias,
                          D,      coef,
                          decay,  y};

  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // ---- Correctness ----
  in.x = to_host(reinterpret_cast<const uint16_t*>(x), size_t(batch) * H * P);
  in.z = to_host(reinterpret_cast<const uint16_t*>(z), size_t(batch) * H * P);
  in.B = to_host(reinterpret_cast<const uint16_t*>(Bin), size_t(batch) * G * N);
  in.C = to_host(reinterpret_cast<const uint16_t*>(Cin), size_t(batch) * G * N);
  in.dt = to_host(reinterpret_cast<const uint16_t*>(dt), size_t(batch) * H);
  in.slot.assign(slot_host.begin(), slot_host.begin() + batch);
  std::vector<std::pair<int, int>> sample = {
      {0, 0}, {batch - 1, H - 1}, {batch / 2, HPG}, {0, H - 1}};
  {
    std::uniform_int_distribution<int> rb(0, batch - 1), rh(0, H - 1);
    while (sample.size() < 128) sample.emplace_back(rb(rng), rh(rng));
  }
  std::vector<int> n_staggered(batch);
  for (int b = 0; b < batch; ++b) n_staggered[b] = b % L;  // 0..15 buffered steps

  // The stream-kernel variants: rows per warp (threads per block) and the register cap.
  const stream_variant variants[] = {
      {"B8", 8, &launch_stream<8, stream_kernel<8>>,
       reinterpret_cast<const void*>(&stream_kernel<8>)},
      {"B8x5", 8, &launch_stream<8, stream_kernel_capped<8, 5>>,
       reinterpret_cast<const void*>(&stream_kernel_capped<8, 5>)},
      {"B4", 4, &launch_stream<4, stream_kernel<4>>,
       reinterpret_cast<const void*>(&stream_kernel<4>)},
      {"B4x4", 4, &launch_stream<4, stream_kernel_capped<4, 4>>,
       reinterpret_cast<const void*>(&stream_kernel_capped<4, 4>)},
  };
  std::printf("stream kernel variants (one block per (row, head)):\n");
  for (const auto& v : variants) {
    cudaFuncAttributes fa{};
    CHECK(cudaFuncGetAttributes(&fa, v.kernel));
    int resident = 0;
    const int threads = 32 * (P / v.rows);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, v.kernel, threads, 0));
    std::printf(
        "  %-5s %d rows per warp, %3d threads, %2d registers, %2zu B local (spills), %d blocks/SM "
        "= %3d KB of state requested per SM\n",
        v.name, v.rows, threads, fa.numRegs, fa.localSizeBytes, resident,
        resident * threads * v.rows * 16 / 1024);
  }

  std::printf(
      "correctness (set 0, float64 reference, output poisoned with NaN before each pass):\n");
  const replay_args& a0 = sets[0];
  bool ok = true;
  std::vector<float> y_plain, y_pdl;
  ok &= check_pass("A + B8, plain, n = 15", a0, in, n_uniform, sample, &y_plain, [&] {
    launch_coef(a0, stream);
    variants[0].launch(a0, stream, false);
  });
  ok &= check_pass("A + B8, PDL, n = 15", a0, in, n_uniform, sample, &y_pdl, [&] {
    launch_coef(a0, stream);
    variants[0].launch(a0, stream, true);
  });
  if (std::memcmp(y_plain.data(), y_pdl.data(), y_plain.size() * sizeof(float)) != 0) {
    std::printf("  FAIL: PDL and plain outputs differ\n");
    ok = false;
  }
  for (const auto& v : variants) {
    if (&v == &variants[0]) continue;
    ok &= check_pass((std::string("A + ") + v.name + ", PDL, n = 15").c_str(), a0, in, n_uniform,
                     sample, nullptr, [&] {
                       launch_coef(a0, stream);
                       v.launch(a0, stream, true);
                     });
  }
  set_cursors(n_staggered);
  bool staggered_ok = true;  // the timed runs use n = 15 (checked above); this checks n = 0..15
  for (const auto& v : variants) {
    const bool pdl = v.rows == 8;  // both launch modes at least once
    staggered_ok &= check_pass(
        (std::string("A + ") + v.name + (pdl ? ", PDL" : ", plain") + ", n = row % 16").c_str(), a0,
        in, n_staggered, sample, nullptr, [&] {
          launch_coef(a0, stream);
          v.launch(a0, stream, pdl);
        });
  }
  set_cursors(n_uniform);
  CHECK(cudaDeviceSynchronize());
  if (!ok) {
    std::printf("correctness FAILED: no timings\n");
    return 1;
  }
  if (!staggered_ok)
    std::printf("staggered check (n = row %% 16) FAILED: timings below are of n = 15, which passed; "
                "exit code 3\n");

  // ---- Timing ----
  // Bytes each launch moves (unique bytes read + written), n = n_timed.
  const double b_ = batch, nb = n_timed;
  const double state_bytes = 4.0 * state_per_set;
  const double coef_bytes = b_ * H * (L + 1) * 4.0;
  const double bytes_A = nb * b_ * G * N * 2 + 2 * b_ * G * N * 2 /* B, C */ + nb * b_ * H * 4 +
                         b_ * H * 2 /* raw dt */ + coef_bytes;
  const double bytes_B = state_bytes + nb * b_ * H * P * 2 /* buffered x */ +
                         2 * b_ * H * P * 2 /* x, z */ + 2 * b_ * G * N * 2 /* C, B */ +
                         b_ * H * 2 /* raw dt */ + coef_bytes + b_ * H * P * 4 /* y */ +
                         b_ * H * P * 2 + b_ * G * N * 2 + b_ * H * 4 /* appends */;

  sample_timer timer(stream);
  std::vector<row_result> rows;
  auto set_of = [&](int i) -> const replay_args& { return sets[i % num_sets]; };

  rows.push_back({"read-only floor (state only)",
                  timer.median_us(reps,
                                  [&](int i) {
                                    read_floor_kernel<<<batch * H, floor_threads, 0, stream>>>(
                                        state + (i % num_sets) * state_per_set, sink);
                                    CHECK(cudaGetLastError());
                                  }),
                  state_bytes});
  rows.push_back(copy_row(timer, reps));
  add_split_rows(rows, timer, reps, "A coef alone", launch_coef, variants, set_of, bytes_A,
                 bytes_B);

  const double floor_us = rows[0].us;
  print_table(rows, reps, num_sets);
  const row_result& best = best_split_row(rows);
  std::printf(
      "\nbest replay step: %s %.1f us = %.3fx the state-only read floor (%.1f us); "
      "library fused replay step at batch 256 (bench/NOTES.md v8): 331-332 us\n",
      best.name.c_str(), best.us, best.us / floor_us, floor_us);

  CHECK(cudaStreamDestroy(stream));
  for (void* p : owned) CHECK(cudaFree(p));
  return staggered_ok ? 0 : 3;
}
