// The lean decoders' pieces between their weight products, each one C++ call (bildlib.kernels.cpu):
// T5's norm, self-attention and folded cross-attention; the decoder-only models' self-attention.
//
// A decoder step in Python ops is some 60 ops a layer, each a few microseconds of dispatch and
// allocation: on a 2-core CPU that was two thirds of the step (docs/engines-cpu.md). Here a layer
// is three calls between its four products: the norm, self-attention with its cache write, and
// the folded cross-attention.
//
// Row-invariant by construction: every row of a call (a token) is computed by the same loop over
// its own inputs, in one fixed order, whatever the number of rows: sums over a vector's length run
// in L lanes (element i into lane i mod L, each lane in index order) then one fixed tree over the
// lanes; sums over keys run in key order, over only the row's own keys (no masked key is ever
// added in). Threads split a call's rows, never a row's sums; no call-length-dependent path. So a k-token call's rows have the
// bits of k one-token calls, on any CPU, though the bits differ between compilers and instruction
// sets (FMA or not): both calls run this same code.
//
// T is float or bf16 (stored as uint16_t, widened to float, rounded back to nearest even where
// Hugging Face's bf16 forward rounds). Shapes: x (k, d); qkv (k, 3 H dh); the cache (2, H, T, dh)
// for one layer; bias (H, Tb, Tb), the causal mask folded in; A (d, H P) and B (H P, d) float32.

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_gemm.h"
#include "cpu_gemm8.h"

namespace {

constexpr int L = 16;  // lanes of a sum over a vector's length

inline float widen(float v) { return v; }
inline float widen(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_bf16(float f) {  // round to nearest even, as c10::BFloat16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float round_bf16(float f) { return widen(to_bf16(f)); }
inline void store(float* p, float v) { *p = v; }
inline void store(uint16_t* p, float v) { *p = to_bf16(v); }
template <typename T> constexpr bool half() { return sizeof(T) == 2; }

// sum_i a[i] b[i], i < n, in L lanes then a fixed tree
template <typename Ta, typename Tb>
inline float dot(const Ta* a, const Tb* b, int64_t n) {
  float acc[L] = {0};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[l] += widen(a[i + l]) * widen(b[i + l]);
  for (int l = 0; i + l < n; ++l) acc[l] += widen(a[i + l]) * widen(b[i + l]);
  for (int s = L / 2; s > 0; s /= 2)
    for (int l = 0; l < s; ++l) acc[l] += acc[l + s];
  return acc[0];
}

template <typename T>
float sumsq(const T* a, int64_t n) { return dot(a, a, n); }

// T5's RMS norm of each row. float32: x * rsqrt(|x|^2 + d eps) * w (w given times sqrt(d)).
// bf16: w * round(x * rsqrt(|x|^2 + d eps) sqrt(d)), rounded again (HF's T5LayerNorm).
template <typename T>
void norm_rows(const T* x, const T* w, T* y, int64_t k, int64_t d, float eps_d) {
  const float sd = std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < k; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float s = 1.0f / std::sqrt(sumsq(xr, d) + eps_d);
    if constexpr (half<T>()) {
      s *= sd;
      for (int64_t i = 0; i < d; ++i) store(yr + i, widen(w[i]) * round_bf16(widen(xr[i]) * s));
    } else {
      for (int64_t i = 0; i < d; ++i) store(yr + i, widen(xr[i]) * s * widen(w[i]));
    }
  }
}

// One query row of one head over its n keys: softmax(q k^T + b) v, b (n,) or none. bf16: the
// score rounded, the bias added and rounded, as HF's bf16 matmul and add round them; the softmax's
// sums in float32 in key order, the output rounded once. e (n) and num (dh) are scratch.
template <typename T>
void attend_one(const T* q, const T* Kh, const T* Vh, const T* b, int64_t n, int64_t dh, T* o,
                float* e, float* num) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    float s = dot(q, Kh + j * dh, dh);
    if (half<T>()) s = b ? round_bf16(round_bf16(s) + widen(b[j])) : round_bf16(s);
    else if (b) s += widen(b[j]);
    e[j] = s;
    m = s > m ? s : m;
  }
  float den = 0.0f;
  for (int64_t c = 0; c < dh; ++c) num[c] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {  // key order
    const float p = std::exp(e[j] - m);
    den += p;
    const T* vj = Vh + j * dh;
    for (int64_t c = 0; c < dh; ++c) num[c] += p * widen(vj[c]);
  }
  for (int64_t c = 0; c < dh; ++c) store(o + c, num[c] / den);
}

