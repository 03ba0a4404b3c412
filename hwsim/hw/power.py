"""Board power, and the SM clock a power limit settles at.

A GPU's firmware holds its average board power at the limit by lowering the SM clock (and the
voltage with it) within tens of milliseconds: on the H200 a 512-token Llama-3.1-8B prefill runs
12.1 ms on its first replays and 13.7-14 ms once the limit holds (validation/probe_clocks.py).
Measurements replay a pass back to back, and serving keeps the chip busy, so a pass runs at
the *settled* clock: the one at which the pass's own average power equals the limit.

Power comes from what the simulated pass did, as the device's units counted it (their work:
hwsim/hw/device.py Device.work, read before and after the pass; several GPUs: each kind's
busiest GPU), split by how it scales with the SM clock f (x = f / f_max):

    P = idle + clock * x^3 + (x_t^2 * tensor flops * e_tensor + x^2 * L2-hit bytes * e_l2) / T
        + HBM bytes * e_hbm / T

with x_t = min(f, f_tensor) / f_tensor: dense tensor-core work never runs above f_tensor (on
the H200 a GEMM on zeros holds 1755 MHz at 404 W, far under the limit), so the profile's
calibrated tensor rates, and e_tensor, are at f_tensor, and a power-capped clock slows tensor
work only below it.

The SMs' and the L2's switching energy scales with V^2 (V about proportional to f in the
DVFS range), the clock tree's power with f V^2; HBM has its own clock. Time T itself comes
from simulating the pass on the chip at that clock (ChipSpec.at_sm_clock), so memory-bound
passes lose little when throttled and compute-bound ones lose nearly x.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hwsim.config.profile import Power


@dataclass(frozen=True)
class ClockChoice:
    """`runtime.sm_clock`, read: the clock the power limit settles the SMs at (`settles`), the
    maximum (`max`), or a clock locked at `locked_mhz`."""
    settles: bool = False
    locked_mhz: float | None = None


CLOCK_CHOICES = {"settled": ClockChoice(settles=True), "max": ClockChoice()}


def clock_choice(sm_clock: str | float) -> ClockChoice:
    return CLOCK_CHOICES[sm_clock] if isinstance(sm_clock, str) else ClockChoice(locked_mhz=sm_clock)


@dataclass(frozen=True)
class Activity:
    """Work of one or more passes, as the units counted it: what their power is made of."""

    tensor_flops: float = 0.0     # the SM pool's, padded to the MMA shape, as the tensor pipe runs them
    l2_bytes: float = 0.0         # the L2's hits (reused activations, GEMM operands; not copies landing)
    hbm_bytes: float = 0.0        # the HBM channels' bytes read or written (weights, KV, evicted
                                  # activations, copies)

    def __add__(self, other: "Activity") -> "Activity":
        return Activity(self.tensor_flops + other.tensor_flops, self.l2_bytes + other.l2_bytes,
                        self.hbm_bytes + other.hbm_bytes)

    def __sub__(self, other: "Activity") -> "Activity":
        return Activity(self.tensor_flops - other.tensor_flops, self.l2_bytes - other.l2_bytes,
                        self.hbm_bytes - other.hbm_bytes)


@dataclass(frozen=True)
class PowerModel:
    limit_w: float
    idle_w: float
    clock_w: float
    tensor_j_per_flop: float
    l2_j_per_byte: float
    hbm_j_per_byte: float
    max_clock_hz: float
    min_clock_hz: float
    tensor_clock_hz: float      # tensor work runs at most at this clock (ChipSpec.at_sm_clock)

    @classmethod
    def from_profile(cls, p: Power, max_clock_mhz: float) -> "PowerModel":
        return cls(limit_w=p.limit_w.value, idle_w=p.idle_w.value, clock_w=p.clock_w.value,
                   tensor_j_per_flop=p.tensor_pj_per_flop.value * 1e-12,
                   l2_j_per_byte=p.l2_pj_per_byte.value * 1e-12,
                   hbm_j_per_byte=p.hbm_pj_per_byte.value * 1e-12,
                   max_clock_hz=max_clock_mhz * 1e6, min_clock_hz=p.min_clock_mhz.value * 1e6,
                   tensor_clock_hz=p.tensor_clock_mhz.value * 1e6)

    def watts(self, work: Activity, seconds: float, clock_hz: float) -> float:
        """Average board power of `work` done in `seconds` with the SMs at `clock_hz`."""
        x = clock_hz / self.max_clock_hz
        x_tensor = min(clock_hz, self.tensor_clock_hz) / self.tensor_clock_hz
        tensor_j = x_tensor ** 2 * work.tensor_flops * self.tensor_j_per_flop
        l2_j = x * x * work.l2_bytes * self.l2_j_per_byte
        return (self.idle_w + self.clock_w * x ** 3
                + (tensor_j + l2_j + work.hbm_bytes * self.hbm_j_per_byte) / seconds)


@dataclass(frozen=True)
class Settled:
    clock_hz: float
    watts: float              # average power at that clock
    watts_at_max: float       # what the pass would draw at the maximum clock (over the limit: throttled)
    seconds: float            # the pass's time at that clock
    simulations: int


# the firmware's own steps are 15 MHz; within 1% of the limit the clock is as settled as it gets
_TOLERANCE = 0.01
_MAX_SIMULATIONS = 6


# what a pass's time is made of, by how it scales with the SM clock (ChipSpec.at_sm_clock):
# the SMs' fixed cost per kernel and their vector rates with the clock, tensor rates below
# tensor_clock_hz; the rest (memory, launches, copies, waits) keeps its time
_SM_CLOCKED = frozenset({"kernel_overhead", "dequant"})
_TENSOR_CLOCKED = frozenset({"attention_compute", "gemm_compute"})


def rescaled_seconds(model: PowerModel, seconds: float, breakdown_s: dict[str, float],
                     clock_hz: float) -> float:
    """The time of passes that took `seconds` at the maximum clock, `breakdown_s` of it by
    component, estimated at `clock_hz`: their SM-bound parts stretch with the clock, the rest
    keeps its time. An estimate: at a lower clock a wave's critical path can move from memory
    to compute, and compute hidden under memory stays hidden."""
    x = model.max_clock_hz / clock_hz
    x_tensor = min(model.max_clock_hz, model.tensor_clock_hz) / min(clock_hz, model.tensor_clock_hz)
    return seconds + sum(secs * ((x if comp in _SM_CLOCKED else x_tensor) - 1.0)
                         for comp, secs in breakdown_s.items() if comp in _SM_CLOCKED or comp in _TENSOR_CLOCKED)


def _estimated_root(model: PowerModel, work: Activity, seconds_at: Callable[[float], float]) -> float:
    """The clock at which `work`, done in `seconds_at(clock)`, draws the limit (bisection to
    about 1 kHz: an estimate costs microseconds, a simulation a good part of a run)."""
    lo, hi = model.min_clock_hz, model.max_clock_hz
    while hi - lo > 1e3:
        mid = 0.5 * (lo + hi)
        if model.watts(work, seconds_at(mid), mid) > model.limit_w:
            hi = mid
        else:
            lo = mid
    return lo


def settle(model: PowerModel, simulate: Callable[[float], tuple[float, Activity]],
           breakdown_at_max: Callable[[], dict[str, float]] | None = None) -> Settled:
    """The clock at which the pass `simulate(clock_hz) -> (seconds, activity)` draws the power
    limit; the maximum clock when it stays under. Each probe is a simulation at that clock, and
    the answer is always the last probe, at the clock it names.
    `breakdown_at_max()`: where the first probe's (maximum-clock) time went, by component
    (issue 33: time once, re-scale the clock-dependent parts). The first guess is then the clock
    where that time re-scaled (rescaled_seconds) draws the limit, and one simulation there
    confirms it: most throttled runs settle in two simulations.
    Without it, or where the confirmation misses, power rises monotonically with the clock, so
    the root is found by the secant method through the last two probes until it is bracketed,
    then by regula falsi inside the bracket: two or three simulations for a compute-bound pass,
    a few more for a memory-bound one (its HBM power does not fall with the clock, so the cubic
    guess lands high)."""
    top = model.max_clock_hz
    t, work = simulate(top)
    at_max = model.watts(work, t, top)
    if at_max <= model.limit_w:
        return Settled(top, at_max, at_max, t, 1)
    over, under = (top, at_max), None            # nearest probes above and below the limit
    last = over
    if breakdown_at_max is not None:
        breakdown = breakdown_at_max()
        clock = _estimated_root(model, work, lambda hz: rescaled_seconds(model, t, breakdown, hz))
    else:
        # every rate scales with the clock (a compute-bound pass), so energy per pass scales
        # with x^2 and time with 1/x: P(x) ~ idle + (P(1) - idle) x^3
        # (a limit at or under the idle power is refused at load: hwsim.config.limits; the
        # guard keeps the cube root real: the lowest clock, then the probes below)
        clock = top * max((model.limit_w - model.idle_w) / (at_max - model.idle_w), 0.0) ** (1 / 3)
    best = None
    for n in range(2, _MAX_SIMULATIONS + 1):
        clock = min(max(clock, model.min_clock_hz), top)
        t, work = simulate(clock)
        p = model.watts(work, t, clock)
        best = Settled(clock, p, at_max, t, n)
        if abs(p - model.limit_w) <= _TOLERANCE * model.limit_w or (p < model.limit_w and clock <= model.min_clock_hz):
            return best
        prev, last = last, (clock, p)
        if p > model.limit_w:
            over = last
        else:
            under = last
        a, b = (under, over) if under else (prev, last)
        if b[1] == a[1]:
            break
        clock = a[0] + (b[0] - a[0]) * (model.limit_w - a[1]) / (b[1] - a[1])
    return best
