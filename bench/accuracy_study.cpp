// Accuracy of the checkpoint precision schemes (issue 5), emulated on the CPU.
//
//   accuracy_study [steps] [out.json]        (defaults: 8192, bench/results/accuracy.json)
//
// For Mamba-2 and Gated DeltaNet, in a typical and a slow-decay regime, every scheme below runs
// the same random input stream next to a float64 eager reference. A scheme is modelled by where
// its state is *stored* and in which format; arithmetic is float64, so the numbers isolate the
// storage rounding that the schemes differ in (fp32 compute adds ~1e-7 relative on top):
//   eager_<fmt>        eager state stored in <fmt> after every step (rounding fed back each step)
//   single_<fmt>       replay with one <fmt> checkpoint: commits read and write it (fed back each
//                      commit), outputs read it plus the exact input buffer
//   pair_fp32_<fmt>    replay with an fp32 master that alone commits and a <fmt> serving copy,
//                      regenerated from the master at each commit, that outputs read
// Formats: fp32, bf16, fp16 (round to nearest even), fp8 e4m3 and int8 with one fp32 scale per
// (head, row) computed when the copy is written. Reported per step: the relative L2 error of the
// outputs against the reference; every 256 steps: the KL divergence of a softmax over a fixed
// random 32768 x D projection of the outputs (a stand-in LM head), reference || scheme.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <replayssm/reference.hpp>
#include <string>
#include <vector>

namespace {

using replayssm::ref::gdn_step;
using replayssm::ref::mamba2_step;
using vec = std::vector<double>;

enum class fmt { f64, f32, bf16, f16, e4m3, i8 };
const char* fmt_name(fmt f) {
  switch (f) {
    case fmt::f64:
      return "fp64";
    case fmt::f32:
      return "fp32";
    case fmt::bf16:
      return "bf16";
    case fmt::f16:
      return "fp16";
    case fmt::e4m3:
      return "fp8e4m3";
    case fmt::i8:
      return "int8";
  }
  return "?";
}

// Round to a binary format with `mant` stored mantissa bits, smallest normal exponent `emin`
// and largest finite value `vmax` (saturating), round half to even.
double round_binary(double x, int mant, int emin, double vmax) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin;
  const double quantum = std::ldexp(1.0, e - mant);
  const double r = std::nearbyint(x / quantum) * quantum;
  return std::max(-vmax, std::min(vmax, r));
}

// Stores `rows` rows of `cols` values in format f (in place: the values the format can hold).
void store(fmt f, vec& s, int cols) {
  const size_t rows = s.size() / cols;
  for (size_t r = 0; r < rows; ++r) {
    double* v = s.data() + r * cols;
    if (f == fmt::e4m3 || f == fmt::i8) {
      double amax = 0;
      for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(v[i]));
      const double top = f == fmt::e4m3 ? 448.0 : 127.0;
      const double scale = static_cast<float>(amax > 0 ? amax / top : 1.0);  // fp32 scale
      for (int i = 0; i < cols; ++i) {
        const double q = v[i] / scale;
        v[i] = scale * (f == fmt::e4m3 ? round_binary(q, 3, -6, 448.0)
                                       : std::max(-127.0, std::min(127.0, std::nearbyint(q))));
      }
      continue;
    }
    for (int i = 0; i < cols; ++i) {
      switch (f) {
        case fmt::f64:
          break;
        case fmt::f32:
          v[i] = static_cast<float>(v[i]);
          break;
        case fmt::bf16:
          v[i] = round_binary(v[i], 7, -126, 3.3895313892515355e38);
          break;
        case fmt::f16:
          v[i] = round_binary(v[i], 10, -14, 65504.0);
          break;
        default:
          break;
      }
    }
  }
}

// The two rules behind one interface.
struct mamba2_rule {
  replayssm::ref::mamba2_config c{8, 64, 128, 1, true, false, true};
  replayssm::ref::mamba2_weights w;
  using step = mamba2_step;
  int row_len() const { return c.dstate; }
  size_t state_size() const { return size_t(c.nheads) * c.headdim * c.dstate; }
  mamba2_rule(bool slow, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> ua(slow ? -6.0 : -4.0, slow ? -3.0 : 1.0), ub(-1, 1);
    for (int h = 0; h < c.nheads; ++h)
      w.A.push_back(-std::exp(ua(rng))), w.dt_bias.push_back(ub(rng)), w.D.push_back(1.0);
  }
  step random_step(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 1);
    std::uniform_real_distribution<double> udt(-4, 1);
    step s;
    s.x.resize(c.nheads * c.headdim);
    s.dt.resize(c.nheads);
    s.B.resize(c.ngroups * c.dstate);
    s.C.resize(s.B.size());
    for (auto& v : s.x) v = nd(rng);
    for (auto& v : s.dt) v = udt(rng);
    for (auto& v : s.B) v = nd(rng);
    for (auto& v : s.C) v = nd(rng);
    return s;
  }
  void eager(vec& st, const step& s, vec& y) const {
    replayssm::ref::mamba2_eager_step(c, w, s, st, y);
  }
  void replay(const vec& ck, const std::vector<step>& b, vec& y) const {
    replayssm::ref::mamba2_replay_output(c, w, ck, b, y);
  }
  void commit(vec& ck, const std::vector<step>& b) const {
    replayssm::ref::mamba2_commit(c, w, ck, b);
  }
};

