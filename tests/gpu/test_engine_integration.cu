// What engines rely on beyond single steps: a decode step captured once in a CUDA graph and
// replayed while sequences join and leave (issue 6), and prefix caching by materialize + load.
#include <optional>

#include "gdn_case.cuh"
#include "mamba2_case.cuh"

namespace {

using namespace replayssm;

/// Captures one decode_step of `c` in a CUDA graph and replays it `replays` times. Between
/// replays only device memory changes: the inputs and the slot index of each row. Every 37
/// replays one live row's sequence leaves (its row becomes a null row) and a new sequence joins a
/// free row in a free slot (load_state, outside the graph), so commits happen at staggered steps.
template <class Case>
void run_graph_decode(Case& c, int replays, std::mt19937_64& rng) {
  const int batch = 4, num_slots = 8;
  c.allocate(batch, num_slots, rng);
  rtest::case_launches<Case> launch{c};
  const size_t out_n = c.out_row_elems();
  cudaStream_t stream;
  RTEST_CUDA(cudaStreamCreate(&stream));

  struct live_seq {
    int slot;
    typename Case::ref_state state;
  };
  std::vector<std::optional<live_seq>> rows(batch);
  std::vector<int> free_slots(num_slots);
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  auto join = [&](int row) {
    live_seq s{free_slots.back(), c.random_state(rng)};
    free_slots.pop_back();
    rtest::dev_array<float> src(c.state_elems());
    src.upload(c.to_device_layout(s.state));
    rtest::dev_array<int32_t> idx(1);
    idx.upload({s.slot});
    RTEST_OK(launch.load(idx.ptr, 1, src.ptr));
    RTEST_CUDA(cudaDeviceSynchronize());
    rows[row] = std::move(s);
  };
  for (int row = 0; row < batch - 1; ++row) join(row);

  rtest::dev_array<int32_t> slot_idx(batch);
  auto upload_slots = [&] {
    std::vector<int32_t> h(batch);
    for (int b = 0; b < batch; ++b) h[b] = rows[b] ? rows[b]->slot : -1;
    slot_idx.upload(h);
  };
  upload_slots();

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  RTEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const result captured =
      decode_step(c.params(c.pool_r.ptr, slot_idx.ptr, batch, -1, c.out_r.ptr), stream);
  RTEST_CUDA(cudaStreamEndCapture(stream, &graph));
  INFO(captured.message);
  REQUIRE(captured.ok());
  RTEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  double worst = 0;
  std::vector<std::vector<double>> y(batch);
  for (int r = 0; r < replays; ++r) {
    if (r % 37 == 36) {  // one sequence leaves, another joins
      std::vector<int> live, empty;
      for (int b = 0; b < batch; ++b) (rows[b] ? live : empty).push_back(b);
      const int leaving = live[rng() % live.size()];
      free_slots.insert(free_slots.begin(), rows[leaving]->slot);
      rows[leaving].reset();
      join(empty[rng() % empty.size()]);
      upload_slots();
    }
    std::vector<typename Case::step_t> steps(batch);
    for (int b = 0; b < batch; ++b) {
      steps[b] = c.random_step(rng);
      c.set_row(b, steps[b]);
    }
    c.upload_inputs();
    c.out_r.poison();
    RTEST_CUDA(cudaGraphLaunch(exec, stream));
    RTEST_CUDA(cudaStreamSynchronize(stream));
    const auto out = c.out_r.download();
    for (int b = 0; b < batch; ++b) {
      if (!rows[b]) {
        REQUIRE(rtest::output_row_poisoned(out, b, out_n));
        continue;
      }
      c.ref_step(rows[b]->state, steps[b], y[b]);
      const auto got = rtest::output_row(out, b, out_n);
      rtest::rel_err e;
      for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[b][i]);
      worst = std::max(worst, e.value());
      INFO("replay " << r << " row " << b << " slot " << rows[b]->slot);
      REQUIRE(e.value() < 2e-5);
    }
  }
  std::printf("[graph %s] %d replays, max rel err vs float64 %.2e\n", typeid(Case).name(), replays,
              worst);
  RTEST_CUDA(cudaGraphExecDestroy(exec));
  RTEST_CUDA(cudaGraphDestroy(graph));
  RTEST_CUDA(cudaStreamDestroy(stream));
}

