"""A quantized weight matrix W (out, in): codes into per-row (or per-group) tables, plus a sparse part.

    W[r, c] = table[r, c // group, codes[r, c]] + sparse[r, c]

One layout serves every method: round-to-nearest's table is an arithmetic progression
(scale * (j - zero)), SqueezeLLM's holds its k-means centroids, int8's is scale * (j - 128). The
sparse part (dense-and-sparse) stores, at the outlier positions, what the dense part misses, so
the product is a table lookup plus a sparse add (kernels/lut.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class QWeight:
    codes: torch.Tensor  # (out, in) uint8, each < 2^bits
    table: torch.Tensor  # (out, G, 2^bits) float32: the values the codes stand for, per row and group
    bits: int
    sparse_idx: torch.Tensor | None = None  # (2, nnz) int64: row, column of each outlier
    sparse_val: torch.Tensor | None = None  # (nnz,) float32: W minus the dense part there
    uniform: bool = False  # the tables are arithmetic progressions (rtn, int8): a kernel reads scale and zero

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    @property
    def group(self) -> int:
        return self.codes.shape[1] // self.table.shape[1]

    @property
    def nnz(self) -> int:
        return 0 if self.sparse_val is None else int(self.sparse_val.numel())

    def dense(self) -> torch.Tensor:
        """The dense part (out, in) float32: each code looked up in its row's (group's) table."""
        out, n = self.codes.shape
        G = self.table.shape[1]
        c = self.codes.long().view(out, G, n // G)  # (out, G, group)
        return torch.gather(self.table, 2, c).view(out, n)

    def dequant(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """W (out, in) as the model runs it: the dense part plus the sparse part, in dtype."""
        w = self.dense()
        if self.nnz:
            w = w.index_put((self.sparse_idx[0], self.sparse_idx[1]), self.sparse_val, accumulate=True)
        return w.to(dtype)

    def nbytes(self) -> int:
        """Bytes to store it as a kernel reads it: bits per code; the tables in fp16, or for a uniform
        grid its scale and zero point in fp16 per row (group); the sparse part in CSR (fp16 value and
        int32 column per outlier, an int32 pointer per row)."""
        out, n = self.codes.shape
        tables = 4 * self.table.shape[0] * self.table.shape[1] if self.uniform else 2 * self.table.numel()
        b = (out * n * self.bits + 7) // 8 + tables
        return b + (6 * self.nnz + 4 * (out + 1) if self.nnz else 0)

    # -- storage -------------------------------------------------------------------------------
    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        """Its tensors under prefix, with the codes packed (pack), for a safetensors file."""
        t = {f"{prefix}.codes": pack(self.codes, self.bits), f"{prefix}.table": self.table.contiguous(),
             f"{prefix}.shape": torch.tensor([*self.codes.shape, self.bits, int(self.uniform)])}  # fmt: skip
        if self.nnz:
            t[f"{prefix}.sparse_idx"], t[f"{prefix}.sparse_val"] = self.sparse_idx, self.sparse_val
        return t

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor], prefix: str) -> QWeight:
        out, n, bits, uniform = (int(v) for v in t[f"{prefix}.shape"])
        codes = unpack(t[f"{prefix}.codes"], bits, out * n).view(out, n)
        sparse = t.get(f"{prefix}.sparse_idx"), t.get(f"{prefix}.sparse_val")
        return cls(codes, t[f"{prefix}.table"], bits, *sparse, uniform=bool(uniform))


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes (any shape, uint8) as a flat uint8 tensor: two codes per byte where bits <= 4 (3-bit
    codes take a nibble each too), one per byte otherwise. Flat over the whole matrix, not per row
    as the LUT kernel reads them (kernels/reference.pack_nibbles)."""
    c = codes.reshape(-1).to(torch.uint8)
    if bits > 4:
        return c.clone()
    if c.numel() % 2:
        c = torch.cat([c, c.new_zeros(1)])
    return c[0::2] | (c[1::2] << 4)


def unpack(p: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """pack's inverse: the first n codes, uint8."""
    if bits > 4:
        return p[:n].clone()
    return torch.stack([p & 15, p >> 4], dim=1).reshape(-1)[:n]
