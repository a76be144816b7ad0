// The small model's run of Algorithm 1 as one C++ call (bildlib.models.native.NativeT5.draft):
// "the small model writes tokens while its max probability is at least α_FB, at most n in a row,
// until EOS or max_new_tokens". Each step is the native T5 decoder call of lean_t5.LeanT5
// (_layer_native and head: the same ATen products and the same C++ pieces, in the same order),
// then the policy of bildlib.decoding.policy (greedy: cpu_policy.h's max probability and argmax,
// the argmax alone where no confidence is asked for (vanilla decoding); nucleus sampling: the same
// ATen ops as kernels.reference's nucleus and sample, one uniform per step from the decode's
// generator). So a draft writes the tokens bild()'s Python loop writes, bit
// for bit (tests/test_draft.py), with no interpreter between its steps.
//
// A product is models.linear's choice for a weight, passed as (kind, a, b, pads):
//   PACKED: oneDNN's prepacked weight a (mkldnn::_linear_pointwise, its relu and its add);
//   MM:     a = W^T (in, out): mm, mm + relu_, addmm;
//   ROWS:   a = W^T in float32 (models.linear.Float32 over rows_mm), pads = the rows_mm path at
//           its shapes (R >= 1: at least R rows, the last row copied; 0: one row at a time), for
//           the product alone and with a residual (two shape keys in rows_mm);
//   INT8:   a = int8 codes (out, in), b = per-row scales (torch._weight_int8pack_mm);
//   NATIVE: a = W packed for cpu_gemm.h (models.linear.Native), pad = its output count;
//   NATIVE8: a = W's int8 codes packed for cpu_gemm8.h, b = their scales (models.linear.NativeInt8).

#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/extension.h>

#include <chrono>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_policy.h"

