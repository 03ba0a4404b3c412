"""A stream of a device as a SimPy process: it dispatches its kernels in order (graph replay,
or eager launches issued by the host) and waits where the schedule says (an expert's copy).

Each kernel is timed alone by the timer (through the replay cache). Then one of two things:
- **alone**: no item of another stream is in flight, and no other process has an event due
  before the kernel would end. Nothing can touch the device meanwhile, so the kernel takes
  its time alone; the stream keeps its own clock (`now`) and runs ahead of SimPy's, handing
  control back only when another process has an event due (or before a copy or a wait).
  At `wave` fidelity, and at `tile` fidelity with `tile_processes`, the kernel is instead
  played on the clock, a SimPy event per wave or per tile: the same result, event by event.
- **shared**: otherwise the kernel is submitted to the sharing arbiter at its dispatch time,
  with what it asks of each unit, and ends when the arbiter says (hwsim/engine/sharing.py).
  The time it loses to sharing is charged to its body (its largest component).

A **private** stream (each GPU's of a multi-GPU pass with one micro-batch: hwsim/build.py sets
it, hwsim/parallel/multi.py runs it) ignores other processes' events: between two collectives
the other processes are the other GPUs' streams, which touch only their own device, so its
kernels still run alone unless an arbiter item is in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from collections import Counter
from itertools import repeat
from operator import attrgetter
from typing import Any

import numpy as np
import simpy

from hwsim.engine.copy import CopyEngine
from hwsim.engine.host import HeldWork, HostTotals, HostWork
from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.engine.replay import ReplayCache
from hwsim.engine.sharing import Arbiter
from hwsim.engine.timer import KernelTimer
from hwsim.hw.device import Device
from hwsim.hw.server import Server
from hwsim.metrics import Component
from hwsim.model.kernel import ExpertBlock, Kernel, PrefetchLoad, StreamItem


_duration, _waves, _parts = attrgetter("duration"), attrgetter("waves"), attrgetter("parts")
_MANY_ALONE = 64      # kernels from which a run alone goes at once: below, numpy's calls cost more


def _sum_after(total: float, values: np.ndarray) -> float:
    """total + values[0] + values[1] + ..., added in order (as a loop adds them)."""
    return float(np.add.accumulate(np.concatenate(([total], values)))[-1])


def _never() -> float:
    return float("inf")


def _stretched(parts: dict[Component, float], extra: float) -> dict[Component, float]:
    """The kernel's parts with `extra` seconds of sharing added to its body."""
    out = dict(parts)
    body = max((c for c in out if c is not Component.KERNEL_OVERHEAD), key=out.get,
               default=Component.KERNEL_OVERHEAD)
    out[body] = out.get(body, 0.0) + extra
    return out


def _with_owners(items: list[StreamItem]):
    """(item, None) for each item, but (kernel, its block) for each kernel of an ExpertBlock."""
    for item in items:
        if type(item) is ExpertBlock:
            for k in item.kernels:
                yield k, item
        else:
            yield item, None


@dataclass(slots=True)
class _Pass:
    """One run of a stream's items: its clocks, what it read once at the start, and what it
    has counted so far."""
    now: float                    # the stream's clock; env.now catches up at every hand-back
    host_t: float                 # the host issues from here (the step's start, after the last sync)
    horizon: float                # the next event of any other process (fixed until we yield)
    peek: Callable[[], float]
    in_flight: list               # items of other streams in flight (the arbiter's own list)
    effects: dict                 # replayed effects, looked up inline: runs for every kernel
    events_alone: bool            # a kernel alone is still played on the clock (wave, tile)
    recording: bool
    once: Any                     # items recorded already, when only first runs are kept
    graph: bool
    graph_launch_s: float
    launch_s: float
    waited: float = 0.0           # expert-load wait since the previous kernel ended
    kernels: int = 0
    replayed: int = 0
    launch_total: float = 0.0
    wait_total: float = 0.0
    host_busy: float = 0.0
    host_launch: float = 0.0
    device_busy: float = 0.0
    host_gap: float = 0.0
    syncs: int = 0
    held_launches: int = 0
    host_launches: int = 0
    last_alone: Any = None        # the effect of the current run of alone kernels of one shape
    run_length: int = 0
    alone_counts: dict = field(default_factory=dict)    # effect -> kernels that ran alone with it

    def flush_alone(self) -> None:
        """The current run of alone kernels of one shape added to `alone_counts`."""
        if self.last_alone is not None:
            self.alone_counts[self.last_alone] = self.alone_counts.get(self.last_alone, 0) + self.run_length


