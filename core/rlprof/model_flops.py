"""A model's FLOPs per token, by a named formula: the analytic FLOPs every step, where token counts are known.

Why a formula at all: a trace counts FLOPs only on profiled steps (:mod:`rlprof.analysis.achieved`); every step
has token counts (the framework's batch) and the model, so tokens x FLOPs per token gives every step's
FLOP/s and MFU over the region's window. Each figure carries its formula's name, so a reader knows what was
assumed, and on profiled steps the trace's count stands beside it (docs/analysis.md, "What the compute achieves").

The formulas (N: the parameters of the model's matrix products; a forward pass costs 2N FLOPs a token, a
training step 6N: forward, and the backward's gradients for inputs and weights):

* **dense** (any ``torch.nn.Module``): N = every parameter of two or more dimensions outside an embedding
  (an embedding is a lookup, no product; biases and norms are elementwise). ``2N`` forward, ``6N`` train.
* **decoder** (a Hugging Face causal LM: its ``config`` has ``num_hidden_layers``, ``hidden_size``, ...): N from
  the config (attention's q, k, v, o projections with grouped KV heads, the gated MLP's three matrices or, for a
  mixture of experts, those of the ``num_experts_per_tok`` experts a token visits and the shared expert, the LM
  head), plus causal attention's own products: a token attends to the ones before it, 2·L·H·d_head·s FLOPs a
  token forward (QKᵀ and AV over s/2 keys on average) for a sequence of s tokens, three times that to train.
  A model sharded by FSDP still reports its whole config, so every rank counts its own tokens' FLOPs.

Nothing here imports torch: a module is only asked for its parameters and its ``config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

FORWARD, TRAIN = 2, 6
"""FLOPs per parameter and token of a forward pass and of a training step."""


@dataclass(frozen=True)
class PerToken:
    """A model's FLOPs per token (the attention term, which grows with the sequence, apart)."""

    parameters: int
    """N: the parameters of its matrix products."""
    train: bool
    formula: str
    """Its name as figures carry it: ``6N (dense, train; N=...)``, ``2N+2LHds (decoder, ...)``: L layers, H heads
    of d dimensions, s the sequence's length."""
    attention: float = 0.0
    """Causal attention's FLOPs per sequence, over its length squared (0: no attention term)."""

    @property
    def dense(self) -> float:
        return (TRAIN if self.train else FORWARD) * self.parameters

    def flops(self, tokens: int, sequences: Iterable[int] = ()) -> float:
        """FLOPs of ``tokens`` tokens; ``sequences``: each sequence's length, for the attention term (a sequence of
        s tokens adds ``attention`` x s² FLOPs)."""
        return self.dense * tokens + self.attention * sum(s * s for s in sequences)


def per_token(model: Any, *, train: bool) -> PerToken | None:
    """``model``'s FLOPs per token (a Hugging Face model or config: the decoder formula; any other module: dense),
    or None when neither applies (no parameters, no config)."""
    config = model if _is_decoder_config(model) else getattr(model, "config", None)
    if _is_decoder_config(config):
        return decoder(config, train=train)
    parameters = getattr(model, "named_modules", None)
    if parameters is None:
        return None
    n = dense_parameters(model)
    if n <= 0:
        return None
    factor = TRAIN if train else FORWARD
    return PerToken(n, train, f"{factor}N (dense, {'train' if train else 'forward'}; N={n:,})")


def dense_parameters(model: Any) -> int:
    """The parameters of ``model``'s matrix products: every parameter of 2+ dimensions not in an embedding."""
    n = 0
    for _, module in model.named_modules():
        if type(module).__name__ in ("Embedding", "EmbeddingBag"):
            continue
        for parameter in module.parameters(recurse=False):
            if parameter.dim() >= 2:
                n += parameter.numel()
    return n


_DECODER_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def _is_decoder_config(config: Any) -> bool:
    return config is not None and all(isinstance(getattr(config, key, None), int) for key in _DECODER_KEYS)


def decoder(config: Any, *, train: bool) -> PerToken:
    """The decoder formula (see the module doc) from a Hugging Face config."""
    d, layers, heads = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    attention_linear = d * (heads * head_dim + 2 * kv_heads * head_dim) + heads * head_dim * d
    experts = getattr(config, "num_experts_per_tok", None)
    expert_size = getattr(config, "moe_intermediate_size", None)
    if isinstance(experts, int) and isinstance(expert_size, int) and experts > 0:
        mlp = experts * 3 * d * expert_size + 3 * d * (getattr(config, "shared_expert_intermediate_size", None) or 0)
        kind = f"decoder, MoE with {experts} experts a token"
    else:
        mlp = 3 * d * config.intermediate_size
        kind = "decoder"
    n = layers * (attention_linear + mlp) + config.vocab_size * d
    factor = TRAIN if train else FORWARD
    # causal attention, per sequence of s tokens and head: QK^T and AV are 2·s²·d_head FLOPs each in full, half
    # of it causal; so 2·L·H·d_head·s² forward, three times that to train
    return PerToken(n, train, f"{factor}N+{factor}LHds ({kind}, causal attention; N={n:,}, "
                              f"{'train' if train else 'forward'})", factor * layers * heads * head_dim)
