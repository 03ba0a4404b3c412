"""The blocks a schedule (hwsim/model/schedule.py) is assembled from, registered by the config
name that chooses them: the decode attention kernel (`runtime.attention_kernel`), the MoE
schedule of a layer with experts (`runtime.moe_schedule`) and the dense FFN of a layer
without. Each declares what it supports; a scenario that asks one for anything else is refused
with one ConfigError naming the key (exit 2), never run as something else.

The registry's names are the schema's choices (hwsim.config.scenario reads them): this module
imports nothing of hwsim but its errors, so it sits with the schemas.

A block says how its kernels are chosen; the schedule's builders make them (the shapes, the
weights' addresses and formats, the memo), so a new block is a class here and its builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hwsim.errors import ConfigError


# -- attention: runtime.attention_kernel ----------------------------------------------------------
@dataclass(frozen=True)
class AttentionKernel:
    """A decode attention kernel over a bf16 KV cache (a quantized cache is read by the fused
    low-bit kernel whichever is chosen: hwsim/config/inert.py says so)."""
    name: str
    library: str                    # hwsim.model.ops.decode_attention's library: flash or cudnn
    mla_reference: bool = False     # MLA decode as DeepSeek's reference PyTorch code
                                    # (Schedule._mla_eager_decode), not one fused latent kernel
    mla_only: bool = False          # supports: MLA models only
    bf16_kv_only: bool = False      # supports: a bf16 KV cache only
    source: str = ""                # what it stands for, for the refusal

    KEY: ClassVar[str] = "runtime.attention_kernel"

    def check(self, model, kv) -> None:
        """Refuse a model or KV format this kernel is not modelled for."""
        mla = model.attention.latent
        if (self.mla_only and not mla) or (self.bf16_kv_only and not kv.is_unquantized):
            others = " or ".join(n for n, a in ATTENTION_KERNELS.items() if not (a.mla_only or a.bf16_kv_only))
            needs = " over ".join(w for w, on in (("MLA models", self.mla_only),
                                                  ("a bf16 KV cache", self.bf16_kv_only)) if on)
            raise ConfigError(f"{self.name} attention is modelled for {needs} only ({self.source}); "
                              f"use {others}", key=self.KEY)


ATTENTION_KERNELS: dict[str, AttentionKernel] = {a.name: a for a in (
    AttentionKernel("flash", "flash", source="FlashAttention-2; for MLA a fused latent kernel as FlashMLA"),
    AttentionKernel("cudnn", "cudnn", source="cuDNN's SDPA kernel"),
    AttentionKernel("eager", "flash", mla_reference=True, mla_only=True, bf16_kv_only=True,
                    source="DeepSeek's reference code"),
)}


def attention_kernel(name: str) -> AttentionKernel:
    return ATTENTION_KERNELS[name]


# -- the FFN: runtime.moe_schedule, and the dense FFN ---------------------------------------------
@dataclass(frozen=True)
class FfnBlock:
    """How a layer's FFN runs. `routed` returns the routed experts' kernels of a MoE layer (after
    the router and the shared experts, before the residual add): `counts` tokens per expert,
    `experts` the active ones and `plans` where each one's weights come from (moe_dispatch)."""
    name: str
    placements: tuple[str, ...] = ("interleaved", "per-expert")   # supports: moe.placement
    one_kernel: bool = False        # one kernel a projection covers every active expert
    unsupported: str = ""           # why a placement it lacks is not modelled

    KEY: ClassVar[str] = "runtime.moe_schedule"

    def problems(self, cfg):
        """(key, message) for each key of the scenario this block cannot honour."""
        placement = cfg.moe.placement
        if placement not in self.placements:
            yield "moe.placement", (f"placement {placement} (each expert on one HBM stack) is simulated with "
                                    f"{self.KEY} {' or '.join(n for n, b in MOE_SCHEDULES.items() if placement in b.placements)} "
                                    f"only, not {self.name}: {self.unsupported}; use placement "
                                    f"{' or '.join(self.placements)}")

    def routed(self, s, layer: int, t: int, counts, experts: list[int], plans: list) -> list:
        raise NotImplementedError


class PerExpert(FfnBlock):
    """The measured PyTorch loop: gather, GEMMs, scatter for each active expert."""

    def routed(self, s, layer, t, counts, experts, plans):
        return s._per_expert_moe(layer, t, counts, experts, plans)


@dataclass(frozen=True)
class OneKernel(FfnBlock):
    """A grouped (torch._grouped_mm) or fused (Triton) MoE: `build` names the schedule's builder."""
    placements: tuple[str, ...] = ("interleaved",)
    one_kernel: bool = True
    unsupported: str = "its one kernel reads all active experts at once"
    build: str = ""

    def routed(self, s, layer, t, counts, experts, plans):
        if not experts:      # expert parallelism sent no token to this GPU's experts (hwsim/parallel)
            return []
        # the active experts' counts as Python ints, picked by numpy: a 256-expert layer's
        # counts iterated one numpy scalar at a time were 2% of a 64-GPU run (issue 33)
        active = np.asarray(counts)
        return s._one_kernel_moe(layer, t, tuple(active[active != 0].tolist()), plans, getattr(s, self.build))


class DenseFfn(FfnBlock):
    """A layer without experts: one MLP over every token (stored as the experts' weight class)."""

    def kernels(self, s, layer: int, t: int) -> list:
        return s._dense_ffn(layer, t)


MOE_SCHEDULES: dict[str, FfnBlock] = {b.name: b for b in (
    PerExpert("per-expert"),
    OneKernel("grouped", build="_grouped_moe"),
    OneKernel("fused", build="_fused_moe"),
)}
DENSE_FFN = DenseFfn("dense")


def moe_schedule(name: str) -> FfnBlock:
    return MOE_SCHEDULES[name]


def moe_schedule_problems(cfg):
    """(key, message) for each MoE key the chosen runtime.moe_schedule cannot honour (the loader
    names its file and line; the pipeline's check stage refuses a scenario made without a file, as a
    sweep's point, before it is built).
    A grouped or fused kernel reads every active expert's weights in one kernel, and a simulated
    kernel streams its weights over one channel range: one stack per expert is not modelled for it."""
    yield from moe_schedule(cfg.runtime.moe_schedule).problems(cfg)