// Self-attention of k new tokens at positions [pos, pos + k): row r attends to keys [0, pos + r],
// exactly its own. q: row r's head h at q + r * qs + h * dh; the cache (2, Hkv, cap, dh), query
// head h reading key head h / (H / Hkv) (grouped-query attention); bias (H, tb, tb) or none.
// Rows split over threads (two rows or more: grain 2), each row whole on one thread.
template <typename T>
void attend_rows(const T* q, int64_t qs, const T* cache, int64_t cap, int64_t Hkv, const T* bias,
                 int64_t tb, T* out, int64_t k, int64_t H, int64_t dh, int64_t pos) {
  const T* K = cache;                   // (Hkv, cap, dh)
  const T* V = cache + Hkv * cap * dh;  // (Hkv, cap, dh)
  const int64_t group = H / Hkv;
  at::parallel_for(0, k, 2, [&](int64_t r0, int64_t r1) {
    std::vector<float> e(pos + k), num(dh);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / group;
        const T* b = bias ? bias + (h * tb + pos + r) * tb : nullptr;  // its row of the bias table
        attend_one(q + r * qs + h * dh, K + g * cap * dh, V + g * cap * dh, b, pos + r + 1, dh,
                   out + r * H * dh + h * dh, e.data(), num.data());
      }
  });
}

// T5: qkv (k, 3 H dh); writes the keys and values into the cache, then attends.
template <typename T>
void attend_t5(const T* qkv, T* cache, int64_t cap, const T* bias, int64_t tb, T* out, int64_t k,
               int64_t H, int64_t dh, int64_t pos) {
  const int64_t hd = H * dh;
  T* K = cache;                 // (H, cap, dh)
  T* V = cache + H * cap * dh;  // (H, cap, dh)
  for (int64_t r = 0; r < k; ++r)
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(K + (h * cap + pos + r) * dh, qkv + r * 3 * hd + hd + h * dh, dh * sizeof(T));
      std::memcpy(V + (h * cap + pos + r) * dh, qkv + r * 3 * hd + 2 * hd + h * dh, dh * sizeof(T));
    }
  attend_rows(qkv, 3 * hd, cache, cap, H, bias, tb, out, k, H, dh, pos);
}

// x + cross-attention over a folded source (lean_t5.LeanT5.begin), in float32: h = x / |x|
// (the norm's weight and sqrt(d) are in A), scores h A (+ mask), a softmax per head over P keys,
// then p B + x, rounded once to T. A^T and B^T come packed (cpu_gemm.h: one sum per output in
// index order), so the k rows read them once and each row's bits are its own.
template <typename T>
void cross_rows(const T* x, const float* A, const float* B, const float* mask, T* y, int64_t k,
                int64_t d, int64_t H, int64_t P, float eps_d) {
  const int64_t hp = H * P;
  std::vector<float> h(k * d), xf(k * d), s(k * hp), o(k * d);
  for (int64_t r = 0; r < k; ++r) {
    const T* xr = x + r * d;
    const float inv = 1.0f / std::sqrt(sumsq(xr, d) + eps_d);
    for (int64_t i = 0; i < d; ++i) {
      xf[r * d + i] = widen(xr[i]);
      h[r * d + i] = xf[r * d + i] * inv;
    }
  }
  gemm::rows(h.data(), k, d, A, hp, mask, 0, false, s.data());
  for (int64_t r = 0; r < k; ++r)
    for (int64_t g = 0; g < H; ++g) {  // softmax over each head's P keys
      float* sg = s.data() + r * hp + g * P;
      float m = -INFINITY, den = 0.0f;
      for (int64_t j = 0; j < P; ++j) m = sg[j] > m ? sg[j] : m;
      for (int64_t j = 0; j < P; ++j) {
        sg[j] = std::exp(sg[j] - m);
        den += sg[j];
      }
      for (int64_t j = 0; j < P; ++j) sg[j] /= den;
    }
  gemm::rows(s.data(), k, hp, B, d, xf.data(), d, false, o.data());
  for (int64_t i = 0; i < k * d; ++i) store(y + i, o[i]);
}

