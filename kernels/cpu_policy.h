// The policy's reductions over a row of logits, one pass each, for bildlib.kernels.max_prob and
// rollback_distance on a CPU and for the native draft loop (cpu_draft.h): both call this code, so
// the small model's confidence has the same bits in the native loop and in bild()'s reference loop.
//
// torch.logsumexp over a 32k vocabulary takes about 70 us at two threads on an AVX2 EPYC (max, a
// subtraction, exp, sum and log as separate passes with their tensors); a decode runs it once per
// token. Here a row is read twice (its maximum and first argmax, then sum_j exp(x_j - max) in L
// lanes and a fixed tree, as cpu_t5.cpp's sums), with an exp over 16 lanes at once: Cephes'
// expf polynomial, within a few ulp of expf on x <= 0 (tests/test_cpu_kernels.py checks it
// against torch). Rows split over threads, each row whole on one thread: row-invariant.
//
// Per row, with s = sum_j exp(x_j - max):
//   max probability p = 1 / s (the argmax's exp(0) / s);
//   the argmax: the first maximum, a NaN counting as the maximum (numpy's and torch's argmax);
//   -log p(y) = max + log(s) - x_y.
// A row holding a NaN gets p = NaN and d = NaN, as torch's logsumexp gives.

#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace policy {

// exp(x) for x <= 0 (x below -87 taken as -87: e^-87 ~ 1.6e-38 next to the maximum's 1), on
// 8 lanes at once (GCC's vector extensions: one AVX2 register): Cephes' expf, 2^n by the
// exponent's bits.
typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
typedef uint16_t vh __attribute__((vector_size(16)));
constexpr int W = 8, L = 16;  // a vector's lanes; the sum's lanes (two vectors)

__attribute__((always_inline)) inline vf vexp(vf x) {
  const vf lo = vf{} - 87.0f;
  x = x < lo ? lo : x;
  const vf n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x log2 e), |n| <= 126
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const vf z = r * r;
  vf y = r * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  vf two;
  std::memcpy(&two, &e, sizeof two);
  return y * two;
}

struct Row {
  float p;      // max probability
  int64_t arg;  // first argmax
  float lse;    // log sum_j exp(x_j)
};

// a bf16 (uint16_t) or float value as float: cpu_t5.cpp's widen, which includes this header after it
template <typename T>
inline float wide(T v) { return widen(v); }
__attribute__((always_inline)) inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline vf load(const uint16_t* p) {
  vh h;
  std::memcpy(&h, p, sizeof h);
  const vi u = __builtin_convertvector(h, vi) << 16;
  vf v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

template <typename T>
Row reduce(const T* x, int64_t n, bool with_p = true) {
  // the maximum (a NaN anywhere: the first NaN is the argmax, p and lse NaN)
  vf mv = vf{} - INFINITY;
  vi nan{};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const vf v = load(x + j);
    nan |= v != v;
    mv = v > mv ? v : mv;
  }
  float m = -INFINITY;
  bool isnan = false;
  for (int l = 0; l < W; ++l) m = mv[l] > m ? mv[l] : m, isnan |= nan[l] != 0;
  for (; j < n; ++j) {
    const float v = wide(x[j]);
    isnan |= v != v;
    m = v > m ? v : m;
  }
  int64_t arg = 0;
  for (; arg < n; ++arg) {
    const float v = wide(x[arg]);
    if (isnan ? v != v : v == m) break;
  }
  if (isnan || m == -INFINITY || !with_p) {  // NaN, or every entry -inf (torch: lse -inf, p NaN)
    const float q = std::numeric_limits<float>::quiet_NaN();
    return {q, arg == n ? 0 : arg, isnan || !with_p ? q : -INFINITY};
  }
  // s = sum_j exp(x_j - m): lane l of 16 sums j = l mod 16 in order, then a fixed tree over them
  vf a0{}, a1{};
  j = 0;
  for (; j + L <= n; j += L) {
    a0 += vexp(load(x + j) - m);
    a1 += vexp(load(x + j + W) - m);
  }
  float a[L];
  std::memcpy(a, &a0, sizeof a0);
  std::memcpy(a + W, &a1, sizeof a1);
  if (j < n) {  // the tail: its entries in the first lanes
    float t[L], e[L];
    for (int l = 0; l < L; ++l) t[l] = j + l < n ? wide(x[j + l]) - m : -INFINITY;
    const vf e0 = vexp(load(t)), e1 = vexp(load(t + W));
    std::memcpy(e, &e0, sizeof e0);
    std::memcpy(e + W, &e1, sizeof e1);
    for (int l = 0; j + l < n; ++l) a[l] += e[l];
  }
  for (int s = L / 2; s > 0; s /= 2)
    for (int l = 0; l < s; ++l) a[l] += a[l + s];
  return {1.0f / a[0], arg, m + std::log(a[0])};
}

// row r of x (k, V) contiguous, float32 or bf16; with_p false: the argmax alone (p, lse NaN)
inline Row reduce_row(const at::Tensor& x, int64_t r, bool with_p = true) {
  const int64_t V = x.size(1);
  if (x.scalar_type() == at::kFloat) return reduce(x.data_ptr<float>() + r * V, V, with_p);
  return reduce(reinterpret_cast<const uint16_t*>(x.data_ptr()) + r * V, V, with_p);
}

inline void check_logits(const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.is_contiguous() && x.size(1) > 0,
              "logits: a contiguous (k, V) CPU tensor, got ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "logits: float32 or bfloat16, got ", x.scalar_type());
}

}  // namespace policy

// (max probability (k,) float32, first argmax (k,) int64) of logits (k, V)
std::tuple<torch::Tensor, torch::Tensor> max_prob(torch::Tensor x) {
  policy::check_logits(x);
  const int64_t k = x.size(0);
  auto p = torch::empty({k}, x.options().dtype(torch::kFloat));
  auto idx = torch::empty({k}, x.options().dtype(torch::kLong));
  at::parallel_for(0, k, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto row = policy::reduce_row(x, r);
      p.data_ptr<float>()[r] = row.p;
      idx.data_ptr<int64_t>()[r] = row.arg;
    }
  });
  return {p, idx};
}

// (-log p(tokens) (k,) float32, first argmax (k,) int64) of logits (k, V) and tokens (k,)
std::tuple<torch::Tensor, torch::Tensor> rollback_distance(torch::Tensor x, torch::Tensor tokens) {
  policy::check_logits(x);
  const int64_t k = x.size(0), V = x.size(1);
  TORCH_CHECK(tokens.dim() == 1 && tokens.size(0) == k && tokens.scalar_type() == torch::kLong,
              "tokens: (k,) int64 for logits (k, V), got ", tokens.sizes(), " ", tokens.scalar_type());
  auto t = tokens.contiguous();
  const int64_t* y = t.data_ptr<int64_t>();
  for (int64_t r = 0; r < k; ++r) TORCH_CHECK(y[r] >= 0 && y[r] < V, "tokens: ", y[r], " outside [0, ", V, ")");
  auto d = torch::empty({k}, x.options().dtype(torch::kFloat));
  auto idx = torch::empty({k}, x.options().dtype(torch::kLong));
  at::parallel_for(0, k, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto row = policy::reduce_row(x, r);
      const float picked = x.scalar_type() == at::kFloat
                               ? x.data_ptr<float>()[r * V + y[r]]
                               : policy::wide(reinterpret_cast<const uint16_t*>(x.data_ptr())[r * V + y[r]]);
      d.data_ptr<float>()[r] = row.lse - picked;
      idx.data_ptr<int64_t>()[r] = row.arg;
    }
  });
  return {d, idx};
}
