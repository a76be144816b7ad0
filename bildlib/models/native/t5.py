"""NativeT5: models.lean_t5.LeanT5 with T5's norms, self-attention and folded cross-attention as
C++ calls (bildlib.kernels.cpu: cpu_t5.cpp, row-invariant by construction), the products as the
lean engine runs them (models.linear), and `draft`, the small model's run of Algorithm 1 in one
C++ call (cpu_draft.h; models.native.plan hands it the engine's weights and products).

With no op family switched (models.wholecall) and a relu feed-forward, a decoder layer is four
products and three C++ calls with nothing between them in Python (`_layer_native`). A draft runs
whole in C++ with no op family switched and a relu or gelu_new feed-forward, gated or not (T5,
mT5); otherwise `draft` returns None and bild()'s Python loop runs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bildlib.models.lean_t5 import LeanT5
from bildlib.models.native import plan


class NativeT5(LeanT5):
    """Engine "native" for a T5 / mT5 on a CPU; `cpp` is bildlib.kernels.cpu's built module; `int8`:
    every weight product in int8 (models.linear.NativeInt8; dtype "int8"), the rest in float32."""

    def __init__(self, model, cpp, int8: bool = False):
        self.eps_dn = model.config.d_model * model.config.layer_norm_epsilon  # the C++ norms' d eps
        self._plan, self._plan_key, self._source = None, None, 0  # the draft's C++ plan (plan.build)
        self.int8 = int8
        super().__init__(model, cpp, "int8" if int8 else True)

    def set_rows(self, ops) -> None:
        super().set_rows(ops)
        # one Python step per layer, and drafts in C++, where no op family runs a row at a time
        self.fast = not self.rows and not self.gated and self.act is F.relu
        self._plan = None  # the products were wrapped again

    def begin(self, src: torch.Tensor) -> None:
        super().begin(src)
        pack = self.cpp.pack  # A^T and B^T as the C++ cross takes them (cpu_gemm.h)
        self.cross = [(pack(A.t()), pack(B.t()), mask) for A, B, mask in self.cross]
        self._source += 1  # the plan takes the new cross-attention matrices at its next run

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        if not self.fast:
            return super().layer(i, x, pos)
        self.room(pos, x.shape[0])
        return self._layer_native(i, x, pos)

    def _layer_native(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        """_block's calls with no op family switched and a relu feed-forward, in as few Python
        steps: norm, qkv, attention (writing the cache), x + a o, x + cross, norm, relu(h wi),
        x + h wo (cpu_draft.h's Plan.forward runs the same calls). The cache and bias have room."""
        w, cpp, eps = self.dec[i], self.cpp, self.eps_dn
        qkv = w["qkv_l"](cpp.norm(x, w["ln0_n"], eps))  # (k, 3 H dh)
        x = w["o_l"].add(cpp.attend(qkv, self.kv.kv[i], self.bias, self.H, pos), x)
        A, B, mask = self.cross[i]
        x = cpp.cross(x, A, B, mask, self.H, eps)
        return w["wo_l"].add(w["wi_l"].relu(cpp.norm(x, w["lnf_n"], eps)), x)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """LeanT5._norm's formulas in one C++ call (its sums in their own order)."""
        return self.cpp.norm(x, w, self.eps_dn)

    def _cross(self, x: torch.Tensor, i: int) -> torch.Tensor:
        A, B, mask = self.cross[i]
        return self.cpp.cross(x, A, B, mask, self.H, self.eps_dn)

    def _attend_self(self, h_qkv, qkv, bias, i: int, pos: int, each_row: bool) -> torch.Tensor:
        """Self-attention of the call's rows h_qkv (k, 3 H dh) in one C++ call (one per row where
        "attention" is switched), writing layer i's cache (2, H, T, dh; room made in layer())."""
        f, cache, H = self.cpp.attend, self.kv.kv[i], self.H
        if each_row:
            return torch.cat([f(h_qkv[j : j + 1], cache, self.bias, H, pos + j) for j in range(len(h_qkv))])
        return f(h_qkv, cache, self.bias, H, pos)  # (k, H dh)

    def draft(self, tokens: list[int], pos: int, width: int, run: plan.Run) -> plan.Drafted | None:
        """The small model's run (plan.Run) from tokens at [pos, ...) in one C++ call, logits cut to
        `width` columns as LM.forward cuts them; None where it cannot run in C++ (an op family
        switched, or a product or activation the C++ loop does not take: plan.build): the caller
        runs its Python loop."""
        if self.rows:
            return None
        key = (width, torch.get_num_threads(), plan.first_only())
        if self._plan_key != key:
            self._plan, self._plan_key = plan.build(self, width), key
        if self._plan is None:
            return None
        p, src = self._plan
        if src != self._source:
            p.source(*zip(*self.cross, strict=True))
            self._plan = (p, self._source)
        self.room(pos, len(tokens) + run.most)  # the cache and bias table hold every step's rows
        self._at = (-1, 0)  # the next layer() call takes its own rows of the bias
        return plan.run(p, tokens, pos, self.kv.buf, self.bias, run)
