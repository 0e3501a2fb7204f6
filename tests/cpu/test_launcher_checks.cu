// Every host-side check of the launchers, without a GPU: an invalid launch must return a clear
// status before anything is launched.
#include <catch2/catch.hpp>
#include <cstring>
#include <replayssm/replayssm.cuh>
#include <string>

namespace {

using namespace replayssm;
using m2pol = replay_policy<rules::mamba2<64, 128, float>, 16, 16>;
using gpol = replay_policy<rules::gated_deltanet<128, 128, float>, 16, 16>;
using gvkpol = replay_policy<rules::gated_deltanet<128, 128, float, state_layout::vk>, 16, 16>;

// Host memory standing in for device pointers: the checks must fail before any launch, so these
// are never dereferenced.
alignas(16) float fake_f[64];
alignas(16) int32_t fake_i[64];
alignas(16) uint32_t fake_u[64];
// The arrays a launch writes are distinct (the launchers refuse one array passed twice): the
// checkpoint pool, the buffer's arrays (16 floats apart, 16-byte aligned) and the branch map.
alignas(16) float fake_state[64];
alignas(16) float fake_buf[5 * 16];
alignas(16) int32_t fake_map[64];

/// verify_step<MaxDraft> of `p` with a workspace 2 bytes off alignment (of the size the split
/// verification needs): where the launch takes the split path, it refuses it as misaligned.
template <int MaxDraft, class Params>
result misaligned_verify_workspace(Params p) {
  p.workspace = reinterpret_cast<float*>(reinterpret_cast<char*>(fake_f) + 2);
  p.workspace_size = p.verify_workspace_elems(p.rows.batch, p.ngroups, MaxDraft);
  return verify_step<MaxDraft>(p, nullptr);
}

template <class Policy = m2pol>
mamba2_params<Policy> valid_mamba2() {
  mamba2_params<Policy> p;
  p.nheads = 8;
  p.ngroups = 2;
  p.headdim = 64;
  p.dstate = 128;
  p.weights = {fake_f, fake_f, fake_f, true};
  p.in.x = fake_f;
  p.in.x_batch_stride = 8 * 64;
  p.in.x_head_stride = 64;
  p.in.dt = fake_f;
  p.in.dt_batch_stride = 8;
  p.in.B = fake_f;
  p.in.B_batch_stride = 2 * 128;
  p.in.B_group_stride = 128;
  p.in.C = fake_f;
  p.in.C_batch_stride = 2 * 128;
  p.in.C_group_stride = 128;
  p.in.out = fake_f;
  p.in.out_batch_stride = 8 * 64;
  p.in.out_head_stride = 64;
  p.rows = {fake_i, -1, 4};
  using M = typename Policy::master_type;
  p.state = {reinterpret_cast<M*>(fake_state), 8 * 64 * 128, 64 * 128, 128, 10};
  p.buffer = {fake_buf, fake_buf + 16, fake_buf + 32};
  p.cursors = {fake_i, fake_u};
  return p;
}

template <class Policy>
gdn_params<Policy> valid_gdn() {
  gdn_params<Policy> p;
  p.num_k_heads = 4;
  p.num_v_heads = 8;
  p.head_k_dim = 128;
  p.head_v_dim = 128;
  p.in.q = fake_f;
  p.in.q_batch_stride = 4 * 128;
  p.in.q_head_stride = 128;
  p.in.k = fake_f;
  p.in.k_batch_stride = 4 * 128;
  p.in.k_head_stride = 128;
  p.in.v = fake_f;
  p.in.v_batch_stride = 8 * 128;
  p.in.v_head_stride = 128;
  p.in.g = fake_f;
  p.in.g_batch_stride = 8;
  p.in.beta = fake_f;
  p.in.beta_batch_stride = 8;
  p.in.out = fake_f;
  p.in.out_batch_stride = 8 * 128;
  p.in.out_head_stride = 128;
  p.rows = {fake_i, -1, 4};
  p.state = {fake_state, 8 * 128 * 128, 128 * 128, 128, 10};
  p.buffer = {fake_buf, fake_buf + 16, fake_buf + 32, fake_buf + 48, fake_buf + 64};
  p.cursors = {fake_i, fake_u};
  return p;
}

bool mentions(const result& r, const char* text) { return std::strstr(r.message, text) != nullptr; }

}  // namespace

