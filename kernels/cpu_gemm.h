// Products x W^T (+ res, relu) of float32 rows on a CPU, for the native engine
// (bildlib.models.linear.Native) and its folded cross-attention: row-invariant by construction,
// and a k-row call reads W once.
//
// oneDNN's packed float32 product multiplies 10 rows at 1.4-1.8 times its one-row time and the
// float32 rows path (a batch of one-row products) at 2.3 times, on an AVX2 EPYC at two threads
// (docs/engines-cpu.md), so a 10-token verifying call of the large model cost 1.6-2.1 one-token
// steps. Here W is packed once into blocks of 32 outputs, (ceil(m / 32), n, 32), each block n
// contiguous rows of 32 weights, and a call walks the blocks once: for each block, its rows of x in
// groups of up to three, each group's 3 x 32 sums in registers while the block streams from L1/L2.
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

namespace gemm {

constexpr int64_t NB = 32;  // outputs per block: four 8-float vectors

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

// R rows (x, row stride xs) times one block p (n, NB): out (R, NB), row stride NB
template <int R>
__attribute__((always_inline)) inline void tile(const float* x, int64_t xs, const float* p, int64_t n,
                                                float* out) {
#if !defined(__FMA__)  // a build without FMA (torch's DEFAULT capability): the same sums, fmaf per term
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < NB; ++c) {
      float a = 0.0f;
      for (int64_t i = 0; i < n; ++i) a = std::fma(x[r * xs + i], p[i * NB + c], a);
      out[r * NB + c] = a;
    }
#else
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const float* w = p + i * NB;
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8), w2 = _mm256_loadu_ps(w + 16),
                 w3 = _mm256_loadu_ps(w + 24);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * xs + i);
      acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(xv, w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(xv, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + r * NB + 8 * j, acc[r][j]);
#endif
}

// y (k, m) = x (k, n) W^T (+ res, row r at res + r rs: rs 0 adds one row to all) (relu), W packed
// (pack); the blocks split over threads, each at least about 64k weights, so a small product
// runs on one
inline void rows(const float* x, int64_t k, int64_t n, const float* p, int64_t m, const float* res, int64_t rs,
                 bool relu, float* y) {
  RECORD_FUNCTION("bild::gemm", std::vector<c10::IValue>());  // a product to torch.profiler (bench.callbench)
  const int64_t nb = (m + NB - 1) / NB, grain = std::max<int64_t>(1, (1 << 16) / (n * NB));
  at::parallel_for(0, nb, grain, [&](int64_t b0, int64_t b1) {
    alignas(32) float t[3 * NB];
    for (int64_t b = b0; b < b1; ++b) {
      const float* pb = p + b * n * NB;
      const int64_t c0 = b * NB, w = std::min(NB, m - c0);
      for (int64_t r = 0; r < k;) {
        const int64_t g = std::min<int64_t>(3, k - r);
        if (g == 3) tile<3>(x + r * n, n, pb, n, t);
        else if (g == 2) tile<2>(x + r * n, n, pb, n, t);
        else tile<1>(x + r * n, n, pb, n, t);
        for (int64_t q = 0; q < g; ++q) {
          float* yr = y + (r + q) * m + c0;
          const float* tr = t + q * NB;
          const float* rr = res ? res + (r + q) * rs + c0 : nullptr;
          for (int64_t c = 0; c < w; ++c) {
            float v = rr ? tr[c] + rr[c] : tr[c];
            yr[c] = relu && v < 0.0f ? 0.0f : v;
          }
        }
        r += g;
      }
    }
  });
}

// the Python entry: x (k, n) float32, W packed, m outputs, res (k, m) or (1, m) or none
inline at::Tensor linear(at::Tensor x, const at::Tensor& p, int64_t m, const c10::optional<at::Tensor>& res,
                         bool relu) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "linear: x (k, in) float32 on a CPU, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(p.dim() == 3 && p.size(2) == NB && p.size(1) == x.size(1) && p.size(0) * NB >= m &&
                  (p.size(0) - 1) * NB < m && p.is_contiguous() && p.scalar_type() == at::kFloat,
              "linear: W packed (ceil(m / 32), in, 32) for x ", x.sizes(), " and m = ", m, ", got ", p.sizes());
  x = x.contiguous();
  const int64_t k = x.size(0);
  at::Tensor r;
  if (res && res->defined()) {
    TORCH_CHECK(res->dim() == 2 && res->size(1) == m && (res->size(0) == k || res->size(0) == 1) &&
                    res->scalar_type() == at::kFloat,
                "linear: res (k, m) or (1, m) float32, got ", res->sizes());
    r = res->contiguous();
  }
  auto y = at::empty({k, m}, x.options());
  rows(x.data_ptr<float>(), k, x.size(1), p.data_ptr<float>(), m, r.defined() ? r.data_ptr<float>() : nullptr,
       r.defined() && r.size(0) == k ? m : 0, relu, y.data_ptr<float>());
  return y;
}

}  // namespace gemm
