// Register tiles of an fp32 state and the numeric helpers the agents share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <replayssm/detail/config.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

REPLAYSSM_DEVICE float to_float(float v) { return v; }
REPLAYSSM_DEVICE float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
REPLAYSSM_DEVICE float to_float(__half v) { return __half2float(v); }

template <class T>
REPLAYSSM_DEVICE T from_float(float v);
template <>
REPLAYSSM_DEVICE float from_float<float>(float v) {
  return v;
}
template <>
REPLAYSSM_DEVICE __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
REPLAYSSM_DEVICE __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

/// softplus as vLLM computes it: x above 20 passes through.
REPLAYSSM_DEVICE float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }
REPLAYSSM_DEVICE float silu(float x) { return x / (1.f + expf(-x)); }

REPLAYSSM_DEVICE float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
/// The inclusive suffix sum over a warp's lanes: lane l gets the sum of v over lanes i >= l
/// (shuffles down, five levels). Call from all lanes.
REPLAYSSM_DEVICE float warp_suffix_sum(float v) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) + off < 32) v += o;
  }
  return v;
}

/// Programmatic dependent launch (the split replay step: a coefficient grid, then the decode
/// grid launched with programmatic stream serialization, kernels.cuh launch_items_or_split).
/// pdl_trigger lets the dependent grid be scheduled once every block of this grid has called it
/// (or exited); pdl_wait blocks until the primary grid has completed and its writes are
/// visible. The device calls exist from sm_90 on; below it the dependent grid is not launched
/// early (the attribute has no effect there), so plain stream order already covers it.
REPLAYSSM_DEVICE void pdl_trigger() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}
REPLAYSSM_DEVICE void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  cudaGridDependencySynchronize();
#endif
}

/// Sums each of F values over a group of `Lanes` lanes (a power of two, aligned within the warp)
/// by halving: at every level a lane keeps half of its values and sends the other half, so the
/// group needs F - 1 + log2(Lanes / F) shuffles instead of F log2(Lanes). Afterwards lane l holds
/// the full sum of value `index(l)` in a[0], as do all lanes with the same `index`; the first of
/// them is `leader(l)`. F <= Lanes, both powers of two. `halve<S>` runs only the first S levels
/// (lane bits Lanes / 2, Lanes / 4, ...): lane l then holds in a[0 .. F >> S) the sums over the
/// 2^S lanes that differ from it in those bits of values `index_after<S>(l)` + i.
template <int F, int Lanes>
struct transpose_sum {
  static_assert(F >= 1 && Lanes <= 32 && (F & (F - 1)) == 0 && (Lanes & (Lanes - 1)) == 0 &&
                    F <= Lanes,
                "transpose_sum: F and Lanes must be powers of two with F <= Lanes <= 32");
  static constexpr int levels = F >= 32 ? 5 : F >= 16 ? 4 : F >= 8 ? 3 : F >= 4 ? 2 : F >= 2;
  template <int S>
  REPLAYSSM_DEVICE static int index_after(int lane) {
    static_assert(S >= 0 && S <= levels, "transpose_sum: at most `levels` halvings");
    int r = 0;
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (lane & (Lanes >> (s + 1))) r += F >> (s + 1);
    return r;
  }
  REPLAYSSM_DEVICE static int index(int lane) { return index_after<levels>(lane); }
  REPLAYSSM_DEVICE static bool leader(int lane) { return (lane % (Lanes / F)) == 0; }
  /// (One level per instantiation: a compile-time width per level keeps `a` in registers,
  /// where a loop over the levels left it in local memory for F = 16.)
  template <int S, int s = 0>
  REPLAYSSM_DEVICE static void halve(float (&a)[F]) {
    static_assert(S >= 0 && S <= levels, "transpose_sum: at most `levels` halvings");
    if constexpr (s < S) {
      constexpr int o = Lanes >> (s + 1), h = F >> (s + 1);
      const bool upper = ((threadIdx.x & 31) & o) != 0;
#pragma unroll
      for (int i = 0; i < h; ++i) {
        const float send = upper ? a[i] : a[i + h];
        const float keep = upper ? a[i + h] : a[i];
        a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
      halve<S, s + 1>(a);
    }
  }
  REPLAYSSM_DEVICE static void run(float (&a)[F]) {
    halve<levels>(a);
#pragma unroll
    for (int o = Lanes / (2 * F); o >= 1; o >>= 1) a[0] += __shfl_xor_sync(0xffffffffu, a[0], o);
  }
};

// State traffic streams through L2 once per step: load and store it evict-first so that the
// small, shared inputs (B, k) stay cached.
REPLAYSSM_DEVICE float4 load_state4(const float* p) {
  return __ldcs(reinterpret_cast<const float4*>(p));
}
REPLAYSSM_DEVICE void store_state4(float* p, float4 v) { __stcs(reinterpret_cast<float4*>(p), v); }
// 16-bit checkpoints and serving copies: four elements in 8 bytes, converted to and from fp32.
template <class T>
REPLAYSSM_DEVICE float4 load_state4(const T* p) {
  static_assert(sizeof(T) == 2, "16-bit state types only");
  const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
  const T* e = reinterpret_cast<const T*>(&u);
  return make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
}
template <class T>
REPLAYSSM_DEVICE void store_state4(T* p, float4 v) {
  static_assert(sizeof(T) == 2, "16-bit state types only");
  uint2 u;
  T* e = reinterpret_cast<T*>(&u);
  e[0] = from_float<T>(v.x), e[1] = from_float<T>(v.y), e[2] = from_float<T>(v.z);
  e[3] = from_float<T>(v.w);
  __stcs(reinterpret_cast<uint2*>(p), u);
}

REPLAYSSM_DEVICE float4 fma4(float a, float4 x, float4 y) {
  return make_float4(fmaf(a, x.x, y.x), fmaf(a, x.y, y.y), fmaf(a, x.z, y.z), fmaf(a, x.w, y.w));
}

/// A `Keep x Red` fp32 tile in registers, element (i, j) at `base + i * row_stride + j`
/// (the reduced index j is contiguous). Each thread holds float4 fragments along j.
/// Mamba-2 uses it with i = headdim, j = dstate; Gated DeltaNet `[V, K]` with i = v, j = k.
template <int Keep, int Red, int Threads>
struct keep_major_tile {
  static constexpr int lanes_per_row = Red / 4;
  static constexpr int rows_per_pass = 32 / lanes_per_row;
  static constexpr int warps = Threads / 32;
  static constexpr int row_step = rows_per_pass * warps;
  static constexpr int frags = Keep / row_step;
  static constexpr int scratch_floats = 1;
  static constexpr int scale_rows = Keep;  ///< rows of an 8-bit copy's scales per tile
  static_assert(Red % 4 == 0 && lanes_per_row <= 32 && 32 % lanes_per_row == 0,
                "keep_major_tile: the contiguous (reduced) dimension must be 16, 32, 64 or 128.");
  static_assert(Keep % row_step == 0 && frags >= 1,
                "keep_major_tile: the tile's rows must divide evenly among the block's warps; "
                "pick a Tile that is a multiple of (BlockThreads / 32) * (128 / Red).");

