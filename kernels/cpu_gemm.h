// Products x W^T (+ res, relu) of float32 rows on a CPU, for the native engine
// (bildlib.models.linear.Native) and its folded cross-attention: row-invariant by construction,
// and a k-row call reads W once.
//
// oneDNN's packed float32 product multiplies 10 rows at 1.4-1.8 times its one-row time and the
// float32 rows path (a batch of one-row products) at 2.3 times, on an AVX2 EPYC at two threads
// (docs/engines-cpu.md), so a 10-token verifying call of the large model cost 1.6-2.1 one-token
// steps. Here W is packed once into blocks of 8 outputs, (ceil(m / 8), n, 8), each block n
// contiguous rows of 8 weights, and a call of up to 12 rows walks W once, all its rows' sums in
// registers, so that W streams from memory once while the sums run (`rows`).
//
// Every output is one sum over i = 0 .. n-1 in index order, one fused multiply-add per term,
// from 0; then + res, then relu. That is the same sequence of operations for a row alone, in a
// group of two or three, in any block split over threads: a row's bits never depend on the
// call's other rows (tests/test_gemm.py), on any x86 CPU with FMA (AVX2 and AVX-512 builds both
// run these 8-lane instructions, and an FMA rounds once wherever it runs).

#pragma once

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace gemm {

constexpr int64_t NB = 8;  // outputs per block: one 8-float vector

// W (m, n) as (ceil(m / NB), n, NB) float32, zero past row m: P[b][i][j] = W[b NB + j][i] (any
// strides: the folded cross-attention packs A^T and B^T from views once per source)
inline at::Tensor pack(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.device().is_cpu(), "pack: W (out, in) on a CPU, got ", w.sizes());
  const at::Tensor f = w.scalar_type() == at::kFloat ? w : w.to(at::kFloat);
  const int64_t m = f.size(0), n = f.size(1), nb = (m + NB - 1) / NB, sm = f.stride(0), sn = f.stride(1);
  auto p = at::empty({nb, n, NB}, f.options());
  if (m % NB) p.select(0, nb - 1).zero_();  // the last block's outputs past m
  const float* src = f.data_ptr<float>();
  float* dst = p.data_ptr<float>();
  if (sm == 1) {  // W's columns contiguous (a transposed view): each block's row a run of W's column
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t w = std::min(NB, m - b * NB);
        std::memcpy(dst + (b * n + i) * NB, src + b * NB + i * sn, w * sizeof(float));
      }
  } else {
    for (int64_t c = 0; c < m; ++c)
      for (int64_t i = 0; i < n; ++i) dst[((c / NB) * n + i) * NB + c % NB] = src[c * sm + i * sn];
  }
  return p;
}

// R rows of x, interleaved (xt[i R + r] = x[r][i]: a term's R inputs in one or two cache lines,
// where rows a page apart shared one L1 set), times C consecutive blocks from p (each (n, NB)):
// out (R, C NB), row stride C NB. Every output's sum runs over i in order, one FMA a term,
// whatever R and C are.
template <int R, int C>
__attribute__((always_inline)) inline void tile(const float* xt, const float* p, int64_t n, float* out) {
#if !defined(__FMA__)  // a build without FMA (torch's DEFAULT capability): the same sums, fmaf per term
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < C * NB; ++c) {
      const float* pc = p + (c / NB) * n * NB + c % NB;
      float a = 0.0f;
      for (int64_t i = 0; i < n; ++i) a = std::fma(xt[i * R + r], pc[i * NB], a);
      out[r * C * NB + c] = a;
    }
#else
  __m256 acc[R * C];  // (GCC keeps these in registers only with its loops unrolled)
#pragma GCC unroll 16
  for (int j = 0; j < R * C; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    __m256 w[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) w[c] = _mm256_loadu_ps(p + (c * n + i) * NB);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(xt + i * R + r);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r * C + c] = _mm256_fmadd_ps(xv, w[c], acc[r * C + c]);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < R * C; ++j) _mm256_storeu_ps(out + j * NB, acc[j]);
#endif
}

// R rows times `c` blocks (c <= C): one tile of C blocks, or tiles of one block each
template <int R, int C>
inline void tiles(const float* xt, int64_t n, const float* p, int64_t c, float* t) {
  if (c == C) return tile<R, C>(xt, p, n, t);
  float one[R * NB];
  for (int64_t j = 0; j < c; ++j) {
    tile<R, 1>(xt, p + j * n * NB, n, one);
    for (int r = 0; r < R; ++r) std::memcpy(t + r * C * NB + j * NB, one + r * NB, NB * sizeof(float));
  }
}

