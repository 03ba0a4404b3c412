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

A **private** stream (one per GPU of a multi-GPU step, hwsim/parallel/step.py) ignores other
processes' events: between two collectives the other processes are the other GPUs' streams,
which touch only their own device, so its kernels still run alone unless an arbiter item is in
flight.
"""

from __future__ import annotations

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


class Stream:
    def __init__(self, env: simpy.Environment, device: Device, arbiter: Arbiter, timer: KernelTimer,
                 *, launch: str, reuse: bool = True, copies: CopyEngine | None = None):
        self.env = env
        self.device = device
        self.arbiter = arbiter
        self.timer = timer
        self.replay = ReplayCache(timer) if reuse else None
        self.graph = launch == "graph"
        self.host = Server("host.launch", 1.0)
        self.launch_s = device.chip.launch_eager_s   # one eager launch's host cost (an imported
                                                     # trace's host profile may set its own)
        self.copies = copies or CopyEngine(env, device, arbiter, timer)
        self.kernels = 0
        self.replayed = 0
        self.private = False          # other processes never touch this device (see above)

    def run(self, items: list[StreamItem], step: int, records: RecordLog | None,
            totals: StreamTotals):
        """Process body: run the items in order; add each kernel to `totals`, and a record
        per kernel to `records` unless it is None."""
        env, device, arbiter, chip = self.env, self.device, self.arbiter, self.device.chip
        events_alone = self.timer.uses_events
        recording = device.recording
        once = device.recorded_once     # items recorded already, when only first runs are kept
        replay = self.replay
        record = records.rows.append if records is not None else None
        # replayed effects, looked up inline: this loop runs for every kernel of every step
        effects = replay.effects if replay else {}
        peek = _never if self.private else env.peek
        horizon = peek()              # the next event of any other process (fixed until we yield)
        in_flight = arbiter.active    # items of other streams in flight (the arbiter's own list)
        replayed = 0
        last_alone, run_length = None, 0
        alone_counts: dict = {}       # effect -> kernels that ran alone with it (added in bulk)
        now = env.now                 # the stream's clock; env.now catches up at every hand-back
        host_t = now                  # the host starts issuing when the step starts (after the last sync)
        waited = 0.0                  # expert-load wait since the previous kernel ended
        launch_total = wait_total = 0.0
        graph, graph_launch_s, launch_s = self.graph, chip.launch_graph_s, self.launch_s
        host_busy = host_launch = device_busy = host_gap = 0.0
        syncs = held_launches = host_launches = 0
        i = -1
        for k, owner in _with_owners(items):
            if type(k) is not Kernel:
                if type(k) is HostWork:         # an imported trace's host (hwsim/engine/host.py)
                    if not graph:
                        if k.sync:
                            syncs += 1
                            host_t = max(host_t, now)
                        host_t += k.cpu_s + k.launch_s
                        host_busy += k.cpu_s + k.launch_s
                        host_launch += k.launch_s
                        host_launches += k.launches
                    continue
                if type(k) is HeldWork:
                    if not graph:
                        host_t = self.host.serve(host_t, launch_s)
                        held_launches += 1
                    start = max(now, host_t) if not graph else now + graph_launch_s
                    host_gap += start - now
                    now = start + k.seconds
                    device_busy += k.seconds
                    totals.add_seconds(Component.ACTIVATION_IO, k.seconds)
                    continue
                if now > env.now:
                    yield env.timeout(now - env.now)
                if isinstance(k, PrefetchLoad):
                    self.copies.start(k)
                else:
                    event = self.copies.landed.get(k.key)
                    if event is not None and not event.triggered:
                        yield event
                        waited += env.now - now
                now = env.now
                horizon = peek()
                continue
            i += 1
            ready = now - waited
            if graph:
                dispatch = now + graph_launch_s
            else:
                host_t = self.host.serve(host_t, launch_s)
                dispatch = max(now, host_t)
            key = k.replay_key
            effect = effects.get(key) if key is not None else None
            if effect is not None:
                replayed += 1
            elif replay is not None:
                effect, hit = replay.effect(k)
                replayed += hit
            else:
                effect = self.timer.at_once(k)
            end = dispatch + effect.duration
            shared = True if in_flight else horizon < end
            if not shared and not events_alone:
                now = end
                if effect is last_alone:      # runs of one shape (a layer's experts) count in one go
                    run_length += 1
                else:
                    if last_alone is not None:
                        alone_counts[last_alone] = alone_counts.get(last_alone, 0) + run_length
                    last_alone, run_length = effect, 1
                parts = effect.parts
                if recording and (once is None or effect not in once):
                    device.record(effect, dispatch, end, owner.name_of(k) if owner else k.name)
            else:
                if now > env.now:
                    yield env.timeout(now - env.now)
                if dispatch > env.now:
                    yield env.timeout(dispatch - env.now)
                if shared:
                    item = arbiter.submit(owner.name_of(k) if owner else k.name, effect.duration,
                                          device.shares(effect))
                    yield item.done
                    now = env.now
                    parts = _stretched(effect.parts, (now - dispatch) - effect.duration)
                else:
                    effect = yield from self.timer.events(env, k)
                    now = env.now
                    parts = effect.parts
                device.account(effect)
                totals.add(parts, k.data, k.hbm_bytes)
                if recording:
                    device.record(effect, dispatch, now, owner.name_of(k) if owner else k.name)
                horizon = peek()
            launch = dispatch - ready - waited
            launch_total += launch
            device_busy += now - dispatch
            wait_total += waited
            if record is not None:          # KernelRecord's fields, in order
                record((step, i, k, ready, dispatch, now, effect.waves, parts, launch, waited, shared, owner))
            waited = 0.0
        if last_alone is not None:
            alone_counts[last_alone] = alone_counts.get(last_alone, 0) + run_length
        self.replayed += replayed
        for effect, n in alone_counts.items():
            totals.add(effect.parts, effect.data, effect.hbm_bytes, n)
            device.account(effect, n)
        device.sync()
        totals.kernels += i + 1
        self.kernels += i + 1
        if not graph and host_t > now:     # the host's work after the last kernel (an imported
            host_gap += host_t - now        # trace's sampling, say) ends the pass
            now = host_t
        # of the device's waits on the host, up to one launch call per kernel is launch overhead,
        # the rest (an imported trace's CPU work and syncs) the host's; a pass without HostWork
        # items (a built-in schedule) keeps it all as launch overhead, as before
        launches = 0 if graph else i + 1 + held_launches
        waited_on_host = launch_total + host_gap
        as_launch = min(waited_on_host, host_launch) if host_busy else waited_on_host
        totals.add_seconds(Component.LAUNCH_OVERHEAD, as_launch)
        totals.add_seconds(Component.HOST, waited_on_host - as_launch)
        totals.add_seconds(Component.EXPERT_LOAD_WAIT, wait_total)
        totals.host = (HostTotals(host_busy, host_launches, syncs, device_busy) if host_busy or syncs
                       else HostTotals(launches * launch_s, launches, 0, device_busy))
        if now > env.now:
            yield env.timeout(now - env.now)