  float4 v[frags];

  REPLAYSSM_DEVICE static int lane() { return threadIdx.x & 31; }
  REPLAYSSM_DEVICE static int row(int r) {
    return r * row_step + (threadIdx.x >> 5) * rows_per_pass + lane() / lanes_per_row;
  }
  REPLAYSSM_DEVICE static int col() { return (lane() % lanes_per_row) * 4; }

  /// base points at element (keep0, 0) of the full state (fp32, bf16 or fp16).
  template <class S>
  REPLAYSSM_DEVICE void load(const S* base, int64_t row_stride) {
#pragma unroll
    for (int r = 0; r < frags; ++r) v[r] = load_state4(base + row(r) * row_stride + col());
  }
  template <class S>
  REPLAYSSM_DEVICE void store(S* base, int64_t row_stride) const {
#pragma unroll
    for (int r = 0; r < frags; ++r) store_state4(base + row(r) * row_stride + col(), v[r]);
  }
  /// out[i] = sum_j s(i, j) vec[j] for this thread's rows, reduced over the lanes of each row
  /// (no barrier).
  REPLAYSSM_DEVICE void contract_rows(const float* vec, float* out) const {
    const float4 c = *reinterpret_cast<const float4*>(vec + col());
    float acc[frags];
#pragma unroll
    for (int r = 0; r < frags; ++r)
      acc[r] = fmaf(v[r].x, c.x, fmaf(v[r].y, c.y, fmaf(v[r].z, c.z, v[r].w * c.w)));
    if constexpr (frags <= lanes_per_row && (frags & (frags - 1)) == 0) {
      using sum = transpose_sum<frags, lanes_per_row>;
      sum::run(acc);
      const int l = lane() % lanes_per_row;
      if (sum::leader(l)) out[row(sum::index(l))] = acc[0];
    } else {
#pragma unroll
      for (int off = lanes_per_row / 2; off > 0; off >>= 1) {
#pragma unroll
        for (int r = 0; r < frags; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      }
      if (lane() % lanes_per_row == 0) {
#pragma unroll
        for (int r = 0; r < frags; ++r) out[row(r)] = acc[r];
      }
    }
  }
  /// out[i] = sum_j s(i, j) vec[j]; vec and out in shared memory. Ends with a block barrier.
  REPLAYSSM_DEVICE void contract(const float* vec, float* out, float* /*scratch*/) const {
    contract_rows(vec, out);
    __syncthreads();
  }
  /// outs[d][i] = sum_j s(i, j) vecs[d][j] for d < count, one block barrier at the end; vecs
  /// and outs in shared memory.
  template <int M>
  REPLAYSSM_DEVICE void contract_many(const float (&vecs)[M][Red], float (&outs)[M][Keep],
                                      int count) const {
    for (int d = 0; d < count; ++d) contract_rows(vecs[d], outs[d]);
    __syncthreads();
  }
  /// s(i, j) = a * s(i, j) + coef * keep[i] * red[j]; red and keep in shared memory.
  REPLAYSSM_DEVICE void rank1(float a, const float* red, const float* keep, float coef) {
    const float4 b = *reinterpret_cast<const float4*>(red + col());
#pragma unroll
    for (int r = 0; r < frags; ++r) {
      const float u = keep[row(r)] * coef;
      v[r] = make_float4(fmaf(a, v[r].x, u * b.x), fmaf(a, v[r].y, u * b.y),
                         fmaf(a, v[r].z, u * b.z), fmaf(a, v[r].w, u * b.w));
    }
  }
  /// s(i, j) += keep[i] * red[j]: one FMA per element; red and keep in shared memory.
  REPLAYSSM_DEVICE void rank1_add(const float* red, const float* keep) {
    const float4 b = *reinterpret_cast<const float4*>(red + col());
#pragma unroll
    for (int r = 0; r < frags; ++r) v[r] = fma4(keep[row(r)], b, v[r]);
  }
  /// s(i, j) *= a.
  REPLAYSSM_DEVICE void scale(float a) {
#pragma unroll
    for (int r = 0; r < frags; ++r) v[r] = make_float4(a * v[r].x, a * v[r].y, a * v[r].z, a * v[r].w);
  }
  /// s(i, j) = a * s(i, j) + sum_{q < m} keep[q][i] * red[q][j]: one FMA per element and q;
  /// red and keep in shared memory.
  template <int Q, int KeepLen>
  REPLAYSSM_DEVICE void rank_k(float a, const float (&red)[Q][Red], const float (&keep)[Q][KeepLen],
                               int m) {
    static_assert(KeepLen >= Keep, "keep_major_tile::rank_k: keep rows shorter than the tile");
#pragma unroll
    for (int r = 0; r < frags; ++r)
      v[r] = make_float4(a * v[r].x, a * v[r].y, a * v[r].z, a * v[r].w);
#pragma unroll 1  // (unrolled, the hoisted shared loads spill at 64 registers)
    for (int q = 0; q < m; ++q) {
      const float4 b = *reinterpret_cast<const float4*>(&red[q][col()]);
#pragma unroll
      for (int r = 0; r < frags; ++r) v[r] = fma4(keep[q][row(r)], b, v[r]);
    }
  }
};

/// A `Keep x Red` fp32 tile in registers, element (i, j) at `base + j * row_stride + i`
/// (the kept index i is contiguous): Gated DeltaNet `[K, V]` with i = v, j = k.
template <int Keep, int Red, int Threads>
struct reduce_major_tile {
  static constexpr int lanes_per_row = Keep / 4;
  static constexpr int rows_per_pass = 32 / lanes_per_row;
  static constexpr int warps = Threads / 32;
  static constexpr int row_step = rows_per_pass * warps;
  static constexpr int frags = Red / row_step;
  static constexpr int scratch_floats = warps * Keep;  ///< contract; contract_cols: twice this
  static constexpr int scale_rows = Red;  ///< rows of an 8-bit copy's scales per tile
  static_assert(Keep % 4 == 0 && lanes_per_row <= 32 && 32 % lanes_per_row == 0,
                "reduce_major_tile: the tile width (Tile columns of V) must be 16, 32, 64 or 128.");
  static_assert(Red % row_step == 0 && frags >= 1,
                "reduce_major_tile: head_k_dim must divide evenly among the block's warps; use "
                "fewer BlockThreads or a wider Tile.");