struct gdn_rule {
  replayssm::ref::gdn_config c{2, 4, 128, 128, true, 0.0};
  double gate_scale;
  using step = gdn_step;
  int row_len() const { return c.head_v_dim; }
  size_t state_size() const { return size_t(c.num_v_heads) * c.head_k_dim * c.head_v_dim; }
  gdn_rule(bool slow, std::mt19937_64&) : gate_scale(slow ? 0.02 : 1.0) {}
  step random_step(std::mt19937_64& rng) const {
    std::normal_distribution<double> nd(0, 1);
    std::uniform_real_distribution<double> ua(-3, 1);
    step s;
    s.q.resize(c.num_k_heads * c.head_k_dim);
    s.k.resize(s.q.size());
    s.v.resize(c.num_v_heads * c.head_v_dim);
    s.g.resize(c.num_v_heads);
    s.beta.resize(c.num_v_heads);
    for (auto& v : s.q) v = nd(rng);
    for (auto& v : s.k) v = nd(rng);
    for (auto& v : s.v) v = nd(rng);
    for (auto& v : s.g) v = -gate_scale * std::exp(ua(rng)) * replayssm::ref::softplus(nd(rng) - 2);
    for (auto& v : s.beta) v = 1.0 / (1.0 + std::exp(-nd(rng)));
    return s;
  }
  void eager(vec& st, const step& s, vec& y) const { replayssm::ref::gdn_eager_step(c, s, st, y); }
  void replay(const vec& ck, const std::vector<step>& b, vec& y) const {
    replayssm::ref::gdn_replay_output(c, ck, b, y);
  }
  void commit(vec& ck, const std::vector<step>& b) const { replayssm::ref::gdn_commit(c, ck, b); }
};

enum class kind { eager, single, pair };
struct scheme {
  kind k;
  fmt f;
  std::string name() const {
    switch (k) {
      case kind::eager:
        return std::string("eager_") + fmt_name(f);
      case kind::single:
        return std::string("single_") + fmt_name(f);
      case kind::pair:
        return std::string("pair_fp32_") + fmt_name(f);
    }
    return "?";
  }
};

struct curve {
  std::vector<double> err;  // every step
  std::vector<double> kl;   // every kl_every steps
};

constexpr int kVocab = 32768;
constexpr int kCommit = 16;  // K
constexpr int kKlEvery = 256;

// KL(softmax(W a) || softmax(W b)) with the outputs scaled by the reference's RMS.
double kl_divergence(const std::vector<float>& W, const vec& ref, const vec& y) {
  const size_t D = ref.size();
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / D) + 1e-30;
  std::vector<double> la(kVocab), lb(kVocab);
  for (int t = 0; t < kVocab; ++t) {
    const float* w = W.data() + size_t(t) * D;
    double a = 0, b = 0;
    for (size_t i = 0; i < D; ++i) a += w[i] * ref[i], b += w[i] * y[i];
    la[t] = a / rms, lb[t] = b / rms;
  }
  auto logsumexp = [](const std::vector<double>& l) {
    const double m = *std::max_element(l.begin(), l.end());
    double s = 0;
    for (double v : l) s += std::exp(v - m);
    return m + std::log(s);
  };
  const double za = logsumexp(la), zb = logsumexp(lb);
  double kl = 0;
  for (int t = 0; t < kVocab; ++t) {
    const double lpa = la[t] - za, lpb = lb[t] - zb;
    kl += std::exp(lpa) * (lpa - lpb);
  }
  return std::max(kl, 0.0);
}

