// Precision schemes on the GPU (issue 5): an fp32 master with a bf16/fp16 serving copy (a pair)
// against a single bf16/fp16 checkpoint, over many decode steps with commits, compared with the
// float64 reference. Inputs are fp32, so the state's storage is the only rounding.
//
// The bounds, with u the unit roundoff of the stored type (round to nearest: one rounding errs
// by at most u relative; bf16 u = 2^-8, fp16 u = 2^-11):
// - pair, state: the master only ever holds fp32 folds of exact inputs, so the state after any
//   number of steps matches float64 to fp32 accuracy (2e-5, as the fp32 tests): the copy's
//   rounding never enters a later state. This is the property that makes pairs worth having.
//   The copy must equal the master rounded to nearest, bit for bit, after a commit.
// - pair, outputs: an output reads the copy, one rounding of each state element (relative <= u),
//   plus fp32 work: y = sum_n h_n C_n errs by <= u sum|h_n C_n|, which normwise over random data
//   is a few u |y|; the test allows 4u.
// - single, state: every commit rounds the whole state once (<= u relative), and decays < 1 only
//   damp older roundings. The worst case grows like c u after c commits; independent roundings
//   grow like sqrt(c) u, which the test allows twice of: 2 u sqrt(c + 1) (for bf16 after 64
//   commits 6.3e-2; a broken commit path errs by O(1)). Outputs add 4u.
#include <algorithm>

#include "gdn_case.cuh"
#include "mamba2_case.cuh"