  float4 v[frags];

  /// Whether a thread's rows are consecutive (one row per warp load): then the reduced vector's
  /// entries of its rows are read 4 at a time (for_rows; the vector 16-byte aligned).
  static constexpr bool rows4 = rows_per_pass == 1 && frags % 4 == 0;

  REPLAYSSM_DEVICE static int lane() { return threadIdx.x & 31; }
  /// Warp w owns rows w Red / warps .. (w + 1) Red / warps - 1 (consecutive; at a Tile of 128
  /// columns a lane holds 4 columns of each, and the reduced vector's entries of a warp's rows
  /// are 4 float4 broadcasts per 16 rows instead of 16 scalar loads: bench/experiments/
  /// gdn_commit_study.md).
  REPLAYSSM_DEVICE static int row(int r) {
    return (threadIdx.x >> 5) * (frags * rows_per_pass) + r * rows_per_pass +
           lane() / lanes_per_row;
  }
  REPLAYSSM_DEVICE static int col() { return (lane() % lanes_per_row) * 4; }
  /// row(r) - row(0), a constant: load_scaled and store_scaled address fragment r and its row's
  /// scale from row 0's by it (`offset_rows`). Indexed by row(r) itself (warp * 32 | r), the
  /// 8-bit paths rebuilt both 64-bit addresses, thread index included, for every row: +600 SASS
  /// instructions in the int8 eager step, +19% time (bench/experiments/gdn_commit_fast_v2.md).
  static constexpr bool offset_rows = true;
  REPLAYSSM_HD static constexpr int row_offset(int r) { return r * rows_per_pass; }
  /// f(r, vec[row(r)]) for r = 0 .. frags - 1, in order; the entries read as float4 where
  /// `rows4` (vec 16-byte aligned: the agents' staged k and q rows are).
  template <class F>
  REPLAYSSM_DEVICE static void for_rows(const float* vec, F&& f) {
    if constexpr (rows4) {
      const float4* v4 = reinterpret_cast<const float4*>(vec + row(0));
#pragma unroll
      for (int r = 0; r < frags; r += 4) {
        const float4 e = v4[r / 4];
        f(r, e.x);
        f(r + 1, e.y);
        f(r + 2, e.z);
        f(r + 3, e.w);
      }
    } else {
#pragma unroll
      for (int r = 0; r < frags; ++r) f(r, vec[row(r)]);
    }
  }