TEST_CASE("mamba2 launcher checks report what is wrong", "[cpu][checks][mamba2]") {
  REQUIRE(validate_mamba2(valid_mamba2(), true, true, true).ok());
  auto expect = [](mamba2_params<m2pol> p, status s, const char* text) {
    const result r = decode_step(p, nullptr);  // fails in the host checks, launches nothing
    INFO(r.message);
    CHECK(r.code == s);
    CHECK(mentions(r, text));
  };
  // A valid params with one change, refused with status s and a message mentioning text.
  auto expect_after = [&](auto&& change, status s, const char* text) {
    auto p = valid_mamba2();
    change(p);
    expect(p, s, text);
  };
  expect_after([](auto& p) { p.headdim = 32; }, status::policy_mismatch, "headdim");
  expect_after([](auto& p) { p.dstate = 64; }, status::policy_mismatch, "dstate");
  expect_after([](auto& p) { p.ngroups = 3; }, status::bad_shape, "ngroups must divide nheads");
  expect_after([](auto& p) { p.nheads = 0; }, status::bad_shape, "positive");
  expect_after([](auto& p) { p.state.data = nullptr; }, status::null_pointer, "state.data");
  expect_after([](auto& p) { p.state.data = fake_f + 1; }, status::misaligned_pointer, "16-byte");
  expect_after([](auto& p) { p.state.row_stride = 130; }, status::misaligned_pointer,
               "multiples of 4");
  expect_after([](auto& p) { p.state.row_stride = 64; }, status::bad_stride,
               "row_stride >= dstate");
  expect_after([](auto& p) { p.state.slot_stride = 64 * 128; }, status::bad_stride, "slot_stride");
  expect_after([](auto& p) { p.state.num_slots = 0; }, status::bad_shape, "num_slots");
  expect_after([](auto& p) { p.rows.batch = -1; }, status::bad_shape, "negative");
  expect_after([](auto& p) { p.rows.batch = 70000; }, status::bad_shape, "65535");
  expect_after([](auto& p) { p.rows.null_slot = 3; }, status::bad_shape, "null_slot");
  expect_after(
      [](auto& p) {
        p.rows.slot_idx = nullptr;
        p.rows.batch = 11;
      },
      status::too_many_slots, "num_slots");
  expect_after([](auto& p) { p.weights.A = nullptr; }, status::null_pointer, "weights.A");
  expect_after([](auto& p) { p.in.C = nullptr; }, status::null_pointer, "in.C");
  expect_after([](auto& p) { p.in.x_head_stride = 32; }, status::bad_stride, "head strides");
  expect_after([](auto& p) { p.in.B_group_stride = 100; }, status::bad_stride, "group strides");
  expect_after([](auto& p) { p.in.x_batch_stride = 64; }, status::bad_stride, "batch stride");
  // dt: its batch stride defaults to 0 (every row would read row 0's dt, and buffer it)
  expect_after([](auto& p) { p.in.dt_batch_stride = 0; }, status::bad_stride, "dt_batch_stride");
  expect_after([](auto& p) { p.in.dt_batch_stride = 7; }, status::bad_stride, "dt_batch_stride");
  expect_after([](auto& p) { p.in.dt_head_stride = 0; }, status::bad_stride, "dt_head_stride");
  expect_after([](auto& p) { p.in.dt_head_stride = -1; }, status::bad_stride, "dt_head_stride");
  expect_after(
      [](auto& p) {  // a gate whose batch stride was left at its default of 0
        p.in.z = fake_f;
        p.in.z_head_stride = 64;
      },
      status::bad_stride, "batch stride (x, z, out, B or C)");
  expect_after([](auto& p) { p.buffer.B = nullptr; }, status::null_pointer, "buffer");
  expect_after([](auto& p) { p.buffer.x = fake_f + 1; }, status::misaligned_pointer, "buffer.x");
  expect_after([](auto& p) { p.cursors.cursor = nullptr; }, status::null_pointer, "cursors.cursor");
  expect_after([](auto& p) { p.cursors.arrivals = nullptr; }, status::null_pointer, "arrivals");

  SECTION("dt and z strides: rows must not share what they read; other layouts pass") {
    auto p = valid_mamba2();
    p.in.dt_head_stride = 2;           // dt interleaved with another per-head scalar
    p.in.dt_batch_stride = 2 * 7 + 1;  // rows exactly one extent apart: no element shared
    CHECK(validate_mamba2(p, true, true, true).ok());
    p.in.dt_batch_stride = 2 * 7;  // row b + 1 starts on row b's last head
    CHECK(validate_mamba2(p, true, true, true).code == status::bad_stride);
    auto one = valid_mamba2();
    one.rows.batch = 1;  // one row: the batch strides are never used
    one.in.dt_batch_stride = 0;
    one.in.z = fake_f;
    one.in.z_head_stride = 64;
    CHECK(validate_mamba2(one, true, true, true).ok());
    auto single_head = valid_mamba2();
    single_head.nheads = 1;  // (ngroups 1) one head: dt's head stride is never used
    single_head.ngroups = 1;
    single_head.in.dt_head_stride = 0;
    single_head.in.dt_batch_stride = 1;
    CHECK(validate_mamba2(single_head, true, true, true).ok());
    auto gated = valid_mamba2();
    gated.in.z = fake_f;
    gated.in.z_head_stride = 64;
    gated.in.z_batch_stride = 8 * 64;
    CHECK(validate_mamba2(gated, true, true, true).ok());
    gated.in.z = nullptr;  // no gate: its strides are not read
    gated.in.z_batch_stride = -5;
    CHECK(validate_mamba2(gated, true, true, true).ok());
  }
  SECTION("the arrays a launch writes are distinct") {
    auto expect_alias = [](const mamba2_params<m2pol>& p) {
      const result r = decode_step(p, nullptr);
      INFO(r.message);
      CHECK(r.code == status::bad_stride);
      CHECK(mentions(r, "distinct arrays"));
    };
    auto p = valid_mamba2();
    p.buffer.B = p.buffer.x;  // one array passed twice
    expect_alias(p);
    p = valid_mamba2();
    p.buffer.dt = fake_state;  // the buffer's dt over the checkpoints
    expect_alias(p);
    p = valid_mamba2();
    p.cursors.arrivals = reinterpret_cast<uint32_t*>(p.cursors.cursor);
    expect_alias(p);
    auto eager = valid_mamba2();  // eager does not use the buffer: it is not compared
    eager.buffer = {fake_state, fake_state, fake_state};
    CHECK(validate_mamba2(eager, true, false, true).ok());
    using ppol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::fp32_bf16>;
    auto q = valid_mamba2<ppol>();
    q.serving = {reinterpret_cast<__nv_bfloat16*>(fake_state), 8 * 64 * 128, 64 * 128, 128, 10};
    result r = decode_step(q, nullptr);  // the copy over its own master
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "distinct arrays"));
    using f8pol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::fp32_fp8>;
    auto e = valid_mamba2<f8pol>();
    e.serving = {reinterpret_cast<__nv_fp8_e4m3*>(fake_f), 8 * 64 * 128, 64 * 128, 128, 10};
    e.serving_scale = {fake_buf, 8 * 64, 64, 10};  // the scales over buffer.x
    r = decode_step(e, nullptr);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "distinct arrays"));
    e.serving_scale.data = fake_f + 32;
    CHECK(validate_mamba2(e, true, true, true).ok());
  }
  SECTION("materialize and eager_draft_step do not write into the state pool") {
    auto p = valid_mamba2();
    const state_pool_ref pool{fake_state, 8 * 64 * 128, 64 * 128, 128, 10};
    result r = materialize(p, pool, nullptr);  // rows by batch row: other slots' checkpoints
    INFO(r.message);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "state pool itself"));
    p.spec.num_draft = fake_i;
    r = eager_draft_step<2>(p, state_pool_ref{fake_state, 8 * 64 * 128, 64 * 128, 128, 8}, nullptr);
    INFO(r.message);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "state pool itself"));
  }
  SECTION("eager needs no buffer, commit needs no step inputs") {
    auto p = valid_mamba2();
    p.buffer = {};
    p.cursors = {};
    CHECK(validate_mamba2(p, true, false, true).ok());
    auto q = valid_mamba2();
    q.in = {};
    CHECK(validate_mamba2(q, false, true, true).ok());
  }
  SECTION("materialize and load check the caller's buffer") {
    auto p = valid_mamba2();
    state_pool_ref dest{nullptr, 8 * 64 * 128, 64 * 128, 128, 4};
    result r = materialize(p, dest, nullptr);
    CHECK(r.code == status::null_pointer);
    dest.data = fake_f;
    dest.num_slots = 2;  // fewer rows than the batch of 4
    r = load_state(p, dest, nullptr);
    CHECK(r.code == status::bad_shape);
    CHECK(mentions(r, "fewer rows"));
  }
  SECTION("speculative launches need their per-row counts") {
    using spol = replay_policy<rules::mamba2<64, 128, float>, 31, 16>;
    auto p = valid_mamba2<spol>();
    result r = verify_step<8>(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "spec.num_draft"));
    r = accept(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "spec.accepted"));
    const state_pool_ref inter{fake_f, 8 * 64 * 128, 64 * 128, 128, 4 * 8};
    r = eager_draft_step<8>(p, inter, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "eager_draft_step"));
    p.spec.num_draft = fake_i;
    r = eager_draft_step<8>(p, state_pool_ref{fake_f, 8 * 64 * 128, 64 * 128, 128, 3}, nullptr);
    CHECK(r.code == status::bad_shape);  // fewer intermediate rows than batch * MaxDraft
    p.rows.batch = 1;  // one row, but MaxDraft input rows: the batch stride still matters
    p.in.x_batch_stride = 0;
    r = verify_step<8>(p, nullptr);
    CHECK(r.code == status::bad_stride);
  }
  SECTION("branching launches need their maps") {
    auto p = valid_mamba2();
    p.branch.write_idx = fake_i;  // commits elsewhere, but nothing records where
    result r = decode_step(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "branch.ckpt_of"));
    p.branch = {};
    r = fork(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "fork_src"));
    p.branch.ckpt_of = p.cursors.cursor;  // the checkpoint map passed as the cursors
    r = decode_step(p, nullptr);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "branch.ckpt_of"));
    p.branch.ckpt_of = fake_map;
    r = fork(p, nullptr);
    CHECK(r.code == status::null_pointer);
    p.cursors.cursor = nullptr;  // fork copies cursors: they are required
    p.branch.fork_src = fake_i;
    r = fork(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "cursor"));
  }
  SECTION("precision pairs need their serving copy; 16-bit pools align to 8 bytes") {
    using ppol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::fp32_bf16>;
    auto p = valid_mamba2<ppol>();
    result r = decode_step(p, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "serving"));
    auto* fake_h = reinterpret_cast<__nv_bfloat16*>(fake_f);
    p.serving = {fake_h + 2, 8 * 64 * 128, 64 * 128, 128, 10};  // 4 bytes off: misaligned
    r = decode_step(p, nullptr);
    CHECK(r.code == status::misaligned_pointer);
    CHECK(mentions(r, "serving"));
    p.serving.data = fake_h;
    p.serving.num_slots = 4;
    r = decode_step(p, nullptr);
    CHECK(r.code == status::bad_shape);
    CHECK(mentions(r, "fewer slots"));
    using spol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::bf16>;
    using f8pol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::fp32_fp8>;
    auto q = valid_mamba2<f8pol>();
    q.serving = {reinterpret_cast<__nv_fp8_e4m3*>(fake_f), 8 * 64 * 128, 64 * 128, 128, 10};
    r = decode_step(q, nullptr);
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "serving_scale"));
    q.serving_scale = {fake_f, 8 * 64, 32, 10};  // head_stride below the 64 rows of P
    r = decode_step(q, nullptr);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "serving_scale"));
    using s8pol = replay_policy<rules::mamba2<64, 128, float>, 16, 16, precision::int8>;
    auto e = valid_mamba2<s8pol>();
    r = eager_step(e, nullptr);  // an 8-bit checkpoint needs its scales, eager or replay
    CHECK(r.code == status::null_pointer);
    CHECK(mentions(r, "state_scale"));
    static_assert(std::is_same<decltype(mamba2_params<spol>{}.state.data), __nv_bfloat16*>::value,
                  "a single bf16 checkpoint is a bf16 pool");
  }
  SECTION("an empty batch is a successful no-op") {
    auto p = valid_mamba2();
    p.rows.batch = 0;
    CHECK(decode_step(p, nullptr).ok());
    p.workspace = fake_f;  // the split step too
    p.workspace_size = 0;  // (enough for no rows)
    CHECK(decode_step(p, nullptr).ok());
  }
  SECTION("the split replay step checks its workspace") {
    auto p = valid_mamba2();
    p.workspace = reinterpret_cast<float*>(reinterpret_cast<char*>(fake_f) + 2);
    p.workspace_size = p.workspace_elems(p.rows.batch, p.nheads);
    result r = decode_step(p, nullptr);
    CHECK(r.code == status::misaligned_pointer);
    CHECK(mentions(r, "workspace"));
    p.workspace = fake_f;
    p.workspace_size = p.workspace_elems(p.rows.batch, p.nheads) - 1;  // one float short
    r = decode_step(p, nullptr);
    CHECK(r.code == status::bad_shape);
    CHECK(mentions(r, "workspace_size"));
    p.nheads = 1024;
    p.ngroups = 1024;  // 1024 groups x 16 steps of dots: over 48 KiB of shared memory
    p.state.slot_stride = int64_t(1024) * 64 * 128;
    p.rows.batch = 1;
    p.workspace_size = p.workspace_elems(1, 1024);
    r = decode_step(p, nullptr);
    CHECK(r.code == status::bad_shape);
    CHECK(mentions(r, "48 KiB"));
    CHECK(mamba2_params<m2pol>::workspace_elems(512, 128) == 512LL * 128 * 17);
  }
  SECTION("the split verification checks its workspace") {
    // fp32, headdim 64, dstate 128, Tile == HeadDim (the defaults): verify_step uses the
    // workspace (mamba2_verify.cuh), whatever BlockThreads.
    using vpol = replay_policy<rules::mamba2<64, 128, float>, 23, 16>;
    using vpol128 = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32, 64, 128>;
    using vpair = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32_bf16>;
    using vpair8 = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32_fp8>;
    using vtiles = replay_policy<rules::mamba2<64, 128, float>, 23, 16, precision::fp32, 32>;
    static_assert(detail::mamba2_verify_split_supported<vpol>::value &&
                      detail::mamba2_verify_split_supported<vpol128>::value &&
                      detail::mamba2_verify_split_supported<vpair>::value,
                  "the split verification (16-bit serving copies included)");
    static_assert(!detail::mamba2_verify_split_supported<vpair8>::value &&
                      !detail::mamba2_verify_split_supported<vtiles>::value,
                  "8-bit (scaled) copies and several tiles per head: fused");
    CHECK(mamba2_params<vpol>::verify_workspace_elems(512, 8, 4) == 512LL * 8 * 4 * 23);
    auto p = valid_mamba2<vpol>();
    p.spec.num_draft = fake_i;
    result r = misaligned_verify_workspace<4>(p);
    INFO(r.message);
    CHECK(r.code == status::misaligned_pointer);
    CHECK(mentions(r, "workspace"));
    p.workspace = fake_f;
    p.workspace_size = p.verify_workspace_elems(p.rows.batch, p.ngroups, 4) - 1;  // one short
    r = verify_step<4>(p, nullptr);
    INFO(r.message);
    CHECK(r.code == status::bad_shape);
    CHECK(mentions(r, "verify_workspace_elems"));
    p.rows.batch = 0;  // an empty batch: a successful no-op (enough for no rows)
    p.workspace_size = 0;
    CHECK(verify_step<4>(p, nullptr).ok());
  }
  SECTION("policies near the 48 KiB staging limit keep the split verification") {
    // A folding row's window staging (mamba2_verify_readout) lives in storage the fused
    // verification has already, or (16-bit window B as given) only where it fits: every policy
    // whose fused verification compiles compiles here too, and the launch reaches the workspace
    // check.
    using l50 = replay_policy<rules::mamba2<64, 128, float>, 50, 16>;
    using b57 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 57, 16>;
    static_assert(sizeof(detail::mamba2_verify_readout<l50, 8>::shared_storage) ==
                      sizeof(detail::mamba2_agent<l50, detail::op::verify, 8>::shared_storage),
                  "fp32 inputs: the readout stages no more than the fused verification");
    static_assert(!detail::mamba2_verify_readout<b57, 4>::copy_B,
                  "16-bit inputs at BufferLen 57: window B through floats, as the fused path");
    auto p = valid_mamba2<l50>();
    p.spec.num_draft = fake_i;
    CHECK(misaligned_verify_workspace<8>(p).code == status::misaligned_pointer);
    CHECK(!verify_step<4>(mamba2_params<b57>{}, nullptr).ok());  // (compiles; no arrays given)
  }
}