namespace {

using namespace replayssm;

const char* type_name(__nv_bfloat16) { return "bf16"; }
const char* type_name(__half) { return "fp16"; }
const char* type_name(__nv_fp8_e4m3) { return "fp8 e4m3"; }
const char* type_name(int8_t) { return "int8"; }

/// `steps` decode steps of two sequences in a pool of four slots (one null row in the batch),
/// with a commit every K steps inside decode_step, an explicit commit and a materialize at the
/// end. Policy::precision is a pair or a single low-precision checkpoint.
template <class Case>
void run_precision(Case& c, int all_steps, std::mt19937_64& rng) {
  using Policy = typename Case::policy_t;
  using M = typename Policy::master_type;
  using S = typename Policy::serving_type;
  constexpr bool pair = Policy::has_serving_copy;
  // A single 8-bit checkpoint rounds coarsely at every commit (the contrast the pairs avoid): a
  // shorter run keeps its bound below 1.
  const int steps = Policy::scaled_state ? all_steps / 8 : all_steps;
  const double u = rtest::unit_roundoff<S>();
  const int batch = 3, num_slots = 4;
  c.allocate(batch, num_slots, rng);
  const size_t out_n = c.out_row_elems();
  // The checkpoint pool of the master type (the case's fp32 pool for pairs); a pair's copy is
  // the case's serving_r, an 8-bit copy's scales its serving_scale_r (poisoned at allocation, set
  // in its params).
  rtest::dev_array<M> typed(std::is_same<M, float>::value ? 0 : num_slots * c.state_elems());
  using params_t = decltype(c.params(nullptr, nullptr, 0, -1, nullptr));
  constexpr int scales_per_head = params_t::serving_scales_per_head;
  const size_t scales_per_slot = c.serving_scales_per_slot();
  rtest::dev_array<float> state_scales(Policy::scaled_state ? num_slots * scales_per_slot : 0);
  if (state_scales.n) state_scales.poison();
  if (typed.n) typed.poison();
  rtest::dev_array<int32_t> slots(batch), live(2);
  slots.upload({2, -1, 0});
  live.upload({2, 0});
  auto params = [&](const int32_t* idx, int rows) {
    auto p = c.params(c.pool_r.ptr, idx, rows, -1, c.out_r.ptr);
    if constexpr (!std::is_same<M, float>::value) p.state = c.rows_pool(typed.ptr, num_slots);
    if constexpr (Policy::scaled_state)
      p.state_scale = {state_scales.ptr, int64_t(scales_per_slot), scales_per_head, num_slots};
    return p;
  };
  std::vector<typename Case::ref_state> ref(2);
  {
    std::vector<float> src;
    for (auto& r : ref) {
      r = c.random_state(rng);
      const auto d = c.to_device_layout(r);
      src.insert(src.end(), d.begin(), d.end());
    }
    rtest::dev_array<float> init(src.size());
    init.upload(src);
    RTEST_OK(load_state(params(live.ptr, 2), c.rows_pool(init.ptr, 2), 0));
    if constexpr (!pair && !std::is_same<M, float>::value) {
      // A single low-precision checkpoint starts rounded: so does its reference.
      rtest::dev_array<float> back(src.size());
      RTEST_OK(materialize(params(live.ptr, 2), c.rows_pool(back.ptr, 2), 0));
      const auto h = back.download();
      for (int q = 0; q < 2; ++q) ref[q] = c.from_device_layout(h.data() + q * c.state_elems());
    }
  }
  const int commits = steps / Case::commit_interval;
  const double state_tol = pair ? 2e-5 : 2 * u * std::sqrt(commits + 1.0) + 2e-5;
  // 16-bit inputs (m2_bf16in): the outputs are rounded to the input type as well, once.
  using In = typename Policy::input_type;
  const double in_u = sizeof(In) == 4 ? 0.0 : rtest::unit_roundoff<In>();
  const double out_tol = (pair ? 4 * u : state_tol + 4 * u) + 2 * in_u;
  double worst_out = 0;
  std::vector<double> y;
  const int rows_of[2] = {0, 2};  // batch row of each sequence (row 1 is null)
  for (int t = 0; t < steps; ++t) {
    std::vector<typename Case::step_t> in(2);
    for (int q = 0; q < 2; ++q) c.set_row(rows_of[q], in[q] = c.random_step(rng));
    c.upload_inputs();
    c.out_r.poison();
    RTEST_OK(decode_step(params(slots.ptr, batch), 0));
    const auto out = c.out_r.download();
    REQUIRE(rtest::output_row_poisoned(out, 1, out_n));
    for (int q = 0; q < 2; ++q) {
      c.ref_step(ref[q], in[q], y);
      const auto got = rtest::output_row(out, rows_of[q], out_n);
      rtest::rel_err e;
      for (size_t i = 0; i < out_n; ++i) e.add(got[i], y[i]);
      worst_out = std::max(worst_out, e.value());
      INFO("step " << t << " sequence " << q << ": output error " << e.value() << ", bound "
                   << out_tol);
      REQUIRE(e.value() < out_tol);
    }
  }
  RTEST_OK(commit(params(live.ptr, 2), 0));
  rtest::dev_array<float> dest(2 * c.state_elems());
  dest.poison();
  RTEST_OK(materialize(params(live.ptr, 2), c.rows_pool(dest.ptr, 2), 0));
  const auto h = dest.download();
  double worst_state = 0;
  for (int q = 0; q < 2; ++q) {
    const auto st = c.from_device_layout(h.data() + q * c.state_elems());
    rtest::rel_err e;
    for (size_t i = 0; i < st.size(); ++i) e.add(st[i], ref[q][i]);
    worst_state = std::max(worst_state, e.value());
    INFO("sequence " << q << " state after " << steps << " steps: " << e.value() << ", bound "
                     << state_tol);
    REQUIRE(e.value() < state_tol);
  }
  if constexpr (pair) {  // the copy is the master rounded as the kernels round; others untouched
    const auto master = c.pool_r.download();
    const auto cp = c.serving_r.download();
    std::vector<float> sc;
    if constexpr (Policy::scaled_copy) sc = c.serving_scale_r.download();
    std::vector<unsigned char> want(sizeof(S) * c.state_elems());
    std::vector<float> want_sc(scales_per_slot);
    for (int slot = 0; slot < num_slots; ++slot) {
      const bool is_live = slot == 2 || slot == 0;
      const float* m = master.data() + slot * c.state_elems();
      if constexpr (Policy::scaled_copy) {
        // Per head, per scale: a segment of one row (rows x row_len, segments of scale_seg).
        using code = replayssm::detail::code8<S>;
        const int rows = c.rows_per_head(), len = c.row_len(), seg = Case::scale_seg;
        for (int h = 0; h < c.heads(); ++h)
          for (int g = 0; g < len / seg; ++g)
            for (int i = 0; i < rows; ++i) {
              const size_t e0 = size_t(h) * rows * len + size_t(i) * len + size_t(g) * seg;
              float amax = 0.f;
              for (int j = 0; j < seg; ++j) amax = std::fmax(amax, std::fabs(m[e0 + j]));
              const float s8 = replayssm::detail::row_scale<S>(amax);
              want_sc[size_t(h) * scales_per_head + size_t(g) * rows + i] = s8;
              const float inv = 1.f / s8;  // as the device: value * (1 / scale) (store_scaled)
              for (int j = 0; j < seg; ++j) want[e0 + j] = code::encode(m[e0 + j] * inv);
            }
      } else {
        for (size_t i = 0; i < c.state_elems(); ++i) {
          const S w = rtest::host_from_float<S>(m[i]);
          std::memcpy(&want[i * sizeof(S)], &w, sizeof(S));
        }
      }
      const auto* got = reinterpret_cast<const unsigned char*>(cp.data() + slot * c.state_elems());
      size_t bad = 0;  // the first byte that differs from what it must be
      while (bad < want.size() && got[bad] == (is_live ? want[bad] : 0xFF)) ++bad;
      INFO("slot " << slot << (is_live ? ": copy == master rounded" : ": copy untouched")
                   << ", first mismatch at element " << bad / sizeof(S) << " of "
                   << c.state_elems());
      REQUIRE(bad == want.size());
      if constexpr (Policy::scaled_copy) {
        const float* gs = sc.data() + slot * scales_per_slot;
        const bool scales_ok =
            is_live ? std::memcmp(gs, want_sc.data(), scales_per_slot * 4) == 0
                    : std::all_of(gs, gs + scales_per_slot, [](float f) { return std::isnan(f); });
        INFO("slot " << slot << ": row scales");
        REQUIRE(scales_ok);
      }
    }
  }
  std::printf(
      "[precision %s %s] %d steps, %d commits: max output err %.2e (bound %.1e), state "
      "err %.2e (bound %.1e)\n",
      pair ? "pair" : "single", type_name(S{}), steps, commits, worst_out, out_tol, worst_state,
      state_tol);
}

template <class Pr>
using m2 = replay_policy<rules::mamba2<64, 128, float>, 16, 16, Pr>;
template <class Pr>
using gdn = replay_policy<rules::gated_deltanet<128, 128, float>, 16, 16, Pr>;
template <class Pr>
using gdn_vk = replay_policy<rules::gated_deltanet<128, 128, float, state_layout::vk>, 16, 8, Pr>;
// Several tiles per head: scales per tile row segment (kv: 4 tiles of 32 columns of V, 8 lanes
// per row; vk: 4 tiles of 32 rows of V; Mamba-2 dstate 64: 16 lanes per row, 4 tiles of P).
template <class Pr>
using gdn_tiles = replay_policy<rules::gated_deltanet<128, 128, float>, 16, 16, Pr, 32>;
template <class Pr>
using gdn_vk_tiles =
    replay_policy<rules::gated_deltanet<128, 128, float, state_layout::vk>, 16, 16, Pr, 32>;
template <class Pr>
using m2_tiles = replay_policy<rules::mamba2<64, 64, float>, 16, 16, Pr, 16>;
// bf16 inputs (as engines and bench_decode feed them): a pair's split step folds its committing
// rows in the stream kernel (mamba2_stream_agent::commit: the master, and the copy regenerated
// from it there); the other schemes keep the fused agent's commit.
template <class Pr>
using m2_bf16in = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 16, 16, Pr>;

}  // namespace

