"""Torch references for the policy reductions; fp32 accumulation for any input dtype."""

import torch


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """torch.argmax(x, dim=-1) of logits (k, V): the first maximum of each row, a NaN counting as
    the maximum. On a CPU, numpy's vectorised argmax gives the same indices in a fraction of the
    time (torch's reduction with indices takes about 100 µs over a 32k vocabulary at 2 threads,
    numpy's about 7: AMD EPYC, AVX2): the policy runs it once per token."""
    if x.device.type != "cpu" or x.dim() != 2 or x.is_complex():
        return x.argmax(dim=-1)
    a = x.detach()
    if a.dtype not in (torch.float32, torch.float64):
        a = a.float()  # bf16 and half to float32 exactly: the same order, the same ties
    return torch.from_numpy(a.contiguous().numpy().argmax(-1).astype("int64"))


def max_prob_ref(logits: torch.Tensor, margin: bool = False) -> tuple[torch.Tensor, ...]:
    """Max softmax probability and argmax of each row of logits (k, V), without a softmax tensor;
    with margin=True also top1 - top2 probability (CALM's softmax confidence)."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)  # (k,)
    idx = argmax_rows(x)  # (k,), first maximum on ties like torch.argmax
    m = x.gather(-1, idx.to(x.device).unsqueeze(-1)).squeeze(-1)  # (k,), the maximum itself
    if not margin:
        return torch.exp(m - lse), idx
    top = x.topk(min(2, x.shape[-1]), dim=-1).values  # (k, 2)
    second = torch.exp(top[:, 1] - lse) if x.shape[-1] > 1 else torch.zeros_like(lse)
    return torch.exp(m - lse), idx, torch.exp(m - lse) - second


def rollback_distance_ref(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BiLD's rollback distance -log p(tokens) per row of logits (k, V), and the rows' argmax."""
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"tokens has shape {tuple(tokens.shape)}, expected {tuple(logits.shape[:-1])}")
    x = logits.float()
    picked = x.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # (k,)
    return torch.logsumexp(x, dim=-1) - picked, argmax_rows(x)


def sample_ref(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of logits (k, V) by inverse CDF at uniforms (k,) in [0, 1).

    Entries at -inf have probability 0 and are never drawn; a row with a single finite
    entry is the greedy case and returns it whatever the uniform.
    """
    return _inverse_cdf(torch.softmax(logits.float(), dim=-1), uniforms.float())


def _inverse_cdf(q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row of non-negative weights q (k, V): the first index whose running sum exceeds
    u * sum(q) (k,); the last index with q > 0 where rounding leaves none."""
    cdf = q.cumsum(dim=-1)  # (k, V)
    i = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)  # (k,)
    last = q.shape[-1] - 1 - (q.flip(-1) > 0).int().argmax(dim=-1)  # (k,)
    return torch.minimum(i, last)


def speculative_accept_ref(
    logits_large: torch.Tensor, logits_small: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling's acceptance step (Leviathan et al. 2023, Chen et al. 2023).

    logits_large (k+1, V): the large model's logits at the k draft positions and one after;
    logits_small (k, V): the small model's logits the drafts were sampled from;
    draft (k,): the small model's tokens; uniforms (k+1,): in [0, 1).
    Draft i is accepted while uniforms[i] * p_S(draft_i) < p_L(draft_i), i.e. with probability
    min(1, p_L/p_S). At the first rejection n the next token is drawn (inverse CDF at
    uniforms[k]) from norm(max(0, p_L - p_S)) at row n; with all k accepted, from p_L at row k.
    Returns (n_accepted, next_token) as 0-d tensors.
    """
    k = draft.shape[0]
    if logits_large.shape[0] != k + 1 or logits_small.shape[0] != k or uniforms.shape[0] != k + 1:
        raise ValueError(
            f"expected logits_large (k+1, V), logits_small (k, V), uniforms (k+1,) for k={k} drafts; got "
            f"{tuple(logits_large.shape)}, {tuple(logits_small.shape)}, {tuple(uniforms.shape)}"
        )
    p_l = torch.softmax(logits_large.float(), dim=-1)  # (k+1, V)
    p_s = torch.softmax(logits_small.float(), dim=-1)  # (k, V)
    d = draft.long().unsqueeze(-1)
    ok = uniforms[:k].float() * p_s.gather(-1, d).squeeze(-1) < p_l[:k].gather(-1, d).squeeze(-1)  # (k,)
    n = torch.where(ok.all(), k, (~ok).int().argmax()) if k else torch.tensor(0)  # first rejection, or k
    resid = torch.cat([(p_l[:k] - p_s).clamp_min(0), p_l[k:]])  # (k+1, V): residuals, then the bonus row
    nxt = _inverse_cdf(resid[n].unsqueeze(0), uniforms[k:].float()).squeeze(0)
    return n, nxt


def nucleus_ref(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Logits (k, V) scaled by 1/temperature with everything outside the top-p nucleus at -inf.

    The nucleus is the smallest set of most likely tokens whose mass reaches top_p (the most
    likely token is always in it); temperature 0 keeps only the argmax (greedy).
    """
    x = logits.float()
    if temperature == 0:
        keep = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, x.argmax(-1, keepdim=True), True)
        return x.masked_fill(~keep, float("-inf"))
    x = x / temperature
    if top_p >= 1:
        return x
    s, order = x.sort(dim=-1, descending=True)  # (k, V)
    before = s.softmax(-1).cumsum(-1) - s.softmax(-1)  # mass strictly above each sorted entry
    drop_sorted = before >= top_p  # (k, V) in sorted order
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return x.masked_fill(drop, float("-inf"))