TEMPLATE_TEST_CASE("gated deltanet launcher checks report what is wrong", "[cpu][checks][gdn]",
                   gpol, gvkpol) {
  REQUIRE(validate_gdn(valid_gdn<TestType>(), true, true).ok());
  auto expect = [](gdn_params<TestType> p, status s, const char* text) {
    const result r = decode_step(p, nullptr);
    INFO(r.message);
    CHECK(r.code == s);
    CHECK(mentions(r, text));
  };
  auto expect_after = [&](auto&& change, status s, const char* text) {
    auto p = valid_gdn<TestType>();
    change(p);
    expect(p, s, text);
  };
  using P = gdn_params<TestType>;
  expect_after([](auto& p) { p.head_k_dim = 64; }, status::policy_mismatch, "head_k_dim");
  expect_after([](auto& p) { p.head_v_dim = 64; }, status::policy_mismatch, "head_v_dim");
  expect_after([](auto& p) { p.num_v_heads = 6; }, status::bad_shape, "multiple of num_k_heads");
  expect_after([](auto& p) { p.scale = -1.f; }, status::bad_shape, "scale");
  expect_after([](auto& p) { p.state.head_stride = 128 * 64; }, status::bad_stride, "overlap");
  expect_after([](auto& p) { p.state.data = fake_f + 2; }, status::misaligned_pointer, "16-byte");
  expect_after([](auto& p) { p.in.beta = nullptr; }, status::null_pointer, "in.beta");
  expect_after([](auto& p) { p.in.k_head_stride = 64; }, status::bad_stride, "head strides");
  expect_after([](auto& p) { p.in.g_batch_stride = 1; }, status::bad_stride, "batch stride");
  expect_after([](auto& p) { p.buffer.kscale = nullptr; }, status::null_pointer, "buffer.kscale");
  expect_after([](auto& p) { p.buffer.v = fake_f + 3; }, status::misaligned_pointer,
               "buffer.k and buffer.v");
  expect_after([](auto& p) { p.cursors.arrivals = nullptr; }, status::null_pointer, "arrivals");
  expect_after([](auto& p) { p.rows.null_slot = 0; }, status::bad_shape, "null_slot");
  expect_after([](auto& p) { p.buffer.beta = p.buffer.g; }, status::bad_stride, "distinct arrays");
  expect_after([](auto& p) { p.buffer.kscale = fake_state; }, status::bad_stride,
               "distinct arrays");
  expect_after([](auto& p) { p.cursors.cursor = reinterpret_cast<int32_t*>(fake_u); },
               status::bad_stride, "distinct arrays");
  expect_after([](auto& p) { p.branch.ckpt_of = p.cursors.cursor; }, status::bad_stride,
               "branch.ckpt_of");
  {  // materialize writes its destination by batch row: never the pool itself
    const P p = valid_gdn<TestType>();
    const result r = materialize(p,
                                 state_pool_ref{p.state.data, p.state.slot_stride,
                                                p.state.head_stride, p.state.row_stride, 10},
                                 nullptr);
    INFO(r.message);
    CHECK(r.code == status::bad_stride);
    CHECK(mentions(r, "state pool itself"));
  }
  {  // the split replay step checks its workspace
    P p = valid_gdn<TestType>();
    p.workspace = reinterpret_cast<float*>(reinterpret_cast<char*>(fake_f) + 2);
    p.workspace_size = p.workspace_elems(p.rows.batch, p.num_v_heads);
    expect(p, status::misaligned_pointer, "workspace");
    p.workspace = fake_f;
    p.workspace_size = p.workspace_elems(p.rows.batch, p.num_v_heads) - 1;  // one float short
    expect(p, status::bad_shape, "workspace_size");
    p.rows.batch = 0;  // nothing to launch: no coefficient grid either
    CHECK(decode_step(p, nullptr).ok());
    CHECK(P::workspace_elems(512, 64) == 512LL * 64 * (128 + 16));
  }
}

