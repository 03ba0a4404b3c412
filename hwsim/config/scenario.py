"""Scenario schema: what to simulate. Every default lives here and nowhere else.

Public contract (scripts outside the repo use these keys): `hardware`, `model`, `seed`,
`budget_ms`, `workload.batch_size`, `workload.context_tokens`, `workload.decode_steps`,
`runtime.launch`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Workload(_Block):
    batch_size: int = Field(1, ge=1, description="sequences decoded together in one step")
    context_tokens: int = Field(4096, ge=1, description="KV length each sequence holds at the first step")
    decode_steps: int = Field(8, ge=1, description="decode steps simulated (one token per sequence each)")
    prompt_tokens: int = Field(0, ge=0, description="if > 0, also simulate one prefill of this many tokens")


class Runtime(_Block):
    launch: Literal["graph", "eager"] = Field("graph", description="CUDA-graph replay or eager launches")
    fidelity: Literal["tile", "wave"] = Field(
        "wave", description="tile: one memory/compute event group per thread block; "
                            "wave: one per wave of thread blocks (same resource model, fewer events)")
    moe_schedule: Literal["per-expert", "grouped"] = Field(
        "per-expert", description="per-expert: gather, GEMMs, scatter for each active expert "
                                  "(the measured PyTorch schedule); grouped: one grouped GEMM per layer")


class KvCache(_Block):
    bits: Literal[16, 8, 4, 2] = Field(16, description="bits per cached K/V element (16 = bf16)")


class Routing(_Block):
    kind: Literal["uniform"] = Field("uniform", description="uniform random top-k per token")


class Moe(_Block):
    routing: Routing = Routing()


class Scenario(_Block):
    name: str = "scenario"
    description: str = ""
    hardware: str = Field(description="profile name in hardware_profiles/ or a path to a profile YAML")
    model: str = Field(description="built-in model name or a path to a model-shape YAML")
    seed: int = Field(0, ge=0)
    budget_ms: float = Field(10.0, gt=0, description="per-token latency budget")
    workload: Workload = Workload()
    runtime: Runtime = Runtime()
    kv_cache: KvCache = KvCache()
    moe: Moe = Moe()
