// Decode benchmarks: eager vs replay (non-commit step, commit step, staggered commit window) for
// the model shapes of Mamba-2 and Gated DeltaNet, a commit-interval sweep, and the copy ceiling.
//
// Every case reports manual time from CUDA events (per decode step) and bytes/s counted from the
// bytes each kernel must move; working sets are rotated over >= 1 GiB of slots so L2 never holds
// them. Inputs are bf16 (as engines feed them), states fp32.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "setups.cuh"

namespace {

using namespace replayssm;
using rbench::cached_setup;
using rbench::dev_array;
using rbench::gdn_setup;
using rbench::mamba2_setup;
using rbench::workspace_by_default;
using T = __nv_bfloat16;

enum class mode : int { eager = 0, replay = 1, commit = 2, window = 3 };
const char* mode_name(mode m) {
  switch (m) {
    case mode::eager:
      return "eager";
    case mode::replay:
      return "replay_step";
    case mode::commit:
      return "commit_step";
    case mode::window:
      return "replay_window_avg";
  }
  return "?";
}

/// Bytes per row per step that a kernel of `m` must move at commit interval K. Output steps read
/// the serving copy (the checkpoint itself unless the policy is a pair); a commit reads and writes
/// the master, and a pair's commit also rewrites the copy (and has read it: decode loads the copy
/// before it knows the row commits).
template <class Setup>
double bytes_per_row(const Setup& s, mode m, int K, bool pair) {
  const double S = s.state_bytes(), Sc = s.serving_bytes(), bs = s.step_buffer_bytes();
  const double io = s.io_bytes();
  const double fold = pair ? 2 * S + 2 * Sc : 2 * S;  // state bytes of a committing step
  const int n_replay = K / 2;  // the replay-step case runs with K/2 buffered steps
  switch (m) {
    case mode::eager:
      return 2 * S + io;
    case mode::replay:
      return Sc + n_replay * bs + bs + io;
    case mode::commit:
      return fold + (K - 1) * bs + io;
    case mode::window: {
      double total = fold + (K - 1) * bs + io;                         // the committing step
      for (int n = 0; n < K - 1; ++n) total += Sc + n * bs + bs + io;  // the others
      return total / K;
    }
  }
  return 0;
}

template <class Setup>
void run_case(benchmark::State& state, Setup& s, mode m) {
  using policy = typename decltype(s.params(0))::policy;
  constexpr int K = policy::commit_interval;
  cudaStream_t stream;
  RBENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  rbench::event_timer timer(stream);
  int it = 0;
  auto set_cursors = [&](int set) {
    const int n = m == mode::commit ? K - 1 : (m == mode::replay ? K / 2 : 0);
    rbench::set_cursors_kernel<<<(s.batch + 127) / 128, 128, 0, stream>>>(
        s.cursor.ptr, s.rot.set(set), s.batch, n, K, m == mode::window, set);
    RBENCH_CHECK(cudaGetLastError());
  };
  auto launch = [&](int set) {
    const auto p = s.params(set);
    if (m == mode::eager) {
      if constexpr (!policy::has_serving_copy) RBENCH_CHECK(eager_step(p, stream));
    } else
      RBENCH_CHECK(decode_step(p, stream));
  };
  for (int w = 0; w < 3; ++w) {  // warm-up
    set_cursors(w);
    launch(w);
  }
  RBENCH_CHECK(cudaStreamSynchronize(stream));
  // Every iteration times one step. In the window mode the rows sit at staggered cursors (row b
  // at (b + iteration) mod K), so a batch of K or more rows has the window's mix at every step
  // (1/K of the rows commit, the others replay 0 .. K - 2 buffered steps) and any batch has it
  // over K iterations: the mean over iterations is the per-step average over a commit window.
  // (Timing K launches per iteration, as before 2026-11-29, gives that mean at K times the wall
  // time per measured second.)
  for (auto _ : state) {
    const int set = it++;
    if (m != mode::eager) set_cursors(set);
    timer.begin();
    launch(set);
    state.SetIterationTime(timer.end());
  }
  const double bytes = bytes_per_row(s, m, K, policy::has_serving_copy) * s.batch;
  state.SetBytesProcessed(int64_t(bytes * state.iterations()));
  state.counters["bytes_per_step"] = bytes;
  state.counters["batch"] = s.batch;
  state.counters["K"] = K;
  RBENCH_CHECK(cudaStreamDestroy(stream));
}

/// Workspace: 1 passes the setup's workspace to decode launches (the split replay step), 0 does
/// not (the fused kernel), -1 follows workspace_by_default() (REPLAYSSM_BENCH_WORKSPACE).
/// (Setups are cached and shared, so every benchmark sets it.)
template <class Setup, int Workspace>
void bm_setup(benchmark::State& state) {
  auto& s = cached_setup<Setup>(int(state.range(0)), int(state.range(1)), int(state.range(2)));
  s.use_workspace = Workspace < 0 ? workspace_by_default() : Workspace == 1;
  run_case(state, s, mode(state.range(3)));
}
template <class Policy, int Workspace = -1>
void bm_mamba2(benchmark::State& state) {
  bm_setup<mamba2_setup<Policy>, Workspace>(state);
}
template <class Policy, int Workspace = -1>
void bm_gdn(benchmark::State& state) {
  bm_setup<gdn_setup<Policy>, Workspace>(state);
}

__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    __stcs(dst + i, __ldcs(src + i));
}