  /// base points at element (keep0, 0) of the full state (fp32, bf16 or fp16).
  template <class S>
  REPLAYSSM_DEVICE void load(const S* base, int64_t row_stride) {
#pragma unroll
    for (int r = 0; r < frags; ++r) v[r] = load_state4(base + row(r) * row_stride + col());
  }
  template <class S>
  REPLAYSSM_DEVICE void store(S* base, int64_t row_stride) const {
#pragma unroll
    for (int r = 0; r < frags; ++r) store_state4(base + row(r) * row_stride + col(), v[r]);
  }
  /// This warp's partial sums of contract(vec) for columns col() .. col() + 3 (its rows, reduced
  /// over the lanes that share those columns).
  REPLAYSSM_DEVICE float4 warp_partial(const float* vec) const {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for_rows(vec, [&](int r, float e) { acc = fma4(e, v[r], acc); });
#pragma unroll
    for (int off = lanes_per_row; off < 32; off <<= 1) {
      acc.x += __shfl_xor_sync(0xffffffffu, acc.x, off);
      acc.y += __shfl_xor_sync(0xffffffffu, acc.y, off);
      acc.z += __shfl_xor_sync(0xffffffffu, acc.z, off);
      acc.w += __shfl_xor_sync(0xffffffffu, acc.w, off);
    }
    return acc;
  }
  /// out[i] = sum_j s(i, j) vec[j]; scratch holds `scratch_floats`. Ends with a block barrier.
  REPLAYSSM_DEVICE void contract(const float* vec, float* out, float* scratch) const {
    const float4 acc = warp_partial(vec);
    if (lane() < lanes_per_row)
      *reinterpret_cast<float4*>(scratch + (threadIdx.x >> 5) * Keep + col()) = acc;
    __syncthreads();
    for (int i = threadIdx.x; i < Keep; i += Threads) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < warps; ++w) s += scratch[w * Keep + i];
      out[i] = s;
    }
    __syncthreads();
  }
  /// s(i, j) = a * s(i, j) + coef * keep[i] * red[j]; red and keep in shared memory.
  REPLAYSSM_DEVICE void rank1(float a, const float* red, const float* keep, float coef) {
    const float4 u = *reinterpret_cast<const float4*>(keep + col());
    rank1_cols(a, red, make_float4(u.x * coef, u.y * coef, u.z * coef, u.w * coef));
  }
  /// rank1 with this thread's keep[col() .. col() + 3] * coef in `keep4` (as contract_cols
  /// returns a thread's columns): s(i, j) = fmaf(a, s(i, j), keep4 * red[j]); red in shared
  /// memory.
  REPLAYSSM_DEVICE void rank1_cols(float a, const float* red, float4 keep4) {
    for_rows(red, [&](int r, float b) {
      v[r] = make_float4(fmaf(a, v[r].x, keep4.x * b), fmaf(a, v[r].y, keep4.y * b),
                         fmaf(a, v[r].z, keep4.z * b), fmaf(a, v[r].w, keep4.w * b));
    });
  }
  /// s(i, j) += keep[i] * red[j]: one FMA per element; red and keep in shared memory.
  REPLAYSSM_DEVICE void rank1_add(const float* red, const float* keep) {
    rank1_add_cols(red, *reinterpret_cast<const float4*>(keep + col()));
  }
  /// s(i, j) += keep[i] * red[j] with this thread's keep[col() .. col() + 3] in `keep4` (as
  /// contract_cols returns them); red in shared memory.
  REPLAYSSM_DEVICE void rank1_add_cols(const float* red, float4 keep4) {
    for_rows(red, [&](int r, float b) { v[r] = fma4(b, keep4, v[r]); });
  }
  /// This thread's columns col() .. col() + 3 of contract(vec) (the same sums in the same
  /// order), with one block barrier: the warps' partial sums go to half `half` (0 or 1) of
  /// scratch (2 * scratch_floats floats) and every thread adds up its own columns. Successive calls alternate halves (a
  /// call's writes then never meet a slower warp's reads of the call before: between them lies
  /// the barrier of the call in between); barrier before any other use of scratch.
  REPLAYSSM_DEVICE float4 contract_cols(const float* vec, float* scratch, int half) const {
    const float4 acc = warp_partial(vec);
    float* part = scratch + half * warps * Keep;
    if (lane() < lanes_per_row)
      *reinterpret_cast<float4*>(part + (threadIdx.x >> 5) * Keep + col()) = acc;
    __syncthreads();
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < warps; ++w) {
      const float4 q = *reinterpret_cast<const float4*>(part + w * Keep + col());
      s = make_float4(s.x + q.x, s.y + q.y, s.z + q.z, s.w + q.w);
    }
    return s;
  }
  /// s(i, j) *= a.
  REPLAYSSM_DEVICE void scale(float a) {
#pragma unroll
    for (int r = 0; r < frags; ++r) v[r] = make_float4(a * v[r].x, a * v[r].y, a * v[r].z, a * v[r].w);
  }
};

