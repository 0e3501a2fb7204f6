// Mamba-2: replay vs eager vs the float64 reference on the real shapes, over 2048 steps.
#include "mamba2_case.cuh"

namespace {

using namespace replayssm;
using rtest::mamba2_case;

using m2f = rules::mamba2<64, 128, float>;
using m2b = rules::mamba2<64, 128, __nv_bfloat16>;
// Readable test names: <rule>_<input type>_L<buffer>_K<commit interval>.
using mamba2_f32_L8_K1 = replay_policy<m2f, 8, 1>;
using mamba2_f32_L8_K4 = replay_policy<m2f, 8, 4>;
using mamba2_f32_L16_K8 = replay_policy<m2f, 16, 8>;
using mamba2_f32_L16_K16 = replay_policy<m2f, 16, 16>;
using mamba2_f32_L32_K16 = replay_policy<m2f, 32, 16>;
using mamba2_bf16_L32_K16 = replay_policy<m2b, 32, 16>;
using mamba2_bf16_L16_K16 = replay_policy<m2b, 16, 16>;  // the decode benchmark's policy
// Precision pairs with bf16 inputs (bench_decode's precision rows): the split step's committing
// rows fold in the stream kernel (mamba2_stream_agent::commit, master and copy).
using mamba2_bf16_L16_K16_fp32_bf16 = replay_policy<m2b, 16, 16, precision::fp32_bf16>;
using mamba2_bf16_L16_K16_fp32_fp8 = replay_policy<m2b, 16, 16, precision::fp32_fp8>;
using mamba2_bf16_L16_K16_fp32_int8 = replay_policy<m2b, 16, 16, precision::fp32_int8>;
using mamba2_bf16_L16_K16_fp32_fp16 = replay_policy<m2b, 16, 16, precision::fp32_fp16>;
// The persistent, pipelined kernels (PipelineStages >= 2).
using mamba2_f32_L16_K16_pipe3 = replay_policy<m2f, 16, 16, precision::fp32, 64, 256, 3>;
using mamba2_bf16_L8_K4_pipe2 = replay_policy<m2b, 8, 4, precision::fp32, 32, 128, 2>;

// The long run of one policy on the real shapes, with or without the split replay step's
// workspace (mamba2_params::workspace on every decode_step); `input_offset` as mamba2_case's.
template <class Policy>
void run_long(bool workspace, int input_offset = 0) {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto cfg = rtest::default_run_config<typename Policy::input_type>();
  struct shape {
    int H, G;
    bool z;
    const char* name;
  };
  for (const shape s : {shape{128, 8, true, "Nemotron-3-Super-like 128/64/128/8 with z"},
                        shape{80, 1, false, "Mamba-2 2.7B 80/64/128/1"}}) {
    SECTION(s.name) {
      mamba2_case<Policy> c(s.H, s.G, s.z);
      c.use_workspace = workspace;
      c.input_offset = input_offset;
      const auto rep = rtest::run_replay_vs_eager(c, cfg, rng);
      std::printf(
          "[mamba2%s%s K=%d L=%d %s %s] max rel err: replay-ref %.2e eager-ref %.2e "
          "replay-eager %.2e state %.2e\n",
          workspace ? " split" : "", input_offset ? " unaligned inputs" : "",
          Policy::commit_interval, Policy::buffer_len,
          sizeof(typename Policy::input_type) == 4 ? "fp32-in" : "bf16-in", s.name,
          rep.max_replay_vs_ref, rep.max_eager_vs_ref, rep.max_replay_vs_eager, rep.max_state_err);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("mamba2 replay equals eager and the float64 reference over 2048 steps",
                   "[gpu][mamba2][replay]", mamba2_f32_L8_K1, mamba2_f32_L8_K4, mamba2_f32_L16_K8,
                   mamba2_f32_L16_K16, mamba2_f32_L32_K16, mamba2_bf16_L16_K16, mamba2_bf16_L32_K16,
                   mamba2_f32_L16_K16_pipe3, mamba2_bf16_L8_K4_pipe2) {
  run_long<TestType>(false);
}

// The split replay step (mamba2_params::workspace): the same long run with a workspace on every
// decode_step (commits in the launch, explicit commits, null rows, slot permutations). The
// pipelined policy ignores the workspace (its fused path must stay correct with one set).
TEMPLATE_TEST_CASE("mamba2 split replay step (workspace) equals eager and the float64 reference",
                   "[gpu][mamba2][replay][split]", mamba2_f32_L8_K1, mamba2_f32_L8_K4,
                   mamba2_f32_L16_K8, mamba2_f32_L16_K16, mamba2_f32_L32_K16, mamba2_bf16_L16_K16,
                   mamba2_bf16_L32_K16, mamba2_f32_L16_K16_pipe3) {
  run_long<TestType>(true);
}

// Inputs at any alignment: x, dt, B, C and z one element into their arrays, so that no row is
// 16-byte aligned (engines slice them out of fused projections). Every kernel takes its
// element-by-element path for the current step (the stream kernel's x, C and z, the coefficient
// kernel's B and C), and the buffer, written from those values, is aligned as validated.
TEMPLATE_TEST_CASE(
    "mamba2 decode with inputs at any alignment equals eager and the float64 "
    "reference",
    "[gpu][mamba2][replay][split]", mamba2_f32_L16_K16, mamba2_bf16_L32_K16) {
  SECTION("fused decode step") { run_long<TestType>(false, 1); }
  SECTION("split decode step (workspace)") { run_long<TestType>(true, 1); }
}

// The split decode step (workspace) against the fused one, launch by launch: identical slot
// memory (checkpoints, buffers, cursors) after every launch, committing rows' outputs bit for
// bit, replay rows' within rounding (rtest::run_split_vs_fused). The split step's committing
// rows run mamba2_stream_agent::commit for fp32 checkpoints (single or the pairs' fp32 masters)
// with 16-bit inputs (the bf16 policies here, asserted) and the fused agent's code otherwise
// (fp32 inputs); both must give the fused step's bits. For the pairs the slot memory includes
// the serving copy and an 8-bit copy's row scales (mamba2_case::slot_regions).
TEMPLATE_TEST_CASE("mamba2 split decode step commits exactly as the fused step",
                   "[gpu][mamba2][replay][split]", mamba2_f32_L8_K4, mamba2_f32_L16_K16,
                   mamba2_bf16_L16_K16, mamba2_bf16_L32_K16, mamba2_bf16_L16_K16_fp32_bf16,
                   mamba2_bf16_L16_K16_fp32_fp8, mamba2_bf16_L16_K16_fp32_int8,
                   mamba2_bf16_L16_K16_fp32_fp16) {
  static_assert(sizeof(typename TestType::input_type) == 4 ||
                    replayssm::detail::mamba2_stream_commits<TestType>::value,
                "the 16-bit-input policies of this test reach mamba2_stream_agent::commit");
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  struct shape {
    int H, G;
    bool z;
    const char* name;
  };
  // 7 heads: an odd count, so a 16-bit copy's two-head blocks end with a single head.
  for (const shape s :
       {shape{128, 8, true, "128/64/128/8 with z"}, shape{80, 1, false, "80/64/128/1 without z"},
        shape{7, 7, true, "7/64/128/7 with z"}}) {
    SECTION(s.name) {
      rtest::check_split_vs_fused<mamba2_case<TestType>>("mamba2", s.name, seed, s.H, s.G, s.z);
    }
  }
}

// Below split_min_batch a decode with a workspace runs the fused kernel: the outputs still match
// eager and the reference, and the workspace (poisoned with NaN) is never written.
TEST_CASE("mamba2 decode below split_min_batch ignores the workspace",
          "[gpu][mamba2][replay][split]") {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto cfg = rtest::default_run_config<float>();
  cfg.steps = std::min(cfg.steps, 256);
  mamba2_case<mamba2_f32_L16_K16> c(16, 2, true);
  c.use_workspace = true;
  c.split_min_batch = 1 << 30;  // more rows than any launch has
  const auto rep = rtest::run_replay_vs_eager(c, cfg, rng);
  INFO("replay-eager " << rep.max_replay_vs_eager);
  const std::vector<float> ws = c.ws.download();
  size_t written = 0;
  for (float f : ws) written += !std::isnan(f);
  REQUIRE(written == 0);
}
