// int8 products x W^T (+ res, relu) for the native engine (bildlib.models.linear.NativeInt8):
// W quantized once per output channel, each row of x quantized by its own absolute maximum, the
// sums in int32, exact. A row's bits depend on that row alone (row-invariant by construction), and
// on no CPU: an integer sum has one value in any order and any instruction set.
//
// W (m, n) -> codes q_c = nearbyint(W_c / s_c) in [-127, 127] with s_c = max |W_c| / 127 (0 -> 0),
// packed as (ceil(m / 8), ceil(n / 2), 8, 2) int8: block b, pair i, output j holds q[8b + j][2i],
// q[8b + j][2i + 1] (zero past m and n). A row x -> a = nearbyint(x * (127 / max |x|)) in
// [-127, 127], sx = max |x| / 127. Then, per output, acc = sum_i a_i q_i in int32 (vpmaddwd: pairs
// of int16 products, each at most 2 * 127^2 < 2^15, summed exactly), and
//   y = float(acc) * (sx * s_c)  [+ res]  [relu],
// each step one float32 rounding, in that order.
//
// The AVX2 loop: a block's 16 codes sign-extended to int16 once per pair index and shared by the
// call's rows, each row's pair broadcast (vpbroadcastd), one vpmaddwd and one vpaddd per 16 terms.
// A k-row call reads W once (up to 12 rows in one pass, as cpu_gemm.h), a quarter of float32's bytes.

#pragma once

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "cpu_gemm.h"  // by_rows, residual

namespace gemm8 {

constexpr int64_t NB = 8;  // outputs per block: one vector of 8 int32 sums

// (codes packed (ceil(m / 8), ceil(n / 2), 8, 2) int8, scales (8 ceil(m / 8),) float32, 0 past m)
// of W (m, n) float
inline std::tuple<at::Tensor, at::Tensor> pack(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.device().is_cpu() && w.is_floating_point(),
              "pack8: W (out, in) floating on a CPU, got ", w.sizes());
  const at::Tensor f = w.to(at::kFloat).contiguous();
  const int64_t m = f.size(0), n = f.size(1), nb = (m + NB - 1) / NB, n2 = (n + 1) / 2;
  auto p = at::zeros({nb, n2, NB, 2}, f.options().dtype(at::kChar));
  auto s = at::zeros({nb * NB}, f.options());  // padded to whole blocks (epilogue)
  const float* src = f.data_ptr<float>();
  int8_t* dst = p.data_ptr<int8_t>();
  float* sc = s.data_ptr<float>();
  for (int64_t c = 0; c < m; ++c) {
    const float* row = src + c * n;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[i]));
    TORCH_CHECK(std::isfinite(amax), "pack8: W has a non-finite value in output ", c);
    sc[c] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float v = std::nearbyint(row[i] * inv);
      dst[(((c / NB) * n2 + i / 2) * NB + c % NB) * 2 + i % 2] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
  return {p, s};
}

// row x (n floats) -> codes a (n int16, then a 0 where n is odd) and its scale max |x| / 127;
// the vector and scalar loops compute the same values (a max is exact in any order, x * inv one
// rounding, then round half to even: cvtps under the default MXCSR, nearbyint under FE_TONEAREST)
inline float quantize(const float* x, int64_t n, int16_t* a) {
  float amax = 0.0f;
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mv = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  alignas(32) float mx[8];
  _mm256_store_ps(mx, mv);
  for (float v : mx) amax = std::max(amax, v);
#endif
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  i = 0;
#if defined(__AVX2__)
  const __m256 iv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (; i + 8 <= n; i += 8) {
    const __m256i q = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), iv))));
    const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));  // in order
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + i), h);
  }
#endif
  for (; i < n; ++i) a[i] = static_cast<int16_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  if (n % 2) a[n] = 0;
  return amax / 127.0f;
}

// R rows' codes, interleaved by pair (xt[i R + r] = row r's pair i as one int32 word), times C
// consecutive blocks of p (each (n2, 8, 2)): int32 sums out (R, C NB)
template <int R, int C>
__attribute__((always_inline)) inline void tile(const int32_t* xt, const int8_t* p, int64_t n2, int32_t* out) {
#if !defined(__AVX2__)  // a build without AVX2: the same integer sums, one term at a time
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < C * NB; ++c) {
      const int8_t* pc = p + (c / NB) * n2 * NB * 2 + (c % NB) * 2;
      int32_t a = 0;
      for (int64_t i = 0; i < n2; ++i) {
        int16_t x2[2];
        std::memcpy(x2, xt + i * R + r, sizeof x2);
        a += int32_t(x2[0]) * pc[i * NB * 2] + int32_t(x2[1]) * pc[i * NB * 2 + 1];
      }
      out[r * C * NB + c] = a;
    }
#else
  __m256i acc[R * C];
#pragma GCC unroll 16
  for (int j = 0; j < R * C; ++j) acc[j] = _mm256_setzero_si256();
  for (int64_t i = 0; i < n2; ++i) {
    __m256i w[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      w[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + ((c * n2 + i) * NB) * 2)));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_set1_epi32(xt[i * R + r]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r * C + c] = _mm256_add_epi32(acc[r * C + c], _mm256_madd_epi16(xv, w[c]));
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < R * C; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j * NB), acc[j]);
#endif
}

