// Host emulation of the 16-bit stream kernel's mma dot (bench/experiments/stream16_mma.patch,
// mamba2_stream_agent::stream with mma_dot): reproduces, lane by lane, the state loads, the C
// fragments read from the staged row, the PTX m16n8k16 fragment semantics, the transposing sum
// of the x terms (tile.cuh transpose_sum<16, 32>) and the shuffle that fetches each row's dot,
// and checks them against plain per-row dots and outputs.
//
// What it checks, for bf16 and fp16 bit patterns, many random tiles:
//  1. the lanes' (g, t) fragments cover every (row, column) of the warp's 16 x 128 tile exactly
//     once as an A element, each paired in the same k slot with C at the same column (the dstate
//     permutation is a bijection that A and B share);
//  2. after the 8 mma, every lane of quad g holds row g's dot in d[0] and d[1] and row g + 8's in
//     d[2] and d[3] (exactly: the emulated mma sums in double, products of 16-bit values are
//     exact there);
//  3. transpose_sum<16, 32> leaves lane l with the sum over lanes of value index(l) (its halving
//     reproduced), and lane 4 (r % 8) + 2 (r / 8), offering d[2] when its lane bit 1 is set and
//     d[0] otherwise, holds row r = index(l)'s dot;
//  4. the output y[r] = decay dot(r) + sum_q w_q x_q[r] (+ D x_n) of every row equals the plain
//     formula (double, relative 1e-6: the kernel sums in fp32 in another order).
// Build: g++ -O2 -std=c++17 bench/experiments/stream16_mma_emu.cpp -o /tmp/emu && /tmp/emu
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <random>
#include <vector>

namespace {

constexpr int R = 16, N = 128, E = 8, KL = 8, lanes = 32;

struct u4 {
  uint32_t w[4];
};

// 16-bit patterns <-> float (bf16: the top half of an fp32; fp16: IEEE half, normals and
// subnormals).
float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {  // round to nearest even (no NaN inputs here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float half_to_float(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), e - 25);
  return s ? -v : v;
}
uint16_t float_to_half(float f) {  // |f| < 65504, round to nearest (ties away; fine for tests)
  const int s = f < 0;
  double a = std::fabs(double(f));
  if (a == 0) return uint16_t(s << 15);
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  int be = e - 1 + 15;
  if (be <= 0) {  // subnormal: units of 2^-24
    const uint16_t m = uint16_t(std::lround(a * std::ldexp(1.0, 24)));
    return uint16_t((s << 15) | m);
  }
  long m = std::lround(a * std::ldexp(1.0, 10 - (e - 1)));  // 11 significant bits
  if (m == 2048) m = 1024, ++be;
  return uint16_t((s << 15) | (be << 10) | (m & 1023));
}

struct fmt {
  const char* name;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
};

uint16_t lo16(uint32_t w) { return uint16_t(w & 0xffffu); }
uint16_t hi16(uint32_t w) { return uint16_t(w >> 16); }

// PTX mma.m16n8k16 .row.col with 16-bit A, B and fp32 C/D; g = lane >> 2, t = lane & 3:
//   A: a0 = (g, 2t | 2t+1), a1 = (g+8, 2t | 2t+1), a2 = (g, 2t+8 | 2t+9), a3 = (g+8, 2t+8 | 2t+9)
//      (the lower half of a register is the lower k)
//   B: b0 = (k 2t | 2t+1, n g), b1 = (k 2t+8 | 2t+9, n g)
//   D: d0 = (g, 2t), d1 = (g, 2t+1), d2 = (g+8, 2t), d3 = (g+8, 2t+1)
// One warp-wide mma: scatter every lane's registers into A, B, multiply in double, gather D.
void mma_warp(const fmt& f, double (&d)[lanes][4], const uint32_t (&a)[lanes][4],
              const uint32_t (&b)[lanes][2]) {
  double A[16][16], B[16][8];
  bool setA[16][16] = {}, setB[16][8] = {};
  for (int l = 0; l < lanes; ++l) {
    const int g = l >> 2, t = l & 3;
    const int arow[4] = {g, g + 8, g, g + 8}, acol[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; ++r) {
      A[arow[r]][acol[r]] = f.to_float(lo16(a[l][r]));
      A[arow[r]][acol[r] + 1] = f.to_float(hi16(a[l][r]));
      setA[arow[r]][acol[r]] = setA[arow[r]][acol[r] + 1] = true;
    }
    const int bk[2] = {2 * t, 2 * t + 8};
    for (int r = 0; r < 2; ++r) {
      B[bk[r]][g] = f.to_float(lo16(b[l][r]));
      B[bk[r] + 1][g] = f.to_float(hi16(b[l][r]));
      setB[bk[r]][g] = setB[bk[r] + 1][g] = true;
    }
  }
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k)
      if (!setA[i][k]) std::printf("A(%d, %d) not set\n", i, k);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n)
      if (!setB[k][n]) std::printf("B(%d, %d) not set\n", k, n);
  for (int l = 0; l < lanes; ++l) {
    const int g = l >> 2, t = l & 3;
    const int drow[4] = {g, g, g + 8, g + 8}, dcol[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int r = 0; r < 4; ++r) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += A[drow[r]][k] * B[k][dcol[r]];
      d[l][r] += s;
    }
  }
}

