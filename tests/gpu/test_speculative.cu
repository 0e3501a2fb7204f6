// Speculative rounds on the GPU (issue 4): verify_step outputs for every draft position from one
// read of the checkpoint, accept keeps the verified prefix (a cursor move) and commits only
// accepted steps; compared with the float64 reference run on the accepted tokens only, and every
// draft position with eager along that draft.
#include "gdn_case.cuh"
#include "mamba2_case.cuh"

namespace {

using namespace replayssm;

template <class C>
struct is_gdn_case : std::false_type {};
template <class P>
struct is_gdn_case<rtest::gdn_case<P>> : std::true_type {};

/// The split verification (params with a workspace) against the fused one (the same params
/// without it) from the same outputs, checkpoints, buffers and cursors: every slot's memory
/// (the case's slot_regions: checkpoints, buffers, cursor, arrivals; pairs: the serving copy)
/// must come out byte-identical, and for Gated DeltaNet the outputs too (gdn_verify.cuh's
/// contract; the Mamba-2 readout sums the outputs in another order, mamba2_verify.cuh: the caller
/// checks them against float64).
/// Leaves the device as the split verification left it (the workspace NaN-poisoned before it:
/// it must write what it reads).
template <int MaxDraft, class Case, class Params>
void require_split_verify_identical(Case& c, const Params& p) {
  const auto regions = c.slot_regions();
  auto snapshot = [&] {
    auto h = rtest::download_slot_memory(c);
    const auto o = c.out_r.download();
    const auto* b = reinterpret_cast<const unsigned char*>(o.data());
    h.emplace_back(b, b + c.out_r.bytes());
    return h;
  };
  auto restore = [&](const std::vector<std::vector<unsigned char>>& h) {
    for (size_t i = 0; i < regions.size(); ++i)
      RTEST_CUDA(cudaMemcpy(const_cast<void*>(regions[i].ptr), h[i].data(), h[i].size(),
                            cudaMemcpyHostToDevice));
    RTEST_CUDA(cudaMemcpy(c.out_r.ptr, h.back().data(), h.back().size(), cudaMemcpyHostToDevice));
  };
  const auto before = snapshot();
  auto fused = p;
  fused.workspace = nullptr;
  fused.workspace_size = 0;
  RTEST_OK(verify_step<MaxDraft>(fused, 0));
  RTEST_CUDA(cudaDeviceSynchronize());
  const auto want = snapshot();
  restore(before);
  c.ws.poison();
  RTEST_OK(verify_step<MaxDraft>(p, 0));
  RTEST_CUDA(cudaDeviceSynchronize());
  const auto got = snapshot();
  for (size_t i = 0; i < regions.size(); ++i) {
    INFO("split verification vs fused: slot memory region " << i << " (slot_regions' order)");
    REQUIRE(std::memcmp(want[i].data(), got[i].data(), want[i].size()) == 0);
  }
  if constexpr (is_gdn_case<Case>::value) {
    INFO("split verification vs fused: outputs");
    REQUIRE(std::memcmp(want.back().data(), got.back().data(), want.back().size()) == 0);
  }
}

/// Tree = false: chains (draft t follows t - 1), accepted = a prefix, and the eager engines' round
/// runs beside ReplaySSM's. Tree = true: random EAGLE-style trees (parent[d] in [-1, d)), every
/// node checked against the float64 reference along its path, accepted = the path to a random
/// node (accept_tree).
/// Graph = true: the round (verify + accept) is captured once in a CUDA graph and replayed; only
/// device memory (inputs, slot indices, counts, parents, accepted paths) changes between replays.
template <int MaxDraft, bool Tree = false, bool Graph = false, class Case>
void run_spec_rounds(Case& c, int rounds, std::mt19937_64& rng) {
  const int nseq = 2, batch = 3, num_slots = 7;
  c.allocate(batch * MaxDraft, num_slots, rng);  // input and output rows: b * MaxDraft + t
  rtest::case_launches<Case> launch{c};
  const size_t out_n = c.out_row_elems();
  using policy = typename Case::policy_t;
  // The eager engines' round runs beside chains; it has no precision pair (one state).
  constexpr bool baseline = !Tree && !policy::has_serving_copy;
  const double tol = rtest::output_tol<Case>();
  std::vector<int> perm(num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<typename Case::ref_state> ref(nseq);
  {
    std::vector<float> src;
    for (int s = 0; s < nseq; ++s) {
      ref[s] = c.random_state(rng);
      const auto d = c.to_device_layout(ref[s]);
      src.insert(src.end(), d.begin(), d.end());
    }
    rtest::dev_array<float> src_dev(src.size());
    src_dev.upload(src);
    rtest::dev_array<int32_t> idx(nseq);
    idx.upload({perm[0], perm[1]});
    RTEST_OK(launch.load(idx.ptr, nseq, src_dev.ptr));
    for (int q = 0; q < nseq; ++q)  // the eager engine's pool starts from the same states
      RTEST_CUDA(cudaMemcpy(c.eager_slot(perm[q]), src_dev.ptr + q * c.state_elems(),
                            c.state_elems() * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  rtest::dev_array<float> intermediate(size_t(batch) * MaxDraft * c.state_elems());
  rtest::dev_array<int32_t> slot_idx(batch), num_draft(batch), accepted(batch);
  rtest::dev_array<int32_t> parent(size_t(batch) * MaxDraft), nodes(size_t(batch) * MaxDraft);
  double worst = 0;
  int commits_expected = 0;
  std::vector<int> buffered(nseq, 0);
  int decodes = 0;
  cudaStream_t graph_stream = nullptr;
  cudaGraphExec_t round_graph = nullptr;
  if (Graph) RTEST_CUDA(cudaStreamCreate(&graph_stream));
  int spec_rounds = 0;
  for (int round = 0; spec_rounds < rounds; ++round) {
    std::vector<int> row_seq{0, 1, -1};
    std::shuffle(row_seq.begin(), row_seq.end(), rng);
    if (rng() % 5 == 0) {  // now and then a plain decode step: it folds a window accept left
      std::vector<int32_t> idx(batch);
      std::vector<typename Case::step_t> steps(batch);
      for (int b = 0; b < batch; ++b) {
        idx[b] = row_seq[b] >= 0 ? perm[row_seq[b]] : -1;
        steps[b] = c.random_step(rng);
        c.set_row(b, steps[b]);
      }
      slot_idx.upload(idx);
      c.upload_inputs();
      c.out_r.poison();
      auto p = c.params(c.pool_r.ptr, slot_idx.ptr, batch, -1, c.out_r.ptr);
      RTEST_OK(decode_step(p, 0));
      RTEST_CUDA(cudaDeviceSynchronize());
      const auto out = c.out_r.download();
      for (int b = 0; b < batch; ++b) {
        if (row_seq[b] < 0) continue;
        std::vector<double> y;
        c.ref_step(ref[row_seq[b]], steps[b], y);
        const auto got = rtest::output_row(out, b, out_n);
        rtest::rel_err e;
        for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[i]);
        worst = std::max(worst, e.value());
        INFO("round " << round << " row " << b << ": decode step after " << buffered[row_seq[b]]
                      << " buffered steps");
        REQUIRE(e.value() < tol);
        if (++buffered[row_seq[b]] >= Case::commit_interval)
          buffered[row_seq[b]] = 0, ++commits_expected;
      }
      if constexpr (baseline)
        RTEST_OK(launch.eager(slot_idx.ptr, batch, -1));  // the eager engine takes the same step
      ++decodes;
      continue;
    }
    ++spec_rounds;
    // A verification folds a window of K or more accepted steps first.
    for (int q = 0; q < nseq; ++q)
      if (buffered[q] >= Case::commit_interval) buffered[q] = 0, ++commits_expected;
    std::vector<int32_t> idx(batch), nd(batch), acc(batch);
    std::vector<int32_t> par(size_t(batch) * MaxDraft), path_nodes(size_t(batch) * MaxDraft, -1);
    std::vector<std::vector<int>> path(batch);  // the accepted drafts, root side first
    std::vector<std::vector<typename Case::step_t>> drafts(batch);
    for (int b = 0; b < batch; ++b) {
      idx[b] = row_seq[b] >= 0 ? perm[row_seq[b]] : -1;
      nd[b] = rng() % 16 == 0 ? 0 : 1 + int(rng() % MaxDraft);  // now and then no draft
      std::vector<int> pr(nd[b]);
      for (int d = 0; d < nd[b]; ++d) pr[d] = Tree ? int(rng() % (d + 1)) - 1 : d - 1;
      for (int d = 0; d < nd[b]; ++d) par[size_t(b) * MaxDraft + d] = pr[d];
      const int last = int(rng() % (nd[b] + 1)) - 1;  // accepted up to this draft (-1: none)
      if (last >= 0) path[b] = replayssm::ref::tree_path(pr, last);
      acc[b] = int(path[b].size());
      for (int k = 0; k < acc[b]; ++k) path_nodes[size_t(b) * MaxDraft + k] = path[b][k];
      for (int t = 0; t < MaxDraft; ++t) {
        const auto s = c.random_step(rng);
        c.set_row(b * MaxDraft + t, s);
        if (t < nd[b]) drafts[b].push_back(s);
      }
    }
    slot_idx.upload(idx);
    num_draft.upload(nd);
    accepted.upload(acc);
    parent.upload(par);
    nodes.upload(path_nodes);
    c.upload_inputs();
    c.out_r.poison();
    c.out_e.poison();
    auto p = c.params(c.pool_r.ptr, slot_idx.ptr, batch, -1, c.out_r.ptr);
    p.spec = {num_draft.ptr, accepted.ptr, Tree ? parent.ptr : nullptr, nodes.ptr};
    if (Graph) {
      if (!round_graph) {  // captured at the first round, replayed from then on
        RTEST_CUDA(cudaStreamBeginCapture(graph_stream, cudaStreamCaptureModeThreadLocal));
        const result v = verify_step<MaxDraft>(p, graph_stream);
        const result a = Tree ? accept_tree<MaxDraft>(p, graph_stream) : accept(p, graph_stream);
        cudaGraph_t g;
        RTEST_CUDA(cudaStreamEndCapture(graph_stream, &g));
        RTEST_OK(v);
        RTEST_OK(a);
        RTEST_CUDA(cudaGraphInstantiate(&round_graph, g, 0));
        RTEST_CUDA(cudaGraphDestroy(g));
      }
      RTEST_CUDA(cudaGraphLaunch(round_graph, graph_stream));
      RTEST_CUDA(cudaStreamSynchronize(graph_stream));
    } else if (c.use_workspace) {  // (the split verification; other policies ignore it)
      require_split_verify_identical<MaxDraft>(c, p);
    } else {
      RTEST_OK(verify_step<MaxDraft>(p, 0));
    }
    // The eager engines' round beside it (chains): one intermediate state per draft.
    auto pe = c.params(c.pool_e.ptr, slot_idx.ptr, batch, -1, c.out_e.ptr);
    pe.spec = p.spec;
    if constexpr (baseline)
      RTEST_OK(eager_draft_step<MaxDraft>(pe, c.rows_pool(intermediate.ptr, batch * MaxDraft), 0));
    RTEST_CUDA(cudaDeviceSynchronize());
    const auto out = c.out_r.download();
    const auto out_e = c.out_e.download();
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < MaxDraft; ++t) {
        const int r = b * MaxDraft + t;
        if (row_seq[b] < 0 || t >= nd[b]) {
          INFO("round " << round << " row " << b << " position " << t << " must be untouched");
          REQUIRE(rtest::output_row_poisoned(out, r, out_n));
        }
      }
      if (row_seq[b] < 0) continue;
      auto& st = ref[row_seq[b]];
      std::vector<int> pr(par.begin() + size_t(b) * MaxDraft,
                          par.begin() + size_t(b) * MaxDraft + nd[b]);
      std::vector<double> y;
      for (int t = 0; t < nd[b]; ++t) {
        auto probe = st;  // the sequence's state, then the path from the root to draft t
        for (int k : replayssm::ref::tree_path(pr, t)) c.ref_step(probe, drafts[b][k], y);
        const auto got = rtest::output_row(out, b * MaxDraft + t, out_n);
        const auto got_e = rtest::output_row(out_e, b * MaxDraft + t, out_n);
        rtest::rel_err e, ee;
        for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[i]), ee.add(got_e[i], y[i]);
        worst = std::max(worst, e.value());
        INFO("round " << round << " row " << b << " draft position " << t << " of " << nd[b]
                      << ": verify " << e.value() << ", eager_draft " << ee.value());
        REQUIRE(e.value() < tol);
        if (baseline) REQUIRE(ee.value() < tol);
      }
      {  // the accepted path becomes the sequence
        std::vector<double> y2;
        for (int k : path[b]) c.ref_step(st, drafts[b][k], y2);
      }
      if (baseline &&
          acc[b] > 0)  // the eager engine keeps the accepted prefix's intermediate state
        RTEST_CUDA(
            cudaMemcpy(c.eager_slot(idx[b]),
                       intermediate.ptr + (size_t(b) * MaxDraft + acc[b] - 1) * c.state_elems(),
                       c.state_elems() * sizeof(float), cudaMemcpyDeviceToDevice));
      buffered[row_seq[b]] += acc[b];
    }
    if (Graph)
      ;  // accepted inside the graph (the counts were uploaded before it ran)
    else if (Tree)
      RTEST_OK(accept_tree<MaxDraft>(p, 0));
    else
      RTEST_OK(accept(p, 0));
    RTEST_CUDA(cudaDeviceSynchronize());
  }
  if (round_graph) RTEST_CUDA(cudaGraphExecDestroy(round_graph));
  if (graph_stream) RTEST_CUDA(cudaStreamDestroy(graph_stream));
  // Cursors match the accepted history; the state (checkpoint + buffer) is the reference's.
  const auto cur = c.cursor.download();
  rtest::dev_array<float> dest(size_t(nseq) * c.state_elems());
  rtest::dev_array<int32_t> live(nseq);
  live.upload({perm[0], perm[1]});
  RTEST_OK(launch.materialize(live.ptr, nseq, dest.ptr));
  const auto h = dest.download();
  for (int s = 0; s < nseq; ++s) {
    REQUIRE(cur[perm[s]] == buffered[s]);
    const auto st = c.from_device_layout(h.data() + s * c.state_elems());
    rtest::rel_err e;
    for (size_t i = 0; i < st.size(); ++i) e.add(st[i], ref[s][i]);
    INFO("sequence " << s << " state vs float64 on accepted tokens");
    REQUIRE(e.value() < 2e-5);
  }
  std::printf(
      "[spec %s%s %s MaxDraft=%d] %d rounds (%d plain decode steps), %d commits, max rel "
      "err %.2e\n",
      Tree ? "trees" : "chains", Graph ? " (CUDA graph)" : "", typeid(Case).name(), MaxDraft,
      rounds, decodes, commits_expected, worst);
}

// Buffers hold a full window of accepted steps plus the next draft: L >= K - 1 + 2 MaxDraft.
using m2 = replay_policy<rules::mamba2<64, 128, float>, 32, 16>;
using gdn = replay_policy<rules::gated_deltanet<128, 128, float>, 32, 16>;
using gdn_vk = replay_policy<rules::gated_deltanet<128, 128, float, state_layout::vk>, 17, 8>;
// The rule's defaults (Tile 128 == head_v_dim, 128 threads, kv) with fp32 checkpoints: with a
// workspace, verify_step runs the split verification (gdn_verify.cuh: sweep grid, then the
// readout grid with PDL; rows that fold do it in the readout: fold_row). `gdn` is one too.
using gdn_sv_bf16 = replay_policy<rules::gated_deltanet<128, 128, __nv_bfloat16>, 24, 16>;
static_assert(detail::gdn_verify_split_supported<gdn>::value &&
                  detail::gdn_verify_split_supported<gdn_sv_bf16>::value,
              "the gated deltanet split verification's test policies must select it");
// Several tiles per head (the per-tile offsets and the single writers of shared inputs), bf16.
using m2_tiles =
    replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 24, 16, precision::fp32, 32, 128>;
using m2_wide = replay_policy<rules::mamba2<64, 128, float>, 48, 16, precision::fp32, 32, 128>;
// Precision pairs: outputs read the 16-bit copy; verify folds into the master and the copy.
using m2_pair = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32_bf16>;
using gdn_pair =
    replay_policy<rules::gated_deltanet<128, 128, float>, 23, 16, precision::fp32_fp16>;
// 8-bit copies (codes with a scale per row, load_scaled / store_scaled in the verification).
using m2_pair8 = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32_fp8>;
using gdn_pair8 =
    replay_policy<rules::gated_deltanet<128, 128, float>, 23, 16, precision::fp32_int8>;
// 16-bit serving copies in the gated deltanet split verification (gdn_verify.cuh): rows that do
// not fold read the copy, a fold reads the master and writes master and copy (the fused path's
// bits: slot memory, serving copy included, and outputs identical). gdn_pair (fp32 inputs, fp16
// copy) is one too; bf16 inputs + bf16 copy (the bench's pair), fp32 inputs + bf16 copy at
// MaxDraft 8 (the readout's per-draft form, held to 3 blocks per SM), bf16 inputs + fp16 copy.
using gdn_pair_bf16 =
    replay_policy<rules::gated_deltanet<128, 128, __nv_bfloat16>, 24, 16, precision::fp32_bf16>;
using gdn_pair_t8 =
    replay_policy<rules::gated_deltanet<128, 128, float>, 32, 16, precision::fp32_bf16>;
using gdn_pair16_bf16in =
    replay_policy<rules::gated_deltanet<128, 128, __nv_bfloat16>, 24, 16, precision::fp32_fp16>;
static_assert(detail::gdn_verify_split_supported<gdn_pair>::value &&
                  detail::gdn_verify_split_supported<gdn_pair_bf16>::value &&
                  detail::gdn_verify_split_supported<gdn_pair_t8>::value &&
                  detail::gdn_verify_split_supported<gdn_pair16_bf16in>::value &&
                  !detail::gdn_verify_split_supported<gdn_pair8>::value,
              "the gated deltanet split verification takes 16-bit serving copies, not 8-bit ones");
using gdn_tiles =
    replay_policy<rules::gated_deltanet<128, 128, float>, 24, 16, precision::fp32, 64, 128>;
// With a workspace, verify_step of an fp32 policy with headdim 64, dstate 128 and Tile == HeadDim
// (the rule's defaults) runs the split verification (mamba2_verify.cuh: a coefficient grid, then
// 128-thread readout blocks with PDL; rows that fold do it in the readout's registers).
using m2_bf16 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 24, 16>;
// K 30: a draft's path holds up to 29 buffered steps + 4 drafts, more than the 32 steps of one
// suffix-scan chunk (decay_weights' second chunk; the readout's prefetched dots cover the first).
using m2_long = replay_policy<rules::mamba2<64, 128, float>, 37, 30>;
using m2_f16 = replay_policy<rules::mamba2<64, 128, __half>, 24, 16>;
// 16-bit serving copies in the split verification: rows that do not fold read the copy, a fold
// reads the master and writes master and copy (the fused path's bits: slot memory identical).
// Inputs of the copy's type take the tensor-core G step (split_verify_serving_copy_m2_mma.patch);
// m2_pair (fp32 inputs) and m2_pair16_bf16in (bf16 inputs, fp16 copy) the widened FFMA one.
using m2_pair_bf16 =
    replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 24, 16, precision::fp32_bf16>;
using m2_pair_t8 =
    replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 31, 16, precision::fp32_bf16>;
using m2_pair_f16 = replay_policy<rules::mamba2<64, 128, __half>, 24, 16, precision::fp32_fp16>;
using m2_pair16_bf16in =
    replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 24, 16, precision::fp32_fp16>;
static_assert(detail::mamba2_verify_split_supported<m2>::value &&
                  detail::mamba2_verify_split_supported<m2_bf16>::value &&
                  detail::mamba2_verify_split_supported<m2_f16>::value &&
                  detail::mamba2_verify_split_supported<m2_long>::value &&
                  detail::mamba2_verify_split_supported<m2_pair>::value &&
                  detail::mamba2_verify_split_supported<m2_pair_bf16>::value &&
                  detail::mamba2_verify_split_supported<m2_pair_t8>::value &&
                  detail::mamba2_verify_split_supported<m2_pair_f16>::value &&
                  detail::mamba2_verify_split_supported<m2_pair16_bf16in>::value &&
                  !detail::mamba2_verify_split_supported<m2_pair8>::value &&
                  !detail::mamba2_verify_split_supported<m2_tiles>::value,
              "the split verification's test policies must select it (and only those)");

}  // namespace

