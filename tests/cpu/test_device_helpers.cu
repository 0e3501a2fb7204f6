// The small index helpers the kernels share, run on the host: the masks of draft paths in token
// trees and the cursor clamp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <replayssm/replayssm.cuh>
#include <vector>

namespace {
using replayssm::spec_ref;
using replayssm::detail::draft_path;
using replayssm::detail::op;
}  // namespace

TEST_CASE("draft paths: chains are prefixes, trees follow their parents", "[cpu][spec]") {
  constexpr int max_draft = 32;
  spec_ref chain;  // no parent: a chain
  CHECK(draft_path<max_draft>(chain, 0, 0) == 0x1u);
  CHECK(draft_path<max_draft>(chain, 0, 4) == 0x1Fu);
  CHECK(draft_path<max_draft>(chain, 0, 30) == 0x7FFFFFFFu);
  CHECK(draft_path<max_draft>(chain, 0, 31) == 0xFFFFFFFFu);

  std::mt19937_64 rng(11);
  std::vector<int32_t> parent(3 * max_draft);
  for (int b = 0; b < 3; ++b)
    for (int d = 0; d < max_draft; ++d)
      parent[b * max_draft + d] = static_cast<int32_t>(rng() % (d + 1)) - 1;
  spec_ref tree;
  tree.parent = parent.data();
  for (int b = 0; b < 3; ++b) {
    std::vector<int> pr(parent.begin() + b * max_draft, parent.begin() + (b + 1) * max_draft);
    for (int d = 0; d < max_draft; ++d) {
      uint32_t want = 0;
      for (int k : replayssm::ref::tree_path(pr, d)) want |= 1u << k;
      INFO("row " << b << " draft " << d);
      CHECK(draft_path<max_draft>(tree, b, d) == want);
    }
  }
  // A malformed parent (not an earlier draft) ends the path instead of looping.
  std::vector<int32_t> bad{-1, 0, 5, 2};
  spec_ref malformed;
  malformed.parent = bad.data();
  CHECK(draft_path<4>(malformed, 0, 2) == 0x4u);  // draft 2's parent 5 is not earlier: stop
  CHECK(draft_path<4>(malformed, 0, 3) == 0xCu);  // 3 -> 2 (valid), then 2's bad parent: stop
}

TEST_CASE("cursor clamps keep every access inside the slot's buffer", "[cpu][checks]") {
  using replayssm::detail::buffered_steps;
  using replayssm::detail::draft_offset;
  using replayssm::detail::folded_cursor;
  CHECK(buffered_steps<op::decode, 16, 24>(7) == 7);
  CHECK(buffered_steps<op::decode, 16, 24>(20) == 20);  // left by accept: decode folds it
  CHECK(buffered_steps<op::decode, 16, 24>(99) == 23);  // the current step still fits
  CHECK(buffered_steps<op::verify, 16, 24>(99) == 24);
  CHECK(buffered_steps<op::flush, 16, 24>(99) == 24);  // a flush may fold a whole buffer
  CHECK(buffered_steps<op::materialize, 16, 24>(20) == 20);
  // After a verification that folded a window of 18 steps: nothing buffered, drafts at 18.
  CHECK(folded_cursor(18) < 0);
  CHECK(buffered_steps<op::decode, 16, 24>(folded_cursor(18)) == 0);
  CHECK(buffered_steps<op::accept, 16, 24>(folded_cursor(18)) == 0);
  CHECK(draft_offset<24>(folded_cursor(18)) == 18);
  CHECK(draft_offset<24>(folded_cursor(0)) == 0);
  CHECK(draft_offset<24>(7) == 7);
  // Garbage stays inside the buffer.
  CHECK(buffered_steps<op::decode, 16, 24>(-3) == 0);
  CHECK(draft_offset<24>(-2147483647 - 1) == 24);
  CHECK(draft_offset<24>(2147483647) == 24);
}

TEST_CASE("8-bit serving copies: codes round to nearest and saturate, scales cover the row",
          "[cpu][precision]") {
  using replayssm::detail::code8;
  using replayssm::detail::row_scale;
  using fp8 = code8<__nv_fp8_e4m3>;
  using i8 = code8<int8_t>;
  // e4m3: 3 mantissa bits, largest finite 448; exact for small integers and powers of two.
  for (float x : {0.f, 1.f, -2.f, 0.5f, 3.f, 448.f, -448.f, 0.015625f})
    CHECK(fp8::decode(fp8::encode(x)) == x);
  CHECK(fp8::decode(fp8::encode(1000.f)) == 448.f);  // saturates, never inf or NaN
  CHECK(fp8::decode(fp8::encode(1.0625f)) == 1.f);   // halfway between 1 and 1.125: to even
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-448.f, 448.f);
  for (int i = 0; i < 1000; ++i) {  // relative error within half an ulp: 2^-4 for normals
    const float x = u(rng);
    if (std::fabs(x) < 0.015625f) continue;
    CHECK(std::fabs(fp8::decode(fp8::encode(x)) - x) <= std::fabs(x) * 0.0625f);
  }
  // int8: symmetric, round to nearest even, saturating at +-127.
  CHECK(i8::decode(i8::encode(2.5f)) == 2.f);
  CHECK(i8::decode(i8::encode(-3.5f)) == -4.f);
  CHECK(i8::decode(i8::encode(300.f)) == 127.f);
  CHECK(i8::decode(i8::encode(-300.f)) == -127.f);
  // A row's scale maps its largest magnitude to the largest code; an all-zero row keeps scale 1.
  CHECK(row_scale<__nv_fp8_e4m3>(0.f) == 1.f);
  CHECK(row_scale<__nv_fp8_e4m3>(1e-44f) == 1.f);  // would underflow: codes of 0 instead
  CHECK(i8::encode(std::nanf("")) == 0);
  CHECK(row_scale<int8_t>(2.54f) == 2.54f / 127.f);
  const float amax = 3.7f, sc = row_scale<__nv_fp8_e4m3>(amax);
  CHECK(fp8::decode(fp8::encode(amax * (1.f / sc))) * sc == Approx(amax).epsilon(1e-6));
  // decode2 (the stream kernels' paired decode) equals two decodes, for every pair of codes
  // (bits; NaN codes decode to NaN either way).
  auto same = [](float a, float b) {
    uint32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y || (a != a && b != b);
  };
  int bad8 = 0, badi = 0;
  for (uint32_t w = 0; w < 65536; ++w) {
    const float2 f = fp8::decode2(w), i = i8::decode2(w);
    bad8 += !same(f.x, fp8::decode(uint8_t(w))) || !same(f.y, fp8::decode(uint8_t(w >> 8)));
    badi += !same(i.x, i8::decode(uint8_t(w))) || !same(i.y, i8::decode(uint8_t(w >> 8)));
  }
  CHECK(bad8 == 0);
  CHECK(badi == 0);
  CHECK(fp8::decode2(0xABCD0000u | 0x4038u).x == fp8::decode(0x38));  // bits 16-31 ignored
}