TEST_CASE("the gated deltanet split verification checks its workspace", "[cpu][checks][gdn]") {
  // fp32, kv, Tile == head_v_dim == 128, 128 threads: verify_step uses the workspace
  // (gdn_verify.cuh); the vk layout and 256 threads keep the fused verification.
  using vpol = replay_policy<rules::gated_deltanet<128, 128, float>, 23, 16>;
  // Pairs: a 16-bit serving copy takes the split verification; an 8-bit one (row scales) not.
  using vpair = replay_policy<rules::gated_deltanet<128, 128, float>, 23, 16, precision::fp32_bf16>;
  using vpair8 =
      replay_policy<rules::gated_deltanet<128, 128, float>, 23, 16, precision::fp32_int8>;
  static_assert(detail::gdn_verify_split_supported<vpol>::value &&
                    detail::gdn_verify_split_supported<vpair>::value,
                "the split verification (16-bit serving copies included)");
  static_assert(!detail::gdn_verify_split_supported<vpair8>::value, "an 8-bit copy: fused");
  static_assert(!detail::gdn_verify_split_supported<gvkpol>::value, "vk: fused");
  static_assert(
      !detail::gdn_verify_split_supported<replay_policy<rules::gated_deltanet<128, 128, float>, 23,
                                                        16, precision::fp32, 128, 256>>::value,
      "256 threads: fused");
  CHECK(gdn_params<vpol>::verify_workspace_elems(512, 64, 4) == 512LL * 64 * 4 * (128 + 23));
  auto p = valid_gdn<vpol>();
  p.spec.num_draft = fake_i;
  p.split_min_batch = 0;
  p.workspace = reinterpret_cast<float*>(reinterpret_cast<char*>(fake_f) + 2);
  p.workspace_size = p.verify_workspace_elems(p.rows.batch, p.num_v_heads, 4);
  result r = verify_step<4>(p, nullptr);
  INFO(r.message);
  CHECK(r.code == status::misaligned_pointer);
  CHECK(mentions(r, "workspace"));
  p.workspace = fake_f;
  p.workspace_size = p.verify_workspace_elems(p.rows.batch, p.num_v_heads, 4) - 1;  // one short
  r = verify_step<4>(p, nullptr);
  INFO(r.message);
  CHECK(r.code == status::bad_shape);
  CHECK(mentions(r, "verify_workspace_elems"));
  // A decode-sized workspace is not enough for verify_step (it is refused, not ignored).
  p.workspace_size = p.workspace_elems(p.rows.batch, p.num_v_heads);
  r = verify_step<4>(p, nullptr);
  INFO(r.message);
  CHECK(r.code == status::bad_shape);
  p.rows.batch = 0;  // an empty batch: a successful no-op (enough for no rows)
  p.workspace_size = 0;
  CHECK(verify_step<4>(p, nullptr).ok());
}