class Stream:
    def __init__(self, env: simpy.Environment, device: Device, arbiter: Arbiter, timer: KernelTimer,
                 *, launch: str, reuse: bool = True, copies: CopyEngine | None = None,
                 book: dict | None = None):
        """`book`: the replay cache's effects, shared with the streams of identical devices
        (hwsim/engine/replay.py); none: its own."""
        self.env = env
        self.device = device
        self.arbiter = arbiter
        self.timer = timer
        self.replay = ReplayCache(timer, book) if reuse else None
        self.graph = launch == "graph"
        self.host = Server("host.launch", 1.0)
        self.launch_s = device.chip.launch_eager_s   # one eager launch's host cost (an imported
                                                     # trace's host profile may set its own)
        self.copies = copies or CopyEngine(env, device, arbiter, timer)
        self.kernels = 0
        self.replayed = 0
        self.private = False          # other processes never touch this device (see above)
        self.all_alone = True         # every pass so far ran its kernels alone, in one loop

    def run(self, items: list[StreamItem], step: int, records: RecordLog | None,
            totals: StreamTotals):
        """Process body: run the items in order, waiting where they say; add each kernel to
        `totals`, and a record per kernel to `records` unless it is None."""
        p = self._start_pass()
        rows = records.rows if records is not None else None
        record = rows.append if rows is not None else None
        alone = self._alone_throughout(p, items, owners=rows is not None)
        if alone is not None:
            self._run_kernels_alone(p, *alone, step=step, rows=rows)
            items = ()
        else:
            self.all_alone = False
        for k, owner in _with_owners(items):
            if type(k) is Kernel:
                ready, dispatch, effect, shared = self._dispatch(p, k)
                if shared or p.events_alone:
                    effect, parts = yield from self._run_on_clock(p, k, owner, effect, dispatch, shared, totals)
                else:
                    parts = self._run_alone(p, k, owner, effect, dispatch)
                self._count(p, k, owner, effect, parts, ready, dispatch, shared, step, record)
            elif type(k) is HostWork:
                self._host_work(p, k)
            elif type(k) is HeldWork:
                self._held_work(p, k, totals)
            else:
                yield from self._copy(p, k)
        self._end_pass(p, totals)
        if p.now > self.env.now:
            yield self.env.timeout(p.now - self.env.now)

    def _start_pass(self) -> _Pass:
        """A pass's state; what it reads of the device, arbiter and replay is read once, here."""
        env, device, replay = self.env, self.device, self.replay
        peek = _never if self.private else env.peek
        return _Pass(
            now=env.now, host_t=env.now, horizon=peek(), peek=peek,
            in_flight=self.arbiter.active, effects=replay.effects if replay else {},
            events_alone=self.timer.uses_events, recording=device.recording, once=device.recorded_once,
            graph=self.graph, graph_launch_s=device.chip.launch_graph_s, launch_s=self.launch_s)

    def _alone_throughout(self, p: _Pass, items: list[StreamItem], owners: bool = False):
        """(the pass's kernels in order, their owners or None) if each of them will run alone
        as a graph launches it, else None: nothing of another stream in flight, and no other
        process with an event due, now or ever in the pass (a private stream ignores them; any
        stream is alone when no other process has one scheduled: one GPU without copies in
        flight), for the pass never yields until it ends; its kernels timed in one go and
        replayed, no busy intervals kept, and nothing but kernels (no copies, waits or host
        work). `owners`: each kernel's ExpertBlock (or None), for its record."""
        if not ((self.private or p.horizon == float("inf")) and p.graph and not p.in_flight
                and not p.events_alone and not p.recording and self.replay is not None):
            return None
        if all(type(k) is Kernel for k in items):          # a many-GPU segment, mostly
            return items, [None] * len(items) if owners else None
        kernels, blocks = [], [] if owners else None
        for item in items:
            kind = type(item)
            if kind is Kernel:
                kernels.append(item)
                if owners:
                    blocks.append(None)
            elif kind is ExpertBlock:
                kernels += item.kernels
                if owners:
                    blocks += [item] * len(item.kernels)
            else:
                return None
        return kernels, blocks

    def _run_kernels_alone(self, p: _Pass, kernels: list[Kernel], owners=None, step: int = 0,
                           rows: list | None = None) -> None:
        """Each kernel alone, back to back as the graph launches them: what _dispatch,
        _run_alone and _count do for such a kernel, float operation for float operation (the
        same numbers to the bit), in one loop. A 64-GPU pass runs ~2,500 kernels a GPU in ~120
        segments, and the three calls a kernel were a fifth of its CPU time (issue 33); a long
        run of them (a one-GPU pass's 2,400) goes at once (_run_many_alone). `rows`: each
        kernel's record appended (KernelRecord's fields), its owner from `owners`."""
        if len(kernels) >= _MANY_ALONE:
            self._run_many_alone(p, kernels, owners, step, rows)
            return
        effects, replay, launch_s = p.effects, self.replay, p.graph_launch_s
        now, launch_total, device_busy = p.now, p.launch_total, p.device_busy
        last, run, counts = p.last_alone, p.run_length, p.alone_counts
        record = rows.append if rows is not None else None
        replayed, index = 0, p.kernels
        for k, owner in zip(kernels, owners or repeat(None)):
            key = k.replay_key
            effect = effects.get(key) if key is not None else None
            if effect is None:
                effect, hit = replay.effect(k)
                replayed += hit
            else:
                replayed += 1
            dispatch = now + launch_s
            launch = dispatch - now                 # ready at `now`: nothing was waited for
            launch_total += launch
            end = dispatch + effect.duration
            device_busy += end - dispatch
            if record is not None:
                record((step, index, k, now, dispatch, end, effect.waves, effect.parts, launch, 0.0,
                        False, owner))
                index += 1
            now = end
            if effect is last:                      # runs of one shape count in one go
                run += 1
            else:
                if last is not None:
                    counts[last] = counts.get(last, 0) + run
                last, run = effect, 1
        p.now, p.launch_total, p.device_busy = now, launch_total, device_busy
        p.last_alone, p.run_length = last, run
        p.replayed += replayed
        p.kernels += len(kernels)

    def _run_many_alone(self, p: _Pass, kernels: list[Kernel], owners, step: int, rows: list | None) -> None:
        """_run_kernels_alone for all the kernels at once: the clocks one sequential sum (numpy's
        accumulate adds in order, as the loop does: `now + launch`, then `+ duration`), the
        records zipped, the runs of each effect counted. A one-GPU pass's kernels were two
        fifths of a power governor's probe (issue 33)."""
        n = len(kernels)
        effects, replay = p.effects, self.replay
        effs = list(map(effects.get, [k.replay_key for k in kernels]))
        replayed = n
        if None in effs:            # met for the first time: timed (or found in the shared book)
            for i, k in enumerate(kernels):
                if effs[i] is None:
                    effs[i], hit = replay.effect(k)
                    replayed -= not hit
        clock = np.empty(2 * n + 1)
        clock[0], clock[1::2] = p.now, p.graph_launch_s
        clock[2::2] = np.fromiter(map(_duration, effs), float, n)
        np.add.accumulate(clock, out=clock)        # ready (the previous end), dispatch, end, ...
        ready, dispatch, end = clock[:-1:2], clock[1::2], clock[2::2]
        launch = dispatch - ready                  # ready at the previous end: nothing waited for
        p.launch_total = _sum_after(p.launch_total, launch)
        p.device_busy = _sum_after(p.device_busy, end - dispatch)
        p.now = float(clock[-1])
        if rows is not None:
            rows.extend(zip(repeat(step), range(p.kernels, p.kernels + n), kernels, ready.tolist(),
                            dispatch.tolist(), end.tolist(), map(_waves, effs), map(_parts, effs),
                            launch.tolist(), repeat(0.0), repeat(False), owners or repeat(None)))
        # runs of one shape count in one go: in the order each effect first ran, after the run
        # the pass was in when this segment began
        counts = p.alone_counts
        p.flush_alone()
        p.last_alone = None
        for effect, runs in Counter(effs).items():
            counts[effect] = counts.get(effect, 0) + runs
        p.replayed += replayed
        p.kernels += n

    def _dispatch(self, p: _Pass, k: Kernel):
        """(ready, dispatch, effect, shared) of the next kernel: when the stream is ready for it,
        when it is launched, its effect timed alone, and whether it must share the device."""
        ready = p.now - p.waited
        if p.graph:
            dispatch = p.now + p.graph_launch_s
        else:
            p.host_t = self.host.serve(p.host_t, p.launch_s)
            dispatch = max(p.now, p.host_t)
        key = k.replay_key
        effect = p.effects.get(key) if key is not None else None
        if effect is not None:
            p.replayed += 1
        elif self.replay is not None:
            effect, hit = self.replay.effect(k)
            p.replayed += hit
        else:
            effect = self.timer.at_once(k)
        end = dispatch + effect.duration
        shared = True if p.in_flight else p.horizon < end
        return ready, dispatch, effect, shared

    def _run_alone(self, p: _Pass, k: Kernel, owner, effect, dispatch: float):
        """The kernel's parts, run alone on the stream's own clock; its unit accounting is
        added in bulk at the end of the pass."""
        end = dispatch + effect.duration
        p.now = end
        if effect is p.last_alone:      # runs of one shape (a layer's experts) count in one go
            p.run_length += 1
        else:
            p.flush_alone()
            p.last_alone, p.run_length = effect, 1
        if p.recording and (p.once is None or effect not in p.once):
            self.device.record(effect, dispatch, end, owner.name_of(k) if owner else k.name)
        return effect.parts

    def _run_on_clock(self, p: _Pass, k: Kernel, owner, effect, dispatch: float, shared: bool,
                      totals: StreamTotals):
        """(effect, parts) of the kernel run on SimPy's clock: shared through the arbiter, or
        played a wave or tile at a time."""
        env, device = self.env, self.device
        if p.now > env.now:
            yield env.timeout(p.now - env.now)
        if dispatch > env.now:
            yield env.timeout(dispatch - env.now)
        if shared:
            item = self.arbiter.submit(owner.name_of(k) if owner else k.name, effect.duration,
                                       device.shares(effect))
            yield item.done
            p.now = env.now
            parts = _stretched(effect.parts, (p.now - dispatch) - effect.duration)
        else:
            effect = yield from self.timer.events(env, k)
            p.now = env.now
            parts = effect.parts
        device.account(effect)
        totals.add(parts, k.data, k.hbm_bytes)
        if p.recording:
            device.record(effect, dispatch, p.now, owner.name_of(k) if owner else k.name)
        p.horizon = p.peek()
        return effect, parts

    @staticmethod
    def _count(p: _Pass, k: Kernel, owner, effect, parts, ready: float, dispatch: float,
               shared: bool, step: int, record) -> None:
        """The kernel's launch, busy and wait times added to the pass, and its record."""
        launch = dispatch - ready - p.waited
        p.launch_total += launch
        p.device_busy += p.now - dispatch
        p.wait_total += p.waited
        if record is not None:          # KernelRecord's fields, in order
            record((step, p.kernels, k, ready, dispatch, p.now, effect.waves, parts, launch, p.waited,
                    shared, owner))
        p.kernels += 1
        p.waited = 0.0

    @staticmethod
    def _host_work(p: _Pass, k: HostWork) -> None:
        """An imported trace's host work (hwsim/engine/host.py): the host is busy, the device not."""
        if p.graph:
            return
        if k.sync:
            p.syncs += 1
            p.host_t = max(p.host_t, p.now)
        p.host_t += k.cpu_s + k.launch_s
        p.host_busy += k.cpu_s + k.launch_s
        p.host_launch += k.launch_s
        p.host_launches += k.launches

    def _held_work(self, p: _Pass, k: HeldWork, totals: StreamTotals) -> None:
        """Device work of a fixed time (activations moved in or out), launched like a kernel."""
        if not p.graph:
            p.host_t = self.host.serve(p.host_t, p.launch_s)
            p.held_launches += 1
        start = max(p.now, p.host_t) if not p.graph else p.now + p.graph_launch_s
        p.host_gap += start - p.now
        p.now = start + k.seconds
        p.device_busy += k.seconds
        totals.add_seconds(Component.ACTIVATION_IO, k.seconds)

    def _copy(self, p: _Pass, k: StreamItem):
        """A prefetch started on the copy engine, or a wait for an expert's copy to land."""
        env = self.env
        if p.now > env.now:
            yield env.timeout(p.now - env.now)
        if isinstance(k, PrefetchLoad):
            self.copies.start(k)
        else:
            event = self.copies.landed.get(k.key)
            if event is not None and not event.triggered:
                yield event
                p.waited += env.now - p.now
        p.now = env.now
        p.horizon = p.peek()

    def _end_pass(self, p: _Pass, totals: StreamTotals) -> None:
        """The pass's alone kernels accounted in bulk, the device synced, and its launch, host
        and wait times added to `totals`."""
        device = self.device
        p.flush_alone()
        self.replayed += p.replayed
        parts, moved = totals.parts, totals.moved
        for effect, n in p.alone_counts.items():       # StreamTotals.add, inline: once per shape
            for comp, secs in effect.parts.items():     # and segment of every GPU's pass
                parts[comp] = parts.get(comp, 0.0) + n * secs
            data = effect.data
            moved[data] = moved.get(data, 0.0) + n * effect.hbm_bytes
        device.account_all(p.alone_counts)
        if not self.private:        # a private stream's device is synced at the end of its pass
            device.sync()
        totals.kernels += p.kernels
        self.kernels += p.kernels
        if not p.graph and p.host_t > p.now:     # the host's work after the last kernel (an imported
            p.host_gap += p.host_t - p.now        # trace's sampling, say) ends the pass
            p.now = p.host_t
        # of the device's waits on the host, up to one launch call per kernel is launch overhead,
        # the rest (an imported trace's CPU work and syncs) the host's; a pass without HostWork
        # items (a built-in schedule) keeps it all as launch overhead, as before
        launches = 0 if p.graph else p.kernels + p.held_launches
        waited_on_host = p.launch_total + p.host_gap
        as_launch = min(waited_on_host, p.host_launch) if p.host_busy else waited_on_host
        totals.add_seconds(Component.LAUNCH_OVERHEAD, as_launch)
        totals.add_seconds(Component.HOST, waited_on_host - as_launch)
        totals.add_seconds(Component.EXPERT_LOAD_WAIT, p.wait_total)
        totals.host = (HostTotals(p.host_busy, p.host_launches, p.syncs, p.device_busy)
                       if p.host_busy or p.syncs
                       else HostTotals(launches * p.launch_s, launches, 0, p.device_busy))