TEMPLATE_TEST_CASE("precision pairs keep the master exact; single checkpoints stay within bounds",
                   "[gpu][precision]", precision::fp32_bf16, precision::fp32_fp16,
                   precision::fp32_fp8, precision::fp32_int8, precision::bf16, precision::fp16,
                   precision::fp8, precision::int8) {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int steps = std::getenv("REPLAYSSM_TEST_STEPS") ? 40 : 1024;
  SECTION("mamba2 16 heads, 2 groups, with z") {
    rtest::mamba2_case<m2<TestType>> c(16, 2, true);
    run_precision(c, steps, rng);
  }
  SECTION("mamba2 16 heads, 2 groups, with z, split replay step (workspace)") {
    rtest::mamba2_case<m2<TestType>> c(16, 2, true);
    c.use_workspace = true;  // the split step reads the serving copy, as the fused one
    run_precision(c, steps, rng);
  }
  SECTION("mamba2 split replay step: 7 heads in 7 groups, 6 heads in 2 groups") {
    // 16- and 8-bit serving states stream two heads per block (mamba2_stream.cuh): with 7 heads
    // the last block has one and every head appends its own group's B; with 6 heads in 2 groups
    // a block's two heads can belong to different groups. (At least 40 steps: commits happen.)
    rtest::mamba2_case<m2<TestType>> c(7, 7, true);
    c.use_workspace = true;
    run_precision(c, std::max(steps / 4, 40), rng);
    rtest::mamba2_case<m2<TestType>> d(6, 2, true);
    d.use_workspace = true;
    run_precision(d, std::max(steps / 4, 40), rng);
  }
  SECTION("mamba2 bf16 inputs, with and without the split step (pairs: the stream commit)") {
    static_assert(!TestType::has_serving_copy ||
                      replayssm::detail::mamba2_stream_commits<m2_bf16in<TestType>>::value,
                  "pairs with bf16 inputs commit in mamba2_stream_agent::commit");
    rtest::mamba2_case<m2_bf16in<TestType>> c(16, 2, true);
    c.use_workspace = true;
    run_precision(c, steps / 2, rng);
    rtest::mamba2_case<m2_bf16in<TestType>> d(7, 7, true);  // odd: a block with one head
    d.use_workspace = true;
    run_precision(d, std::max(steps / 4, 40), rng);
    rtest::mamba2_case<m2_bf16in<TestType>> f(16, 2, true);  // the fused step, as a control
    run_precision(f, steps / 4, rng);
  }
  SECTION("gated deltanet kv 2/4 heads") {
    rtest::gdn_case<gdn<TestType>> c(2, 4);
    run_precision(c, steps, rng);
  }
  SECTION("several tiles per head: gated deltanet kv and vk, mamba2 dstate 64") {
    rtest::gdn_case<gdn_tiles<TestType>> a(2, 4);
    run_precision(a, steps / 4, rng);
    rtest::gdn_case<gdn_vk_tiles<TestType>> b(2, 4);
    run_precision(b, steps / 4, rng);
    rtest::mamba2_case<m2_tiles<TestType>> m(8, 2, true);
    run_precision(m, steps / 4, rng);
  }
  SECTION("gated deltanet vk 2/4 heads, K 8") {
    rtest::gdn_case<gdn_vk<TestType>> c(2, 4);
    run_precision(c, steps, rng);
  }
  SECTION("gated deltanet kv and vk, split replay step (workspace), one and several tiles") {
    // The split step reads the serving copy, as the fused one; several tiles of one value head
    // read one workspace row. (kv with one tile per value head: the stream kernel,
    // gdn_stream.cuh, 16-byte fragments of every serving type; the others: the split item kernel.)
    rtest::gdn_case<gdn<TestType>> c(2, 4);
    c.use_workspace = true;
    run_precision(c, steps / 2, rng);
    rtest::gdn_case<gdn_vk<TestType>> d(2, 4);
    d.use_workspace = true;
    run_precision(d, steps / 2, rng);
    rtest::gdn_case<gdn_tiles<TestType>> a(2, 4);
    a.use_workspace = true;
    run_precision(a, steps / 4, rng);
    rtest::gdn_case<gdn_vk_tiles<TestType>> b(2, 4);
    b.use_workspace = true;
    run_precision(b, steps / 4, rng);
  }
}