// f(R, C) with R rows of a group of g (1-12) and the C blocks a tile of them covers, as
// std::integral_constant: 1-3 rows over 4 blocks, 4-6 over 2, 7-12 over 1 (at most 12 sums in
// registers). Both products (this file's and cpu_gemm8.h's) pick their tiles so.
template <class F>
inline void by_rows(int64_t g, F&& f) {
  using std::integral_constant;
  switch (g) {
    case 1: return f(integral_constant<int, 1>{}, integral_constant<int, 4>{});
    case 2: return f(integral_constant<int, 2>{}, integral_constant<int, 4>{});
    case 3: return f(integral_constant<int, 3>{}, integral_constant<int, 4>{});
    case 4: return f(integral_constant<int, 4>{}, integral_constant<int, 2>{});
    case 5: return f(integral_constant<int, 5>{}, integral_constant<int, 2>{});
    case 6: return f(integral_constant<int, 6>{}, integral_constant<int, 2>{});
    case 7: return f(integral_constant<int, 7>{}, integral_constant<int, 1>{});
    case 8: return f(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    case 9: return f(integral_constant<int, 9>{}, integral_constant<int, 1>{});
    case 10: return f(integral_constant<int, 10>{}, integral_constant<int, 1>{});
    case 11: return f(integral_constant<int, 11>{}, integral_constant<int, 1>{});
    default: return f(integral_constant<int, 12>{}, integral_constant<int, 1>{});
  }
}

// res (k, m) or (1, m) float32, contiguous, or an undefined tensor where there is none; `what`
// names the entry in the error
inline at::Tensor residual(const c10::optional<at::Tensor>& res, int64_t k, int64_t m, const char* what) {
  if (!res || !res->defined()) return at::Tensor();
  TORCH_CHECK(res->dim() == 2 && res->size(1) == m && (res->size(0) == k || res->size(0) == 1) &&
                  res->scalar_type() == at::kFloat,
              what, ": res (k, m) or (1, m) float32, got ", res->sizes());
  return res->contiguous();
}

// y (k, m) = x (k, n) W^T (+ res, row r at res + r rs: rs 0 adds one row to all) (relu), W packed
// (pack). Up to 12 rows go in one pass over W, so that W streams from memory once while the sums
// run: 1-3 rows over 4 blocks at a time, 4-6 over 2, 7-12 over 1 (at most 12 sums in registers);
// more rows take more passes. (Passes over each block pair in L1, in groups of 6 rows at the
// faster 6 x 2 tile, took longer at 10 rows on an AVX2 EPYC: W then waited on memory.) The blocks
// split over threads, at least about 64k weights each, so a small product runs on one thread.
inline void rows(const float* x, int64_t k, int64_t n, const float* p, int64_t m, const float* res, int64_t rs,
                 bool relu, float* y) {
  RECORD_FUNCTION("bild::gemm", std::vector<c10::IValue>());  // a product to torch.profiler (bench.callbench)
  const int64_t nb = (m + NB - 1) / NB, grain = std::max<int64_t>(4, (1 << 16) / (n * NB));
  std::vector<float> xv(n * std::min<int64_t>(12, k));
  for (int64_t r = 0; r < k;) {
    const int64_t g = std::min<int64_t>(12, k - r), C = g <= 3 ? 4 : g <= 6 ? 2 : 1;
    float* xt = xv.data();  // rows r .. r + g - 1, interleaved (tile)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t q = 0; q < g; ++q) xt[i * g + q] = x[(r + q) * n + i];
    at::parallel_for(0, (nb + 3) / 4, (grain + 3) / 4, [&](int64_t q0, int64_t q1) {
      alignas(32) float t[12 * 4 * NB];
      for (int64_t b = q0 * 4; b < std::min(nb, q1 * 4); b += C) {
        const int64_t c = std::min(C, nb - b), c0 = b * NB, w = std::min(C * NB, m - c0);
        const float* pb = p + b * n * NB;
        by_rows(g, [&](auto R, auto Cb) { tiles<decltype(R)::value, decltype(Cb)::value>(xt, n, pb, c, t); });
        for (int64_t q = 0; q < g; ++q) {
          float* yr = y + (r + q) * m + c0;
          const float* tr = t + q * C * NB;
          const float* rr = res ? res + (r + q) * rs + c0 : nullptr;
          for (int64_t j = 0; j < w; ++j) {
            const float v = rr ? tr[j] + rr[j] : tr[j];
            yr[j] = relu && v < 0.0f ? 0.0f : v;
          }
        }
      }
    });
    r += g;
  }
}

// the Python entry: x (k, n) float32, W packed, m outputs, res (k, m) or (1, m) or none
inline at::Tensor linear(at::Tensor x, const at::Tensor& p, int64_t m, const c10::optional<at::Tensor>& res,
                         bool relu) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "linear: x (k, in) float32 on a CPU, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(p.dim() == 3 && p.size(2) == NB && p.size(1) == x.size(1) && p.size(0) * NB >= m &&
                  (p.size(0) - 1) * NB < m && p.is_contiguous() && p.scalar_type() == at::kFloat,
              "linear: W packed (ceil(m / 8), in, 8) for x ", x.sizes(), " and m = ", m, ", got ", p.sizes());
  x = x.contiguous();
  const int64_t k = x.size(0);
  const at::Tensor r = residual(res, k, m, "linear");
  auto y = at::empty({k, m}, x.options());
  rows(x.data_ptr<float>(), k, x.size(1), p.data_ptr<float>(), m, r.defined() ? r.data_ptr<float>() : nullptr,
       r.defined() && r.size(0) == k ? m : 0, relu, y.data_ptr<float>());
  return y;
}

}  // namespace gemm