__global__ void read_kernel(const float4* __restrict__ src, size_t n, float* sink) {
  float acc = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(src + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) *sink = acc;  // keeps the loads alive
}

// The bandwidth ceilings: cudaMemcpyAsync (range(0) == 0), a float4 copy kernel (1), both
// counted read + write, and a read-only float4 kernel (2), counted read.
void bm_copy(benchmark::State& state) {
  const size_t bytes = size_t(2) << 30;
  dev_array<char> a(bytes), b(bytes);
  RBENCH_CHECK(cudaMemset(a.ptr, 1, bytes));
  cudaStream_t stream;
  RBENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  rbench::event_timer timer(stream);
  const int how = int(state.range(0));
  auto copy = [&] {
    if (how == 2) {
      read_kernel<<<132 * 16, 256, 0, stream>>>(reinterpret_cast<const float4*>(a.ptr), bytes / 16,
                                                reinterpret_cast<float*>(b.ptr));
      RBENCH_CHECK(cudaGetLastError());
    } else if (how == 1) {
      copy_kernel<<<132 * 16, 256, 0, stream>>>(reinterpret_cast<const float4*>(a.ptr),
                                                reinterpret_cast<float4*>(b.ptr), bytes / 16);
      RBENCH_CHECK(cudaGetLastError());
    } else {
      RBENCH_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
    }
  };
  copy();
  for (auto _ : state) {
    timer.begin();
    copy();
    state.SetIterationTime(timer.end());
  }
  state.SetBytesProcessed(int64_t((how == 2 ? 1.0 : 2.0) * bytes * state.iterations()));
  RBENCH_CHECK(cudaStreamDestroy(stream));
}

template <int K>
using m2pol = replay_policy<rules::mamba2<64, 128, T>, K, K>;
template <int K>
using gdnpol = replay_policy<rules::gated_deltanet<128, 128, T>, K, K>;

template <int K, int Tile, int Threads, int Stages = 0>
using m2var =
    replay_policy<rules::mamba2<64, 128, T>, K, K, precision::fp32, Tile, Threads, Stages>;
template <int K, int Tile, int Threads, int Stages = 0>
using gdnvar =
    replay_policy<rules::gated_deltanet<128, 128, T>, K, K, precision::fp32, Tile, Threads, Stages>;
// The pipelined (persistent, cp.async) configuration measured beside the defaults.
template <int K>
using m2pipe = m2var<K, 64, 256, 3>;
template <int K>
using gdnpipe = gdnvar<K, 64, 128, 3>;

// Precision schemes (issue 5), K = 16: a single low-precision checkpoint and the pairs.
template <class Pr>
using m2prec = replay_policy<rules::mamba2<64, 128, T>, 16, 16, Pr>;
template <class Pr>
using gdnprec = replay_policy<rules::gated_deltanet<128, 128, T>, 16, 16, Pr>;

const std::vector<int64_t> kBatches{1, 8, 64, 256, 512};
const mode kModes[] = {mode::eager, mode::replay, mode::commit, mode::window};