def saturation_ref(prev: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """CALM's hidden-state saturation: cosine similarity of each row of prev and new (k, d), fp32."""
    return torch.nn.functional.cosine_similarity(prev.float(), new.float(), dim=-1, eps=1e-12)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Codes (out, n) < 16 as (out, ceil(n / 2)) uint8, column 2j in the low nibble of byte j and
    column 2j + 1 in the high one: the layout lut_matvec reads (4-bit and 3-bit codes alike)."""
    c = codes.to(torch.uint8)
    if c.shape[1] % 2:
        c = torch.cat([c, c.new_zeros(c.shape[0], 1)], dim=1)
    return c[:, 0::2] | (c[:, 1::2] << 4)


def lut_matvec_ref(x, packed, table, n: int, sparse_idx=None, sparse_val=None) -> torch.Tensor:
    """x (k, n) @ W^T -> (k, out) in float32, W[r, c] = table[r, code(r, c)] (+ the sparse part:
    sparse_val (nnz,) at rows sparse_idx[0], columns sparse_idx[1]); codes packed by pack_nibbles,
    table (out, L) with L <= 16: SqueezeLLM's dense-and-sparse product."""
    codes = torch.stack([packed & 15, packed >> 4], dim=2).reshape(packed.shape[0], -1)[:, :n]  # (out, n)
    w = torch.gather(table.float(), 1, codes.long())  # (out, n)
    y = x.float() @ w.t()
    if sparse_val is not None and sparse_val.numel():
        r, c = sparse_idx
        y.index_add_(1, r, x.float()[:, c] * sparse_val.float())  # (k, nnz) into their rows
    return y


# -- the decoder step's products (triton_rowinv's references; also the static engine's CPU path) --
def mm_ref(x: torch.Tensor, w: torch.Tensor, epilogue: str = "none", other=None, norm=None, eps: float = 1e-6,
           scale: float = 1.0) -> torch.Tensor:  # fmt: skip
    """x (M, K) @ w (N, K)^T in float32 times scale, the epilogue ("add" / "mul" with other,
    "relu", "gelu_tanh") before one rounding to x's dtype. norm (K,): T5's RMS norm of x by norm
    first, as triton_rowinv.mm fuses it: x * norm rounded to x's dtype enters the product, and each
    row's 1 / rms(x) multiplies the float32 sum."""
    h = x.float()
    if norm is not None:
        h = (h * norm.float()).to(x.dtype).float()
    y = h @ w.float().t()
    if norm is not None:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * scale
    y = y * scale
    if epilogue == "add":
        y = y + other.float()
    elif epilogue == "mul":
        y = y * other.float()
    elif epilogue == "relu":
        y = torch.relu(y)
    elif epilogue == "gelu_tanh":
        y = torch.nn.functional.gelu(y, approximate="tanh")
    return y.to(x.dtype)


def rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """T5's RMS norm (HF's T5LayerNorm): float32 statistics, rounded to w's dtype, then scaled."""
    xf = x.float()
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(w.dtype)


def attention_ref(q, k, v, pos, n_keys=None, bias=None) -> torch.Tensor:
    """triton_rowinv.attention in float32 torch: q (H, M, dh) at positions pos + [0, M) over k, v
    (H, T, dh); causal when n_keys is None, else the first n_keys[0] keys; bias (H, T_q, T) read at
    [h, pos + row, t]. pos and n_keys are (1,) device tensors: no host sync, so it traces whole."""
    H, M, _ = q.shape
    T = k.shape[1]
    t = torch.arange(T, device=q.device)
    rows = pos + torch.arange(M, device=q.device)  # (M,) positions of the query rows
    see = t[None, :] <= rows[:, None] if n_keys is None else (t < n_keys).expand(M, T)  # (M, T)
    s = q.float() @ k.float().transpose(1, 2)  # (H, M, T)
    if bias is not None:
        s = s + bias.index_select(1, rows.clamp(max=bias.shape[1] - 1)).float()
    s = s.masked_fill(~see, float("-inf"))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
