"""One step clock: the time of one engine step of a given batch, for any scheduler.

A real engine's scheduler (hwsim/serving/engines/) hands a step's batch as a list of
(query tokens, cached KV tokens), one per sequence. The clock turns it into the pass hwsim's
own serving loop times (hwsim/serving/loop.py: StepOracle, shape_key, pass_shape), so there is
one timing model: the built-in schedule on the scenario's chip, model and formats, simulated by
the hardware engine.

Sequences with one query token and a KV cache are decodes; the others are prompt chunks (a
first chunk, or a later chunk of a chunked prefill over its cached prefix). The pass's shape is
(decodes, their mean context, prompt tokens, prompts in the step). Decodes and prompts are kept
exact; the mean context and the prompt tokens are placed on a grid (GRID below: 128, 256, then
every 512 tokens of context; 16, 32, 64, then every 128 prompt tokens) and the device time is
interpolated linearly between the grid's passes around the step (each simulated once by the
loop's StepOracle, then reused), bilinearly when both are off the grid. A step below the grid's
first point takes that point's pass. Rounding up to a bucket instead (the built-in loop's rule)
was 15% off in device time (median of 60 steps of scenarios/engines/hf-llama-chat.yaml: a
40-token chunk timed as 128 tokens); the grid's error is measured by
benchmarks/bench_serving_engine.py (`--bucket-error`) and stated in docs/serving.md.

Device time is the pass's kernels (their busy union, without hwsim's own launch model: the
engine's host is timed apart, hwsim/serving/engine_host.py). Host time and how it overlaps
the device are the engine host's; with no host model the step takes the device time alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from hwsim.serving.loop import StepOracle


@dataclass(frozen=True, slots=True)
class StepBatch:
    """A step's batch reduced to what the timing reads."""
    decodes: int
    mean_context: float
    prefill_tokens: int
    prefill_sequences: int
    query_tokens: int
    kv_tokens: int

    @classmethod
    def of(cls, batch: list[tuple[int, int]]) -> "StepBatch":
        dec_n = dec_ctx = pre_tok = pre_n = kv = 0
        for q, cached in batch:
            kv += q + cached
            if q == 1 and cached > 0:
                dec_n += 1
                dec_ctx += cached + 1
            else:
                pre_n += 1
                pre_tok += q
        return cls(dec_n, dec_ctx / dec_n if dec_n else 0.0, pre_tok, pre_n, dec_n + pre_tok, kv)


@dataclass(frozen=True, slots=True)
class StepTime:
    device_s: float                  # the pass's kernels on the chip
    host_s: float                    # the engine host's work for the step (all of it)
    total_s: float                   # the step's wall time: what the engine's clock advances
    breakdown_s: dict = field(default_factory=dict)   # device components and host parts
    kernels: int = 0
    step: object = None              # the simulated pass of the bucket (hwsim.step.StepResult)


class StepClock:
    """Step times from the scenario's built system; `host` an EngineHost (or None: device only)."""

    def __init__(self, built, host=None, oracle: StepOracle | None = None):
        self.built = built
        self.host = host
        self.oracle = oracle or StepOracle(built)
        self.steps = 0

    @property
    def shapes_simulated(self) -> int:
        return self.oracle.simulated

    def corner(self, decodes: int, context: int, prefill: int, prompts: int):
        """The simulated pass of one grid shape (hwsim.step.StepResult), simulated once."""
        key = (decodes, context if decodes else 0, prefill, prompts if prefill else 0)
        cache = self.oracle.cache
        if key not in cache:
            cache[key] = self.oracle.simulate(key)
        return cache[key]

    def device(self, sb: StepBatch) -> tuple[float, dict, object]:
        """The step's device time, its breakdown, and the grid pass nearest above it."""
        dec = _around(sb.decodes, DECODE_GRID) if sb.decodes else ((0, 1.0),)
        ctx = _around(sb.mean_context, CONTEXT_GRID) if sb.decodes else ((0, 1.0),)
        pre = _around(sb.prefill_tokens, PREFILL_GRID) if sb.prefill_tokens else ((0, 1.0),)
        secs, parts, top = 0.0, {}, None
        for (d, wd), (c, wc), (p, wp) in itertools.product(dec, ctx, pre):
            w = wd * wc * wp
            if w == 0.0:
                continue
            step = self.corner(d, c, p, sb.prefill_sequences)
            secs += w * (step.host.device_busy_s or step.duration_s)
            for k, v in step.breakdown_s.items():
                parts[k] = parts.get(k, 0.0) + w * v
            top = step
        return secs, parts, top

    def time(self, batch: list[tuple[int, int]], padding: tuple = ()) -> StepTime:
        """The step of `batch`: [(query tokens, cached KV tokens)] per sequence; `padding`: rows
        the engine adds (CUDA graphs' static shapes), run on the device, no request's."""
        if not batch:
            raise ValueError("a step needs at least one sequence")
        sb = StepBatch.of([*batch, *padding])
        device_s, parts, step = self.device(sb)
        self.steps += 1
        parts.pop("launch_overhead", None)       # the engine's host launches, timed below
        parts.pop("host", None)
        if self.host is None:
            return StepTime(device_s, 0.0, device_s, parts, step.kernels, step)
        host = self.host.step(batch, sb, step.kernels, device_s, parts)
        if host.attention_s:                      # the engine's own attention (engine_host.py)
            device_s += host.attention_s
            parts["packed_attention"] = host.attention_s
        parts.update({f"host_{k}": v for k, v in host.parts_s.items()})
        return StepTime(device_s, host.busy_s, host.wall_s, parts, step.kernels, step)


# the grid points the device time is interpolated between (tokens)
DECODE_GRID = ((1, 2, 3, 4, 6, 8, 12, 16, 24, 32), 16)   # (first points, then every this many)
CONTEXT_GRID = ((128, 256, 512), 512)
PREFILL_GRID = ((16, 32, 64, 128), 128)


def _around(x: float, points_step: tuple) -> tuple:
    """((lower point, weight), (upper point, weight)) of x on the grid (its points, then every
    `step`); x at or below the first point: that point alone."""
    grid, step = points_step
    if x <= grid[0]:
        return ((grid[0], 1.0),)
    if x <= grid[-1]:
        hi = next(g for g in grid if g >= x)
        lo = grid[grid.index(hi) - 1]
    else:
        hi = grid[-1] + math.ceil((x - grid[-1]) / step) * step
        lo = hi - step
    if x == hi:
        return ((hi, 1.0),)
    w = (x - lo) / (hi - lo)
    return ((lo, 1.0 - w), (hi, w))