/// The 8-bit codes of a scaled serving copy: a value is its code times its row's scale, the
/// scale being the row's largest magnitude over the code's largest finite value.
template <class S>
struct code8;
template <>
struct code8<__nv_fp8_e4m3> {
  static constexpr float max = 448.f;
  REPLAYSSM_HD static float decode(uint8_t c) {
    __nv_fp8_e4m3 v;
    v.__x = c;
    return float(v);
  }
  /// The codes in bits 0-7 (x) and 8-15 (y) of `two`, exactly as decode: one paired e4m3 -> f16
  /// conversion (exact: every e4m3 value is an f16 normal) and two f16 -> f32 widenings, half the
  /// instructions of two decodes (sm_90 SASS: F2FP.UNPACK_B + 2 HADD2.F32 per pair, against
  /// byte extracts and a conversion per code).
  REPLAYSSM_HD static float2 decode2(uint32_t two) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
    return make_float2(__half2float(__half(__half_raw{h.x})),
                       __half2float(__half(__half_raw{h.y})));
  }
  REPLAYSSM_HD static uint8_t encode(float x) {  // round to nearest, saturating
    return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
  }
};
template <>
struct code8<int8_t> {
  static constexpr float max = 127.f;
  REPLAYSSM_HD static float decode(uint8_t c) { return float(int8_t(c)); }
  REPLAYSSM_HD static float2 decode2(uint32_t two) {  // bits 0-7 (x), 8-15 (y)
    return make_float2(decode(uint8_t(two)), decode(uint8_t(two >> 8)));
  }
  REPLAYSSM_HD static uint8_t encode(float x) {  // round to nearest even, saturating; NaN -> 0
    const float r = rintf(x);
    return r != r ? uint8_t(0) : uint8_t(int8_t(r > 127.f ? 127.f : (r < -127.f ? -127.f : r)));
  }
};
/// The scale of a row whose largest magnitude is amax: 1 for an all-zero row, and for rows so
/// small that amax / max would underflow (their codes are then 0).
template <class S>
REPLAYSSM_HD float row_scale(float amax) {
  return amax >= code8<S>::max * 1.17549435e-38f ? amax / code8<S>::max : 1.f;
}