void check(const torch::Tensor& t, const char* name, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu(), name, ": a CPU tensor, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), name, ": contiguous, got strides ", t.strides());
  TORCH_CHECK(t.dim() == dims, name, ": ", dims, " dimensions, got shape ", t.sizes());
}

template <typename F>
void by_dtype(const torch::Tensor& t, F&& f) {
  if (t.scalar_type() == torch::kFloat) f(float{});
  else if (t.scalar_type() == torch::kBFloat16) f(uint16_t{});
  else TORCH_CHECK(false, "float32 or bfloat16 expected, got ", t.scalar_type());
}

}  // namespace

torch::Tensor norm(torch::Tensor x, torch::Tensor w, double eps_d) {
  check(x, "x", 2);
  check(w, "w", 1);
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.size(0) == x.size(1), "w: (d,) in x's dtype");
  auto y = torch::empty_like(x);
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    norm_rows<T>(reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<const T*>(w.data_ptr()),
                 reinterpret_cast<T*>(y.data_ptr()), x.size(0), x.size(1), static_cast<float>(eps_d));
  });
  return y;
}

torch::Tensor attend(torch::Tensor qkv, torch::Tensor cache, torch::Tensor bias, int64_t heads,
                     int64_t pos) {
  check(qkv, "qkv", 2);
  check(cache, "cache", 4);
  check(bias, "bias", 3);
  const int64_t k = qkv.size(0), dh = cache.size(3), cap = cache.size(2);
  TORCH_CHECK(cache.size(0) == 2 && cache.size(1) == heads && qkv.size(1) == 3 * heads * dh,
              "cache (2, H, T, dh) and qkv (k, 3 H dh) disagree: ", cache.sizes(), " ", qkv.sizes());
  TORCH_CHECK(pos >= 0 && pos + k <= cap, "pos + k = ", pos + k, " exceeds the cache's ", cap);
  TORCH_CHECK(bias.size(0) == heads && bias.size(1) == bias.size(2) && pos + k <= bias.size(1),
              "bias (H, Tb, Tb) with Tb >= pos + k, got ", bias.sizes());
  TORCH_CHECK(qkv.scalar_type() == cache.scalar_type() && bias.scalar_type() == cache.scalar_type(),
              "qkv, cache and bias in one dtype");
  auto out = torch::empty({k, heads * dh}, qkv.options());
  by_dtype(qkv, [&](auto z) {
    using T = decltype(z);
    attend_t5<T>(reinterpret_cast<const T*>(qkv.data_ptr()), reinterpret_cast<T*>(cache.data_ptr()),
                 cap, reinterpret_cast<const T*>(bias.data_ptr()), bias.size(1),
                 reinterpret_cast<T*>(out.data_ptr()), k, heads, dh, pos);
  });
  return out;
}

torch::Tensor attend_cached(torch::Tensor q, torch::Tensor cache, int64_t heads, int64_t pos) {
  check(q, "q", 2);
  check(cache, "cache", 4);
  const int64_t k = q.size(0), hkv = cache.size(1), cap = cache.size(2), dh = cache.size(3);
  TORCH_CHECK(cache.size(0) == 2 && heads % hkv == 0 && q.size(1) == heads * dh,
              "cache (2, Hkv, T, dh) with Hkv dividing H, and q (k, H dh), disagree: ", cache.sizes(), " ",
              q.sizes(), " H = ", heads);
  TORCH_CHECK(pos >= 0 && pos + k <= cap, "pos + k = ", pos + k, " exceeds the cache's ", cap);
  TORCH_CHECK(q.scalar_type() == cache.scalar_type(), "q and cache in one dtype");
  auto out = torch::empty({k, heads * dh}, q.options());
  by_dtype(q, [&](auto z) {
    using T = decltype(z);
    attend_rows<T>(reinterpret_cast<const T*>(q.data_ptr()), heads * dh,
                   reinterpret_cast<const T*>(cache.data_ptr()), cap, hkv, nullptr, 0,
                   reinterpret_cast<T*>(out.data_ptr()), k, heads, dh, pos);
  });
  return out;
}

