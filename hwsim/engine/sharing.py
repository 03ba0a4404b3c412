"""Units shared among the work items of concurrent streams, through SimPy events.

Policy: proportional sharing, fluid. An item that runs alone for T seconds uses a fraction
f_u of each unit u (its Effect: busy seconds on u over T). While several items are in flight,
each progresses at a rate r_i <= 1 (1 = as fast as alone), and a unit serves them in
proportion to what they ask: sum_i f_iu * r_i <= 1. The rates are the max-min fair solution
(progressive filling): every item speeds up together until a unit saturates; the items on
that unit keep that rate, the others go on. On one saturated unit this is generalised
processor sharing with weights f_iu, which is what a FIFO memory controller fed by
interleaved requests does (each item's share of the queue is its share of the requests);
two items that each saturate a unit alone get half each.

Every arrival and every completion is a SimPy event: the arbiter then advances each item's
remaining work at its old rate, solves the rates again and schedules the next completion as
a timeout (a stale timeout, superseded by a later change, is ignored). Latency inside an item
(its fixed cost, round trips) is part of its T and is stretched with it: a documented
simplification, small for the bandwidth-bound items that share.

An item alone finishes exactly T after it starts, so the single-stream results are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from hwsim.hw.units import Unit

DONE = 1e-9           # fraction of an item's work under which it counts as finished (rounding)


@dataclass(eq=False)
class SharedItem:
    name: str
    duration: float                    # seconds alone
    shares: dict[Unit, float]          # fraction of each unit used alone
    done: simpy.Event
    start: float
    remaining: float = 1.0             # fraction of its work left
    rate: float = 1.0                  # its progress rate now (1: as fast as alone)


class Arbiter:
    """One per simulation: units of every device and link are shared through it."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: list[SharedItem] = []
        self._last = env.now
        self._version = 0

    def submit(self, name: str, duration: float, shares: dict[Unit, float]) -> SharedItem:
        """Start an item now; its `done` event succeeds (with the end time) when its work is done."""
        self._advance()
        item = SharedItem(name, duration, shares, self.env.event(), self.env.now)
        if duration <= 0:
            item.done.succeed(self.env.now)
            return item
        self.active.append(item)
        self._reschedule()
        return item

    # -- the fluid model ---------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for item in self.active:
                item.remaining -= dt * item.rate / item.duration
        self._last = now

    def _solve(self) -> None:
        """Max-min fair progress rates by progressive filling. Each unit's asked share is summed
        over its own users only (an index, in the order of `active`: the same additions as
        over every item, whose absent shares add 0.0), not over every open item: with two
        micro-batches on eight GPUs this ran 88,000 times a step over every unit and item."""
        users: dict[Unit, list[SharedItem]] = {}
        for item in self.active:
            for unit in item.shares:
                users.setdefault(unit, []).append(item)
        free = dict.fromkeys(users, 1.0)
        open_items = list(self.active)
        is_open = set(open_items)
        while open_items:
            asked = {unit: sum(it.shares[unit] for it in us if it in is_open) for unit, us in users.items()}
            level = 1.0
            for unit, capacity in free.items():
                a = asked[unit]
                if a > 0 and capacity / a < level:
                    level = capacity / a
            saturated = {u for u, cap in free.items() if (a := asked[u]) > 0 and cap <= level * a * (1 + 1e-12)}
            fixed = [it for it in open_items if level >= 1.0 or any(u in saturated for u in it.shares)]
            for it in fixed:
                it.rate = level
                for unit, f in it.shares.items():
                    free[unit] = max(0.0, free[unit] - f * level)
                is_open.discard(it)
            open_items = [it for it in open_items if it in is_open]

    def _reschedule(self) -> None:
        self._solve()
        self._version += 1
        version = self._version
        delay = min(item.remaining * item.duration / item.rate for item in self.active)
        timeout = self.env.timeout(max(0.0, delay))
        timeout.callbacks.append(lambda _event: self._on_timeout(version))

    def _on_timeout(self, version: int) -> None:
        if version != self._version:
            return        # superseded by a later arrival or completion
        self._advance()
        finished = [it for it in self.active if it.remaining <= DONE]
        if not finished:      # rounding: finish the nearest one
            finished = [min(self.active, key=lambda it: it.remaining * it.duration / it.rate)]
        for it in finished:
            self.active.remove(it)
            it.remaining = 0.0
            it.done.succeed(self.env.now)
        if self.active:
            self._reschedule()
