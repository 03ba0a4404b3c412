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
remaining work at its old rate, solves the rates again (once for all the changes of one
instant) and schedules the next completion as a timeout (a stale timeout, superseded by a
later change, is ignored). Latency inside an item
(its fixed cost, round trips) is part of its T and is stretched with it: a documented
simplification, small for the bandwidth-bound items that share.

An item alone finishes exactly T after it starts, so the single-stream results are unchanged.

Unit groups (issue 33): a collective's flow asks the same share of each HBM stack of its sender
and of every receiver (hwsim/parallel/flows.py), 54 of a 64-GPU flow's 65 units. It asks their
group (`Device.hbm_all`, whose `members` are the stacks) instead. While only such items ask a
group's members, the members' records would all be the same (the same shares added and taken
away in the same order), so the group's one record stands for them all and a solve treats it
as each of them would be treated. When an item asks a member itself (a kernel beside a
collective, a copy), the group is split: each member gets the group's record, and the group's
items ask the members from then on; an item that asks a group while any member is asked
directly asks the members. So the rates are those of the stacks asked one by one, to the bit
(tests/test_sharing_groups.py). An item asks a group or its members, never both.
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
    shares: dict[Unit, float]          # fraction of each unit used alone (replaced, never changed
                                       # in place, where a unit group is split: see the module)
    done: simpy.Event
    start: float
    remaining: float = 1.0             # fraction of its work left
    rate: float = 1.0                  # its progress rate now (1: as fast as alone)
    seq: int = 0                       # submission order (the order of `Arbiter.active`)