/// Prefix caching: a slot mid-window (non-empty buffer) is materialized and loaded into another
/// slot; both then decode the same inputs and must give the reference's outputs, and the
/// materialized state must equal the reference state.
template <class Case>
void run_prefix_roundtrip(Case& c, std::mt19937_64& rng) {
  const int batch = 2, num_slots = 6;
  c.allocate(batch, num_slots, rng);
  rtest::case_launches<Case> launch{c};
  const size_t out_n = c.out_row_elems();
  const int32_t a = 1, b = 4;
  auto state = c.random_state(rng);
  {
    rtest::dev_array<float> src(c.state_elems());
    src.upload(c.to_device_layout(state));
    rtest::dev_array<int32_t> idx(1);
    idx.upload({a});
    RTEST_OK(launch.load(idx.ptr, 1, src.ptr));
  }
  rtest::dev_array<int32_t> one(1), both(2);
  one.upload({a});
  both.upload({a, b});
  std::vector<double> y;
  const int before = Case::commit_interval + Case::commit_interval / 2 + 1;  // mid-window
  for (int t = 0; t < before; ++t) {
    const auto s = c.random_step(rng);
    c.set_row(0, s);
    c.upload_inputs();
    RTEST_OK(launch.decode(one.ptr, 1, -1));
    c.ref_step(state, s, y);
  }
  rtest::dev_array<float> cached(c.state_elems());
  cached.poison();
  RTEST_OK(launch.materialize(one.ptr, 1, cached.ptr));
  {
    const auto h = cached.download();
    const auto got = c.from_device_layout(h.data());
    rtest::rel_err e;
    for (size_t i = 0; i < got.size(); ++i) e.add(got[i], state[i]);
    INFO("materialized state vs float64: " << e.value());
    REQUIRE(e.value() < 2e-5);
  }
  rtest::dev_array<int32_t> dst(1);
  dst.upload({b});
  RTEST_OK(launch.load(dst.ptr, 1, cached.ptr));
  for (int t = 0; t < 2 * Case::commit_interval + 3; ++t) {
    const auto s = c.random_step(rng);
    c.set_row(0, s);
    c.set_row(1, s);
    c.upload_inputs();
    c.out_r.poison();
    RTEST_OK(launch.decode(both.ptr, 2, -1));
    c.ref_step(state, s, y);
    const auto out = c.out_r.download();
    for (int row = 0; row < 2; ++row) {
      const auto got = rtest::output_row(out, row, out_n);
      rtest::rel_err e;
      for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[i]);
      INFO("step " << t << " row " << row);
      REQUIRE(e.value() < 2e-5);
    }
  }
}

