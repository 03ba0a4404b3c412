"""run_scenario(cfg) -> RunResult: the simulation, as pure data. Never touches the disk."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hwsim import __version__
from hwsim.build import Built, build
from hwsim.config.scenario import Scenario
from hwsim.engine.rng import RandomStreams
from hwsim.hw.system import KernelRecord
from hwsim.metrics import Component, percentiles, traffic_class
from hwsim.model.schedule import StepShape
from hwsim.workload.kv_fidelity import attention_rel_error
from hwsim.workload.kv_format import max_context_fitting
from hwsim.workload.router import uniform_topk


@dataclass
class StepResult:
    step: int
    phase: str
    batch: int
    context: int
    t_start: float
    t_end: float
    breakdown_s: dict[str, float]
    bytes: dict[str, float]
    kernels: int
    active_experts_per_layer: float

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start


@dataclass
class RunResult:
    scenario: Scenario
    steps: list[StepResult]
    records: list[KernelRecord]
    summary: dict
    resolved: dict = field(default_factory=dict)


def _routing(b: Built, rng, tokens: int):
    m = b.model
    return [uniform_topk(rng, tokens, m.moe) if m.is_moe_layer(layer) else None
            for layer in range(m.layers)]


def simulate_pass(b: Built, shape: StepShape, step: int, rng, records: list[KernelRecord]) -> StepResult:
    routing = _routing(b, rng, shape.tokens)
    kernels = b.schedule.step(shape, routing)
    first = len(records)
    t0 = b.env.now
    b.env.process(b.system.run_stream(kernels, step, records))
    b.env.run()
    breakdown = {c.value: 0.0 for c in Component}
    moved = {"weights": 0.0, "kv": 0.0, "activations": 0.0}
    for rec in records[first:]:
        for comp, secs in rec.attribution.items():
            breakdown[comp.value] += secs
        moved[traffic_class(rec.data)] += rec.hbm_read_bytes + rec.hbm_write_bytes
    active = [len(np.unique(r)) for r in routing if r is not None]
    return StepResult(step=step, phase=shape.phase, batch=shape.batch, context=shape.context,
                      t_start=t0, t_end=b.env.now, breakdown_s=breakdown, bytes=moved,
                      kernels=len(kernels), active_experts_per_layer=float(np.mean(active)) if active else 0.0)


def run_scenario(cfg: Scenario, built: Built | None = None) -> RunResult:
    wall0 = time.perf_counter()
    b = built or build(cfg)
    w = cfg.workload
    rng = RandomStreams(cfg.seed).get("routing")
    records: list[KernelRecord] = []
    steps: list[StepResult] = []
    prefill = None
    if w.prompt_tokens:
        prefill = simulate_pass(b, StepShape("prefill", 1, w.prompt_tokens, 0), -1, rng, records)
    for i in range(w.decode_steps):
        shape = StepShape("decode", w.batch_size, w.batch_size, w.context_tokens + i)
        steps.append(simulate_pass(b, shape, i, rng, records))
    wall = time.perf_counter() - wall0
    summary = summarize(cfg, b, steps, prefill, wall)
    all_steps = ([prefill] if prefill else []) + steps
    return RunResult(scenario=cfg, steps=all_steps, records=records, summary=summary)


def kv_summary(cfg: Scenario, b: Built) -> dict:
    """What the KV format stores, saves, and costs in accuracy, at the scenario's context."""
    fmt, m = b.schedule.kv, b.model
    context = cfg.workload.context_tokens
    bits = fmt.bits_per_element(context)
    a = m.attention
    heads = 1 if a.kind == "mla" else a.kv_heads
    free = b.chip.hbm_capacity_bytes - b.schedule.weight_bytes_total()
    return {
        "effective_bits_per_element": bits,
        "bytes_per_token": m.layers * b.schedule.kv_token_bytes(context),
        "effective_bandwidth_multiplier": 16.0 / bits,
        "attention_rel_error": attention_rel_error(fmt, cfg.seed),
        "max_context_tokens_fitting": max_context_fitting(
            free, cfg.workload.batch_size, m.layers, a.kv_elements_per_token(), heads, fmt),
        "dequant": b.schedule.dequant,
    }


def summarize(cfg: Scenario, b: Built, steps: list[StepResult], prefill: StepResult | None,
              wall_s: float) -> dict:
    n = len(steps)
    itl = [s.duration_s for s in steps]
    breakdown = {k: sum(s.breakdown_s[k] for s in steps) / n * 1e3 for k in steps[0].breakdown_s}
    moved = {k: sum(s.bytes[k] for s in steps) / n for k in steps[0].bytes}
    budget_s = cfg.budget_ms * 1e-3
    return {
        "scenario": cfg.name,
        "hardware": cfg.hardware,
        "model": cfg.model,
        "seed": cfg.seed,
        "budget_ms": cfg.budget_ms,
        "batch_size": cfg.workload.batch_size,
        "context_tokens": cfg.workload.context_tokens,
        "launch": cfg.runtime.launch,
        "itl_ms": percentiles(itl),
        "ttft_ms": percentiles([prefill.duration_s]) if prefill else None,
        "within_budget": float(np.mean([t <= budget_s for t in itl])),
        "breakdown_ms": breakdown,
        "bytes": moved,
        "kernels_per_step": steps[0].kernels,
        "active_experts_per_layer": float(np.mean([s.active_experts_per_layer for s in steps])),
        "weights_gb": b.schedule.weight_bytes_total() / 1e9,
        "kv": kv_summary(cfg, b),
        "warnings": b.warnings,
        "sim": {"events": b.system.events, "wall_s": wall_s,
                "simulated_tokens": n * cfg.workload.batch_size, "version": __version__},
    }