TEST_CASE("status names", "[cpu][checks]") {
  CHECK(std::string(to_string(status::misaligned_pointer)) == "misaligned_pointer");
  CHECK(std::string(to_string(status::success)) == "success");
  CHECK(result{}.ok());
  CHECK_FALSE(bool(result{status::bad_shape, "x"}));
}

TEST_CASE("buffer sizes follow the documented layouts", "[cpu][checks]") {
  using mb = mamba2_buffer_ref<__nv_bfloat16>;
  // Nemotron-3-Super-like layer, 512 slots, L = 16.
  CHECK(mb::x_elems(512, 16, 128, 64) == 512LL * 16 * 128 * 64);
  CHECK(mb::B_elems(512, 16, 8, 128) == 512LL * 16 * 8 * 128);
  CHECK(mb::dt_elems(512, 16, 128) == 512LL * 16 * 128);
  using gb = gdn_buffer_ref<__nv_bfloat16>;
  CHECK(gb::k_elems(512, 16, 16, 128) == 512LL * 16 * 16 * 128);
  CHECK(gb::kscale_elems(512, 16, 16) == 512LL * 16 * 16);
  CHECK(gb::v_elems(512, 16, 64, 128) == 512LL * 16 * 64 * 128);
  CHECK(gb::gate_elems(512, 16, 64) == 512LL * 16 * 64);
  // No overflow of 32-bit products for a large pool.
  CHECK(gb::v_elems(65536, 64, 64, 128) == 65536LL * 64 * 64 * 128);
}

