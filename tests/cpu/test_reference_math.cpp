// Tests of the float64 host reference (include/replayssm/reference.hpp): its unrolled replay and
// commit forms must agree with the eager recurrences.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "replayssm/reference.hpp"

namespace {

namespace ref = replayssm::ref;
using vec = std::vector<double>;

/// @brief Fresh seed for a test run (printed by the caller via INFO).
std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

/// @brief Relative error ||a - b|| / ||b||.
double rel_err(const vec& a, const vec& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

/// @brief Vector of n standard normal samples, times scale.
vec normal(std::mt19937_64& rng, std::size_t n, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, 1.0);
  vec v(n);
  for (auto& e : v) e = scale * d(rng);
  return v;
}

/// @brief Vector of n samples from U(lo, hi).
vec uniform(std::mt19937_64& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  vec v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// @brief Realistic Mamba-2 weights: A = -exp(U(-4,1)), D ~ U(0.5,1.5), dt_bias ~ U(-1,1)
///        (U(0,0.5) without softplus, so dt stays positive).
ref::mamba2_weights make_weights(std::mt19937_64& rng, const ref::mamba2_config& c) {
  ref::mamba2_weights w;
  w.A = uniform(rng, c.nheads, -4, 1);
  for (auto& a : w.A) a = -std::exp(a);
  w.dt_bias = c.dt_softplus ? uniform(rng, c.nheads, -1, 1) : uniform(rng, c.nheads, 0, 0.5);
  w.D = uniform(rng, c.nheads, 0.5, 1.5);
  return w;
}

/// @brief Realistic Mamba-2 step: raw dt ~ U(-4,1) (softplus(U(-4,1)) without softplus),
///        x, B, C, z ~ N(0,1).
ref::mamba2_step make_step(std::mt19937_64& rng, const ref::mamba2_config& c) {
  ref::mamba2_step s;
  s.x = normal(rng, static_cast<std::size_t>(c.nheads) * c.headdim);
  s.dt = uniform(rng, c.nheads, -4, 1);
  if (!c.dt_softplus)
    for (auto& d : s.dt) d = ref::softplus(d);
  s.B = normal(rng, static_cast<std::size_t>(c.ngroups) * c.dstate);
  s.C = normal(rng, static_cast<std::size_t>(c.ngroups) * c.dstate);
  if (c.has_z) s.z = normal(rng, s.x.size());
  return s;
}

std::size_t state_size(const ref::mamba2_config& c) {
  return static_cast<std::size_t>(c.nheads) * c.headdim * c.dstate;
}

/// @brief Realistic GDN step: q, k, v ~ N(0,1), g = -softplus(N(0,1)) clipped to [-5,0),
///        beta = sigmoid(N(0,1)). Without l2norm, q and k are drawn with norm about 1.
ref::gdn_step make_step(std::mt19937_64& rng, const ref::gdn_config& c) {
  ref::gdn_step s;
  const std::size_t nk = static_cast<std::size_t>(c.num_k_heads) * c.head_k_dim;
  const double qk_scale = c.l2norm_qk ? 1.0 : 1.0 / std::sqrt(static_cast<double>(c.head_k_dim));
  s.q = normal(rng, nk, qk_scale);
  s.k = normal(rng, nk, qk_scale);
  s.v = normal(rng, static_cast<std::size_t>(c.num_v_heads) * c.head_v_dim);
  s.g = normal(rng, c.num_v_heads);
  for (auto& g : s.g) g = std::max(-5.0, std::min(-1e-3, -ref::softplus(g)));
  s.beta = normal(rng, c.num_v_heads);
  for (auto& b : s.beta) b = sigmoid(b);
  return s;
}

std::size_t state_size(const ref::gdn_config& c) {
  return static_cast<std::size_t>(c.num_v_heads) * c.head_k_dim * c.head_v_dim;
}

/// @brief Mamba-2 shapes under test: grouped (G=2) and single-group (G=1).
std::vector<ref::mamba2_config> mamba2_shapes() {
  return {ref::mamba2_config{4, 8, 16, 2}, ref::mamba2_config{3, 5, 7, 1}};
}

/// @brief GDN shapes under test: grouped value heads (Hv=2Hk) and Hv == Hk.
std::vector<ref::gdn_config> gdn_shapes() {
  return {ref::gdn_config{2, 4, 16, 8}, ref::gdn_config{3, 3, 8, 5}};
}

}  // namespace

TEST_CASE("softplus, silu and mamba2_dt follow the documented formulas", "[cpu][math]") {
  CHECK(ref::softplus(25.0) == 25.0);
  CHECK(ref::softplus(0.5) == Approx(std::log(1.0 + std::exp(0.5))).epsilon(1e-15));
  CHECK(ref::silu(1.5) == Approx(1.5 / (1.0 + std::exp(-1.5))).epsilon(1e-15));
  ref::mamba2_config c{2, 1, 1, 1};
  ref::mamba2_weights w{{-1.0, -2.0}, {0.25, -0.5}, {1.0, 1.0}};
  CHECK(ref::mamba2_dt(c, w, 1, 0.2) == Approx(ref::softplus(-0.3)).epsilon(1e-15));
  c.dt_softplus = false;
  CHECK(ref::mamba2_dt(c, w, 0, 0.2) == Approx(0.45).epsilon(1e-15));
}

TEST_CASE("eager steps match the unrolled matrix forms written out independently", "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);

  SECTION("mamba2: h = a h + dt x B^T, y = (h C + D x) silu(z)") {
    ref::mamba2_config c{4, 3, 5, 2};
    c.has_z = true;
    const auto w = make_weights(rng, c);
    const auto s = make_step(rng, c);
    const vec h0 = normal(rng, state_size(c));
    vec state = h0, y;
    ref::mamba2_eager_step(c, w, s, state, y);
    vec h_want(h0.size()), y_want(y.size());
    for (int h = 0; h < 4; ++h) {
      const int g = h / 2;
      const double dt = std::log(1.0 + std::exp(s.dt[h] + w.dt_bias[h]));
      for (int p = 0; p < 3; ++p) {
        double acc = 0;
        for (int n = 0; n < 5; ++n) {
          const int i = (h * 3 + p) * 5 + n;
          h_want[i] = std::exp(w.A[h] * dt) * h0[i] + dt * s.x[h * 3 + p] * s.B[g * 5 + n];
          acc += h_want[i] * s.C[g * 5 + n];
        }
        const double z = s.z[h * 3 + p];
        y_want[h * 3 + p] = (acc + w.D[h] * s.x[h * 3 + p]) * z * sigmoid(z);
      }
    }
    CHECK(rel_err(state, h_want) < 1e-14);
    CHECK(rel_err(y, y_want) < 1e-14);
  }

  SECTION("gdn: h = alpha (I - beta k k^T) h + beta k v^T, o = h^T q") {
    ref::gdn_config c{1, 2, 4, 3};  // both value heads share the one q/k head
    const auto s = make_step(rng, c);
    const vec h0 = normal(rng, state_size(c));
    vec state = h0, o;
    ref::gdn_eager_step(c, s, state, o);
    vec q = s.q, k = s.k, h_want(h0.size()), o_want(o.size(), 0.0);
    double qq = 0, kk = 0;
    for (int i = 0; i < 4; ++i) qq += q[i] * q[i], kk += k[i] * k[i];
    for (int i = 0; i < 4; ++i) q[i] *= 0.5 / std::sqrt(qq + 1e-6), k[i] /= std::sqrt(kk + 1e-6);
    for (int h = 0; h < 2; ++h) {
      const double alpha = std::exp(s.g[h]), beta = s.beta[h];
      for (int i = 0; i < 4; ++i)
        for (int e = 0; e < 3; ++e) {
          double mh = 0;  // ((I - beta k k^T) h0)[i][e]
          for (int l = 0; l < 4; ++l)
            mh += ((i == l ? 1.0 : 0.0) - beta * k[i] * k[l]) * h0[(h * 4 + l) * 3 + e];
          h_want[(h * 4 + i) * 3 + e] = alpha * mh + beta * k[i] * s.v[h * 3 + e];
        }
      for (int e = 0; e < 3; ++e)
        for (int i = 0; i < 4; ++i) o_want[h * 3 + e] += h_want[(h * 4 + i) * 3 + e] * q[i];
    }
    CHECK(rel_err(state, h_want) < 1e-14);
    CHECK(rel_err(o, o_want) < 1e-14);
  }
}

TEST_CASE("mamba2 replay output equals eager output for n = 1..24", "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  for (auto c : mamba2_shapes()) {
    for (bool has_z : {false, true}) {
      for (bool softplus_on : {true, false}) {
        c.has_z = has_z;
        c.dt_softplus = softplus_on;
        INFO("H=" << c.nheads << " P=" << c.headdim << " N=" << c.dstate << " G=" << c.ngroups
                  << " has_z=" << has_z << " dt_softplus=" << softplus_on);
        const auto w = make_weights(rng, c);
        const vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, y_eager, y_replay;
        std::vector<ref::mamba2_step> steps;
        for (int n = 1; n <= 24; ++n) {
          INFO("n = " << n);
          steps.push_back(make_step(rng, c));
          ref::mamba2_eager_step(c, w, steps.back(), state, y_eager);
          ref::mamba2_replay_output(c, w, checkpoint, steps, y_replay);
          CHECK(rel_err(y_replay, y_eager) < 1e-12);
        }
      }
    }
  }
}

