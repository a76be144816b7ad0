"""Training losses with early exits (paper §4.4; CALM, Schuster et al. 2022): the decoder's layer-i
output sent through the final layer norm and the shared head predicts the next token, and the
loss is a weighted sum of these exits' cross-entropies.

    "ee":   L = (L_e + L_n) / 2             the early-exit BiLD model (exit layer e, n layers)
    "calm": L = sum_i w_i L_i, w_i = i / sum_j j    CALM's weighting (t5x aggregation_weights=1)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bildlib.models.early_exit import check_exit_layer

EXIT_LOSSES = ("", "ee", "calm")


def exit_weights(kind: str, n_layers: int, exit_layer: int = 1) -> dict[int, float]:
    """{decoder layer (1-based): weight} of each exit in the loss; "" is the plain last-layer loss."""
    if kind not in EXIT_LOSSES:
        raise ValueError(f"exits must be one of {EXIT_LOSSES}, got {kind!r}")
    if kind == "ee":
        check_exit_layer(exit_layer, n_layers)
        return {exit_layer: 0.5, n_layers: 0.5}
    if kind == "calm":
        total = n_layers * (n_layers + 1) / 2
        return {i: i / total for i in range(1, n_layers + 1)}
    return {n_layers: 1.0}


def exit_logits(model, hidden: tuple[torch.Tensor, ...], layer: int) -> torch.Tensor:
    """Logits of decoder layer `layer` (1-based) from HF's decoder_hidden_states: (embeddings,
    layer 1, ..., layer n-1, final-normed layer n). An early layer goes through the decoder's
    final norm (and dropout, as the last layer does) and the shared head, scaled like the last."""
    h = hidden[layer]
    if layer < len(hidden) - 1:
        h = model.decoder.dropout(model.decoder.final_layer_norm(h))
    if model.config.scale_decoder_outputs:  # tied T5 heads scale by d_model^-0.5
        h = h * model.config.d_model**-0.5
    return model.lm_head(h)  # (B, T, V)


def multi_exit_loss(model, batch: dict, weights: dict[int, float], label_smoothing: float = 0.0):
    """sum_i weights[i] * cross-entropy of exit i on the batch's labels (-100 ignored)."""
    out = model(**batch, output_hidden_states=True)
    hidden = out.decoder_hidden_states
    n = len(hidden) - 1
    loss = 0.0
    for layer, w in weights.items():
        logits = out.logits if layer == n else exit_logits(model, hidden, layer)
        ce = F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), ignore_index=-100,
                             label_smoothing=label_smoothing)  # fmt: skip
        loss = loss + w * ce
    return loss