// The kernel's loads (stream(), mma_dot): hr[j] = row lane / 4, hr[KL / 2 + j] = row lane / 4 + 8,
// 16 bytes at element (lane % 4) E + 4 E j; the staged C row read as uint4 cs[4 j] from element
// (lane % 4) E. Records which (row, column) each loaded element is, for check 1.
u4 load16(const uint16_t* p) {
  u4 u;
  for (int i = 0; i < 4; ++i) u.w[i] = uint32_t(p[2 * i]) | (uint32_t(p[2 * i + 1]) << 16);
  return u;
}

// transpose_sum<F, Lanes>::index / run (tile.cuh), reproduced for F = 16, Lanes = 32.
int ts_index(int lane) {
  int r = 0;
  for (int s = 0; s < 4; ++s)
    if (lane & (32 >> (s + 1))) r += 16 >> (s + 1);
  return r;
}
void ts_run(std::vector<std::vector<double>>& a) {  // a[lane][F]
  for (int s = 0; s < 4; ++s) {
    const int o = 32 >> (s + 1), h = 16 >> (s + 1);
    std::vector<std::vector<double>> next = a;
    for (int l = 0; l < lanes; ++l) {
      const bool upper = (l & o) != 0;
      const int m = l ^ o;
      const bool m_upper = (m & o) != 0;
      for (int i = 0; i < h; ++i) {
        const double keep = upper ? a[l][i + h] : a[l][i];
        const double recv = m_upper ? a[m][i] : a[m][i + h];  // what lane m sends
        next[l][i] = keep + recv;
      }
    }
    a = next;
  }
  std::vector<double> a0(lanes);
  for (int l = 0; l < lanes; ++l) a0[l] = a[l][0] + a[l ^ 1][0];  // o = Lanes / (2F) = 1
  for (int l = 0; l < lanes; ++l) a[l][0] = a0[l];
}