TEST_CASE("mamba2 commit equals stepwise state; commit-then-replay chains match eager",
          "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  for (auto c : mamba2_shapes()) {
    for (bool has_z : {false, true}) {
      c.has_z = has_z;
      INFO("H=" << c.nheads << " G=" << c.ngroups << " has_z=" << has_z);
      const auto w = make_weights(rng, c);
      {  // Commit of n steps equals the state after n eager steps.
        const vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, y;
        std::vector<ref::mamba2_step> steps;
        for (int n = 1; n <= 24; ++n) {
          INFO("n = " << n);
          steps.push_back(make_step(rng, c));
          ref::mamba2_eager_step(c, w, steps.back(), state, y);
          vec committed = checkpoint;
          ref::mamba2_commit(c, w, committed, steps);
          CHECK(rel_err(committed, state) < 1e-12);
        }
      }
      {  // 200-step chain with random commit points.
        std::uniform_int_distribution<int> coin(0, 5);
        vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, y_eager, y_replay;
        std::vector<ref::mamba2_step> steps;
        int commits = 0;
        for (int t = 0; t < 200; ++t) {
          INFO("t = " << t << " buffered = " << steps.size());
          steps.push_back(make_step(rng, c));
          ref::mamba2_eager_step(c, w, steps.back(), state, y_eager);
          ref::mamba2_replay_output(c, w, checkpoint, steps, y_replay);
          CHECK(rel_err(y_replay, y_eager) < 1e-12);
          if (coin(rng) == 0 || steps.size() >= 24) {
            ref::mamba2_commit(c, w, checkpoint, steps);
            steps.clear();
            ++commits;
            CHECK(rel_err(checkpoint, state) < 1e-12);
          }
        }
        CHECK(commits > 5);
      }
    }
  }
}