/// Word i (0..3) of a 16-byte fragment held in registers.
REPLAYSSM_DEVICE uint32_t frag_word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
REPLAYSSM_DEVICE uint32_t& frag_word(uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
/// The bits of an fp32, bf16 or fp16 value (16-bit: in the low half).
template <class V>
REPLAYSSM_DEVICE uint32_t value_bits(V v) {
  if constexpr (sizeof(V) == 4)
    return __float_as_uint(v);
  else if constexpr (std::is_same<V, __nv_bfloat16>::value)
    return __bfloat16_as_ushort(v);
  else
    return __half_as_ushort(v);
}
/// An fp32, bf16 or fp16 value from its bits (16-bit: the low half, the rest 0), as a float
/// (exact).
template <class V>
REPLAYSSM_DEVICE float bits_value(uint32_t b) {
  if constexpr (sizeof(V) == 4)
    return __uint_as_float(b);
  else if constexpr (std::is_same<V, __nv_bfloat16>::value)
    return __uint_as_float(b << 16);  // exact, as __bfloat162float
  else
    return __half2float(__ushort_as_half((unsigned short)b));
}

/// Element e of a 16-byte fragment of fp32, bf16 or fp16 values, or of 8-bit codes (fp8 e4m3,
/// int8: the code's value, before its row's scale), as a float, by bit operations (indexing the
/// registers through a pointer would move the fragment to local memory). Call with indices that
/// are constant after unrolling.
template <class V>
REPLAYSSM_DEVICE float frag_get(const uint4& u, int e) {
  if constexpr (sizeof(V) == 4) {
    return bits_value<V>(frag_word(u, e));
  } else if constexpr (sizeof(V) == 1) {
    return code8<V>::decode(uint8_t(frag_word(u, e >> 2) >> (8 * (e & 3))));
  } else {
    const uint32_t w = frag_word(u, e >> 1);
    return bits_value<V>((e & 1) ? (w >> 16) : (w & 0xffffu));
  }
}
/// Elements e and e + 1 (e even) of a 16-byte fragment, as frag_get of each; 8-bit codes are
/// decoded as a pair (code8::decode2).
template <class V>
REPLAYSSM_DEVICE float2 frag_get2(const uint4& u, int e) {
  if constexpr (sizeof(V) == 1)
    return code8<V>::decode2(frag_word(u, e >> 2) >> (8 * (e & 2)));
  else
    return make_float2(frag_get<V>(u, e), frag_get<V>(u, e + 1));
}
/// Sets element e of a 16-byte fragment to v (bits as given).
template <class V>
REPLAYSSM_DEVICE void frag_set(uint4& u, int e, V v) {
  if constexpr (sizeof(V) == 4) {
    frag_word(u, e) = value_bits(v);
  } else {
    const uint32_t b = value_bits(v);
    uint32_t& w = frag_word(u, e >> 1);
    w = (e & 1) ? ((w & 0xffffu) | (b << 16)) : ((w & 0xffff0000u) | b);
  }
}

/// Four consecutive fp32, bf16 or fp16 values V from their bits (`u`: V itself or an integer
/// type of its size; 16-bit: one 8-byte read, fp32: one 16-byte read, `u` aligned to it), as
/// floats (frag_get of each: exact).
template <class V, class U>
REPLAYSSM_DEVICE float4 value4_of(const U* u) {
  static_assert(sizeof(U) == sizeof(V) && sizeof(V) >= 2, "value4_of: U holds a V's bits");
  uint4 f;
  if constexpr (sizeof(V) == 4) {
    f = *reinterpret_cast<const uint4*>(u);
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(u);
    f = make_uint4(w.x, w.y, 0u, 0u);
  }
  return make_float4(frag_get<V>(f, 0), frag_get<V>(f, 1), frag_get<V>(f, 2), frag_get<V>(f, 3));
}

/// Whether load_scaled and store_scaled address a tile's fragments from row 0's by
/// Tile::row_offset (reduce_major_tile: `offset_rows`); other tiles index by row(r).
template <class Tile, class = void>
struct offset_rows_of : std::false_type {};
template <class Tile>
struct offset_rows_of<Tile, std::enable_if_t<Tile::offset_rows>> : std::true_type {};

/// Four 8-bit codes (one 4-byte word, code 0 in the low byte) times their row's scale.
template <class S>
REPLAYSSM_DEVICE float4 scaled_codes4(uint32_t u, float sc) {
  const float2 lo = code8<S>::decode2(u), hi = code8<S>::decode2(u >> 16);
  return make_float4(lo.x * sc, lo.y * sc, hi.x * sc, hi.y * sc);
}
/// Loads a tile from an 8-bit copy: four codes (4 bytes) per fragment times the row's scale
/// (`scales[i]`: tile row i).
template <class Tile, class S>
REPLAYSSM_DEVICE void load_scaled(Tile& tile, const S* base, int64_t row_stride,
                                  const float* scales) {
  if constexpr (offset_rows_of<Tile>::value) {
    const S* p = base + Tile::row(0) * row_stride + Tile::col();
    const float* sp = scales + Tile::row(0);
    uint32_t u[Tile::frags];  // (every fragment's codes and scale requested before any is used)
    float sc[Tile::frags];
#pragma unroll
    for (int r = 0; r < Tile::frags; ++r) {
      u[r] = __ldcs(reinterpret_cast<const unsigned int*>(p + Tile::row_offset(r) * row_stride));
      sc[r] = sp[Tile::row_offset(r)];
    }
#pragma unroll
    for (int r = 0; r < Tile::frags; ++r) tile.v[r] = scaled_codes4<S>(u[r], sc[r]);
  } else {
#pragma unroll
    for (int r = 0; r < Tile::frags; ++r) {
      const uint32_t u = __ldcs(
          reinterpret_cast<const unsigned int*>(base + Tile::row(r) * row_stride + Tile::col()));
      tile.v[r] = scaled_codes4<S>(u, scales[Tile::row(r)]);
    }
  }
}
/// One fragment of store_scaled, held by the `Lanes` lanes of its row (every lane of the warp
/// calls it): the row's scale to *sc (by the row's first lane), the codes to p. With Lanes = 32
/// a whole warp holds the row (mamba2_stream_agent::commit's 8-bit copy).
template <int Lanes, class S>
REPLAYSSM_DEVICE void store_scaled_frag(const float4 v, S* p, float* sc) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int off = Lanes / 2; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float s = row_scale<S>(amax), inv = 1.f / s;
  if ((threadIdx.x & 31) % Lanes == 0) *sc = s;
  const uint32_t u = uint32_t(code8<S>::encode(v.x * inv)) |
                     (uint32_t(code8<S>::encode(v.y * inv)) << 8) |
                     (uint32_t(code8<S>::encode(v.z * inv)) << 16) |
                     (uint32_t(code8<S>::encode(v.w * inv)) << 24);
  __stcs(reinterpret_cast<unsigned int*>(p), u);
}
/// Stores a tile as an 8-bit copy: each row's scale from its largest magnitude (reduced over the
/// lanes that hold the row), then the codes of value * (1 / scale): one IEEE division per row
/// instead of one per element (each ~10 instructions with its slow-path check); the product
/// differs from value / scale by at most an ulp before the 8-bit rounding. A host reference
/// must round the same way (tests/gpu/test_precision.cu does).
template <class Tile, class S>
REPLAYSSM_DEVICE void store_scaled(const Tile& tile, S* base, int64_t row_stride, float* scales) {
  if constexpr (offset_rows_of<Tile>::value) {
    S* p = base + Tile::row(0) * row_stride + Tile::col();
    float* sp = scales + Tile::row(0);
#pragma unroll
    for (int r = 0; r < Tile::frags; ++r)
      store_scaled_frag<Tile::lanes_per_row>(tile.v[r], p + Tile::row_offset(r) * row_stride,
                                             sp + Tile::row_offset(r));
  } else {
#pragma unroll
    for (int r = 0; r < Tile::frags; ++r)
      store_scaled_frag<Tile::lanes_per_row>(
          tile.v[r], base + Tile::row(r) * row_stride + Tile::col(), scales + Tile::row(r));
  }
}