int run(const fmt& f, std::mt19937_64& rng, int tiles) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int bad = 0;
  double worst = 0;
  for (int it = 0; it < tiles; ++it) {
    // The warp's 16 state rows (row stride padded: the kernel takes any multiple of E), C, x, w.
    const int row_stride = N + 8 * (it % 3);
    std::vector<uint16_t> st(size_t(R) * row_stride), c(N);
    for (auto& v : st) v = f.from_float(u(rng) * (it % 2 ? 1.f : 8.f));
    for (auto& v : c) v = f.from_float(0.5f * u(rng));
    const int n = it % 16;  // buffered steps; lane q <= n holds step q
    std::vector<std::vector<float>> x(lanes, std::vector<float>(R, 0.f));
    std::vector<float> w(lanes, 0.f);
    for (int q = 0; q <= n; ++q) {
      w[q] = u(rng);
      for (int r = 0; r < R; ++r) x[q][r] = f.to_float(f.from_float(u(rng)));  // as given in T
    }
    const float D = u(rng), decay = 0.5f + 0.5f * std::fabs(u(rng));
    w[n] += D;  // D x_cur rides on the current weight

    // Loads and check 1.
    u4 hr[lanes][KL], cr[lanes][KL / 2];
    std::vector<int> seen(size_t(R) * N, 0);
    for (int l = 0; l < lanes; ++l) {
      const uint16_t* base = st.data() + size_t(l / 4) * row_stride + (l % 4) * E;
      for (int j = 0; j < KL / 2; ++j) {
        hr[l][j] = load16(base + 4 * E * j);
        hr[l][KL / 2 + j] = load16(base + 8 * row_stride + 4 * E * j);
        cr[l][j] = load16(c.data() + (l % 4) * E + 4 * E * j);
      }
    }
    // Which (row, column) lands in which (m, k-slot) of which mma, and which C column in the same
    // k-slot of B: walk the mma operands as the kernel passes them.
    for (int j = 0; j < KL / 2; ++j)
      for (int half = 0; half < 2; ++half) {  // k-block 2 j + half: words 2 half, 2 half + 1
        int a_src[16][16], b_src[16];
        for (int l = 0; l < lanes; ++l) {
          const int g = l >> 2, t = l & 3;
          for (int wi = 0; wi < 2; ++wi) {    // register a0/a1 (wi 0), a2/a3 (wi 1)
            const int word = 2 * half + wi;  // word of the 16-byte chunk
            for (int e = 0; e < 2; ++e) {
              const int col = 32 * j + 8 * t + 2 * word + e;  // the element's dstate column
              const int k = 2 * t + 8 * wi + e;
              a_src[g][k] = g * N + col;
              a_src[g + 8][k] = (g + 8) * N + col;
              b_src[k] = col;  // every n column g: the same C column
              ++seen[size_t(g) * N + col];
              ++seen[size_t(g + 8) * N + col];
            }
          }
        }
        for (int m = 0; m < 16; ++m)
          for (int k = 0; k < 16; ++k)
            if (a_src[m][k] % N != b_src[k] || a_src[m][k] / N != m) ++bad;
      }
    for (int i = 0; i < R * N; ++i)
      if (seen[i] != 1) ++bad;  // every (row, column) in exactly one A slot of one mma
    // And the load addresses: every element loaded by exactly one lane and fragment.
    std::fill(seen.begin(), seen.end(), 0);
    for (int l = 0; l < lanes; ++l)
      for (int j = 0; j < KL; ++j)
        for (int e = 0; e < E; ++e) {
          const int row = l / 4 + (j >= KL / 2 ? 8 : 0);
          const int col = (l % 4) * E + 4 * E * (j % (KL / 2)) + e;
          ++seen[size_t(row) * N + col];
        }
    for (int i = 0; i < R * N; ++i)
      if (seen[i] != 1) ++bad;

    // Check 2: the 8 mma as the kernel issues them.
    double d[lanes][4] = {};
    for (int j = 0; j < KL / 2; ++j)
      for (int half = 0; half < 2; ++half) {
        uint32_t a[lanes][4], b[lanes][2];
        for (int l = 0; l < lanes; ++l) {
          const u4 lo = hr[l][j], hi = hr[l][KL / 2 + j], cc = cr[l][j];
          a[l][0] = lo.w[2 * half];
          a[l][1] = hi.w[2 * half];
          a[l][2] = lo.w[2 * half + 1];
          a[l][3] = hi.w[2 * half + 1];
          b[l][0] = cc.w[2 * half];
          b[l][1] = cc.w[2 * half + 1];
        }
        mma_warp(f, d, a, b);
      }
    double dot[R];
    for (int r = 0; r < R; ++r) {
      dot[r] = 0;
      for (int k = 0; k < N; ++k)
        dot[r] += double(f.to_float(st[size_t(r) * row_stride + k])) * f.to_float(c[k]);
    }
    for (int l = 0; l < lanes; ++l) {
      const int g = l >> 2;
      for (int r = 0; r < 4; ++r) {
        const double want = dot[r < 2 ? g : g + 8];
        if (std::fabs(d[l][r] - want) > 1e-12 * (1 + std::fabs(want))) ++bad;
      }
    }

    // Check 3 and 4: the x terms' transposing sum, the dot's shuffle, the output.
    std::vector<std::vector<double>> v(lanes, std::vector<double>(R));
    for (int l = 0; l < lanes; ++l)
      for (int r = 0; r < R; ++r) v[l][r] = double(w[l]) * x[l][r];
    std::vector<std::vector<double>> v0 = v;
    ts_run(v);
    for (int l = 0; l < lanes; ++l) {
      const int r_out = ts_index(l);
      double xs = 0;
      for (int q = 0; q < lanes; ++q) xs += v0[q][r_out];
      if (std::fabs(v[l][0] - xs) > 1e-12 * (1 + std::fabs(xs))) ++bad;
      const int src = 4 * (r_out % 8) + 2 * (r_out / 8);
      const double got_dot = (src & 2) ? d[src][2] : d[src][0];
      if (got_dot != dot[r_out]) ++bad;
      const double y = std::fma(double(decay), got_dot, v[l][0]);
      double want = double(decay) * dot[r_out];
      for (int q = 0; q <= n; ++q) want += double(w[q]) * x[q][r_out];
      const double mag = std::fabs(want) + std::fabs(decay * dot[r_out]);
      const double err = std::fabs(y - want) / (1e-30 + mag);
      worst = std::max(worst, err);
      if (err > 1e-6) ++bad;
    }
  }
  std::printf("%s: %d tiles, %d mismatches, worst output rel err %.2e%s\n", f.name, tiles, bad,
              worst, bad ? "  FAILED" : "");
  return bad;
}

}  // namespace

int main() {
  std::mt19937_64 rng(7);
  const fmt bf{"bf16", bf16_to_float, float_to_bf16}, hf{"fp16", half_to_float, float_to_half};
  int bad = run(bf, rng, 200) + run(hf, rng, 200);
  std::printf("%s\n", bad ? "FAILED" : "all checks pass");
  return bad ? 1 : 0;
}