TEST_CASE("gdn backward-sweep output equals eager output for n = 1..24", "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  for (auto c : gdn_shapes()) {
    for (bool l2 : {true, false}) {
      for (double scale : {0.0, 0.3}) {
        c.l2norm_qk = l2;
        c.scale = scale;
        INFO("Hk=" << c.num_k_heads << " Hv=" << c.num_v_heads << " K=" << c.head_k_dim
                   << " V=" << c.head_v_dim << " l2norm=" << l2 << " scale=" << scale);
        const vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, o_eager, o_replay;
        std::vector<ref::gdn_step> steps;
        for (int n = 1; n <= 24; ++n) {
          INFO("n = " << n);
          steps.push_back(make_step(rng, c));
          ref::gdn_eager_step(c, steps.back(), state, o_eager);
          ref::gdn_replay_output(c, checkpoint, steps, o_replay);
          CHECK(rel_err(o_replay, o_eager) < 1e-12);
        }
      }
    }
  }
}

TEST_CASE("gdn commit equals stepwise state; commit-then-replay chains match eager",
          "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  for (auto c : gdn_shapes()) {
    for (bool l2 : {true, false}) {
      c.l2norm_qk = l2;
      INFO("Hk=" << c.num_k_heads << " Hv=" << c.num_v_heads << " l2norm=" << l2);
      {  // Commit of n steps equals the state after n eager steps.
        const vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, o;
        std::vector<ref::gdn_step> steps;
        for (int n = 1; n <= 24; ++n) {
          INFO("n = " << n);
          steps.push_back(make_step(rng, c));
          ref::gdn_eager_step(c, steps.back(), state, o);
          vec committed = checkpoint;
          ref::gdn_commit(c, committed, steps);
          CHECK(rel_err(committed, state) < 1e-12);
        }
      }
      {  // 200-step chain with random commit points.
        std::uniform_int_distribution<int> coin(0, 5);
        vec checkpoint = normal(rng, state_size(c));
        vec state = checkpoint, o_eager, o_replay;
        std::vector<ref::gdn_step> steps;
        int commits = 0;
        for (int t = 0; t < 200; ++t) {
          INFO("t = " << t << " buffered = " << steps.size());
          steps.push_back(make_step(rng, c));
          ref::gdn_eager_step(c, steps.back(), state, o_eager);
          ref::gdn_replay_output(c, checkpoint, steps, o_replay);
          CHECK(rel_err(o_replay, o_eager) < 1e-12);
          if (coin(rng) == 0 || steps.size() >= 24) {
            ref::gdn_commit(c, checkpoint, steps);
            steps.clear();
            ++commits;
            CHECK(rel_err(checkpoint, state) < 1e-12);
          }
        }
        CHECK(commits > 5);
      }
    }
  }
}