/// A block's arrival at the end of its use of a slot's cursor: the last of the slot's blocks to
/// arrive writes the slot's new cursor (and, when branching, its checkpoint index) and rearms
/// the counter. `arrive` must follow a block barrier that comes after every thread's last read of
/// the cursor and checkpoint index (the barrier orders all its threads' uses before the atomic),
/// so no block can see the new value in the same launch; `finish` may come much later (decode
/// arrives as soon as it has staged its inputs, so the atomic's round trip overlaps its work).
/// No fence is needed: nothing else this launch writes is read by another block of the launch.
/// Relies on the launch contract that a slot appears in at most one row (cache.cuh): two rows of
/// one slot would race on its cursor, the more so as decode arrives early.
struct slot_arrival {
  uint32_t prev = 0;
  REPLAYSSM_DEVICE void arrive(uint32_t* arrivals, int64_t slot) {
    if (threadIdx.x == 0) prev = atomicAdd(arrivals + slot, 1u);
  }
  REPLAYSSM_DEVICE void finish(int32_t* cursor, uint32_t* arrivals, int64_t slot,
                               uint32_t blocks_per_slot, int32_t new_cursor,
                               int32_t* ckpt_of = nullptr, int64_t new_ckpt = 0) const {
    if (threadIdx.x == 0 && prev == blocks_per_slot - 1) {
      arrivals[slot] = 0u;
      cursor[slot] = new_cursor;
      if (ckpt_of) ckpt_of[slot] = int32_t(new_ckpt);
    }
  }
};

/// Copies `count` elements from `src` to `dst` (not overlapping) with the block's NT threads:
/// 16 bytes per thread and load where both are 16-byte aligned and the span is whole 16-byte
/// chunks, else one element per load; each thread requests up to 8 loads before it stores (one
/// memory latency for 32 KB at 256 threads, 16 KB at 128). Call from all threads.
template <int NT, class V>
REPLAYSSM_DEVICE void block_copy(V* __restrict__ dst, const V* __restrict__ src, int64_t count) {
  constexpr int vec = 16 / sizeof(V), U = 8;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if (addr % 16 == 0 && count % vec == 0) {
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    const int64_t n = count / vec;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += U * NT) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * NT < n) r[u] = s[i0 + u * NT];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * NT < n) d[i0 + u * NT] = r[u];
    }
  } else {
    for (int64_t i = threadIdx.x; i < count; i += NT) dst[i] = src[i];
  }
}

/// Barrier, arrival and finish at once, for launches that read the cursor until their end.
/// Call from all threads.
REPLAYSSM_DEVICE void arrive_and_set_cursor(int32_t* cursor, uint32_t* arrivals, int64_t slot,
                                            uint32_t blocks_per_slot, int32_t new_cursor,
                                            int32_t* ckpt_of = nullptr, int64_t new_ckpt = 0) {
  __syncthreads();
  slot_arrival a;
  a.arrive(arrivals, slot);
  a.finish(cursor, arrivals, slot, blocks_per_slot, new_cursor, ckpt_of, new_ckpt);
}

