"""FIFO rate servers: the queueing primitive behind every simulated resource.

A server with rate r that is free at `free_at` serves a request of n units arriving at t
from max(t, free_at) to that plus n / r (Lindley's recursion). SimPy processes call `serve`
at the simulated time the request is issued and then wait (one `env.timeout`) until the
returned completion time. Because SimPy hands out requests in time order, the computed
departures are exactly those of a FIFO queue, without a SimPy `Resource` request/release
pair per byte burst: that is what keeps the event count per kernel small.
"""

from __future__ import annotations

import numpy as np


class Server:
    """One FIFO server with a fixed rate (units per second)."""

    __slots__ = ("name", "rate", "free_at", "busy_s", "units")

    def __init__(self, name: str, rate: float):
        assert rate > 0, name
        self.name = name
        self.rate = rate
        self.free_at = 0.0
        self.busy_s = 0.0
        self.units = 0.0

    def serve(self, now: float, units: float) -> float:
        """Queue `units` of work at time `now`; return when it is done."""
        if units <= 0:
            return now
        start = now if now > self.free_at else self.free_at
        service = units / self.rate
        self.free_at = start + service
        self.busy_s += service
        self.units += units
        return self.free_at


class ServerBank:
    """N identical FIFO servers served in parallel (HBM pseudo-channels, per-SM pipes)."""

    def __init__(self, name: str, count: int, rate_each: float):
        assert count >= 1 and rate_each > 0, name
        self.name = name
        self.rate = rate_each
        self.free_at = np.zeros(count)
        self.busy_s = np.zeros(count)
        self.units = np.zeros(count)
        self.last_free = 0.0          # max(free_at), kept up to date so idleness is O(1)

    def __len__(self) -> int:
        return len(self.free_at)

    def serve(self, now: float, units: np.ndarray, rate_scale: float = 1.0) -> float:
        """Queue units[i] on server i at `now`; return when the last of them is done."""
        touched = np.flatnonzero(units > 0)
        return self.serve_on(now, touched, units[touched], rate_scale)

    def serve_on(self, now: float, servers: np.ndarray | slice, units: np.ndarray,
                 rate_scale: float = 1.0) -> float:
        """Queue units[j] on server servers[j] (distinct, each units[j] > 0; or a slice of the
        servers) at `now`; return when the last of them is done."""
        if not len(units):
            return now
        start = np.maximum(self.free_at[servers], now)
        service = units / (self.rate * rate_scale)
        end = start + service
        self.free_at[servers] = end
        self.busy_s[servers] += service
        self.units[servers] += units
        last = float(end.max())
        if last > self.last_free:
            self.last_free = last
        return last
