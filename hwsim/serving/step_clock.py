"""One step clock: the time of one engine step of a given batch, for any scheduler.

A real engine's scheduler (hwsim/serving/engines/) hands a step's batch as a list of
(query tokens, cached KV tokens), one per sequence. The clock turns it into the pass hwsim's
own serving loop times (hwsim/serving/loop.py: StepOracle, shape_key, pass_shape), so there is
one timing model: the built-in schedule on the scenario's chip, model and formats, simulated by
the hardware engine.

Sequences with one query token and a KV cache are decodes; the others are prompt chunks (a
first chunk, or a later chunk of a chunked prefill over its cached prefix). The pass's shape is
(decodes, their mean context, prompt tokens, prompts in the step). The prompts are kept exact;
decodes, mean context and prompt tokens are placed on geometric grids (GRIDS below) and the
device time is interpolated linearly between the grid's passes around the step (each simulated
once by the loop's StepOracle, then reused by the run's clock), bilinearly or trilinearly when
several are off the grid. A step below a grid's first point takes that point's pass. The grids
are geometric because the pass is near linear between their points: decode attention is
bilinear in decodes x context (which bilinear interpolation reproduces), the GEMMs linear in
tokens once compute-bound; a step with prompt tokens runs its decodes inside the prompt's
GEMMs, so its decodes and context take a coarser grid (x4) than a decode-only step's (x2).
Fewer passes is the clock's speed (a pass is ~10 ms of Python: 78 instead of 299 for 200
requests of scenarios/engines/hf-llama-chat.yaml) at the same accuracy: the grid's error
against each step's exact shape is measured by benchmarks/bench_serving_engine.py
(`--bucket-error`), stated in docs/serving.md and held by tests/test_step_clock.py. Rounding up
to a bucket instead (the built-in loop's rule) was 15% off in device time (median of 60 steps:
a 40-token chunk timed as 128 tokens).

Device time is the pass's kernels (their busy union, without hwsim's own launch model: the
engine's host is timed apart, hwsim/serving/engine_host.py). Host time and how it overlaps
the device are the engine host's; with no host model the step takes the device time alone.

An engine whose attention is one SDPA over the packed batch (HF's paged|sdpa: `packed`) runs
its own attention kernels in place of the pass's per-sequence ones (hwsim/model/paged_sdpa.py):
the grid's passes leave attention out (paged_sdpa.APART), and the attention's kernels run as a
stream of their own on the same system, on their own (q, k) grid (hwsim/serving/packed_attention.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hwsim.hw.power import Activity
from hwsim.model.ops import MMA_M
from hwsim.model.paged_sdpa import APART, PackedShape
from hwsim.serving.loop import StepOracle
from hwsim.serving.packed_attention import GRID, PackedStreams, packed_shape


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
    """Step times from the scenario's built system; `host` an EngineHost (or None: device only);
    `packed`: the engine attends the packed batch in one SDPA (the host's profile gives its share
    of the tensor peak), one GPU."""

    def __init__(self, built, host=None, oracle: StepOracle | None = None, packed: bool = False):
        self.built = built
        self.host = host
        self.oracle = oracle or StepOracle(built)
        self.attention = PackedStreams(built) if packed and host is not None else None
        self.steps = 0

    @property
    def shapes_simulated(self) -> int:
        return self.oracle.simulated + (self.attention.simulated if self.attention else 0)

    def corner(self, decodes: int, context: int, prefill: int, prompts: int, apart: bool = False):
        """The simulated pass of one grid shape (hwsim.step.StepResult), simulated once;
        `apart`: without attention (the engine's runs in its own stream)."""
        key = (decodes, context if decodes else 0, prefill, prompts if prefill else 0)
        cache = self.oracle.cache
        if apart:
            key = (*key, APART)
        if key not in cache:
            cache[key] = self.oracle.simulate(key[:4], APART if apart else None)
        return cache[key]

    def device(self, sb: StepBatch, packed=None, exact: bool = False) -> tuple[float, dict, object]:
        """The step's device time, its breakdown, and its pass: the grid passes around it
        blended with the interpolation's weights (one pass where the step is on the grid);
        `packed` (a PackedShape): with the engine's attention stream of that shape (`exact`:
        that shape's own, else its grid's around it) in place of the passes' attention."""
        grid = GRIDS["mixed" if sb.prefill_tokens else "decode"]
        dec = _around(sb.decodes, *grid["decodes"]) if sb.decodes else ((0, 1.0),)
        ctx = _around(sb.mean_context, *grid["context"]) if sb.decodes else ((0, 1.0),)
        pre = _around(sb.prefill_tokens, *GRIDS["prefill"]) if sb.prefill_tokens else ((0, 1.0),)
        corners = [(wd * wc * wp, self.corner(d, c, p, sb.prefill_sequences, packed is not None))
                   for d, wd in dec for c, wc in ctx for p, wp in pre]
        if packed is not None:
            corners += self.attention_corners(packed, exact)
        secs, parts = 0.0, {}
        for w, step in corners:
            secs += w * (step.host.device_busy_s or step.duration_s)
            for k, v in step.breakdown_s.items():
                parts[k] = parts.get(k, 0.0) + w * v
        return secs, parts, corners[0][1] if len(corners) == 1 else _blend(corners, dict(parts))

    def attention_corners(self, p: PackedShape, exact: bool) -> list[tuple[float, object]]:
        """[(weight, stream)] of the engine's attention: `p`'s own (`exact`: a padded shape), or
        the (q, k) grid's streams around it, q as the SDPA's MMAs pad its rows (its flops are
        linear in them: hwsim/serving/packed_attention.py)."""
        if exact:
            return [(1.0, self.attention.stream(p))]
        rows = -(-p.q // MMA_M) * MMA_M
        return [(wq * wk, self.attention.stream(PackedShape(q, k, p.gathers, p.share, p.lone)))
                for q, wq in _around(rows, *GRID["q"]) for k, wk in _around(p.k, *GRID["k"])]

    def packed(self, batch) -> tuple:
        """(the step's packed attention shape or None, whether it is exact: a padded shape)."""
        share = self.host.sdpa_share() if self.attention is not None else None
        if share is None:
            return None, False
        graphs = self.host.cuda_graph
        return packed_shape(batch, share, self.host.padding if graphs else None, self.host.sdpa_lone()), graphs

    def time(self, batch: list[tuple[int, int]], padding: tuple = ()) -> StepTime:
        """The step of `batch`: [(query tokens, cached KV tokens)] per sequence; `padding`: rows
        the engine adds (CUDA graphs' static shapes), run on the device, no request's."""
        if not batch:
            raise ValueError("a step needs at least one sequence")
        sb = StepBatch.of([*batch, *padding])
        device_s, parts, step = self.device(sb, *self.packed(batch))
        self.steps += 1
        parts.pop("launch_overhead", None)       # the engine's host launches, timed below
        parts.pop("host", None)
        if self.host is None:
            return StepTime(device_s, 0.0, device_s, parts, step.kernels, step)
        host = self.host.step(batch, sb, step.kernels, device_s)
        parts.update({f"host_{k}": v for k, v in host.parts_s.items()})
        return StepTime(device_s, host.busy_s, host.wall_s, parts, step.kernels, step)


def _blend(corners: list, breakdown: dict):
    """A pass standing for a step between grid passes (what the run's summary averages: its
    breakdown, bytes, kernels, work and host figures), each figure its corners' weighted sum.
    Its upper corner alone put the 200-request run's mean device_busy_ms at 8.28 ms, where the
    steps' own device time averages 7.36 ms (a chunk's prompt tokens rounded up)."""
    weights = [w for w, _ in corners]
    steps = [s for _, s in corners]

    def mix(values: list) -> float:     # the corners' values, in their order: sum's order as ever
        return sum([w * v for w, v in zip(weights, values)])
    first, hosts = steps[0], [s.host for s in steps]
    host = {f.name: mix([getattr(h, f.name) for h in hosts]) for f in dataclasses.fields(first.host)}
    act = [s.activity for s in steps]
    return dataclasses.replace(
        first, t_start=0.0, t_end=mix([s.duration_s for s in steps]), breakdown_s=breakdown,
        bytes={k: mix([s.bytes.get(k, 0.0) for s in steps]) for k in first.bytes},
        kernels=mix([s.kernels for s in steps]), tokens=mix([s.tokens for s in steps]),
        active_experts_per_layer=mix([s.active_experts_per_layer for s in steps]),
        active_weight_fraction=mix([s.active_weight_fraction for s in steps]),
        activity=Activity(mix([a.tensor_flops for a in act]), mix([a.l2_bytes for a in act]),
                          mix([a.hbm_bytes for a in act])),
        host=dataclasses.replace(first.host, **host))


# the grids the device time is interpolated on: (first point, ratio, widest spacing) in tokens;
# a pass's time is a staircase in decodes (the GEMMs' tiles: 5.6 ms at 33 decodes, 6.0 at 34 on
# the H200's Llama-3.1-8B), so their spacing is capped
GRIDS = {
    "decode": {"decodes": (1, 2, 8), "context": (128, 2, None)},      # a decode-only step
    "mixed": {"decodes": (1, 4, 64), "context": (256, 4, None)},       # decodes inside a prompt's GEMMs
    "prefill": (16, 4, None),                                          # prompt tokens of a step
}


def _around(x: float, first: int, ratio: int, spacing: int | None = None) -> tuple:
    """((lower point, weight), (upper point, weight)) of x on the grid first * ratio**k (points
    at most `spacing` apart); x at or below the first point, or on a point: that point alone."""
    if x <= first:
        return ((first, 1.0),)
    lo = hi = first
    while hi < x:
        lo, hi = hi, hi * ratio if spacing is None else min(hi * ratio, hi + spacing)
    if x == hi:
        return ((hi, 1.0),)
    w = (x - lo) / (hi - lo)
    return ((lo, 1.0 - w), (hi, w))
