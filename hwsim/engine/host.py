"""Stream items that are not kernels timed from shapes: the host's own work between launches
(an imported trace's CPU time and synchronisations, hwsim/ktrace/) and device work taken as
given (a trace kernel nothing could classify, held at its traced duration). The stream
(hwsim/engine/stream.py) runs them in order with its kernels."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostWork:
    """The host spends `cpu_s` of CPU work and then `launch_s` in `launches` launch calls
    before the device items that follow are issued (a graph launch issues all of its kernels
    at once); with `sync` it first waits until the device has finished everything issued so far
    (cudaStreamSynchronize, the D2H copy behind .item()). Under graph replay the host is off the
    critical path: the stream ignores these. A stream fed HostWork pays no launch cost of its
    own per kernel (Stream.launch_s is 0): the items carry it."""

    cpu_s: float
    launch_s: float = 0.0
    launches: int = 0
    sync: bool = False


@dataclass(frozen=True, slots=True)
class HeldWork:
    """Device time taken as given (`seconds` on the stream, nothing asked of the units): a
    trace kernel no rule classified, or a host copy, timed by the documented fallback."""

    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class HostTotals:
    """What the host did in a pass: its busy seconds (CPU work and launch calls), the kernels it
    launched, the synchronisations it waited at, and the device's busy seconds (the union of
    its kernels' intervals: one stream runs one at a time)."""

    busy_s: float = 0.0
    launches: int = 0
    syncs: int = 0
    device_busy_s: float = 0.0
