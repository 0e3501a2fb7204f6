/**
 * @file reference.hpp
 * @brief Float64 host reference of the Mamba-2 and Gated DeltaNet decode recurrences, in eager
 *        form (mamba2_eager_step, gdn_eager_step) and in the unrolled replay/commit forms the
 *        kernels compute (mamba2_replay_output, mamba2_commit, gdn_replay_output, gdn_commit),
 *        each formula given below. Pure C++17, no CUDA.
 */
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace replayssm::ref {

/**
 * @brief Softplus with the vLLM threshold convention.
 * @param x Input.
 * @return x when x > 20, else log1p(exp(x)).
 */
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

/**
 * @brief SiLU activation.
 * @param x Input.
 * @return x / (1 + exp(-x)).
 */
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

/** @brief Shape and options of a Mamba-2 (SSD) layer. */
struct mamba2_config {
  int nheads;               ///< Number of heads H.
  int headdim;              ///< Head dimension P.
  int dstate;               ///< State dimension N.
  int ngroups;              ///< Number of B/C groups G; H must be a multiple of G.
  bool dt_softplus = true;  ///< Apply softplus to dt + dt_bias.
  bool has_z = false;       ///< Gate the output with silu(z).
  bool has_D = true;        ///< Add the skip term D * x.
};

/** @brief Per-head Mamba-2 parameters, each of size nheads (D may be empty when !has_D). */
struct mamba2_weights {
  std::vector<double> A;        ///< Negative decay rates, [H].
  std::vector<double> dt_bias;  ///< Bias added to raw dt, [H].
  std::vector<double> D;        ///< Skip coefficients, [H].
};

/** @brief Inputs of one Mamba-2 decode step. */
struct mamba2_step {
  std::vector<double> x;   ///< [H*P].
  std::vector<double> dt;  ///< Raw dt before bias, [H].
  std::vector<double> B;   ///< [G*N].
  std::vector<double> C;   ///< [G*N].
  std::vector<double> z;   ///< [H*P]; ignored (may be empty) when !has_z.
};

/** @brief Shape and options of a Gated DeltaNet layer. */
struct gdn_config {
  int num_k_heads;        ///< Number of q/k heads Hk.
  int num_v_heads;        ///< Number of value heads Hv; a multiple of Hk.
  int head_k_dim;         ///< Key dimension K.
  int head_v_dim;         ///< Value dimension V.
  bool l2norm_qk = true;  ///< L2-normalise q and k before use.
  double scale = 0;       ///< Query scale; 0 means head_k_dim^-0.5.
};

/** @brief Inputs of one Gated DeltaNet decode step. */
struct gdn_step {
  std::vector<double> q;     ///< [Hk*K].
  std::vector<double> k;     ///< [Hk*K].
  std::vector<double> v;     ///< [Hv*V].
  std::vector<double> g;     ///< Log gate per value head (alpha = exp(g)), [Hv].
  std::vector<double> beta;  ///< Delta-rule strength per value head, [Hv].
};

/** @brief Internal helpers; not part of the public API. */
namespace detail {

/**
 * @brief Throw std::invalid_argument unless a vector has the expected size.
 * @param v Vector to check.
 * @param n Expected size.
 * @param what Name used in the error message.
 */
inline void check_size(const std::vector<double>& v, std::size_t n, const char* what) {
  if (v.size() != n) {
    throw std::invalid_argument(std::string("replayssm::ref: ") + what + " has size " +
                                std::to_string(v.size()) + ", expected " + std::to_string(n));
  }
}

/**
 * @brief Throw std::invalid_argument unless a condition holds.
 * @param ok Condition.
 * @param msg Error message.
 */
inline void require(bool ok, const char* msg) {
  if (!ok) throw std::invalid_argument(std::string("replayssm::ref: ") + msg);
}

/**
 * @brief Validate a Mamba-2 config and its weights.
 * @param c Config.
 * @param w Weights.
 */
inline void check(const mamba2_config& c, const mamba2_weights& w) {
  require(c.nheads > 0 && c.headdim > 0 && c.dstate > 0 && c.ngroups > 0,
          "mamba2 dimensions must be positive");
  require(c.nheads % c.ngroups == 0, "mamba2 nheads must be a multiple of ngroups");
  const auto h = static_cast<std::size_t>(c.nheads);
  check_size(w.A, h, "mamba2 A");
  check_size(w.dt_bias, h, "mamba2 dt_bias");
  if (c.has_D) check_size(w.D, h, "mamba2 D");
}

/**
 * @brief Validate one Mamba-2 step.
 * @param c Config.
 * @param s Step.
 */
inline void check(const mamba2_config& c, const mamba2_step& s) {
  const auto hp = static_cast<std::size_t>(c.nheads) * c.headdim;
  const auto gn = static_cast<std::size_t>(c.ngroups) * c.dstate;
  check_size(s.x, hp, "mamba2 step x");
  check_size(s.dt, static_cast<std::size_t>(c.nheads), "mamba2 step dt");
  check_size(s.B, gn, "mamba2 step B");
  check_size(s.C, gn, "mamba2 step C");
  if (c.has_z) check_size(s.z, hp, "mamba2 step z");
}

/**
 * @brief Validate a GDN config.
 * @param c Config.
 */
inline void check(const gdn_config& c) {
  require(c.num_k_heads > 0 && c.num_v_heads > 0 && c.head_k_dim > 0 && c.head_v_dim > 0,
          "gdn dimensions must be positive");
  require(c.num_v_heads % c.num_k_heads == 0, "gdn num_v_heads must be a multiple of num_k_heads");
}

/**
 * @brief Validate one GDN step.
 * @param c Config.
 * @param s Step.
 */
inline void check(const gdn_config& c, const gdn_step& s) {
  const auto hk = static_cast<std::size_t>(c.num_k_heads) * c.head_k_dim;
  const auto hv = static_cast<std::size_t>(c.num_v_heads);
  check_size(s.q, hk, "gdn step q");
  check_size(s.k, hk, "gdn step k");
  check_size(s.v, hv * c.head_v_dim, "gdn step v");
  check_size(s.g, hv, "gdn step g");
  check_size(s.beta, hv, "gdn step beta");
}

/**
 * @brief Normalise (if configured) a step's q and k per head and scale q.
 * @param c Config.
 * @param s Step (validated).
 * @param q Output prepared q, [Hk*K].
 * @param k Output prepared k, [Hk*K].
 */
inline void gdn_prepare_qk(const gdn_config& c, const gdn_step& s, std::vector<double>& q,
                           std::vector<double>& k) {
  const int K = c.head_k_dim;
  const double scale = c.scale == 0 ? 1.0 / std::sqrt(static_cast<double>(K)) : c.scale;
  q = s.q;
  k = s.k;
  for (int h = 0; h < c.num_k_heads; ++h) {
    double* qh = q.data() + static_cast<std::size_t>(h) * K;
    double* kh = k.data() + static_cast<std::size_t>(h) * K;
    double qn = 1.0, kn = 1.0;
    if (c.l2norm_qk) {
      double sq = 0, sk = 0;
      for (int i = 0; i < K; ++i) sq += qh[i] * qh[i], sk += kh[i] * kh[i];
      qn = 1.0 / std::sqrt(sq + 1e-6);
      kn = 1.0 / std::sqrt(sk + 1e-6);
    }
    for (int i = 0; i < K; ++i) qh[i] *= qn * scale, kh[i] *= kn;
  }
}

/**
 * @brief Effective dt of one head without validation (see mamba2_dt).
 * @param c Config.
 * @param w Weights (validated).
 * @param head Head index.
 * @param raw_dt Raw dt before bias.
 * @return dt' = [softplus](raw_dt + dt_bias[head]).
 */
inline double mamba2_dt_unchecked(const mamba2_config& c, const mamba2_weights& w, int head,
                                  double raw_dt) {
  const double dt = raw_dt + w.dt_bias[head];
  return c.dt_softplus ? softplus(dt) : dt;
}

}  // namespace detail

/**
 * @brief Effective (post-bias, post-softplus) dt of one head.
 * @param c Config.
 * @param w Weights.
 * @param head Head index in [0, nheads).
 * @param raw_dt Raw dt before bias.
 * @return dt' = [softplus](raw_dt + dt_bias[head]).
 */
inline double mamba2_dt(const mamba2_config& c, const mamba2_weights& w, int head, double raw_dt) {
  detail::check(c, w);
  detail::require(head >= 0 && head < c.nheads, "mamba2_dt head out of range");
  return detail::mamba2_dt_unchecked(c, w, head, raw_dt);
}

/**
 * @brief One eager Mamba-2 decode step: update the state in place and produce the output.
 * @param c Config.
 * @param w Weights.
 * @param s Step inputs.
 * @param state State [H][P][N], updated in place.
 * @param y Output [H*P] (resized).
 */
inline void mamba2_eager_step(const mamba2_config& c, const mamba2_weights& w, const mamba2_step& s,
                              std::vector<double>& state, std::vector<double>& y) {
  detail::check(c, w);
  detail::check(c, s);
  const int P = c.headdim, N = c.dstate, hpg = c.nheads / c.ngroups;
  detail::check_size(state, static_cast<std::size_t>(c.nheads) * P * N, "mamba2 state");
  y.assign(static_cast<std::size_t>(c.nheads) * P, 0.0);
  for (int h = 0; h < c.nheads; ++h) {
    const double dt = detail::mamba2_dt_unchecked(c, w, h, s.dt[h]), a = std::exp(w.A[h] * dt);
    const double* B = s.B.data() + static_cast<std::size_t>(h / hpg) * N;
    const double* C = s.C.data() + static_cast<std::size_t>(h / hpg) * N;
    for (int p = 0; p < P; ++p) {
      const std::size_t hp = static_cast<std::size_t>(h) * P + p;
      double* row = state.data() + hp * N;
      double acc = 0;
      for (int n = 0; n < N; ++n) {
        row[n] = a * row[n] + dt * s.x[hp] * B[n];
        acc += row[n] * C[n];
      }
      if (c.has_D) acc += w.D[h] * s.x[hp];
      if (c.has_z) acc *= silu(s.z[hp]);
      y[hp] = acc;
    }
  }
}

/**
 * @brief Output of the last buffered step from the checkpoint, without forming any state: over
 *        steps 1..n (n the current one; dt_j as mamba2_dt gives it), with
 *        L_{j,n} = sum_{i=j+1..n} A dt_i and h the checkpoint,
 *        y = exp(L_{0,n}) h C_n + sum_j exp(L_{j,n}) dt_j (B_j . C_n) x_j + D x_n, then
 *        y *= silu(z_n) (cumulative log decays, dot products B_j . C_n, axpys).
 * @param c Config.
 * @param w Weights.
 * @param checkpoint Checkpoint state [H][P][N].
 * @param steps Buffered steps after the checkpoint (at least one); the last is current.
 * @param y Output [H*P] of the last step (resized).
 */
inline void mamba2_replay_output(const mamba2_config& c, const mamba2_weights& w,
                                 const std::vector<double>& checkpoint,
                                 const std::vector<mamba2_step>& steps, std::vector<double>& y) {
  detail::check(c, w);
  detail::require(!steps.empty(), "mamba2_replay_output needs at least one step");
  for (const auto& s : steps) detail::check(c, s);
  const int P = c.headdim, N = c.dstate, hpg = c.nheads / c.ngroups;
  const int n = static_cast<int>(steps.size());
  detail::check_size(checkpoint, static_cast<std::size_t>(c.nheads) * P * N, "mamba2 checkpoint");
  const mamba2_step& last = steps.back();
  y.assign(static_cast<std::size_t>(c.nheads) * P, 0.0);
  for (int h = 0; h < c.nheads; ++h) {
    const std::size_t goff = static_cast<std::size_t>(h / hpg) * N;
    const double* Cn = last.C.data() + goff;
    // Backward accumulation of L_{j,n}: L starts at 0 for j = n, then adds log a_j.
    double L = 0;
    for (int j = n - 1; j >= 0; --j) {
      const double dt = detail::mamba2_dt_unchecked(c, w, h, steps[j].dt[h]);
      double bc = 0;
      for (int i = 0; i < N; ++i) bc += steps[j].B[goff + i] * Cn[i];
      const double coef = std::exp(L) * dt * bc;
      for (int p = 0; p < P; ++p)
        y[static_cast<std::size_t>(h) * P + p] +=
            coef * steps[j].x[static_cast<std::size_t>(h) * P + p];
      L += w.A[h] * dt;
    }
    const double decay0 = std::exp(L);  // exp(L_{0,n})
    for (int p = 0; p < P; ++p) {
      const std::size_t hp = static_cast<std::size_t>(h) * P + p;
      const double* row = checkpoint.data() + hp * N;
      double hc = 0;
      for (int i = 0; i < N; ++i) hc += row[i] * Cn[i];
      y[hp] += decay0 * hc;
      if (c.has_D) y[hp] += w.D[h] * last.x[hp];
      if (c.has_z) y[hp] *= silu(last.z[hp]);
    }
  }
}

/**
 * @brief Fold all buffered steps into the checkpoint with the rank-n formula
 *        h' = exp(L_{0,n}) h + sum_j exp(L_{j,n}) dt_j x_j B_j^T (L as in mamba2_replay_output).
 * @param c Config.
 * @param w Weights.
 * @param checkpoint Checkpoint state [H][P][N], updated in place.
 * @param steps Buffered steps (may be empty: no-op).
 */
inline void mamba2_commit(const mamba2_config& c, const mamba2_weights& w,
                          std::vector<double>& checkpoint, const std::vector<mamba2_step>& steps) {
  detail::check(c, w);
  for (const auto& s : steps) detail::check(c, s);
  const int P = c.headdim, N = c.dstate, hpg = c.nheads / c.ngroups;
  const int n = static_cast<int>(steps.size());
  detail::check_size(checkpoint, static_cast<std::size_t>(c.nheads) * P * N, "mamba2 checkpoint");
  std::vector<double> wj(steps.size());
  for (int h = 0; h < c.nheads; ++h) {
    const std::size_t goff = static_cast<std::size_t>(h / hpg) * N;
    double L = 0;
    for (int j = n - 1; j >= 0; --j) {
      const double dt = detail::mamba2_dt_unchecked(c, w, h, steps[j].dt[h]);
      wj[j] = std::exp(L) * dt;
      L += w.A[h] * dt;
    }
    const double decay0 = std::exp(L);
    for (int p = 0; p < P; ++p) {
      double* row = checkpoint.data() + (static_cast<std::size_t>(h) * P + p) * N;
      for (int i = 0; i < N; ++i) row[i] *= decay0;
      for (int j = 0; j < n; ++j) {
        const double xw = wj[j] * steps[j].x[static_cast<std::size_t>(h) * P + p];
        for (int i = 0; i < N; ++i) row[i] += xw * steps[j].B[goff + i];
      }
    }
  }
}

/**
 * @brief One eager Gated DeltaNet decode step: h = exp(g) h; v' = beta (v - h^T k);
 *        h += k v'^T; o = h^T q.
 * @param c Config.
 * @param s Step inputs (q, k raw: normalised and scaled here).
 * @param state State [Hv][K][V], updated in place.
 * @param o Output [Hv*V] (resized).
 */
inline void gdn_eager_step(const gdn_config& c, const gdn_step& s, std::vector<double>& state,
                           std::vector<double>& o) {
  detail::check(c);
  detail::check(c, s);
  const int K = c.head_k_dim, V = c.head_v_dim, vpk = c.num_v_heads / c.num_k_heads;
  detail::check_size(state, static_cast<std::size_t>(c.num_v_heads) * K * V, "gdn state");
  std::vector<double> q, k, vp(V);
  detail::gdn_prepare_qk(c, s, q, k);
  o.assign(static_cast<std::size_t>(c.num_v_heads) * V, 0.0);
  for (int h = 0; h < c.num_v_heads; ++h) {
    double* S = state.data() + static_cast<std::size_t>(h) * K * V;
    const double* kh = k.data() + static_cast<std::size_t>(h / vpk) * K;
    const double* qh = q.data() + static_cast<std::size_t>(h / vpk) * K;
    const double* vh = s.v.data() + static_cast<std::size_t>(h) * V;
    const double alpha = std::exp(s.g[h]);
    for (int i = 0; i < K * V; ++i) S[i] *= alpha;
    for (int e = 0; e < V; ++e) {
      double hk = 0;
      for (int i = 0; i < K; ++i) hk += S[i * V + e] * kh[i];
      vp[e] = s.beta[h] * (vh[e] - hk);
    }
    for (int i = 0; i < K; ++i)
      for (int e = 0; e < V; ++e) S[i * V + e] += kh[i] * vp[e];
    for (int e = 0; e < V; ++e) {
      double acc = 0;
      for (int i = 0; i < K; ++i) acc += S[i * V + e] * qh[i];
      o[static_cast<std::size_t>(h) * V + e] = acc;
    }
  }
}

/**
 * @brief Output of the last buffered step by the backward sweep over steps 1..n (n the current
 *        one; q, k prepared as in gdn_eager_step, alpha_j = exp(g_j)):
 *        r = q_n; for j = n..1 { c_j = k_j.r; r = alpha_j (r - beta_j c_j k_j) };
 *        o = h_c^T r + sum_j beta_j c_j v_j, h_c the checkpoint. No state is formed.
 * @param c Config.
 * @param checkpoint Checkpoint state [Hv][K][V].
 * @param steps Buffered steps after the checkpoint (at least one); the last is current.
 * @param o Output [Hv*V] of the last step (resized).
 */
inline void gdn_replay_output(const gdn_config& c, const std::vector<double>& checkpoint,
                              const std::vector<gdn_step>& steps, std::vector<double>& o) {
  detail::check(c);
  detail::require(!steps.empty(), "gdn_replay_output needs at least one step");
  for (const auto& s : steps) detail::check(c, s);
  const int K = c.head_k_dim, V = c.head_v_dim, vpk = c.num_v_heads / c.num_k_heads;
  detail::check_size(checkpoint, static_cast<std::size_t>(c.num_v_heads) * K * V, "gdn checkpoint");
  const int n = static_cast<int>(steps.size());
  std::vector<std::vector<double>> qs(steps.size()), ks(steps.size());
  for (int j = 0; j < n; ++j) detail::gdn_prepare_qk(c, steps[j], qs[j], ks[j]);
  o.assign(static_cast<std::size_t>(c.num_v_heads) * V, 0.0);
  std::vector<double> r(K);
  for (int h = 0; h < c.num_v_heads; ++h) {
    const std::size_t koff = static_cast<std::size_t>(h / vpk) * K;
    const std::size_t voff = static_cast<std::size_t>(h) * V;
    r.assign(qs.back().begin() + koff, qs.back().begin() + koff + K);
    for (int j = n - 1; j >= 0; --j) {
      const double* kj = ks[j].data() + koff;
      double cj = 0;
      for (int i = 0; i < K; ++i) cj += kj[i] * r[i];
      const double bc = steps[j].beta[h] * cj, alpha = std::exp(steps[j].g[h]);
      for (int i = 0; i < K; ++i) r[i] = alpha * (r[i] - bc * kj[i]);
      for (int e = 0; e < V; ++e) o[voff + e] += bc * steps[j].v[voff + e];
    }
    const double* S = checkpoint.data() + static_cast<std::size_t>(h) * K * V;
    for (int i = 0; i < K; ++i)
      for (int e = 0; e < V; ++e) o[voff + e] += S[i * V + e] * r[i];
  }
}

/**
 * @brief Apply the buffered updates to the checkpoint (stepwise, exact).
 * @param c Config.
 * @param checkpoint Checkpoint state [Hv][K][V], updated in place.
 * @param steps Buffered steps (may be empty: no-op).
 */
inline void gdn_commit(const gdn_config& c, std::vector<double>& checkpoint,
                       const std::vector<gdn_step>& steps) {
  detail::check(c);
  for (const auto& s : steps) detail::check(c, s);
  detail::check_size(checkpoint,
                     static_cast<std::size_t>(c.num_v_heads) * c.head_k_dim * c.head_v_dim,
                     "gdn checkpoint");
  std::vector<double> unused;
  for (const auto& s : steps) gdn_eager_step(c, s, checkpoint, unused);
}

/**
 * @brief The steps of the path from the root of a draft tree to node `node`, root first.
 * @param parent Parent of every node (EAGLE style): -1 for a child of the root (the buffer's
 *        tail), else an earlier node (parent[i] < i).
 * @param node Node index.
 */
inline std::vector<int> tree_path(const std::vector<int>& parent, int node) {
  detail::require(node >= 0 && node < static_cast<int>(parent.size()),
                  "tree_path: node out of range");
  std::vector<int> path;
  for (int i = node; i >= 0; i = parent[i]) {
    detail::require(parent[i] < i,
                    "tree_path: a parent must come before its child (parent[i] < i)");
    path.push_back(i);
  }
  return {path.rbegin(), path.rend()};
}

/**
 * @brief Output-only verification of a draft tree, Mamba-2: the output of every node is that of
 *        the path root..node appended to the buffered steps, computed from the checkpoint by
 *        replay (no intermediate state). A chain is the tree with parent[i] = i - 1.
 * @param c Config. @param w Weights. @param checkpoint State before the buffered steps.
 * @param buffered Buffered (accepted, uncommitted) steps. @param nodes Draft steps, one per node.
 * @param parent Parent of every node (see tree_path). @param outputs Output of every node.
 */
inline void mamba2_verify_tree(const mamba2_config& c, const mamba2_weights& w,
                               const std::vector<double>& checkpoint,
                               const std::vector<mamba2_step>& buffered,
                               const std::vector<mamba2_step>& nodes,
                               const std::vector<int>& parent,
                               std::vector<std::vector<double>>& outputs) {
  detail::require(nodes.size() == parent.size(), "mamba2_verify_tree: one parent per node");
  outputs.assign(nodes.size(), {});
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::vector<mamba2_step> steps = buffered;
    for (int n : tree_path(parent, static_cast<int>(i))) steps.push_back(nodes[n]);
    mamba2_replay_output(c, w, checkpoint, steps, outputs[i]);
  }
}

/**
 * @brief Output-only verification of a draft tree, Gated DeltaNet (see mamba2_verify_tree).
 */
inline void gdn_verify_tree(const gdn_config& c, const std::vector<double>& checkpoint,
                            const std::vector<gdn_step>& buffered,
                            const std::vector<gdn_step>& nodes, const std::vector<int>& parent,
                            std::vector<std::vector<double>>& outputs) {
  detail::require(nodes.size() == parent.size(), "gdn_verify_tree: one parent per node");
  outputs.assign(nodes.size(), {});
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::vector<gdn_step> steps = buffered;
    for (int n : tree_path(parent, static_cast<int>(i))) steps.push_back(nodes[n]);
    gdn_replay_output(c, checkpoint, steps, outputs[i]);
  }
}

}  // namespace replayssm::ref