TEST_CASE("gated deltanet split replay step: which policies stream, which pools fall back",
          "[cpu][checks][gdn]") {
  using gb = rules::gated_deltanet<128, 128, __nv_bfloat16>;
  using detail::gdn_stream_supported;
  // The kv layout at the default tile (one per value head) and 128 threads, K <= 32, every
  // serving type: the stream kernel (gdn_stream.cuh).
  CHECK(gdn_stream_supported<gpol>::value);
  CHECK(gdn_stream_supported<replay_policy<gb, 32, 32>>::value);
  CHECK(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp32_bf16>>::value);
  CHECK(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp8>>::value);
  CHECK(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp32_int8>>::value);
  // The split item kernel: vk, several tiles per head, other block sizes, pipelined policies.
  CHECK_FALSE(gdn_stream_supported<gvkpol>::value);
  CHECK_FALSE(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp32, 64>>::value);
  CHECK_FALSE(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp32, 128, 256>>::value);
  CHECK_FALSE(gdn_stream_supported<replay_policy<gb, 16, 16, precision::fp32, 128, 128, 2>>::value);
  CHECK_FALSE(gdn_stream_supported<
              replay_policy<rules::gated_deltanet<64, 128, __nv_bfloat16>, 16, 16>>::value);
  // A 16-bit serving pool streams 16-byte fragments of 8 elements: strides that are multiples of
  // 4 (valid) but not of 8 fall back to the split item kernel.
  using pb = replay_policy<gb, 16, 16, precision::fp32_bf16>;
  using agent = detail::gdn_stream_agent<pb, false>;
  gdn_params<pb> p;
  alignas(16) static __nv_bfloat16 pool[64];
  p.serving = {pool, 4 * 128 * 128, 128 * 128, 128, 1};
  CHECK(agent::fragments_aligned(p));
  p.serving.row_stride = 132;
  CHECK_FALSE(agent::fragments_aligned(p));
  p.serving.row_stride = 136;
  CHECK(agent::fragments_aligned(p));
  p.serving.data = pool + 4;
  CHECK_FALSE(agent::fragments_aligned(p));
}
