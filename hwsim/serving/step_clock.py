"""One step clock: the time of one engine step of a given batch, for any scheduler.

A real engine's scheduler (hwsim/serving/engines/) hands a step's batch as a list of
(query tokens, cached KV tokens), one per sequence. The clock turns it into the pass hwsim's
own serving loop times (hwsim/serving/loop.py: StepOracle, shape_key, pass_shape), so there is
one timing model: the built-in schedule on the scenario's chip, model and formats, simulated by
the hardware engine.

Sequences with one query token and a KV cache are decodes; the others are prompt chunks (a
first chunk, or a later chunk of a chunked prefill over its cached prefix). The pass is keyed by
the loop's shape bucket: decodes exact, their mean context rounded up to CONTEXT_BUCKET (512)
tokens, prompt tokens rounded up to PREFILL_BUCKET (128), prompts in the step exact. A bucket
is simulated once and reused; its error against simulating the exact shape is measured by
benchmarks/bench_serving_engine.py (`--bucket-error`) and stated in docs/serving.md.

Device time is the pass's kernels (their busy union, without hwsim's own launch model: the
engine's host is timed apart, hwsim/serving/engine_host.py). Host time and how it overlaps
the device are the engine host's; with no host model the step takes the device time alone.
"""

from __future__ import annotations

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

    def device(self, sb: StepBatch):
        """The simulated pass of the step's bucket (hwsim.step.StepResult)."""
        return self.oracle.time(sb.decodes, sb.mean_context, sb.prefill_tokens, sb.prefill_sequences)

    def time(self, batch: list[tuple[int, int]]) -> StepTime:
        """The step of `batch`: [(query tokens, cached KV tokens)] per sequence."""
        if not batch:
            raise ValueError("a step needs at least one sequence")
        sb = StepBatch.of(batch)
        step = self.device(sb)
        device_s = step.host.device_busy_s or step.duration_s
        self.steps += 1
        parts = dict(step.breakdown_s)
        parts.pop("launch_overhead", None)       # the engine's host launches, timed below
        parts.pop("host", None)
        if self.host is None:
            return StepTime(device_s, 0.0, device_s, parts, step.kernels, step)
        host = self.host.step(batch, sb, step.kernels, device_s)
        parts.update({f"host_{k}": v for k, v in host.parts_s.items()})
        return StepTime(device_s, host.busy_s, host.wall_s, parts, step.kernels, step)