TEST_CASE("reference functions reject wrongly sized inputs", "[cpu][math]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  using IA = std::invalid_argument;

  SECTION("mamba2") {
    ref::mamba2_config c{4, 8, 16, 2};
    c.has_z = true;
    const auto w = make_weights(rng, c);
    const auto s = make_step(rng, c);
    vec state = normal(rng, state_size(c)), y;
    REQUIRE_NOTHROW(ref::mamba2_eager_step(c, w, s, state, y));

    auto bad = s;
    bad.x.pop_back();
    CHECK_THROWS_AS(ref::mamba2_eager_step(c, w, bad, state, y), IA);
    bad = s;
    bad.B.push_back(1.0);
    CHECK_THROWS_AS(ref::mamba2_replay_output(c, w, state, {s, bad}, y), IA);
    bad = s;
    bad.z.clear();  // has_z but no z
    CHECK_THROWS_AS(ref::mamba2_eager_step(c, w, bad, state, y), IA);
    bad = s;
    bad.dt.pop_back();
    CHECK_THROWS_AS(ref::mamba2_commit(c, w, state, {bad}), IA);

    vec short_state(state.size() - 1, 1.0);
    CHECK_THROWS_AS(ref::mamba2_eager_step(c, w, s, short_state, y), IA);
    CHECK_THROWS_AS(ref::mamba2_replay_output(c, w, short_state, {s}, y), IA);
    CHECK_THROWS_AS(ref::mamba2_commit(c, w, short_state, {s}), IA);
    CHECK_THROWS_AS(ref::mamba2_replay_output(c, w, state, {}, y), IA);

    auto bad_w = w;
    bad_w.A.pop_back();
    CHECK_THROWS_AS(ref::mamba2_eager_step(c, bad_w, s, state, y), IA);
    bad_w = w;
    bad_w.D.clear();
    CHECK_THROWS_AS(ref::mamba2_eager_step(c, bad_w, s, state, y), IA);
    CHECK_THROWS_AS(ref::mamba2_dt(c, w, 4, 0.0), IA);

    auto bad_c = c;
    bad_c.ngroups = 3;  // does not divide nheads
    CHECK_THROWS_AS(ref::mamba2_dt(bad_c, w, 0, 0.0), IA);
  }

  SECTION("gdn") {
    ref::gdn_config c{2, 4, 16, 8};
    const auto s = make_step(rng, c);
    vec state = normal(rng, state_size(c)), o;
    REQUIRE_NOTHROW(ref::gdn_eager_step(c, s, state, o));

    auto bad = s;
    bad.q.pop_back();
    CHECK_THROWS_AS(ref::gdn_eager_step(c, bad, state, o), IA);
    bad = s;
    bad.v.push_back(0.5);
    CHECK_THROWS_AS(ref::gdn_replay_output(c, state, {s, bad}, o), IA);
    bad = s;
    bad.g.pop_back();
    CHECK_THROWS_AS(ref::gdn_commit(c, state, {bad}), IA);
    bad = s;
    bad.beta.push_back(0.5);
    CHECK_THROWS_AS(ref::gdn_eager_step(c, bad, state, o), IA);

    vec short_state(state.size() - 1, 1.0);
    CHECK_THROWS_AS(ref::gdn_eager_step(c, s, short_state, o), IA);
    CHECK_THROWS_AS(ref::gdn_replay_output(c, short_state, {s}, o), IA);
    CHECK_THROWS_AS(ref::gdn_commit(c, short_state, {s}), IA);
    CHECK_THROWS_AS(ref::gdn_replay_output(c, state, {}, o), IA);

    auto bad_c = c;
    bad_c.num_v_heads = 3;  // not a multiple of num_k_heads
    CHECK_THROWS_AS(ref::gdn_commit(bad_c, state, {}), IA);
  }
}

