// Gated DeltaNet: replay (backward sweep) vs eager vs the float64 reference on the real shapes,
// over 2048 steps, in both state layouts.
#include "gdn_case.cuh"

namespace {

using namespace replayssm;
using rtest::gdn_case;

using gkv = rules::gated_deltanet<128, 128, float, state_layout::kv>;
using gvk = rules::gated_deltanet<128, 128, float, state_layout::vk>;
using gkvb = rules::gated_deltanet<128, 128, __nv_bfloat16, state_layout::kv>;
// Readable test names: <rule>_<layout>_<input type>_L<buffer>_K<commit interval>.
using gdn_kv_f32_L8_K1 = replay_policy<gkv, 8, 1>;
using gdn_kv_f32_L8_K4 = replay_policy<gkv, 8, 4>;
using gdn_kv_f32_L16_K8 = replay_policy<gkv, 16, 8>;
using gdn_kv_f32_L16_K16 = replay_policy<gkv, 16, 16>;
using gdn_kv_f32_L32_K16 = replay_policy<gkv, 32, 16>;
using gdn_vk_f32_L16_K16 = replay_policy<gvk, 16, 16>;
using gdn_vk_f32_L32_K8 = replay_policy<gvk, 32, 8>;
using gdn_kv_bf16_L32_K16 = replay_policy<gkvb, 32, 16>;
using gdn_kv_bf16_L16_K16 = replay_policy<gkvb, 16, 16>;  // the decode benchmark's policy
// K = 32 with bf16 inputs: the stream kernel's largest step count per warp (8), whose v values it
// requests mid-contraction for an fp32 state (gdn_stream.cuh, early_v).
using gdn_kv_bf16_L32_K32 = replay_policy<gkvb, 32, 32>;
// The persistent, pipelined kernels (PipelineStages >= 2).
using gdn_kv_f32_L16_K16_pipe3 = replay_policy<gkv, 16, 16, precision::fp32, 64, 128, 3>;
using gdn_vk_f32_L16_K8_pipe2 = replay_policy<gvk, 16, 8, precision::fp32, 128, 128, 2>;

struct shape {
  int Hk, Hv;
  const char* name;
};
const shape qwen3_next{16, 32, "Qwen3-Next-like 16/32/128/128"};
const shape qwen35{16, 64, "Qwen3.5-122B-like 16/64/128/128"};

// The long run of one policy on `shapes`, with or without the split replay step's workspace
// (gdn_params::workspace on every decode_step).
template <class Policy>
void run_long(bool workspace, std::initializer_list<shape> shapes, int input_offset = 0) {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto cfg = rtest::default_run_config<typename Policy::input_type>();
  for (const shape s : shapes) {
    SECTION(s.name) {
      gdn_case<Policy> c(s.Hk, s.Hv);
      c.use_workspace = workspace;
      c.input_offset = input_offset;
      const auto rep = rtest::run_replay_vs_eager(c, cfg, rng);
      std::printf(
          "[gdn%s%s K=%d L=%d %s %s %s] max rel err: replay-ref %.2e eager-ref %.2e "
          "replay-eager %.2e state %.2e\n",
          workspace ? " split" : "", input_offset ? " unaligned inputs" : "",
          Policy::commit_interval, Policy::buffer_len,
          Policy::rule::layout == state_layout::kv ? "kv" : "vk",
          sizeof(typename Policy::input_type) == 4 ? "fp32-in" : "bf16-in", s.name,
          rep.max_replay_vs_ref, rep.max_eager_vs_ref, rep.max_replay_vs_eager, rep.max_state_err);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("gated deltanet replay equals eager and the float64 reference over 2048 steps",
                   "[gpu][gdn][replay]", gdn_kv_f32_L8_K1, gdn_kv_f32_L8_K4, gdn_kv_f32_L16_K8,
                   gdn_kv_f32_L16_K16, gdn_kv_f32_L32_K16, gdn_vk_f32_L16_K16, gdn_vk_f32_L32_K8,
                   gdn_kv_bf16_L16_K16, gdn_kv_bf16_L32_K16, gdn_kv_f32_L16_K16_pipe3,
                   gdn_vk_f32_L16_K8_pipe2) {
  run_long<TestType>(false, {qwen3_next, qwen35});
}

// The split replay step (gdn_params::workspace): the same long run with a workspace on every
// decode_step (commits in the launch, explicit commits, null rows, slot permutations), both
// layouts. Its decode grid is the stream kernel (gdn_stream.cuh) for the kv policies of one tile
// per value head (all kv ones here), the split item kernel for vk. The pipelined policies ignore
// the workspace (their fused path must stay correct with one set).
TEMPLATE_TEST_CASE(
    "gated deltanet split replay step (workspace) equals eager and the float64 "
    "reference",
    "[gpu][gdn][replay][split]", gdn_kv_f32_L8_K1, gdn_kv_f32_L8_K4, gdn_kv_f32_L16_K8,
    gdn_kv_f32_L16_K16, gdn_kv_f32_L32_K16, gdn_vk_f32_L16_K16, gdn_vk_f32_L32_K8,
    gdn_kv_bf16_L16_K16, gdn_kv_bf16_L32_K16, gdn_kv_bf16_L32_K32, gdn_kv_f32_L16_K16_pipe3,
    gdn_vk_f32_L16_K8_pipe2) {
  run_long<TestType>(true, {qwen3_next, qwen35,
                            shape{2, 20, "10 value heads per k head (coefficient warps loop)"}});
}

// Inputs at any alignment: q, k, v, g and beta one element into their arrays, so that no row is
// 8- or 16-byte aligned (engines slice them out of fused projections). The stream kernel loads
// the current v element by element, the coefficient kernel appends k, g and beta from those
// values; the buffer stays aligned as validated.
TEMPLATE_TEST_CASE(
    "gated deltanet decode with inputs at any alignment equals eager and the "
    "float64 reference",
    "[gpu][gdn][replay][split]", gdn_kv_f32_L16_K16, gdn_kv_bf16_L32_K16) {
  SECTION("fused decode step") { run_long<TestType>(false, {qwen35}, 1); }
  SECTION("split decode step (workspace)") { run_long<TestType>(true, {qwen35}, 1); }
}

// The split decode step (workspace) against the fused one, launch by launch
// (rtest::run_split_vs_fused): identical slot memory after every launch (the coefficient grid
// appends k, its factor, g and beta with the fused path's bits), committing rows' outputs bit
// for bit, replay rows' within rounding.
TEMPLATE_TEST_CASE("gated deltanet split decode step commits exactly as the fused step",
                   "[gpu][gdn][replay][split]", gdn_kv_f32_L8_K4, gdn_kv_f32_L16_K16,
                   gdn_kv_bf16_L16_K16, gdn_kv_bf16_L32_K16) {
  const uint64_t seed = rtest::fresh_seed();
  INFO("seed " << seed);
  for (const shape s : {qwen3_next, qwen35}) {
    SECTION(s.name) {
      rtest::check_split_vs_fused<gdn_case<TestType>>("gdn", s.name, seed, s.Hk, s.Hv);
    }
  }
}