template <int R, int C>
inline void tiles(const int32_t* xt, int64_t n2, const int8_t* p, int64_t c, int32_t* t) {
  if (c == C) return tile<R, C>(xt, p, n2, t);
  int32_t one[R * NB];
  for (int64_t j = 0; j < c; ++j) {
    tile<R, 1>(xt, p + j * n2 * NB * 2, n2, one);
    for (int r = 0; r < R; ++r) std::memcpy(t + r * C * NB + j * NB, one + r * NB, NB * sizeof(int32_t));
  }
}

// out[j] = float(acc[j]) * (s * ws[j]) (+ res[j]) (relu), j < w (<= 8; ws padded to 8): each
// step one rounding, no fused multiply-add, in both loops
inline void epilogue(const int32_t* acc, float s, const float* ws, const float* res, int64_t w, bool relu,
                     float* out) {
#if defined(__AVX2__)
  alignas(32) float rb[NB] = {}, ob[NB];
  if (res) std::memcpy(rb, res, w * sizeof(float));
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc))),
                           _mm256_mul_ps(_mm256_set1_ps(s), _mm256_loadu_ps(ws)));
  asm("" : "+x"(v));  // the product rounded here: GCC would fuse it with the add below (an FMA)
  if (res) v = _mm256_add_ps(v, _mm256_load_ps(rb));
  if (relu) v = _mm256_max_ps(v, _mm256_setzero_ps());  // v > 0 ? v : +0
  _mm256_store_ps(ob, v);
  std::memcpy(out, ob, w * sizeof(float));
#else
  for (int64_t j = 0; j < w; ++j) {
    const float sc = s * ws[j], prod = static_cast<float>(acc[j]) * sc, v = res ? prod + res[j] : prod;
    out[j] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
#endif
}

// y (k, m) = dequantized x (k, n) W^T (+ res: row r at res + r rs) (relu), W packed (pack)
inline void rows(const float* x, int64_t k, int64_t n, const int8_t* p, const float* ws, int64_t m,
                 const float* res, int64_t rs, bool relu, float* y) {
  RECORD_FUNCTION("bild::gemm8", std::vector<c10::IValue>());
  const int64_t nb = (m + NB - 1) / NB, n2 = (n + 1) / 2, grain = std::max<int64_t>(4, (1 << 17) / (n2 * NB * 2));
  std::vector<int16_t> codes(2 * n2);
  std::vector<int32_t> xv(n2 * std::min<int64_t>(12, k));
  std::vector<float> sx(k);
  for (int64_t r = 0; r < k;) {
    const int64_t g = std::min<int64_t>(12, k - r), C = g <= 3 ? 4 : g <= 6 ? 2 : 1;  // as gemm::by_rows
    int32_t* xt = xv.data();
    for (int64_t q = 0; q < g; ++q) {
      sx[r + q] = quantize(x + (r + q) * n, n, codes.data());
      for (int64_t i = 0; i < n2; ++i) std::memcpy(xt + i * g + q, codes.data() + 2 * i, sizeof(int32_t));
    }
    at::parallel_for(0, (nb + 3) / 4, (grain + 3) / 4, [&](int64_t q0, int64_t q1) {
      alignas(32) int32_t t[12 * 4 * NB];
      for (int64_t b = q0 * 4; b < std::min(nb, q1 * 4); b += C) {
        const int64_t c = std::min(C, nb - b), c0 = b * NB;
        const int8_t* pb = p + b * n2 * NB * 2;
        gemm::by_rows(g, [&](auto R, auto Cb) { tiles<decltype(R)::value, decltype(Cb)::value>(xt, n2, pb, c, t); });
        for (int64_t q = 0; q < g; ++q)
          for (int64_t j = 0; j < c; ++j) {  // the float epilogue, 8 outputs at a time
            const int64_t o = c0 + j * NB, wj = std::min(NB, m - o);
            const float* rr = res ? res + (r + q) * rs + o : nullptr;
            epilogue(t + q * C * NB + j * NB, sx[r + q], ws + o, rr, wj, relu, y + (r + q) * m + o);
          }
      }
    });
    r += g;
  }
}

// the Python entry: x (k, n) float32, W packed with its scales (pack), m outputs, res (k, m) or (1, m) or none
inline at::Tensor linear(at::Tensor x, const at::Tensor& p, const at::Tensor& s, int64_t m,
                         const c10::optional<at::Tensor>& res, bool relu) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "linear8: x (k, in) float32 on a CPU, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(m > 0 && s.dim() == 1 && s.size(0) == (m + NB - 1) / NB * NB && s.scalar_type() == at::kFloat &&
                  s.is_contiguous(), "linear8: scales (8 ceil(out / 8),) float32 for ", m, " outputs");
  TORCH_CHECK(p.dim() == 4 && p.size(2) == NB && p.size(3) == 2 && p.size(1) == (x.size(1) + 1) / 2 &&
                  p.size(0) == (m + NB - 1) / NB && p.is_contiguous() && p.scalar_type() == at::kChar,
              "linear8: W packed (ceil(out / 8), ceil(in / 2), 8, 2) int8 for x ", x.sizes(), " and ", m,
              " outputs, got ", p.sizes());
  x = x.contiguous();
  const int64_t k = x.size(0);
  const at::Tensor r = gemm::residual(res, k, m, "linear8");
  auto y = at::empty({k, m}, x.options());
  rows(x.data_ptr<float>(), k, x.size(1), p.data_ptr<int8_t>(), s.data_ptr<float>(), m,
       r.defined() ? r.data_ptr<float>() : nullptr, r.defined() && r.size(0) == k ? m : 0, relu, y.data_ptr<float>());
  return y;
}

}  // namespace gemm8