/// Branching (issue 6): one sequence decodes a few steps, is forked into three branches that
/// share its checkpoint (fork copies buffer and cursor only), and each branch then decodes its own
/// inputs for `steps` steps, committing into a pool slot of its own (branch.write_idx). Every
/// output follows the float64 reference of its branch, each branch's final state (materialize)
/// matches, and the shared checkpoint stays bit-identical throughout.
template <class Case>
void run_branches(Case& c, int steps, std::mt19937_64& rng) {
  const int nb = 3, num_slots = 8;
  c.allocate(nb, num_slots, rng);
  rtest::case_launches<Case> launch{c};
  const size_t out_n = c.out_row_elems();
  const double tol = rtest::output_tol<Case>();
  rtest::dev_array<int32_t> ckpt_of(num_slots), branch_slots(nb), write_idx(nb), src(nb);
  {
    std::vector<int32_t> id(num_slots);
    std::iota(id.begin(), id.end(), 0);
    ckpt_of.upload(id);
  }
  // Slots 0..2 hold the branches; pool slots 3..5 take their commits; slot 0's checkpoint
  // (pool slot 0) is the shared one.
  branch_slots.upload({0, 1, 2});
  write_idx.upload({3, 4, 5});
  src.upload({0, 0, 0});
  auto params = [&](int rows) {
    auto p = c.params(c.pool_r.ptr, branch_slots.ptr, rows, -1, c.out_r.ptr);
    p.branch.ckpt_of = ckpt_of.ptr;
    return p;
  };
  auto root = c.random_state(rng);
  {
    rtest::dev_array<float> init(c.state_elems());
    init.upload(c.to_device_layout(root));
    RTEST_OK(load_state(params(1), c.rows_pool(init.ptr, 1), 0));
  }
  std::vector<double> y;
  const int prefix = Case::commit_interval / 2 + 1;  // buffered steps the branches inherit
  for (int t = 0; t < prefix; ++t) {
    const auto s = c.random_step(rng);
    c.set_row(0, s);
    c.upload_inputs();
    RTEST_OK(decode_step(params(1), 0));
    c.ref_step(root, s, y);
  }
  {  // slots 1 and 2 become branches of slot 0 (rows 1, 2 of the batch: fork_src 0)
    auto p = params(nb);
    p.branch.fork_src = src.ptr;
    p.rows.slot_idx = branch_slots.ptr + 1;
    p.rows.batch = nb - 1;
    RTEST_OK(fork(p, 0));
  }
  RTEST_CUDA(cudaDeviceSynchronize());
  // The shared checkpoint: pool slot 0, and for a precision pair its serving copy too.
  constexpr bool pair = Case::policy_t::has_serving_copy;
  const size_t master_bytes = c.state_elems() * sizeof(float);
  const size_t shared_bytes =
      master_bytes + (pair ? c.state_elems() * sizeof(typename Case::policy_t::serving_type) : 0);
  std::vector<unsigned char> shared(shared_bytes), now(shared_bytes);
  auto read_shared = [&](std::vector<unsigned char>& to) {
    RTEST_CUDA(cudaMemcpy(to.data(), c.pool_r.ptr, master_bytes, cudaMemcpyDeviceToHost));
    if constexpr (pair)
      RTEST_CUDA(cudaMemcpy(to.data() + master_bytes, c.serving_r.ptr, shared_bytes - master_bytes,
                            cudaMemcpyDeviceToHost));
  };
  read_shared(shared);
  std::vector<typename Case::ref_state> ref(nb, root);
  auto p = params(nb);
  p.branch.write_idx = write_idx.ptr;
  double worst = 0;
  for (int t = 0; t < steps; ++t) {
    // Now and then one branch sits a step out (a null row), so the branches' windows drift apart
    // and one commits while the others still read the shared checkpoint.
    const int skip = rng() % 3 == 0 ? int(rng() % nb) : -1;
    std::vector<int32_t> rows_now{0, 1, 2};
    if (skip >= 0) rows_now[skip] = -1;
    branch_slots.upload(rows_now);
    std::vector<typename Case::step_t> in(nb);
    for (int b = 0; b < nb; ++b) c.set_row(b, in[b] = c.random_step(rng));
    c.upload_inputs();
    c.out_r.poison();
    RTEST_OK(decode_step(p, 0));
    const auto out = c.out_r.download();
    for (int b = 0; b < nb; ++b) {
      if (b == skip) {
        REQUIRE(rtest::output_row_poisoned(out, b, out_n));
        continue;
      }
      c.ref_step(ref[b], in[b], y);
      const auto got = rtest::output_row(out, b, out_n);
      rtest::rel_err e;
      for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[i]);
      worst = std::max(worst, e.value());
      INFO("step " << t << " branch " << b);
      REQUIRE(e.value() < tol);
    }
    read_shared(now);
    INFO("step " << t);
    REQUIRE(now == shared);  // the shared checkpoint is never written
  }
  branch_slots.upload({0, 1, 2});
  RTEST_OK(commit(p, 0));  // folds what each branch has buffered, into its own pool slot
  read_shared(now);
  REQUIRE(now == shared);
  const auto where = ckpt_of.download();
  for (int b = 0; b < nb; ++b) {
    INFO("branch " << b << " reads its checkpoint from pool slot " << where[b]);
    REQUIRE(where[b] == (steps + prefix >= Case::commit_interval ? 3 + b : 0));
  }
  rtest::dev_array<float> dest(size_t(nb) * c.state_elems());
  auto pm = params(nb);
  RTEST_OK(materialize(pm, c.rows_pool(dest.ptr, nb), 0));
  const auto h = dest.download();
  for (int b = 0; b < nb; ++b) {
    const auto st = c.from_device_layout(h.data() + b * c.state_elems());
    rtest::rel_err e;
    for (size_t i = 0; i < st.size(); ++i) e.add(st[i], ref[b][i]);
    INFO("branch " << b << " final state vs float64");
    REQUIRE(e.value() < 2e-5);
  }
  std::printf("[branches %s] %d steps after the fork, max rel err %.2e\n", typeid(Case).name(),
              steps, worst);
}

using m2 = replay_policy<rules::mamba2<64, 128, float>, 16, 16>;
using gdn = replay_policy<rules::gated_deltanet<128, 128, float>, 16, 16>;
using m2_pair = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::fp32_bf16>;
// bf16 inputs: the split step's committing rows fold in mamba2_stream_agent::commit (Branch).
using m2b_pair =
    replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 16, 16, precision::fp32_bf16>;
static_assert(detail::mamba2_stream_commits<m2b_pair>::value,
              "the bf16-input pair commits in the stream kernel");
using gdn_vk = replay_policy<rules::gated_deltanet<128, 128, float, state_layout::vk>, 16, 8>;

}  // namespace

