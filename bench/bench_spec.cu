// Speculative rounds at batch 256: ReplaySSM's round (verify_step + accept, random acceptance,
// steady state: the folds of full windows the verifications do included) against the eager engines'
// round (eager_draft_step: one read, one intermediate state written per draft; keeping the accepted
// prefix is a slot-index redirect, free). T tokens per row per round: the last accepted token
// plus T - 1 drafts. Manual time from CUDA events per round; bytes counted as each scheme must
// move them. Two more rows split the verification's time: verify_nofold (every row at K - 1
// buffered steps, the most a row holds without folding) and verify_fold (every row at K: every
// row folds its window first), the verification alone, cursors reset outside the timed region.
#include "setups.cuh"

namespace {

using namespace replayssm;
using rbench::cached_setup;
using rbench::dev_array;
using rbench::T;

constexpr int K = 16;  // the commit interval of the main rows (the _K<k> rows sweep it)
// The smallest buffer verify_step<Tn> accepts: a full window of accepted steps plus a draft.
template <int Tn, int Kc = K>
using m2pol = replay_policy<rules::mamba2<64, 128, T>, Kc - 1 + 2 * Tn, Kc>;
template <int Tn, int Kc = K>
using gdnpol = replay_policy<rules::gated_deltanet<128, 128, T>, Kc - 1 + 2 * Tn, Kc>;
// The same with a bf16 serving copy beside the fp32 checkpoint (precision::pair): the
// verification reads the copy, a fold updates the master and rewrites the copy (the "_bf16copy"
// rows; their outputs carry the copy's rounding, not fp32's: README "Precision pairs").
template <int Tn, int Kc = K>
using m2pair =
    replay_policy<rules::mamba2<64, 128, T>, Kc - 1 + 2 * Tn, Kc, precision::pair<__nv_bfloat16>>;
template <int Tn, int Kc = K>
using gdnpair = replay_policy<rules::gated_deltanet<128, 128, T>, Kc - 1 + 2 * Tn, Kc,
                              precision::pair<__nv_bfloat16>>;

// Per-row counts on the device: num_draft = T for every row, and `sets` random acceptance
// vectors (uniform in [1, T]) rotated over the rounds.
struct spec_counts {
  int batch, sets = 16;
  dev_array<int32_t> num_draft, accepted;
  double mean_accepted = 0;
  spec_counts(int b, int t) : batch(b), num_draft(b), accepted(size_t(b) * 16) {
    std::vector<int32_t> nd(b, t), acc(size_t(b) * sets);
    std::mt19937_64 rng(7);
    for (auto& a : acc) a = 1 + int(rng() % t), mean_accepted += a;
    mean_accepted /= acc.size();
    RBENCH_CHECK(cudaMemcpy(num_draft.ptr, nd.data(), nd.size() * 4, cudaMemcpyHostToDevice));
    RBENCH_CHECK(cudaMemcpy(accepted.ptr, acc.data(), acc.size() * 4, cudaMemcpyHostToDevice));
  }
  spec_ref round(int i) const { return {num_draft.ptr, accepted.ptr + size_t(i % sets) * batch}; }
};

enum class kind { eager_round, replay_round, verify_nofold, verify_fold };

/// `ws`: verify_step gets the setup's workspace (the split verification where the policy allows
/// it); otherwise no launch of the round gets one (verify_step and accept ignore it elsewhere).
template <int Tn, class Setup>
void run_round(benchmark::State& state, Setup& s, kind what, bool ws = false) {
  using policy = typename decltype(s.params(0))::policy;
  constexpr int K = policy::commit_interval;  // (this setup's)
  const bool replay = what != kind::eager_round;
  const bool with_accept = what == kind::replay_round;  // verify, then accept
  const bool verify_only = replay && !with_accept;      // verify alone, cursors reset
  if (policy::has_serving_copy && !replay) {
    state.SkipWithError("the eager round keeps one state: run it with the fp32 policy");
    return;
  }
  spec_counts counts(s.batch, Tn);
  dev_array<float> intermediate(replay ? 0 : size_t(s.batch) * Tn * s.state_elems());
  const state_pool_ref inter{intermediate.ptr, int64_t(s.state_elems()),
                             s.params(0).state.head_stride, s.params(0).state.row_stride,
                             s.batch * Tn};
  cudaStream_t stream;
  RBENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  rbench::event_timer timer(stream);
  cudaEvent_t mid;  // between verify and accept: the verification's own time
  RBENCH_CHECK(cudaEventCreate(&mid));
  double verify_s = 0;
  RBENCH_CHECK(cudaMemsetAsync(s.cursor.ptr, 0, s.cursor.n * 4, stream));
  int it = 0;
  auto round = [&](int i) {
    auto p = s.params(0);  // one slot set: the pool is >= 1 GiB at batch 256
    p.spec = counts.round(i);
    if (ws) {
      p.workspace = s.ws.ptr, p.workspace_size = int64_t(s.ws.n);
    } else {
      p.workspace = nullptr, p.workspace_size = 0;
    }
    if (replay) {
      RBENCH_CHECK(verify_step<Tn>(p, stream));
      if (with_accept) {
        RBENCH_CHECK(cudaEventRecord(mid, stream));
        RBENCH_CHECK(accept(p, stream));
      }
    } else if constexpr (!policy::has_serving_copy) {  // (a pair has no eager round)
      RBENCH_CHECK(eager_draft_step<Tn>(p, inter, stream));
    }
  };
  for (int w = 0; w < 2 * K; ++w) round(w);  // warm-up into the steady state of the cursors
  RBENCH_CHECK(cudaStreamSynchronize(stream));
  const int n_fixed = what == kind::verify_fold ? K : K - 1;
  for (auto _ : state) {
    if (verify_only) {  // every row at n_fixed buffered steps (a fold leaves a marker: reset)
      rbench::set_cursors_kernel<<<(s.batch + 127) / 128, 128, 0, stream>>>(
          s.cursor.ptr, s.rot.set(0), s.batch, n_fixed, K, false, 0);
      RBENCH_CHECK(cudaGetLastError());
    }
    timer.begin();
    round(it++);
    state.SetIterationTime(timer.end());
    if (with_accept) {
      float ms = 0;
      RBENCH_CHECK(cudaEventElapsedTime(&ms, timer.start, mid));
      verify_s += ms * 1e-3;
    }
  }
  RBENCH_CHECK(cudaEventDestroy(mid));
  if (with_accept) state.counters["verify_us"] = 1e6 * verify_s / double(state.iterations());
  // Bytes per row per round. Outputs read the serving copy (the checkpoint itself unless the
  // policy is a pair: Sc = S); a fold reads and writes the master, and a pair's also reads and
  // rewrites the copy (bench_decode's bytes_per_row).
  const double S = s.state_bytes(), Sc = s.serving_bytes(), bs = s.step_buffer_bytes();
  const double io = s.io_bytes();
  const double fold_state = policy::has_serving_copy ? 2 * S + 2 * Sc : 2 * S;
  double bytes;
  if (verify_only) {  // the state read (and written, folding), the buffered rows, the drafts
    const bool fold = what == kind::verify_fold;
    bytes = (fold ? fold_state : Sc) + (n_fixed + Tn) * bs + Tn * io;
  } else if (replay) {
    const double a = counts.mean_accepted, mean_buffered = (K - 1 + a) / 2.0;
    // The verification that finds K or more accepted steps buffered folds them (the window plus
    // the overshoot of the round that filled it: about K + (a - 1) / 2 steps, once every that
    // many accepted steps) in its own pass over the state: fold_state instead of the read.
    const double fold = K + (a - 1) / 2;
    bytes = Sc + (mean_buffered + Tn) * bs + Tn * io + (a / fold) * (fold_state - Sc);
  } else {
    bytes = (1 + Tn) * S + Tn * io;
  }
  state.SetBytesProcessed(int64_t(bytes * s.batch * state.iterations()));
  state.counters["bytes_per_round"] = bytes * s.batch;
  state.counters["T"] = Tn;
  state.counters["mean_accepted"] = counts.mean_accepted;
  RBENCH_CHECK(cudaStreamDestroy(stream));
}

template <int Tn>
void bm_mamba2(benchmark::State& state) {
  auto& s = cached_setup<rbench::mamba2_setup<m2pol<Tn>>>(int(state.range(0)), int(state.range(1)),
                                                          256, 8);
  run_round<Tn>(state, s, kind(state.range(2)));
}
/// verify_step with a workspace: the split verification (mamba2_verify.cuh).
template <int Tn, int Kc = K>
void bm_mamba2_ws(benchmark::State& state) {
  auto& s = cached_setup<rbench::mamba2_setup<m2pol<Tn, Kc>>>(int(state.range(0)),
                                                              int(state.range(1)), 256, 8);
  run_round<Tn>(state, s, kind(state.range(2)), true);
}
template <int Tn>
void bm_gdn(benchmark::State& state) {
  auto& s =
      cached_setup<rbench::gdn_setup<gdnpol<Tn>>>(int(state.range(0)), int(state.range(1)), 256, 8);
  // run_round passes no workspace (ws false): the fused verification, as before.
  run_round<Tn>(state, s, kind(state.range(2)));
}
/// The same rounds with the split verification (gdn_verify.cuh): every launch gets the setup's
/// workspace (run_round's ws), grown to verify_workspace_elems floats (accept ignores it).
template <int Tn>
void bm_gdn_ws(benchmark::State& state) {
  using P = gdnpol<Tn>;
  static_assert(replayssm::detail::gdn_verify_split_supported<P>::value,
                "the _ws rows measure the split verification");
  auto& s = cached_setup<rbench::gdn_setup<P>>(int(state.range(0)), int(state.range(1)), 256, 8);
  const size_t need = size_t(gdn_params<P>::verify_workspace_elems(s.batch, s.H, Tn));
  if (s.ws.n < need) {  // (still enough for decode_step: verify needs more)
    RBENCH_CHECK(cudaFree(s.ws.ptr));
    s.ws.ptr = nullptr;
    RBENCH_CHECK(cudaMalloc(&s.ws.ptr, need * sizeof(float)));
    s.ws.n = need;
  }
  run_round<Tn>(state, s, kind(state.range(2)), true);
}

/// The rounds with a bf16 serving copy, without a workspace (the fused verification).
template <int Tn>
void bm_mamba2_pair(benchmark::State& state) {
  auto& s = cached_setup<rbench::mamba2_setup<m2pair<Tn>>>(int(state.range(0)), int(state.range(1)),
                                                           256, 8);
  run_round<Tn>(state, s, kind(state.range(2)));
}
/// The same with a workspace: the split verification (rows that do not fold read the 16-bit
/// copy; folds write master and copy).
template <int Tn, int Kc = K>
void bm_mamba2_pair_ws(benchmark::State& state) {
  static_assert(replayssm::detail::mamba2_verify_split_supported<m2pair<Tn, Kc>>::value,
                "the _bf16copy_ws rows measure the split verification");
  auto& s = cached_setup<rbench::mamba2_setup<m2pair<Tn, Kc>>>(int(state.range(0)),
                                                               int(state.range(1)), 256, 8);
  run_round<Tn>(state, s, kind(state.range(2)), true);
}
template <int Tn>
void bm_gdn_pair(benchmark::State& state) {
  auto& s = cached_setup<rbench::gdn_setup<gdnpair<Tn>>>(int(state.range(0)), int(state.range(1)),
                                                         256, 8);
  run_round<Tn>(state, s, kind(state.range(2)));
}
/// The same with a workspace: the split verification (gdn_verify.cuh: rows that do not fold read
/// the 16-bit copy; folds write master and copy), the workspace grown to verify_workspace_elems
/// floats as bm_gdn_ws's. (run_round's bytes charge a pair's fold the fused path's copy read,
/// which the split path does too: 2 S + 2 Sc.)
template <int Tn, int Kc = K>
void bm_gdn_pair_ws(benchmark::State& state) {
  using P = gdnpair<Tn, Kc>;
  static_assert(replayssm::detail::gdn_verify_split_supported<P>::value,
                "the _bf16copy_ws rows measure the split verification");
  auto& s = cached_setup<rbench::gdn_setup<P>>(int(state.range(0)), int(state.range(1)), 256, 8);
  const size_t need = size_t(gdn_params<P>::verify_workspace_elems(s.batch, s.H, Tn));
  if (s.ws.n < need) {  // (still enough for decode_step: verify needs more)
    RBENCH_CHECK(cudaFree(s.ws.ptr));
    s.ws.ptr = nullptr;
    RBENCH_CHECK(cudaMalloc(&s.ws.ptr, need * sizeof(float)));
    s.ws.n = need;
  }
  run_round<Tn>(state, s, kind(state.range(2)), true);
}

/// One benchmark row: `name` runs `fn` with the arguments (a0, a1, kind), named `names`.
void add_row(const std::string& name, void (*fn)(benchmark::State&),
             const std::vector<std::string>& names, int a0, int a1, int kind) {
  benchmark::RegisterBenchmark(name.c_str(), fn)
      ->Args({a0, a1, kind})
      ->ArgNames(names)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

/// The commit interval for speculative decoding: rounds with a workspace at K = Kc (rows
/// "spec/mamba2/H128_G8_ws_K<Kc>/T<Tn>/replay_round", the same for "_bf16copy_ws", and
/// "spec/gdn/Hv64_Hk16_bf16copy_ws_K<Kc>/..." where the GDN split takes the buffer, L <= 32; the
/// eager round is K's own row). A longer window folds less often (one fold per K accepted
/// tokens) but replays more steps; with a serving copy the folds are the larger share of a round.
template <int Tn, int Kc>
void register_interval() {
  const std::string tail = "_K" + std::to_string(Kc) + "/T" + std::to_string(Tn) + "/replay_round";
  const int round = int(kind::replay_round);
  if constexpr (replayssm::detail::mamba2_verify_split_supported<m2pol<Tn, Kc>>::value)
    add_row("spec/mamba2/H128_G8_ws" + tail, bm_mamba2_ws<Tn, Kc>, {"H", "G", "replay"}, 128, 8,
            round);
  if constexpr (replayssm::detail::mamba2_verify_split_supported<m2pair<Tn, Kc>>::value)
    add_row("spec/mamba2/H128_G8_bf16copy_ws" + tail, bm_mamba2_pair_ws<Tn, Kc>,
            {"H", "G", "replay"}, 128, 8, round);
  if constexpr (replayssm::detail::gdn_verify_split_supported<gdnpair<Tn, Kc>>::value)
    add_row("spec/gdn/Hv64_Hk16_bf16copy_ws" + tail, bm_gdn_pair_ws<Tn, Kc>, {"Hv", "Hk", "replay"},
            64, 16, round);
}

template <int Tn>
void register_rounds() {
  const std::string t = "/T" + std::to_string(Tn);
  // replay: the kind (eager_round, replay_round, verify_nofold, verify_fold).
  for (int replay : {0, 1, 2, 3}) {
    const char* names[] = {"/eager_round", "/replay_round", "/verify_nofold", "/verify_fold"};
    const std::string label = names[replay];
    add_row("spec/mamba2/H128_G8" + t + label, bm_mamba2<Tn>, {"H", "G", "replay"}, 128, 8, replay);
    if (replay != 0)  // the split verification (the eager round is the same)
      add_row("spec/mamba2/H128_G8_ws" + t + label, bm_mamba2_ws<Tn>, {"H", "G", "replay"}, 128, 8,
              replay);
    for (int hv : {64, 32})
      add_row("spec/gdn/Hv" + std::to_string(hv) + "_Hk16" + t + label, bm_gdn<Tn>,
              {"Hv", "Hk", "replay"}, hv, 16, replay);
    if (replay != 0)  // the split verification beside them (the eager round is the same)
      for (int hv : {64, 32})
        add_row("spec/gdn/Hv" + std::to_string(hv) + "_Hk16_ws" + t + label, bm_gdn_ws<Tn>,
                {"Hv", "Hk", "replay"}, hv, 16, replay);
    if (replay != 0) {  // a bf16 serving copy (the eager round is the fp32 one above)
      add_row("spec/mamba2/H128_G8_bf16copy" + t + label, bm_mamba2_pair<Tn>, {"H", "G", "replay"},
              128, 8, replay);
      add_row("spec/mamba2/H128_G8_bf16copy_ws" + t + label, bm_mamba2_pair_ws<Tn>,
              {"H", "G", "replay"}, 128, 8, replay);
      add_row("spec/gdn/Hv64_Hk16_bf16copy" + t + label, bm_gdn_pair<Tn>, {"Hv", "Hk", "replay"},
              64, 16, replay);
      for (int hv : {64, 32})
        add_row("spec/gdn/Hv" + std::to_string(hv) + "_Hk16_bf16copy_ws" + t + label,
                bm_gdn_pair_ws<Tn>, {"Hv", "Hk", "replay"}, hv, 16, replay);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  rbench::add_device_context();
  register_rounds<2>();
  register_rounds<4>();
  register_rounds<8>();
  register_interval<2, 8>();
  register_interval<4, 8>();
  register_interval<8, 8>();
  register_interval<2, 32>();
  register_interval<4, 32>();
  register_interval<8, 32>();
  register_interval<2, 24>();  // (GDN pairs: L <= 32)
  register_interval<4, 24>();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