template <class Rule>
std::map<std::string, curve> run(bool slow, int steps, uint64_t seed,
                                 const std::vector<scheme>& schemes) {
  std::mt19937_64 rng(seed);
  Rule rule(slow, rng);
  const size_t S = rule.state_size();
  const int cols = rule.row_len();
  vec init(S);
  std::normal_distribution<double> nd(0, 0.3);
  for (auto& v : init) v = nd(rng);
  std::vector<typename Rule::step> stream;
  for (int t = 0; t < steps; ++t) stream.push_back(rule.random_step(rng));
  // Float64 reference outputs.
  std::vector<vec> yref(steps);
  {
    vec st = init;
    for (int t = 0; t < steps; ++t) rule.eager(st, stream[t], yref[t]);
  }
  const size_t D = yref[0].size();
  std::vector<float> W(size_t(kVocab) * D);
  std::normal_distribution<float> nw(0.f, float(3.0 / std::sqrt(double(D))));
  for (auto& v : W) v = nw(rng);

  auto one = [&](const scheme& sc) {
    curve cv;
    vec master = init, copy;
    store(sc.k == kind::pair ? fmt::f32 : sc.f, master, cols);
    if (sc.k == kind::pair) copy = master, store(sc.f, copy, cols);
    std::vector<typename Rule::step> buf;
    vec y;
    for (int t = 0; t < steps; ++t) {
      if (sc.k == kind::eager) {
        rule.eager(master, stream[t], y);
        store(sc.f, master, cols);
      } else {
        buf.push_back(stream[t]);
        rule.replay(sc.k == kind::pair ? copy : master, buf, y);
        if (int(buf.size()) == kCommit) {
          rule.commit(master, buf);
          buf.clear();
          store(sc.k == kind::pair ? fmt::f32 : sc.f, master, cols);
          if (sc.k == kind::pair) copy = master, store(sc.f, copy, cols);
        }
      }
      double num = 0, den = 0;
      for (size_t i = 0; i < D; ++i)
        num += (y[i] - yref[t][i]) * (y[i] - yref[t][i]), den += yref[t][i] * yref[t][i];
      cv.err.push_back(std::sqrt(num / den));
      if (t % kKlEvery == kKlEvery - 1) cv.kl.push_back(kl_divergence(W, yref[t], y));
    }
    return cv;
  };
  std::map<std::string, curve> out;
  std::vector<std::future<curve>> jobs;
  for (const auto& sc : schemes) jobs.push_back(std::async(std::launch::async, one, sc));
  for (size_t i = 0; i < schemes.size(); ++i) out[schemes[i].name()] = jobs[i].get();
  return out;
}

void write_json(std::ofstream& o, const std::map<std::string, curve>& m, int every) {
  o << "{";
  bool first = true;
  for (const auto& [name, cv] : m) {
    o << (first ? "" : ",") << "\n    \"" << name << "\": {\"err\": [";
    first = false;
    for (size_t i = 0; i < cv.err.size(); i += every) o << (i ? "," : "") << cv.err[i];
    double mx = 0;
    for (double e : cv.err) mx = std::max(mx, e);
    o << "], \"err_max\": " << mx << ", \"err_last\": " << cv.err.back() << ", \"kl\": [";
    for (size_t i = 0; i < cv.kl.size(); ++i) o << (i ? "," : "") << cv.kl[i];
    o << "]}";
  }
  o << "}";
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8192;
  const std::string path = argc > 2 ? argv[2] : "bench/results/accuracy.json";
  std::vector<scheme> schemes{{kind::eager, fmt::f32}};
  for (fmt f : {fmt::bf16, fmt::f16, fmt::e4m3, fmt::i8})
    schemes.push_back({kind::eager, f}), schemes.push_back({kind::single, f}),
        schemes.push_back({kind::pair, f});
  schemes.push_back({kind::single, fmt::f32});
  const int every = 16;
  std::ofstream o(path);
  o.precision(4);
  o << "{\"steps\": " << steps << ", \"err_every\": " << every << ", \"kl_every\": " << kKlEvery
    << ", \"commit_interval\": " << kCommit << ", \"vocab\": " << kVocab
    << ", \"model\": \"storage rounding emulated on the CPU, float64 arithmetic\",\n \"runs\": {";
  bool first = true;
  for (bool slow : {false, true}) {
    for (int r = 0; r < 2; ++r) {
      const char* rule = r == 0 ? "mamba2 H8 P64 N128" : "gdn Hk2 Hv4 K=V=128";
      std::fprintf(stderr, "%s, %s decay ...\n", rule, slow ? "slow" : "typical");
      const auto m = r == 0 ? run<mamba2_rule>(slow, steps, 1234 + r, schemes)
                            : run<gdn_rule>(slow, steps, 1234 + r, schemes);
      o << (first ? "" : ",") << "\n  \"" << rule << (slow ? ", slow decay" : ", typical decay")
        << "\": ";
      first = false;
      write_json(o, m, every);
      for (const auto& [name, cv] : m) {
        double mx = 0, klm = 0;
        for (double e : cv.err) mx = std::max(mx, e);
        for (double k : cv.kl) klm = std::max(klm, k);
        std::printf("%-22s %-16s %-22s max rel err %.2e  last %.2e  max KL %.2e\n", rule,
                    slow ? "slow" : "typical", name.c_str(), mx, cv.err.back(), klm);
      }
    }
  }
  o << "}}\n";
  std::printf("wrote %s\n", path.c_str());
  return 0;
}