namespace draft {

enum Kind : int64_t { PACKED = 0, MM = 1, ROWS = 2, INT8 = 3, NATIVE = 4, NATIVE8 = 5 };
enum Stop : int64_t { FALLBACK = 0, LIMIT = 1, END = 2, LENGTH = 3 };  // why a run stopped

using ProductSpec = std::tuple<int64_t, at::Tensor, at::Tensor, int64_t, int64_t>;

struct Product {
  int64_t kind = MM;
  at::Tensor a, b;
  int64_t pad = 1, pad_add = 1;
  Product() = default;
  explicit Product(const ProductSpec& s)
      : kind(std::get<0>(s)), a(std::get<1>(s)), b(std::get<2>(s)), pad(std::get<3>(s)), pad_add(std::get<4>(s)) {
    TORCH_CHECK(kind >= PACKED && kind <= NATIVE8, "product kind ", kind, " unknown");
  }
};

inline c10::OperatorHandle op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

inline at::Tensor boxed(const c10::OperatorHandle& h, std::vector<c10::IValue> args) {
  torch::jit::Stack s(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  h.callBoxed(&s);
  return s[0].toTensor();
}

// oneDNN's packed product, as models.linear.Packed calls it
inline at::Tensor packed(const at::Tensor& x, const at::Tensor& w, const char* attr) {
  static const c10::OperatorHandle h = op("mkldnn::_linear_pointwise", "");
  return boxed(h, {x, w, c10::IValue(), std::string(attr), c10::List<std::optional<at::Scalar>>(),
                   c10::IValue()});
}
inline at::Tensor packed_add(const at::Tensor& x, const at::Tensor& res, const at::Tensor& w) {
  static const c10::OperatorHandle h = op("mkldnn::_linear_pointwise", "binary");
  return boxed(h, {x, res, w, c10::IValue(), std::string("add")});
}

// models.linear._rows_bmm, under rowinv.at_least (pad >= 1) or rowinv.rowwise (pad 0)
inline at::Tensor rows_bmm(const at::Tensor& x, const at::Tensor& t, const at::Tensor& res) {
  const int64_t k = x.size(0);
  if (!res.defined()) return at::bmm(x.unsqueeze(1), t.expand({k, -1, -1})).squeeze(1);
  return at::baddbmm(res.unsqueeze(1), x.unsqueeze(1), t.expand({k, -1, -1})).squeeze(1);
}
inline at::Tensor pad_rows(const at::Tensor& a, int64_t R) {
  const int64_t k = a.size(0);
  return at::cat({a, a.narrow(0, k - 1, 1).expand({R - k, a.size(1)})}, 0);
}
inline at::Tensor rows_mm(const at::Tensor& x, const at::Tensor& t, const at::Tensor& res, int64_t R) {
  const int64_t k = x.size(0);
  if (R == 0) {
    std::vector<at::Tensor> out;
    for (int64_t i = 0; i < k; ++i) {
      auto one = [&](const at::Tensor& a) { return a.narrow(0, i, 1).clone(at::MemoryFormat::Contiguous); };
      out.push_back(rows_bmm(one(x), t, res.defined() ? one(res) : res));
    }
    return at::cat(out, 0);
  }
  if (k >= R) return rows_bmm(x, t, res);
  return rows_bmm(pad_rows(x, R), t, res.defined() ? pad_rows(res, R) : res).narrow(0, 0, k);
}

inline at::Tensor int8mm(const Product& p, at::Tensor x) {
  if (!x.is_contiguous() || reinterpret_cast<uintptr_t>(x.data_ptr()) % 64)
    x = x.clone(at::MemoryFormat::Contiguous);  // the kernel's aligned loads
  return at::_weight_int8pack_mm(x, p.a, p.b);
}

inline at::Tensor call(const Product& p, const at::Tensor& x) {  // x W^T
  switch (p.kind) {
    case PACKED: return packed(x, p.a, "none");
    case ROWS: return rows_mm(x.to(at::kFloat), p.a, {}, p.pad).to(x.scalar_type());
    case INT8: return int8mm(p, x);
    case NATIVE: return gemm::linear(x, p.a, p.pad, c10::nullopt, false);
    case NATIVE8: return gemm8::linear(x, p.a, p.b, p.pad, c10::nullopt, false);
    default: return at::mm(x, p.a);
  }
}
inline at::Tensor relu(const Product& p, const at::Tensor& x) {  // relu(x W^T)
  switch (p.kind) {
    case PACKED: return packed(x, p.a, "relu");
    case ROWS: return rows_mm(x.to(at::kFloat), p.a, {}, p.pad).relu_().to(x.scalar_type());
    case INT8: return int8mm(p, x).relu_();
    case NATIVE: return gemm::linear(x, p.a, p.pad, c10::nullopt, true);
    case NATIVE8: return gemm8::linear(x, p.a, p.b, p.pad, c10::nullopt, true);
    default: return at::mm(x, p.a).relu_();
  }
}
inline at::Tensor add(const Product& p, const at::Tensor& x, const at::Tensor& res) {  // res + x W^T
  switch (p.kind) {
    case PACKED: return packed_add(x, res, p.a);
    case ROWS: return rows_mm(x.to(at::kFloat), p.a, res.to(at::kFloat), p.pad_add).to(res.scalar_type());
    case INT8: return int8mm(p, x).add_(res);
    case NATIVE: return gemm::linear(x, p.a, p.pad, res, false);
    case NATIVE8: return gemm8::linear(x, p.a, p.b, p.pad, res, false);
    default: return at::addmm(res, x, p.a);
  }
}

// kernels.reference.nucleus_ref(scaled, 1.0, top_p) and sample_ref, op for op
inline at::Tensor nucleus(const at::Tensor& scaled, double top_p) {
  auto x = scaled.to(at::kFloat) / 1.0;
  if (top_p >= 1) return x;
  auto [s, order] = x.sort(-1, true);
  auto before = s.softmax(-1).cumsum(-1) - s.softmax(-1);
  auto drop_sorted = before >= top_p;
  auto drop = at::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
  return x.masked_fill(drop, -INFINITY);
}
inline int64_t sample(const at::Tensor& logits, const at::Tensor& u) {
  auto q = at::softmax(logits.to(at::kFloat), -1);
  auto cdf = q.cumsum(-1);
  auto i = at::searchsorted(cdf, (u.to(at::kFloat) * cdf.select(1, -1)).unsqueeze(-1), false, true).squeeze(-1);
  auto last = (q.size(-1) - 1) - (q.flip(-1) > 0).to(at::kInt).argmax(-1);
  return at::minimum(i, last).item<int64_t>();
}

// HF's NewGELUActivation ("gelu_new", mT5's gated feed-forward), op for op as its forward:
// 0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0))))
inline at::Tensor gelu_new(const at::Tensor& x) {
  auto inner = (x + at::pow(x, 3.0) * 0.044715) * 0.7978845608028654;  // math.sqrt(2.0 / math.pi)
  return (x * 0.5) * (at::tanh(inner) + 1.0);
}
enum Act : int64_t { RELU = 0, GELU_NEW = 1 };

// The native T5 decoder (no op family switched; a relu or a gelu_new feed-forward, gated or not)
// and its head, over the pieces norm / attend / cross of cpu_t5.cpp.
struct Plan {
  at::Tensor emb, head_w;  // (V, d); the head's norm weight as lean_t5.LeanT5.head takes it
  double scale, eps;       // the tied head's d_model^-0.5 in half precision (0: none); d eps
  bool f32, gated;
  int64_t act, H, width;
  std::vector<at::Tensor> ln0, lnf;  // per layer, as the C++ norm takes them
  std::vector<Product> qkv, o, wi, wi1, wo;  // wi: wi_0 where gated, wi1 its wi_1 (else empty)
  Product lm;
  std::vector<at::Tensor> A, B, mask;  // the folded cross-attention of the current source

  Plan(at::Tensor emb, at::Tensor head_w, double scale, double eps, bool f32, int64_t act, int64_t H,
       int64_t width, std::vector<at::Tensor> ln0, std::vector<at::Tensor> lnf, std::vector<ProductSpec> qkv,
       std::vector<ProductSpec> o, std::vector<ProductSpec> wi, std::vector<ProductSpec> wi1,
       std::vector<ProductSpec> wo, ProductSpec lm)
      : emb(emb), head_w(head_w), scale(scale), eps(eps), f32(f32), gated(!wi1.empty()), act(act), H(H),
        width(width), ln0(ln0), lnf(lnf), lm(lm) {
    const size_t n = ln0.size();
    TORCH_CHECK(lnf.size() == n && qkv.size() == n && o.size() == n && wi.size() == n && wo.size() == n &&
                    (wi1.empty() || wi1.size() == n),
                "Plan: one norm and product of each kind per layer");
    TORCH_CHECK(act == RELU || act == GELU_NEW, "Plan: activation ", act, " unknown");
    for (size_t i = 0; i < n; ++i) {
      this->qkv.emplace_back(qkv[i]), this->o.emplace_back(o[i]);
      this->wi.emplace_back(wi[i]), this->wo.emplace_back(wo[i]);
      if (gated) this->wi1.emplace_back(wi1[i]);
    }
  }

  // lean_t5.LeanT5._rest's feed-forward after its norm: h (k, d) -> (k, d_ff)
  at::Tensor ff(size_t i, const at::Tensor& h) const {
    auto f = [&](const at::Tensor& a) { return act == RELU ? a.relu() : gelu_new(a); };
    if (gated) {
      auto a = call(wi[i], h), b = call(wi1[i], h);
      return f(a) * b;
    }
    return act == RELU ? relu(wi[i], h) : f(call(wi[i], h));
  }

  void source(std::vector<at::Tensor> a, std::vector<at::Tensor> b, std::vector<std::optional<at::Tensor>> m) {
    TORCH_CHECK(a.size() == ln0.size() && b.size() == a.size() && m.size() == a.size(),
                "source: one (A, B, mask) per layer");
    A = std::move(a), B = std::move(b), mask.clear();
    for (auto& t : m) mask.push_back(t ? *t : at::Tensor());
  }

  // logits (k, V) of tokens (k,) at [pos, pos + k); buf (L, 2, H, T, dh), bias (H, Tb, Tb) with room
  at::Tensor forward(const at::Tensor& tokens, int64_t pos, const at::Tensor& buf, const at::Tensor& bias) {
    auto x = at::embedding(emb, tokens);
    for (size_t i = 0; i < ln0.size(); ++i) {
      auto q = call(qkv[i], ::norm(x, ln0[i], eps));
      x = add(o[i], ::attend(q, buf.select(0, i), bias, H, pos), x);
      x = ::cross(x, A[i], B[i], mask[i].defined() ? c10::optional<at::Tensor>(mask[i]) : c10::nullopt, H, eps);
      x = add(wo[i], ff(i, ::norm(x, lnf[i], eps)), x);
    }
    auto h = ::norm(x, head_w, eps);
    if (!f32 && scale != 0) h = h * scale;
    return call(lm, h);
  }

  // The run (module comment). Returns (tokens kept, their max probabilities, why it stopped, each
  // step's wall seconds).
  std::tuple<std::vector<int64_t>, std::vector<double>, int64_t, std::vector<double>> run(
      at::Tensor tokens, int64_t pos, at::Tensor buf, at::Tensor bias, int64_t most, double fallback,
      int64_t eos, int64_t room, double temperature, double top_p, std::optional<at::Generator> gen,
      bool confidence) {
    TORCH_CHECK(A.size() == ln0.size(), "run: no source (call source() after the encoder)");
    TORCH_CHECK(most >= 1 && room >= 1, "run: at least one token to write");
    std::vector<int64_t> kept;
    std::vector<double> probs, seconds;
    int64_t why = LIMIT;
    auto t0 = std::chrono::steady_clock::now();
    while (true) {
      const int64_t k = tokens.size(0);
      auto logits = forward(tokens, pos, buf, bias);  // (k, V)
      pos += k;
      auto row = logits.narrow(0, k - 1, 1).narrow(1, 0, width);  // (1, width), as LM.forward slices
      if (gen && !(temperature == 0 || temperature == 1)) row = row.to(at::kFloat) / temperature;
      const auto r = policy::reduce_row(row.contiguous(), 0, confidence || fallback >= 0);
      const double p = r.p;
      int64_t y = r.arg;
      if (gen) y = sample(nucleus(row, top_p), at::rand({1}, *gen, at::TensorOptions().dtype(at::kFloat)));
      const auto t1 = std::chrono::steady_clock::now();
      seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
      t0 = t1;
      if (!(fallback < 0 || p >= fallback)) {  // NaN falls back, as in Python
        why = FALLBACK;
        break;
      }
      kept.push_back(y), probs.push_back(p);
      const int64_t n = static_cast<int64_t>(kept.size());
      if (y == eos) why = END;
      else if (n >= room) why = LENGTH;
      else if (n >= most) why = LIMIT;
      else {
        tokens = at::full({1}, y, tokens.options());
        continue;
      }
      break;
    }
    return {kept, probs, why, seconds};
  }
};

}  // namespace draft