TEST_CASE("a captured decode step replays 1000 times as sequences join and leave", "[gpu][graph]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int replays = std::getenv("REPLAYSSM_TEST_STEPS") ? 60 : 1000;
  SECTION("mamba2 16 heads, 2 groups") {
    rtest::mamba2_case<m2> c(16, 2, true);
    run_graph_decode(c, replays, rng);
  }
  SECTION("mamba2 16 heads, 2 groups, split replay step (workspace, PDL edge in the graph)") {
    rtest::mamba2_case<m2> c(16, 2, true);
    c.use_workspace = true;
    run_graph_decode(c, replays, rng);
  }
  SECTION("gated deltanet 2 k heads, 4 v heads") {
    rtest::gdn_case<gdn> c(2, 4);
    run_graph_decode(c, replays, rng);
  }
  SECTION("gated deltanet kv and vk, split replay step (workspace, PDL edge in the graph)") {
    rtest::gdn_case<gdn> c(2, 4);
    c.use_workspace = true;
    run_graph_decode(c, replays, rng);
    rtest::gdn_case<gdn_vk> d(2, 4);
    d.use_workspace = true;
    run_graph_decode(d, replays, rng);
  }
}

TEST_CASE("branches forked from one sequence share its checkpoint and never write it",
          "[gpu][branch]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int steps = std::getenv("REPLAYSSM_TEST_STEPS") ? 40 : 1000;
  SECTION("mamba2") {
    rtest::mamba2_case<m2> c(16, 2, true);
    run_branches(c, steps, rng);
  }
  SECTION("mamba2, split replay step (workspace)") {
    rtest::mamba2_case<m2> c(16, 2, true);
    c.use_workspace = true;
    run_branches(c, steps, rng);
  }
  SECTION("mamba2 fp32 + bf16 pair, fused and split (commits write master and copy elsewhere)") {
    rtest::mamba2_case<m2_pair> c(16, 2, true);
    run_branches(c, steps, rng);
    rtest::mamba2_case<m2_pair> d(16, 2, true);
    d.use_workspace = true;
    run_branches(d, steps, rng);
  }
  SECTION("mamba2 fp32 + bf16 pair, bf16 inputs, split (the stream kernel's commit, branching)") {
    rtest::mamba2_case<m2b_pair> c(16, 2, true);
    c.use_workspace = true;
    run_branches(c, steps, rng);
  }
  SECTION("gated deltanet kv") {
    rtest::gdn_case<gdn> c(2, 4);
    run_branches(c, steps, rng);
  }
  SECTION("gated deltanet vk") {
    rtest::gdn_case<gdn_vk> c(2, 4);
    run_branches(c, steps, rng);
  }
  SECTION("gated deltanet kv and vk, split replay step (workspace)") {
    rtest::gdn_case<gdn> c(2, 4);
    c.use_workspace = true;
    run_branches(c, steps, rng);
    rtest::gdn_case<gdn_vk> d(2, 4);
    d.use_workspace = true;
    run_branches(d, steps, rng);
  }
}

TEST_CASE("prefix caching: materialize then load into another slot continues identically",
          "[gpu][prefix]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  SECTION("mamba2") {
    rtest::mamba2_case<m2> c(16, 2, true);
    run_prefix_roundtrip(c, rng);
  }
  SECTION("gated deltanet kv") {
    rtest::gdn_case<gdn> c(2, 4);
    run_prefix_roundtrip(c, rng);
  }
  SECTION("gated deltanet vk") {
    rtest::gdn_case<gdn_vk> c(2, 4);
    run_prefix_roundtrip(c, rng);
  }
}

TEST_CASE("kernels built for sm_90 keep programmatic dependent launch for the split paths",
          "[gpu][split]") {
  // launch_dependent launches a kernel with programmatic serialization only when pdl_capable
  // finds it compiled from PTX of compute_90 or newer (older PTX, JIT-compiled on Hopper, has
  // pdl_wait compiled out: plain stream order then). These tests are built for sm_90
  // (CMAKE_CUDA_ARCHITECTURES 90), so on a Hopper GPU the query must say yes: a wrong answer
  // would silently drop the overlap of every split launch.
  int dev = 0, major = 0;
  RTEST_CUDA(cudaGetDevice(&dev));
  RTEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) {
    WARN("compute capability " << major << ".x: no programmatic dependent launch to check");
    return;
  }
  using spec = replay_policy<rules::mamba2<64, 128, float>, 23, 16>;  // verify_step<4> fits
  static_assert(detail::mamba2_verify_split_supported<spec>::value, "the split verification");
  CHECK(detail::pdl_capable(detail::mamba2_verify_coef_kernel<spec, 4>));
  CHECK(detail::pdl_capable(detail::mamba2_verify_readout_kernel<spec, 4>));
  cudaFuncAttributes a = {};
  RTEST_CUDA(cudaFuncGetAttributes(&a, detail::mamba2_verify_readout_kernel<spec, 4>));
  INFO("ptxVersion " << a.ptxVersion << ", binaryVersion " << a.binaryVersion);
  CHECK(a.binaryVersion >= 90);
}