void register_all() {
  rbench::add_device_context();
  benchmark::RegisterBenchmark("copy/d2d_2GiB", bm_copy)
      ->ArgName("kind")
      ->Arg(0)
      ->Arg(1)
      ->Arg(2)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
  // Decode at K = 16 for the model shapes: {heads, groups, batch, mode}.
  // Names: <rule>[_pipe]/<shape>/K16/<mode>/batch:<b>.
  auto suite = [](const std::string& rule, auto m2fn, auto gdnfn) {
    for (auto hg : std::vector<std::pair<int, int>>{{128, 8}, {80, 1}})
      for (mode m : kModes)
        benchmark::RegisterBenchmark(("mamba2" + rule + "/H" + std::to_string(hg.first) + "_G" +
                                      std::to_string(hg.second) + "/K16/" + mode_name(m))
                                         .c_str(),
                                     m2fn)
            ->ArgsProduct({{hg.first}, {hg.second}, kBatches, {int64_t(m)}})
            ->ArgNames({"H", "G", "batch", "mode"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    for (auto hv : std::vector<int>{64, 32})
      for (mode m : kModes)
        benchmark::RegisterBenchmark(
            ("gdn" + rule + "/Hv" + std::to_string(hv) + "_Hk16/K16/" + mode_name(m)).c_str(),
            gdnfn)
            ->ArgsProduct({{hv}, {16}, kBatches, {int64_t(m)}})
            ->ArgNames({"Hv", "Hk", "batch", "mode"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
  };
  suite("", bm_mamba2<m2pol<16>>, bm_gdn<gdnpol<16>>);
  suite("_pipe", bm_mamba2<m2pipe<16>>, bm_gdn<gdnpipe<16>>);
  // Commit-interval sweep at batch 256 (the staggered window average, plus eager once).
  auto sweep = [](const char* name, auto fn, int h, int g) {
    benchmark::RegisterBenchmark(name, fn)
        ->Args({h, g, 256, 3})
        ->ArgNames({"H", "G", "batch", "mode"})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  };
  // Tile/thread variants at batch 256 (tuning record; names: tile<rows or cols>_t<threads>).
  auto variant = [](std::string name, auto fn, int h, int g) {
    for (mode m : {mode::eager, mode::replay, mode::commit})
      benchmark::RegisterBenchmark((name + "/" + mode_name(m)).c_str(), fn)
          ->Args({h, g, 256, int64_t(m)})
          ->ArgNames({"H", "G", "batch", "mode"})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  };
  variant("variant/mamba2/tile64_t128", bm_mamba2<m2var<16, 64, 128>>, 128, 8);
  variant("variant/mamba2/tile32_t128", bm_mamba2<m2var<16, 32, 128>>, 128, 8);
  variant("variant/mamba2/tile64_t256", bm_mamba2<m2var<16, 64, 256>>, 128, 8);
  variant("variant/gdn/tile64_t128", bm_gdn<gdnvar<16, 64, 128>>, 64, 16);
  variant("variant/gdn/tile32_t128", bm_gdn<gdnvar<16, 32, 128>>, 64, 16);
  variant("variant/gdn/tile128_t128", bm_gdn<gdnvar<16, 128, 128>>, 64, 16);
  variant("variant/gdn/tile64_t256", bm_gdn<gdnvar<16, 64, 256>>, 64, 16);
  variant("variant/mamba2/tile64_t256_z2", bm_mamba2<m2var<16, 64, 256, 2>>, 128, 8);
  variant("variant/mamba2/tile64_t128_z3", bm_mamba2<m2var<16, 64, 128, 3>>, 128, 8);
  variant("variant/mamba2/tile64_t256_z4", bm_mamba2<m2var<16, 64, 256, 4>>, 128, 8);
  variant("variant/gdn/tile128_t128_z2", bm_gdn<gdnvar<16, 128, 128, 2>>, 64, 16);
  variant("variant/gdn/tile64_t256_z3", bm_gdn<gdnvar<16, 64, 256, 3>>, 64, 16);
  variant("variant/gdn/tile32_t128_z4", bm_gdn<gdnvar<16, 32, 128, 4>>, 64, 16);
  // Small batches (issue 3: batch 1 and 8 no slower than eager): the fused kernel (no
  // workspace) with smaller tiles, i.e. more blocks, beside the defaults without a workspace.
  // A tile is a compile-time choice over the same memory: an engine may keep two policies
  // that differ only in Tile and launch by batch size.
  auto small = [](std::string name, auto fn, int h, int g) {
    for (int batch : {1, 8})
      for (mode m : {mode::replay, mode::window})
        benchmark::RegisterBenchmark((name + "/" + mode_name(m)).c_str(), fn)
            ->Args({h, g, batch, int64_t(m)})
            ->ArgNames({"H", "G", "batch", "mode"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
  };
  small("small/mamba2/tile64_t256", bm_mamba2<m2var<16, 64, 256>, 0>, 128, 8);
  small("small/mamba2/tile32_t256", bm_mamba2<m2var<16, 32, 256>, 0>, 128, 8);
  small("small/mamba2/tile16_t256", bm_mamba2<m2var<16, 16, 256>, 0>, 128, 8);
  small("small/mamba2/tile16_t128", bm_mamba2<m2var<16, 16, 128>, 0>, 128, 8);
  small("small/gdn/tile128_t128", bm_gdn<gdnvar<16, 128, 128>, 0>, 64, 16);
  small("small/gdn/tile64_t128", bm_gdn<gdnvar<16, 64, 128>, 0>, 64, 16);
  small("small/gdn/tile32_t128", bm_gdn<gdnvar<16, 32, 128>, 0>, 64, 16);
  sweep("sweep/mamba2/K1", bm_mamba2<m2pol<1>>, 128, 8);
  sweep("sweep/mamba2/K2", bm_mamba2<m2pol<2>>, 128, 8);
  sweep("sweep/mamba2/K4", bm_mamba2<m2pol<4>>, 128, 8);
  sweep("sweep/mamba2/K8", bm_mamba2<m2pol<8>>, 128, 8);
  sweep("sweep/mamba2/K16", bm_mamba2<m2pol<16>>, 128, 8);
  sweep("sweep/mamba2/K32", bm_mamba2<m2pol<32>>, 128, 8);
  sweep("sweep/gdn/K1", bm_gdn<gdnpol<1>>, 64, 16);
  sweep("sweep/gdn/K2", bm_gdn<gdnpol<2>>, 64, 16);
  sweep("sweep/gdn/K4", bm_gdn<gdnpol<4>>, 64, 16);
  sweep("sweep/gdn/K8", bm_gdn<gdnpol<8>>, 64, 16);
  sweep("sweep/gdn/K16", bm_gdn<gdnpol<16>>, 64, 16);
  sweep("sweep/gdn/K32", bm_gdn<gdnpol<32>>, 64, 16);
  // Precision schemes at batch 256, K = 16 (names: precision/<rule>/<shape>/<scheme>/<mode>);
  // the fp32 rows of the same run are the suite's. Pairs have no eager step.
  auto prec = [](const std::string& name, auto m2fn, auto gdnfn, bool pair) {
    for (mode m : kModes) {
      if (pair && m == mode::eager) continue;
      for (auto hg : std::vector<std::pair<int, int>>{{128, 8}, {80, 1}})
        benchmark::RegisterBenchmark(("precision/mamba2/H" + std::to_string(hg.first) + "_G" +
                                      std::to_string(hg.second) + "/" + name + "/" + mode_name(m))
                                         .c_str(),
                                     m2fn)
            ->Args({hg.first, hg.second, 256, int64_t(m)})
            ->ArgNames({"H", "G", "batch", "mode"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      for (int hv : {64, 32})
        benchmark::RegisterBenchmark(
            ("precision/gdn/Hv" + std::to_string(hv) + "_Hk16/" + name + "/" + mode_name(m))
                .c_str(),
            gdnfn)
            ->Args({hv, 16, 256, int64_t(m)})
            ->ArgNames({"Hv", "Hk", "batch", "mode"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    }
  };
  prec("bf16", bm_mamba2<m2prec<precision::bf16>>, bm_gdn<gdnprec<precision::bf16>>, false);
  prec("fp16", bm_mamba2<m2prec<precision::fp16>>, bm_gdn<gdnprec<precision::fp16>>, false);
  prec("fp8", bm_mamba2<m2prec<precision::fp8>>, bm_gdn<gdnprec<precision::fp8>>, false);
  prec("int8", bm_mamba2<m2prec<precision::int8>>, bm_gdn<gdnprec<precision::int8>>, false);
  prec("fp32_bf16", bm_mamba2<m2prec<precision::fp32_bf16>>, bm_gdn<gdnprec<precision::fp32_bf16>>,
       true);
  prec("fp32_fp16", bm_mamba2<m2prec<precision::fp32_fp16>>, bm_gdn<gdnprec<precision::fp32_fp16>>,
       true);
  prec("fp32_fp8", bm_mamba2<m2prec<precision::fp32_fp8>>, bm_gdn<gdnprec<precision::fp32_fp8>>,
       true);
  prec("fp32_int8", bm_mamba2<m2prec<precision::fp32_int8>>, bm_gdn<gdnprec<precision::fp32_int8>>,
       true);
  for (auto [name, fn] : {std::pair{"sweep_pipe/mamba2/K4", &bm_mamba2<m2pipe<4>>},
                          std::pair{"sweep_pipe/mamba2/K8", &bm_mamba2<m2pipe<8>>},
                          std::pair{"sweep_pipe/mamba2/K16", &bm_mamba2<m2pipe<16>>}})
    sweep(name, fn, 128, 8);
  for (auto [name, fn] : {std::pair{"sweep_pipe/gdn/K4", &bm_gdn<gdnpipe<4>>},
                          std::pair{"sweep_pipe/gdn/K8", &bm_gdn<gdnpipe<8>>},
                          std::pair{"sweep_pipe/gdn/K16", &bm_gdn<gdnpipe<16>>}})
    sweep(name, fn, 64, 16);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