torch::Tensor cross(torch::Tensor x, torch::Tensor A, torch::Tensor B, c10::optional<torch::Tensor> mask,
                    int64_t heads, double eps_d) {
  check(x, "x", 2);
  check(A, "A", 3);
  check(B, "B", 3);
  const int64_t d = x.size(1), hp = B.size(1), nb = gemm::NB;
  TORCH_CHECK(A.scalar_type() == torch::kFloat && B.scalar_type() == torch::kFloat, "A, B: float32");
  TORCH_CHECK(A.size(1) == d && A.size(2) == nb && A.size(0) == (hp + nb - 1) / nb && B.size(2) == nb &&
                  B.size(0) == (d + nb - 1) / nb && hp % heads == 0,
              "A and B packed (pack(A^T): (ceil(H P / 8), d, 8); pack(B^T): (ceil(d / 8), H P, 8)) for x (k, d): ",
              A.sizes(), " ", B.sizes(), " ", x.sizes());
  const float* m = nullptr;
  if (mask && mask->defined()) {
    check(*mask, "mask", 2);
    TORCH_CHECK(mask->scalar_type() == torch::kFloat && mask->numel() == hp, "mask: (1, H P) float32");
    m = mask->data_ptr<float>();
  }
  auto y = torch::empty_like(x);
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    cross_rows<T>(reinterpret_cast<const T*>(x.data_ptr()), A.data_ptr<float>(), B.data_ptr<float>(), m,
                  reinterpret_cast<T*>(y.data_ptr()), x.size(0), d, heads, hp / heads,
                  static_cast<float>(eps_d));
  });
  return y;
}

#include "cpu_draft.h"  // after the pieces: the small model's run calls them (and cpu_policy.h)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("norm", &norm, "T5's RMS norm of each row of x (k, d)");
  m.def("attend", &attend, "causal self-attention of k new tokens, written into the cache");
  m.def("cross", &cross, "x + the folded cross-attention over a source (A^T, B^T packed)");
  m.def("pack", &gemm::pack, "W (out, in) packed for linear: (ceil(out / 8), in, 8) float32");
  m.def("linear", &gemm::linear, "x W^T (+ res) (relu) of float32 rows, W packed; row-invariant");
  m.def("pack8", &gemm8::pack, "W (out, in) as int8 codes per output channel, packed, and their scales");
  m.def("linear8", &gemm8::linear, "x W^T (+ res) (relu) with x's rows and W in int8, int32 sums; row-invariant");
  m.def("attend_cached", &attend_cached,
        "causal self-attention of k new tokens over a cache holding their keys and values");
  m.def("max_prob", &max_prob, "(max probability, first argmax) of each row of logits (k, V)");
  m.def("rollback_distance", &rollback_distance, "(-log p(tokens), first argmax) of each row of logits");
  pybind11::class_<draft::Plan>(m, "Plan", pybind11::module_local())  // a second build in one process
      .def(pybind11::init<at::Tensor, at::Tensor, double, double, bool, int64_t, int64_t, int64_t,
                          std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<draft::ProductSpec>,
                          std::vector<draft::ProductSpec>, std::vector<draft::ProductSpec>,
                          std::vector<draft::ProductSpec>, std::vector<draft::ProductSpec>, draft::ProductSpec>())
      .def("source", &draft::Plan::source, "the folded cross-attention (A, B, mask) of each layer")
      .def("forward", &draft::Plan::forward, "logits (k, V) of k tokens at [pos, pos + k)")
      .def("run", &draft::Plan::run, "the small model's run: (tokens kept, max probabilities, stop, each step's seconds)");
}