class Arbiter:
    """One per simulation: units of every device and link are shared through it.

    Cost (issue 33): the items that start at one instant (a collective's G senders) are solved
    once, after the last of them (a zero-delay event scheduled behind them); each unit's users
    and the sum of what they ask are kept up to date as items come and go, so a solve looks
    only at the units asked for more than they have (`_contended`): a unit asked for at most
    all of itself can never hold an item below full speed, and an item on no contended unit
    runs at full speed without entering the progressive filling."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: list[SharedItem] = []     # in submission order; streams read it (in flight)
        self._last = env.now
        self._version = 0
        self._seq = 0
        # each unit in use: [the sum of its items' shares, {item in flight: its share}], one
        # record (one look-up a unit as an item comes or goes: a 64-GPU flow asks ~65 units)
        self._units: dict[Unit, list] = {}
        self._contended: dict[Unit, None] = {}   # units whose users ask more than all of them
                                                 # (a dict: deterministic order, unlike a set)
        self._direct: dict[Unit, int] = {}   # a unit group -> its members with a record of their own
        self._solve_pending = False

    def submit(self, name: str, duration: float, shares: dict[Unit, float]) -> SharedItem:
        """Start an item now; its `done` event succeeds (with the end time) when its work is done."""
        self._advance()
        item = SharedItem(name, duration, shares, self.env.event(), self.env.now)
        if duration <= 0:
            item.done.succeed(self.env.now)
            return item
        self._seq += 1
        item.seq = self._seq
        self.active.append(item)
        if self._direct:                    # some group's members are asked one by one
            shares = item.shares = self._ungrouped(shares)
        units, contended = self._units, self._contended
        for unit, f in shares.items():
            rec = units.get(unit)
            if rec is None:
                group = unit.group
                if group is not None and group in units:    # a member while its group is asked
                    self._split(group)
                    rec = units[unit]
                else:                       # its first user: asked 0.0 + f, which is f
                    units[unit] = [f, {item: f}]
                    if f > 1.0:
                        contended[unit] = None
                    if group is not None:
                        self._direct[group] = self._direct.get(group, 0) + 1
                    continue
            rec[1][item] = f
            total = rec[0] = rec[0] + f
            if total > 1.0:
                contended[unit] = None
        self._request_solve()
        return item

    def _remove(self, item: SharedItem) -> None:
        units, contended = self._units, self._contended
        for unit, f in item.shares.items():
            rec = units[unit]
            on = rec[1]
            del on[item]
            if not on:                  # exactly nothing asked: no rounding carried over
                del units[unit]
                contended.pop(unit, None)
                if unit.group is not None:
                    self._member_gone(unit.group)
                continue
            total = rec[0] = rec[0] - f
            if total <= 1.0:
                contended.pop(unit, None)

    # -- unit groups (see the module) --------------------------------------------------------
    def _ungrouped(self, shares: dict[Unit, float]) -> dict[Unit, float]:
        """The shares with each group whose members are asked one by one replaced by them."""
        direct = self._direct
        if not any(unit.members and unit in direct for unit in shares):
            return shares
        out: dict[Unit, float] = {}
        for unit, f in shares.items():
            if unit.members and unit in direct:
                for member in unit.members:
                    out[member] = out.get(member, 0.0) + f
            else:
                out[unit] = f
        return out

    def _split(self, group: Unit) -> None:
        """The group's record given to each of its members (what each would hold had they been
        asked one by one), and its items made to ask the members."""
        units, contended = self._units, self._contended
        asked, users = units.pop(group)
        contended.pop(group, None)
        for member in group.members:
            units[member] = [asked, dict(users)]
            if asked > 1.0:
                contended[member] = None
        self._direct[group] = self._direct.get(group, 0) + len(group.members)
        for item in users:
            item.shares = self._ungrouped(item.shares)

    def _member_gone(self, group: Unit) -> None:
        left = self._direct[group] - 1
        if left:
            self._direct[group] = left
        else:
            del self._direct[group]

    # -- the fluid model ---------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for item in self.active:
                item.remaining -= dt * item.rate / item.duration
        self._last = now

    def _request_solve(self) -> None:
        """Solve the rates once this instant's other arrivals and completions are in: the solve
        runs on a zero-delay event, behind every event of this instant scheduled so far. Any
        completion timeout scheduled before is stale from now on."""
        self._version += 1
        if not self._solve_pending:
            self._solve_pending = True
            self.env.timeout(0).callbacks.append(self._on_solve)

    def _on_solve(self, _event) -> None:
        self._solve_pending = False
        if not self.active:
            return
        self._solve()
        version = self._version
        delay = min(item.remaining * item.duration / item.rate for item in self.active)
        timeout = self.env.timeout(max(0.0, delay))
        timeout.callbacks.append(lambda _event: self._on_timeout(version))

    def _solve(self) -> None:
        """Max-min fair progress rates by progressive filling, over the contended units only
        (the others never saturate: see the class). Each unit's asked share is summed over
        its open users in submission order (the order of `active`), then lowered as they are
        fixed, and summed afresh when it has fallen by half (so that the subtractions never
        lose more than a few roundings); items are fixed in submission order."""
        for item in self.active:
            item.rate = 1.0
        contended = self._contended
        if not contended:
            return
        users = {u: self._units[u][1] for u in contended}     # each contended unit's items
        free = dict.fromkeys(contended, 1.0)
        asked = {u: sum(users[u].values()) for u in contended}
        fresh = dict(asked)                       # each asked sum as last summed afresh
        n_open = {u: len(users[u]) for u in contended}
        live = dict.fromkeys(contended)           # units with open users
        fixed_items: set[SharedItem] = set()
        while live:
            level = 1.0
            for u in live:
                a = asked[u]
                if a > 0 and free[u] / a < level:
                    level = free[u] / a
            if level >= 1.0:
                break                             # the open items run as fast as alone
            saturated = [u for u in live if (a := asked[u]) > 0 and free[u] <= level * a * (1 + 1e-12)]
            fixed = {it for u in saturated for it in users[u] if it not in fixed_items}
            for it in sorted(fixed, key=_by_seq):
                it.rate = level
                fixed_items.add(it)
                for v, f in it.shares.items():
                    if v not in live:
                        continue
                    free[v] = max(0.0, free[v] - f * level)
                    n_open[v] -= 1
                    if n_open[v] == 0:
                        del live[v]
                        continue
                    a = asked[v] = asked[v] - f
                    if a < 0.5 * fresh[v]:
                        a = asked[v] = fresh[v] = sum(g for w, g in users[v].items() if w not in fixed_items)
            for u in saturated:
                live.pop(u, None)

    def _on_timeout(self, version: int) -> None:
        if version != self._version:
            return        # superseded by a later arrival or completion
        self._advance()
        finished = [it for it in self.active if it.remaining <= DONE]
        if not finished:      # rounding: finish the nearest one
            finished = [min(self.active, key=lambda it: it.remaining * it.duration / it.rate)]
        done = set(finished)
        self.active[:] = [it for it in self.active if it not in done]     # in place: streams hold it
        for it in finished:
            self._remove(it)
            it.remaining = 0.0
            it.done.succeed(self.env.now)
        if self.active:
            self._request_solve()


def _by_seq(item: SharedItem) -> int:
    return item.seq