namespace {

/// A random EAGLE-style tree: parent[i] in [-1, i).
std::vector<int> random_tree(std::mt19937_64& rng, int nodes) {
  std::vector<int> parent(nodes);
  for (int i = 0; i < nodes; ++i) parent[i] = static_cast<int>(rng() % (i + 1)) - 1;
  return parent;
}

// The two rules behind one interface for the speculative checks.
struct mamba2_ops {
  ref::mamba2_config c{4, 8, 16, 2};
  ref::mamba2_weights w;
  explicit mamba2_ops(std::mt19937_64& rng) : w(make_weights(rng, c)) {}
  ref::mamba2_step step(std::mt19937_64& rng) const { return make_step(rng, c); }
  std::size_t size() const { return state_size(c); }
  void eager(vec& s, const ref::mamba2_step& st, vec& y) const {
    ref::mamba2_eager_step(c, w, st, s, y);
  }
  void commit(vec& ck, const std::vector<ref::mamba2_step>& b) const {
    ref::mamba2_commit(c, w, ck, b);
  }
  void replay(const vec& ck, const std::vector<ref::mamba2_step>& b, vec& y) const {
    ref::mamba2_replay_output(c, w, ck, b, y);
  }
  void verify(const vec& ck, const std::vector<ref::mamba2_step>& b,
              const std::vector<ref::mamba2_step>& nodes, const std::vector<int>& parent,
              std::vector<vec>& out) const {
    ref::mamba2_verify_tree(c, w, ck, b, nodes, parent, out);
  }
};
struct gdn_ops {
  ref::gdn_config c{2, 4, 16, 8};
  explicit gdn_ops(std::mt19937_64&) {}
  ref::gdn_step step(std::mt19937_64& rng) const { return make_step(rng, c); }
  std::size_t size() const { return state_size(c); }
  void eager(vec& s, const ref::gdn_step& st, vec& y) const { ref::gdn_eager_step(c, st, s, y); }
  void commit(vec& ck, const std::vector<ref::gdn_step>& b) const { ref::gdn_commit(c, ck, b); }
  void replay(const vec& ck, const std::vector<ref::gdn_step>& b, vec& y) const {
    ref::gdn_replay_output(c, ck, b, y);
  }
  void verify(const vec& ck, const std::vector<ref::gdn_step>& b,
              const std::vector<ref::gdn_step>& nodes, const std::vector<int>& parent,
              std::vector<vec>& out) const {
    ref::gdn_verify_tree(c, ck, b, nodes, parent, out);
  }
};

}  // namespace