/// Rows of a `[rows][W]` matrix of T in global memory (row j at `src + j * stride`, 16-byte
/// aligned), requested with 16-byte loads all at once by `load` and converted into
/// `dst[j][0..W)` floats by `store`, which may keep fewer rows than were loaded: a block can
/// request rows before it knows how many it needs, and pays one memory latency for all of them.
/// Call from all threads; rows <= S.
template <int S, int W, int NT, class T>
struct staged_rows {
  static constexpr int vec = 16 / sizeof(T);
  static_assert(W % vec == 0,
                "staged_rows: a buffered row must be a whole number of 16-byte chunks");
  static constexpr int chunks_per_row = W / vec;
  static constexpr int iters = (S * chunks_per_row + NT - 1) / NT;
  uint4 v[iters];
  REPLAYSSM_DEVICE void load(const T* src, int64_t stride, int rows) {
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int c = threadIdx.x + it * NT;
      if (c < rows * chunks_per_row)
        v[it] = __ldg(reinterpret_cast<const uint4*>(src + (c / chunks_per_row) * stride +
                                                     (c % chunks_per_row) * vec));
    }
  }
  /// Rows [0, rows) of those loaded.
  REPLAYSSM_DEVICE void store(float (*dst)[W], int rows) const {
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int c = threadIdx.x + it * NT;
      if (c < rows * chunks_per_row) {
        const T* e = reinterpret_cast<const T*>(&v[it]);
        float* d = &dst[c / chunks_per_row][(c % chunks_per_row) * vec];
#pragma unroll
        for (int k = 0; k < vec; ++k) d[k] = to_float(e[k]);
      }
    }
  }
};

/// Copies rows [0, n) (n <= S) of a `[rows][W]` matrix into `dst` (staged_rows, loaded and
/// stored at once). Call from all threads.
template <int S, int W, int NT, class T>
REPLAYSSM_DEVICE void stage_rows(float (*dst)[W], const T* src, int64_t stride, int n) {
  staged_rows<S, W, NT, T> rows;
  rows.load(src, stride, n);
  rows.store(dst, n);
}

/// Rows [0, n) (n <= MaxRows) of a strided matrix of T in global memory (row j at
/// `src + j * stride`, W contiguous elements, any alignment), held in registers between `load`
/// and `store` so that a block can request several such matrices before waiting for any: one
/// memory latency for all of them, not one per row.
template <int MaxRows, int W, int NT, class T>
struct strided_rows {
  static constexpr int iters = (MaxRows * W + NT - 1) / NT;
  T v[iters];
  int n = 0;
  REPLAYSSM_DEVICE void load(const T* src, int64_t stride, int rows) {
    n = rows;
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int i = threadIdx.x + it * NT;
      if (i < n * W) v[it] = src[(i / W) * stride + i % W];
    }
  }
  /// dst[j][c] = row j's element c as float, for j < min(rows, n).
  template <int Rows>
  REPLAYSSM_DEVICE void store(float (*dst)[Rows], int rows) const {
    static_assert(Rows == W, "strided_rows: destination rows must be W wide");
    const int m = rows < n ? rows : n;
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const int i = threadIdx.x + it * NT;
      if (i < m * W) dst[i / W][i % W] = to_float(v[it]);
    }
  }
};

// Asynchronous 16-byte global -> shared copies (sm_80+), for the pipelined kernels (and the
// split verification's staging, gdn_verify.cuh).
REPLAYSSM_DEVICE void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
/// An asynchronous 4-byte global -> shared copy (sm_80+; any 4-byte aligned addresses): a copy
/// that holds no register, so that any number of them are in flight at once.
REPLAYSSM_DEVICE void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
REPLAYSSM_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
REPLAYSSM_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
/// Waits for every cp.async of this thread (committed or not).
REPLAYSSM_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/// Requests this thread's fragments of a state tile into `stage` (`[frags][Threads]` float4:
/// every thread later reads back only what it copied, so no barrier is needed in between).
template <class Tile, int Threads>
REPLAYSSM_DEVICE void tile_load_async(float4* stage, const float* base, int64_t row_stride) {
#pragma unroll
  for (int r = 0; r < Tile::frags; ++r)
    cp_async16(stage + r * Threads + threadIdx.x, base + Tile::row(r) * row_stride + Tile::col());
}
/// Moves this thread's fragments from `stage` into the tile's registers.
template <class Tile, int Threads>
REPLAYSSM_DEVICE void tile_load_from(Tile& tile, const float4* stage) {
#pragma unroll
  for (int r = 0; r < Tile::frags; ++r) tile.v[r] = stage[r * Threads + threadIdx.x];
}

}  // namespace detail
}  // namespace replayssm
