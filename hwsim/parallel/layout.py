"""A scenario's `parallel:` block as a layout: what each GPU computes, and where the tokens of
a MoE layer go.

Two families of layouts, as serving engines run MoE models:
- **tensor-parallel** (tp = gpus, vLLM's default): every GPU holds 1/tp of each attention
  block's heads, of the dense FFNs, shared experts and LM head, and sees every token; an
  all-reduce follows the attention block and the FFN. The routed experts are spread over ep
  groups (whole experts), each expert's FFN split over the gpus / ep GPUs of its group, so the
  FFN's all-reduce also sums the experts' partial outputs.
- **data-parallel attention** (dp_attention, or tp = 1 on several GPUs: SGLang and DeepSeek
  serving V3): every GPU runs attention and the dense layers for its own share of the
  sequences, and the routed experts are spread over all GPUs (ep = gpus): each MoE layer
  dispatches its tokens to the GPUs of their experts and combines the outputs back
  (all-to-all, DeepEP's kernels).
Other mixes (tp between 1 and gpus; experts split over fewer GPUs than hold tokens) would need
gathers between groups and are refused with a message saying which layouts are simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwsim.config.scenario import Parallel
from hwsim.errors import ConfigError
from hwsim.model.shapes import GqaAttention, ModelShape
from hwsim.parallel import placement as pl


@dataclass(frozen=True)
class Layout:
    gpus: int
    tp: int                 # attention and dense layers: split tp ways (1 or gpus)
    ep: int                 # routed experts: whole experts over ep groups
    gpus_per_node: int
    dp_attention: bool

    @property
    def attention_groups(self) -> int:
        """Groups that run attention on their own sequences (gpus under DP attention, else 1)."""
        return self.gpus // self.tp

    @property
    def expert_tp(self) -> int:
        """GPUs that split each expert's FFN (1 when every GPU holds whole experts)."""
        return self.gpus // self.ep

    @property
    def all_to_all(self) -> bool:
        """MoE layers dispatch and combine tokens between GPUs (DP attention with EP)."""
        return self.attention_groups > 1

    def tokens_per_group(self, tokens: int) -> list[int]:
        """Each attention group's share of a pass's tokens (sequences are not split)."""
        g = self.attention_groups
        return [tokens // g + (i < tokens % g) for i in range(g)]


ONE_GPU = Layout(gpus=1, tp=1, ep=1, gpus_per_node=1, dp_attention=False)


def from_config(p: Parallel, model: ModelShape, batch: int) -> Layout:
    """The layout of a scenario, or a ConfigError (exit 2) naming what cannot be simulated.
    One GPU is the trivial layout (its other `parallel:` keys cannot act: config/inert.py says so)."""
    if p.gpus == 1:
        return ONE_GPU
    tp = 1 if p.dp_attention else p.tp
    if p.dp_attention and p.tp > 1:
        raise ConfigError(f"parallel.dp_attention runs attention and the dense layers whole on every GPU; "
                          f"tp = {p.tp} cannot split them too (set tp: 1)", key="parallel.tp")
    if tp not in (1, p.gpus):
        raise ConfigError(f"parallel.tp = {tp} on {p.gpus} GPUs: simulated layouts are tp = gpus "
                          f"(tensor parallel) or tp = 1 (data-parallel attention)", key="parallel.tp")
    layout = Layout(p.gpus, tp, p.ep, p.gpus // p.nodes, p.dp_attention)
    if layout.all_to_all and model.moe and p.ep != p.gpus:      # (a dense model: replicas)
        raise ConfigError(f"data-parallel attention over {p.gpus} GPUs needs the experts on all of them "
                          f"(ep = {p.gpus}, got {p.ep})", key="parallel.ep")
    if layout.attention_groups * p.micro_batches > batch:
        raise ConfigError(f"{layout.attention_groups} attention group(s) x {p.micro_batches} micro-batch(es) "
                          f"need at least that many sequences (workload.batch_size = {batch})", key="parallel")
    _check_divides(model, layout)
    return layout


def _check_divides(model: ModelShape, layout: Layout) -> None:
    a, tp = model.attention, layout.tp
    splits = {"attention heads": a.heads, "vocab (LM head)": model.vocab}
    if model.ffn and (not model.moe or model.moe.dense_layers):
        splits["dense FFN"] = model.ffn
    if model.moe and model.moe.shared_experts:
        splits["shared expert FFN"] = model.moe.shared_ffn
    for what, n in splits.items():
        if tp > 1 and n % tp:
            raise ConfigError(f"{model.name}: {what} ({n}) cannot be split tp = {tp} ways", key="parallel.tp")
    if model.moe:
        if model.moe.experts % layout.ep:
            raise ConfigError(f"{model.name}: {model.moe.experts} experts cannot be spread over ep = "
                              f"{layout.ep} GPUs", key="parallel.ep")
        if model.moe.expert_ffn % layout.expert_tp:
            raise ConfigError(f"{model.name}: expert FFN ({model.moe.expert_ffn}) cannot be split "
                              f"{layout.expert_tp} ways", key="parallel.ep")
    elif layout.ep > 1:
        raise ConfigError(f"{model.name} has no experts to spread (ep = {layout.ep})", key="parallel.ep")


def shard_model(model: ModelShape, layout: Layout) -> ModelShape:
    """The model as one GPU computes it: its share of the heads, dense FFN, shared experts, LM
    head and each expert's FFN. All experts keep their ids (the router scores every one); a
    GPU runs only the tokens routed to its own (per_gpu_choice). Nothing split (one GPU): the
    model itself."""
    tp = layout.tp
    if tp == 1 and layout.expert_tp == 1:
        return model
    a = model.attention
    heads = {"heads": a.heads // tp}
    if isinstance(a, GqaAttention):
        heads["kv_heads"] = max(1, a.kv_heads // tp)
    update = {"attention": a.model_copy(update=heads), "ffn": model.ffn // tp, "vocab": model.vocab // tp}
    if model.moe:
        update["moe"] = model.moe.model_copy(update={"expert_ffn": model.moe.expert_ffn // layout.expert_tp,
                                                     "shared_ffn": model.moe.shared_ffn // tp})
    return model.model_copy(update=update)


class ExpertMap:
    """Which EP group runs each (token, expert) choice: contiguous, round-robin or redundant
    placement (hwsim/parallel/placement.py), per MoE layer (EPLB places each layer on its own
    loads). A choice of an expert with several copies goes to them in turn."""

    def __init__(self, policy: str, experts: int, ep: int, redundant: int, loads: dict[int, np.ndarray]):
        self.ep = ep
        self.copies: dict[int, list[list[int]]] = {}      # layer -> expert -> groups holding a copy
        self.slots = experts // ep + redundant // ep
        for layer, load in loads.items():
            if policy == "redundant":
                placed = pl.redundant(load, ep, self.slots)
            elif policy == "round-robin":
                placed = pl.round_robin(experts, ep)
            else:
                placed = pl.contiguous(experts, ep)
            held: list[list[int]] = [[] for _ in range(experts)]
            for e, g, _ in placed:
                held[e].append(g)
            self.copies[layer] = held

    def groups(self, layer: int, choice: np.ndarray) -> np.ndarray:
        """[tokens, top_k] EP group of each choice (-1 where the choice was dropped)."""
        held = self.copies[layer]
        flat = choice.ravel()
        out = np.full(flat.shape, -1)
        kept = np.flatnonzero(flat >= 0)
        order = kept[np.argsort(flat[kept], kind="stable")]
        experts = flat[order]
        starts = np.searchsorted(experts, experts, side="left")
        nth = np.arange(len(order)) - starts                       # the n-th choice of its expert
        out[order] = [held[e][n % len(held[e])] for e, n in zip(experts.tolist(), nth.tolist())]
        return out.reshape(choice.shape)

    def holder(self, group: int):
        """holds(layer, expert): whether EP group `group` holds a copy of that layer's expert."""
        return lambda layer, e: group in self.copies[layer][e]

    def gpu_load(self, layer_groups: list[np.ndarray]) -> np.ndarray:
        """Choices each EP group ran over the given layers."""
        counts = np.zeros(self.ep)
        for g in layer_groups:
            counts += np.bincount(g[g >= 0].ravel(), minlength=self.ep)
        return counts


def per_gpu_choice(layout: Layout, choice: np.ndarray, groups: np.ndarray, gpu: int) -> np.ndarray:
    """The choices a GPU's experts run (every token's, from every GPU); the others set to -1."""
    return np.where(groups == gpu // layout.expert_tp, choice, -1)


def owners(layout: Layout, tokens: int) -> np.ndarray:
    """The attention group (GPU, under DP attention) each of a pass's tokens belongs to."""
    return np.repeat(np.arange(layout.attention_groups), layout.tokens_per_group(tokens))


def dispatch_counts(layout: Layout, owner: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """[i][j]: (token, expert) messages GPU i sends to GPU j (low-latency style: one per choice)."""
    g = layout.gpus
    src = np.repeat(owner, groups.shape[1])
    dst = groups.ravel()
    keep = dst >= 0
    return np.bincount(src[keep] * g + dst[keep], minlength=g * g).reshape(g, g).astype(float)