TEMPLATE_TEST_CASE("draft trees verify output-only: every node equals eager along its path",
                   "[cpu][math][spec]", mamba2_ops, gdn_ops) {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  TestType ops(rng);
  for (int trial = 0; trial < 20; ++trial) {
    const vec ck = normal(rng, ops.size(), 0.3);
    std::vector<decltype(ops.step(rng))> buffered, nodes;
    const int nb = static_cast<int>(rng() % 9);
    for (int i = 0; i < nb; ++i) buffered.push_back(ops.step(rng));
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) nodes.push_back(ops.step(rng));
    const auto parent = random_tree(rng, n);
    std::vector<vec> out;
    ops.verify(ck, buffered, nodes, parent, out);
    for (int i = 0; i < n; ++i) {
      vec s = ck, y;
      for (const auto& b : buffered) ops.eager(s, b, y);
      for (int p : ref::tree_path(parent, i)) ops.eager(s, nodes[p], y);
      INFO("trial " << trial << " node " << i);
      REQUIRE(rel_err(out[i], y) < 1e-12);
    }
  }
  REQUIRE_THROWS_AS(ref::tree_path({-1, 1}, 1), std::invalid_argument);  // parent not earlier
}

TEMPLATE_TEST_CASE(
    "speculative rounds: rollback is a cursor move, commits take accepted steps only",
    "[cpu][math][spec]", mamba2_ops, gdn_ops) {
  const std::uint64_t seed = fresh_seed();
  INFO("seed = " << seed);
  std::mt19937_64 rng(seed);
  TestType ops(rng);
  constexpr int K = 16;  // commit once K accepted steps are buffered
  vec ck = normal(rng, ops.size(), 0.3), eager_state = ck, y;
  std::vector<decltype(ops.step(rng))> buffer;
  int commits = 0;
  for (int round = 0; round < 1000; ++round) {
    const int T = 1 + static_cast<int>(rng() % 8);  // last accepted token + drafts
    std::vector<decltype(ops.step(rng))> draft;
    for (int t = 0; t < T; ++t) draft.push_back(ops.step(rng));
    std::vector<int> chain(T);
    for (int t = 0; t < T; ++t) chain[t] = t - 1;
    std::vector<vec> out;
    ops.verify(ck, buffer, draft, chain, out);
    const int accepted = 1 + static_cast<int>(rng() % T);
    // Accepted positions equal eager over the accepted stream; rejected ones equal eager along
    // the draft from there (then are dropped: the checkpoint never saw them).
    vec probe = eager_state;
    for (int t = 0; t < T; ++t) {
      ops.eager(probe, draft[t], y);
      INFO("round " << round << " position " << t << " of " << T);
      REQUIRE(rel_err(out[t], y) < 1e-11);
      if (t < accepted) eager_state = probe;
    }
    for (int t = 0; t < accepted; ++t) buffer.push_back(draft[t]);
    if (static_cast<int>(buffer.size()) >= K) {
      ops.commit(ck, buffer);
      buffer.clear();
      ++commits;
    }
  }
  ops.commit(ck, buffer);
  INFO("commits " << commits);
  REQUIRE(commits > 50);
  REQUIRE(rel_err(ck, eager_state) < 1e-11);
}
