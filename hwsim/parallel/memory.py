"""What one GPU holds under a parallel layout: its weights, its KV cache and its activations,
against its HBM. A layout that does not fit is a ConfigError (exit 2) naming the numbers,
unless the scenario allows overcommit as a what-if (and the output says so).

Per GPU (the layout of hwsim/parallel/layout.py):
- attention and dense-FFN weights: split tp ways; replicated on every GPU under dp_attention;
- routed experts: whole experts split ep ways, each expert's FFN split over the gpus / ep GPUs
  of its group (tensor-parallel experts, as vLLM runs Mixtral on TP); redundant copies of hot
  experts take spare slots; shared experts and the embeddings and LM head: as dense; the
  router: on every GPU;
- KV cache: each GPU holds its attention group's share of the sequences (batch over
  gpus / tp groups; all of them under tp = gpus) and its share of the KV heads (at least one:
  heads are replicated when tp exceeds them; MLA's one latent head is never split);
- activations: the largest live pair of a layer's hidden-sized and FFN-sized buffers for the
  GPU's tokens, in the activation dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwsim.errors import ConfigError
from hwsim.model.shapes import ModelShape


@dataclass(frozen=True)
class GpuMemory:
    weights: float
    kv_cache: float
    activations: float
    capacity: float

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def kv_room(self) -> float:
        """HBM the weights leave for KV caches (activations not set aside): what a serving loop admits into."""
        return self.capacity - self.weights


def per_gpu(model: ModelShape, *, gpus: int, tp: int, ep: int, dp_attention: bool,
            batch: int, context: int, capacity_bytes: float, kv_bytes_per_element: float = 2.0,
            expert_bytes_per_weight: float | None = None, activation_bytes: float = 2.0,
            attention_bytes_per_weight: float | None = None,
            embedding_bytes_per_weight: float | None = None,
            kv_bytes_per_token_layer: float | None = None, expert_slots: int | None = None) -> GpuMemory:
    """One GPU's memory. Bytes per weight default to the model's width; the stored formats
    (hwsim/model/weight_format.py) pass their own, scales included. `expert_slots`: routed
    experts one GPU holds (E / ep, more with redundant copies)."""
    wb = model.weight_bytes
    eb = expert_bytes_per_weight or wb
    ab = attention_bytes_per_weight or wb
    emb = embedding_bytes_per_weight or wb
    att = sum(model.attention.weight_elements(model.hidden).values()) * model.layers
    moe = model.moe
    moe_layers = sum(model.is_moe_layer(layer) for layer in range(model.layers))
    dense_ffn = 3 * model.hidden * model.ffn * (model.layers - moe_layers)
    experts = shared = router = 0
    if moe:
        experts = 3 * model.hidden * moe.expert_ffn * moe.experts * moe_layers
        shared = 3 * model.hidden * moe.shared_ffn * moe.shared_experts * moe_layers
        router = model.hidden * moe.experts * moe_layers
    embeddings = 2 * model.vocab * model.hidden
    split = 1 if dp_attention else tp             # attention and dense layers
    groups = gpus // split                        # attention groups, each with its sequences
    expert_share = (expert_slots / moe.experts if moe and expert_slots else 1 / ep) * ep / gpus
    weights = att / split * ab + (dense_ffn + shared) / split * eb + embeddings / split * emb \
        + router * wb + experts * expert_share * eb
    heads = model.attention.cached_heads
    kv_share = math.ceil(batch / groups) / batch * (max(1, heads // split) / heads if heads >= split else 1.0)
    per_token = (kv_bytes_per_token_layer if kv_bytes_per_token_layer is not None
                 else model.attention.kv_elements_per_token() * kv_bytes_per_element)
    kv = per_token * model.layers * batch * context * kv_share
    tokens = math.ceil(batch / groups)
    ffn = max(model.ffn, moe.expert_ffn * moe.top_k if moe else 0)
    activations = tokens * (2 * model.hidden + 2 * ffn) * activation_bytes
    return GpuMemory(weights, kv, activations, capacity_bytes)


def check(mem: GpuMemory, where: str, allow_overcommit: bool) -> str | None:
    """Exit-2 error when a GPU's memory does not fit; with allow_overcommit, the warning to print."""
    if mem.fits:
        return None
    msg = (f"{where}: one GPU needs {mem.total / 1e9:.1f} GB (weights {mem.weights / 1e9:.1f} GB + "
           f"KV cache {mem.kv_cache / 1e9:.1f} GB + activations {mem.activations / 1e9:.2f} GB) "
           f"but has {mem.capacity / 1e9:.0f} GB of HBM")
    if allow_overcommit:
        return msg + "; simulated as if it fit (parallel.allow_overcommit)"
    raise ConfigError(msg + "; spread it over more GPUs (parallel: gpus, tp, ep; e.g. "
                      "scenarios/deepseek-v3-ep8.yaml), or set parallel.allow_overcommit: true "
                      "for a what-if", key="parallel")