TEST_CASE("speculative rounds verify every draft position and accept the verified prefix",
          "[gpu][spec]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int rounds = std::getenv("REPLAYSSM_TEST_STEPS") ? 40 : 1000;
  SECTION("mamba2 128/64/128/8, K 16, drafts up to 8") {
    rtest::mamba2_case<m2> c(128, 8, true);
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION("gated deltanet 16/32/128/128 kv, K 16, drafts up to 8") {
    rtest::gdn_case<gdn> c(16, 32);
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION("gated deltanet 16/32/128/128 vk, K 8, drafts up to 5") {
    rtest::gdn_case<gdn_vk> c(16, 32);
    run_spec_rounds<5>(c, rounds, rng);
  }
  SECTION("gated deltanet 16/32 kv, split verification (workspace), drafts up to 8") {
    rtest::gdn_case<gdn> c(16, 32);
    c.use_workspace = true;
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION("gated deltanet bf16 inputs 4/16 kv, split verification (workspace), drafts up to 4") {
    rtest::gdn_case<gdn_sv_bf16> c(4, 16);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("gated deltanet 1/32 kv, split verification (workspace), drafts up to 2") {
    // 32 value heads on one k head: the sweep block (512 threads at 64 sweeps) stages the value
    // heads' g and beta in two chunks of 16.
    rtest::gdn_case<gdn_sv_bf16> c(1, 32);
    c.use_workspace = true;
    run_spec_rounds<2>(c, rounds, rng);
  }
  SECTION("gated deltanet 2/40 kv, split verification (workspace), drafts up to 2") {
    // 20 value heads per k head: a chunk of 16 and a partial one of 4.
    rtest::gdn_case<gdn_sv_bf16> c(2, 40);
    c.use_workspace = true;
    run_spec_rounds<2>(c, rounds, rng);
  }
  SECTION("gated deltanet 4/4 kv, split verification (workspace), drafts up to 4") {
    // One value head per k head.
    rtest::gdn_case<gdn_sv_bf16> c(4, 4);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION(
      "gated deltanet bf16 inputs + bf16 copy 4/16 kv, split verification (workspace), "
      "drafts up to 4") {
    // Four value heads per k head (the sweep's four chains a warp), the copy read as bits and
    // widened; folds write master and copy.
    rtest::gdn_case<gdn_pair_bf16> c(4, 16);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION(
      "gated deltanet fp32 master + bf16 copy 4/8 kv, split verification (workspace), "
      "drafts up to 8") {
    rtest::gdn_case<gdn_pair_t8> c(4, 8);
    c.use_workspace = true;
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION(
      "gated deltanet bf16 inputs + fp16 copy 2/40 kv, split verification (workspace), "
      "drafts up to 2") {
    rtest::gdn_case<gdn_pair16_bf16in> c(2, 40);
    c.use_workspace = true;
    run_spec_rounds<2>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, two tiles per head") {
    rtest::mamba2_case<m2_tiles> c(32, 4, true);
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("gated deltanet two tiles per head") {
    rtest::gdn_case<gdn_tiles> c(4, 8);
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 fp32 master + bf16 copy, drafts up to 4") {
    rtest::mamba2_case<m2_pair> c(32, 4, true);
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 fp32 master + fp8 copy, drafts up to 4") {
    rtest::mamba2_case<m2_pair8> c(32, 4, true);
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 fp32 master + bf16 copy, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_pair> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs + bf16 copy, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_pair_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs + bf16 copy, split verification (workspace), drafts up to 8") {
    rtest::mamba2_case<m2_pair_t8> c(128, 8, true);
    c.use_workspace = true;
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION("mamba2 fp16 inputs + fp16 copy, no z, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_pair_f16> c(32, 4, false);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs + fp16 copy, split verification (workspace), drafts up to 2") {
    rtest::mamba2_case<m2_pair16_bf16in> c(16, 2, true);
    c.use_workspace = true;
    run_spec_rounds<2>(c, rounds, rng);
  }
  SECTION("mamba2 split verification (workspace), drafts up to 8") {
    rtest::mamba2_case<m2> c(128, 8, true);
    c.use_workspace = true;
    run_spec_rounds<8>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, no z, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_bf16> c(32, 4, false);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION(
      "mamba2 no D, K 30 (paths over 32 steps), split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_long> c(16, 2, true);
    c.cfg.has_D = false;  // weights.D null: no skip term (the reference drops it too)
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  // The Mamba-2 split readout's draft layouts and group maps the sections above do not reach
  // (bench/experiments/m2_readout_drafts_review.md): MaxDraft 3 (a warp with no draft), 2 and 1;
  // fp16 inputs with one group per head; one group for all heads with every input one element
  // off 16-byte alignment (the drafts' rows by the element-by-element paths).
  SECTION("mamba2 bf16 inputs, split verification (workspace), drafts up to 3") {
    rtest::mamba2_case<m2_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<3>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, split verification (workspace), drafts up to 2") {
    rtest::mamba2_case<m2_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<2>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, split verification (workspace), drafts up to 1") {
    rtest::mamba2_case<m2_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<1>(c, rounds, rng);
  }
  SECTION("mamba2 fp16 inputs, 8 heads 8 groups, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2_f16> c(8, 8, true);
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
  SECTION(
      "mamba2 8 heads 1 group, unaligned inputs, split verification (workspace), drafts up to 4") {
    rtest::mamba2_case<m2> c(8, 1, true);
    c.input_offset = 1;
    c.use_workspace = true;
    run_spec_rounds<4>(c, rounds, rng);
  }
}

TEST_CASE("token trees give every node its path output and the accepted path becomes the tail",
          "[gpu][spec][tree]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int rounds = std::getenv("REPLAYSSM_TEST_STEPS") ? 40 : 1000;
  SECTION("mamba2 128/64/128/8, trees of up to 8 drafts") {
    rtest::mamba2_case<m2> c(128, 8, true);
    run_spec_rounds<8, true>(c, rounds, rng);
  }
  SECTION("gated deltanet 16/32/128/128 kv, trees of up to 8 drafts") {
    rtest::gdn_case<gdn> c(16, 32);
    run_spec_rounds<8, true>(c, rounds, rng);
  }
  SECTION("gated deltanet vk, K 8, trees of up to 5 drafts") {
    rtest::gdn_case<gdn_vk> c(16, 32);
    run_spec_rounds<5, true>(c, rounds, rng);
  }
  SECTION("gated deltanet 16/32 kv, split verification (workspace), trees of up to 8 drafts") {
    rtest::gdn_case<gdn> c(16, 32);
    c.use_workspace = true;
    run_spec_rounds<8, true>(c, rounds, rng);
  }
  SECTION("gated deltanet bf16 inputs, split verification (workspace), trees of up to 4 drafts") {
    rtest::gdn_case<gdn_sv_bf16> c(4, 16);
    c.use_workspace = true;
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("mamba2, trees of up to 16 drafts") {
    rtest::mamba2_case<m2_wide> c(16, 2, true);
    run_spec_rounds<16, true>(c, rounds / 4, rng);
  }
  SECTION("mamba2 bf16, two tiles per head, trees of up to 4 drafts") {
    rtest::mamba2_case<m2_tiles> c(32, 4, true);
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("gated deltanet two tiles per head, trees of up to 4 drafts") {
    rtest::gdn_case<gdn_tiles> c(4, 8);
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("gated deltanet fp32 master + fp16 copy, trees of up to 4 drafts") {
    rtest::gdn_case<gdn_pair> c(4, 8);
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("gated deltanet fp32 master + int8 copy, trees of up to 4 drafts") {
    rtest::gdn_case<gdn_pair8> c(4, 8);
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION(
      "gated deltanet fp32 master + fp16 copy, split verification (workspace), trees of up "
      "to 4 drafts") {
    rtest::gdn_case<gdn_pair> c(4, 8);
    c.use_workspace = true;
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION(
      "gated deltanet bf16 inputs + bf16 copy, split verification (workspace), trees of up "
      "to 4 drafts") {
    rtest::gdn_case<gdn_pair_bf16> c(4, 16);
    c.use_workspace = true;
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("mamba2 split verification (workspace), trees of up to 8 drafts") {
    rtest::mamba2_case<m2> c(128, 8, true);
    c.use_workspace = true;
    run_spec_rounds<8, true>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, split verification (workspace), trees of up to 4 drafts") {
    rtest::mamba2_case<m2_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<4, true>(c, rounds, rng);
  }
  SECTION("mamba2 bf16 inputs, split verification (workspace), trees of up to 3 drafts") {
    rtest::mamba2_case<m2_bf16> c(32, 4, true);
    c.use_workspace = true;
    run_spec_rounds<3, true>(c, rounds, rng);
  }
}

TEST_CASE("a captured speculative round replays 1000 times with rows changing slots",
          "[gpu][spec][graph]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int rounds = std::getenv("REPLAYSSM_TEST_STEPS") ? 40 : 1000;
  SECTION("mamba2 chains, drafts up to 8") {
    rtest::mamba2_case<m2> c(128, 8, true);
    run_spec_rounds<8, false, true>(c, rounds, rng);
  }
  SECTION("gated deltanet split verification (workspace), trees, drafts up to 8") {
    rtest::gdn_case<gdn> c(16, 32);
    c.use_workspace = true;
    run_spec_rounds<8, true, true>(c, rounds, rng);
  }
  SECTION("gated deltanet trees, drafts up to 8") {
    rtest::gdn_case<gdn> c(16, 32);
    run_spec_rounds<8, true, true>(c, rounds, rng);
  }
  SECTION("mamba2 split verification (workspace), chains, drafts up to 8") {
    rtest::mamba2_case<m2> c(128, 8, true);
    c.use_workspace = true;
    run_spec_rounds<8, false, true>(c, rounds, rng);
  }
}
