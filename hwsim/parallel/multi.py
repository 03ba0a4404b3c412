"""One pass (decode step or prefill) on several GPUs: each GPU's kernels on its own stream,
the collectives between them on the cluster's links.

Each GPU's schedule is the single-GPU schedule of its shard of the model (layout.py), for its
tokens, with its experts' choices. It is cut where the layout communicates:
- tensor parallel: an all-reduce of the hidden states before each residual add (after the
  attention block's output projection, and after the FFN or the experts), and an all-gather of
  the logits after the LM head;
- data-parallel attention with experts on every GPU: a MoE dispatch before the layer's experts
  and a combine after them (DeepEP's low-latency kernels: one message per (token, expert),
  FP8 out and BF16 back).
Between two cuts every GPU runs its kernels at once. A collective starts when the slowest GPU
arrives (the others wait: `gpu_wait`) and runs on the cluster: bytes through NVLink and NIC
ports, HBM and SMs, through the arbiter (collectives.py). With one micro-batch nothing runs
beside a GPU's segment but its own kernels, so each stream runs alone (Stream.private). With
two, each GPU alternates the micro-batches' segments while the other's collective is in
flight, sharing the device with it through the arbiter. A GPU's idle time is then charged to
what was in flight (a collective, by kind) or to waiting for the slowest GPU (`_stats`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.engine.stream import Stream
from hwsim.hw.power import Activity
from hwsim.metrics import CommComponent, Component
from hwsim.model.ir import Collective
from hwsim.model.kernel import ExpertBlock, Kernel, Role
from hwsim.model.onchip import OnChipState
from hwsim.model.schedule import StepShape
from hwsim.parallel import collectives, layout as lay
from hwsim.parallel.comm_kernels import DEEPEP_LOW_LATENCY, NCCL_GATHER_SCATTER, NCCL_RING, CommKernel
from hwsim.parallel.memory import GpuMemory
from hwsim.step import StepResult, active_experts, moved_bytes

ACT_BYTES = 2                               # hidden states and logits in bf16

COMM_COMPONENT = {"all_reduce": CommComponent.ALL_REDUCE, "dispatch": CommComponent.ALL_TO_ALL,
                  "combine": CommComponent.ALL_TO_ALL, "all_gather": CommComponent.ALL_GATHER}


def ll_dispatch_bytes(hidden: int) -> float:
    """One low-latency dispatch message: FP8 values, an fp32 scale per 128, a 16-byte header
    (DeepEP README, V1; as calibration/published_collectives.py sends them)."""
    return hidden + hidden // 128 * 4 + 16


@dataclass
class ParallelRun:
    """The GPUs of a system of several (build() makes it; one GPU is hwsim.parallel.one_gpu.OneGpu, which
    answers the same: layout, topology, streams, onchips, memory, plan, simulate, lanes)."""
    layout: lay.Layout
    topology: str
    streams: list[Stream]
    onchips: list[OnChipState]
    experts: lay.ExpertMap | None
    memory: GpuMemory
    micro_batches: int = 1           # 2: one micro-batch communicates while the other computes
    dispatch_kernel: CommKernel = DEEPEP_LOW_LATENCY     # MoE dispatch and combine (dp attention)
    plans_ahead: ClassVar[bool] = False     # each GPU's kernels are planned inside the pass

    def plan(self, b, shape: StepShape, step: int, counts_only: bool = False) -> None:
        """None: the pass draws its routing and plans each GPU's kernels itself (simulate)."""
        return None

    def lanes(self) -> dict[str, list]:
        return lanes(self)

    def simulate(self, b, shape: StepShape, step: int, records: RecordLog | None,
                 every_interval: bool = True, plan=None, intervals: bool = True) -> StepResult:
        """A pass on the GPUs: the breakdown averages the GPUs' kernels and adds the collectives
        and the wait for the slowest GPU; bytes and kernels are summed. (Every busy interval of a
        recorded step is kept; `plan` is None: see plan.)"""
        t0, totals, stats, routing, busiest = simulate(b, shape, step, records, intervals)
        moved = moved_bytes(totals)
        moved["expert_prefetch"] = 0.0
        for onchip in self.onchips:
            if onchip.dispatch:
                onchip.dispatch.end_step()
        return StepResult(step=step, phase=shape.phase, batch=shape.batch, context=shape.context,
                          t_start=t0, t_end=b.env.now, breakdown_s=breakdown(totals, stats),
                          bytes=moved, kernels=sum(t.kernels for t in totals), tokens=shape.tokens,
                          **active_experts(b, routing), parallel=stats, activity=busiest,
                          host=totals[0].host)


Cut = Collective | None                     # the collective after a segment, or None at the end


def cut_points(items: list, layout: lay.Layout, moe_layers: set[int], shape: StepShape,
               hidden: int, vocab: int) -> list[tuple[list, Cut]]:
    """The GPU's stream cut into segments, each followed by the collective that ends it, where
    the kernels' roles say (Kernel.role): the all-reduce of a block's partial sums before its
    residual add, the MoE dispatch before the first kernel of the routed experts and the
    combine after them, the logits' all-gather at the end. `shape` is the micro-batch's."""
    out: list[tuple[list, Cut]] = []
    cur: list = []
    dispatched: set[int] = set()
    hidden_bytes = shape.tokens * hidden * ACT_BYTES

    def cut(what: str, layer: int, nbytes: float = 0.0):    # dispatch, combine: routing's bytes
        nonlocal cur
        out.append((cur, _collective(what, nbytes, layout.gpus, layer)))
        cur = []

    # read once, not per kernel: this loop runs over every kernel of every GPU's pass
    all_to_all, tp = layout.all_to_all, layout.tp > 1
    a2a_layers = moe_layers if all_to_all else set()
    attention_residual, ffn_residual, routed = Role.ATTENTION_RESIDUAL, Role.FFN_RESIDUAL, Role.ROUTED
    for k in items:
        kind = type(k)
        if kind is Kernel:
            role = k.role
            if role is None:                # most kernels: no cut
                pass
            elif role is attention_residual:
                if tp:
                    cut("all_reduce", k.layer, hidden_bytes)
            elif role is ffn_residual:
                layer = k.layer
                if layer in a2a_layers:
                    if layer not in dispatched:
                        cut("dispatch", layer)
                    cut("combine", layer)
                elif tp:
                    cut("all_reduce", layer, hidden_bytes)
            elif role is routed and (layer := k.layer) in a2a_layers and layer not in dispatched:
                cut("dispatch", layer)
                dispatched.add(layer)
        elif kind is ExpertBlock:           # a routed expert: the layer's experts have begun
            if k.layer in a2a_layers and k.layer not in dispatched:
                cut("dispatch", k.layer)
                dispatched.add(k.layer)
        cur.append(k)
    logits = Collective("all_gather", max(shape.lm_rows, 1) * vocab * ACT_BYTES, layout.gpus)
    out.append((cur, logits if layout.tp > 1 else None))
    return out


@functools.lru_cache(maxsize=4096, typed=True)   # typed: 0 and 0.0 stay apart
def _collective(kind: str, nbytes: float, group: int, layer: int) -> Collective:
    """One (frozen) Collective per value: every GPU of a pass cuts at the same ones, and building a
    frozen dataclass costs more than finding it; the check that all GPUs reach the same
    collectives then compares them by identity."""
    return Collective(kind, nbytes, group, layer)


@dataclass
class MicroBatch:
    """One micro-batch of a pass: its tokens' owners and EP groups, and each GPU's segments."""
    shape: StepShape                 # the whole micro-batch (all GPUs' tokens)
    owner: np.ndarray                # attention group of each of its tokens
    groups: dict[int, np.ndarray]    # layer -> EP group of each (token, expert) choice
    segments: list[list[tuple[list, Cut]]]     # per GPU


@dataclass
class PassStats:
    """What a pass on several GPUs reports beside the kernels' totals."""
    comm_s: dict[str, float]         # seconds of the collectives of each kind, summed over calls
    comm_wall_s: float               # time with at least one collective in flight
    exposed_s: dict[str, float]      # the mean GPU's idle time while a collective of a kind is in flight
    wait_s: float                    # the mean GPU's other idle time: waiting for the slowest GPU
    imbalance: list[float]           # per MoE layer: max / mean choices per EP group

    @property
    def overlap_fraction(self) -> float:
        """Share of the collectives' time that the mean GPU spends computing."""
        if self.comm_wall_s <= 0:
            return 0.0
        hidden = 1.0 - sum(self.exposed_s.values()) / self.comm_wall_s
        return hidden if hidden > 1e-9 else 0.0          # rounding, not overlap


def simulate(b, shape: StepShape, step: int, records: RecordLog | None, intervals: bool = True):
    """Run one pass on every GPU; returns (t0, totals per GPU, PassStats, routing, the work of
    the GPU that does the most: what its power limit settles on, hwsim/hw/power.py)."""
    run: ParallelRun = b.gpus
    layout, env = run.layout, b.cluster.env
    routing = b.router.step(step, shape.tokens) if b.router else {}
    owner = lay.owners(layout, shape.tokens)
    groups = {layer: run.experts.groups(layer, choice) for layer, choice in routing.items()}
    imbalance = []
    for g in groups.values():
        load = run.experts.gpu_load([g])
        imbalance.append(float(load.max() / load.mean()) if load.mean() > 0 else 1.0)
    parts = run.micro_batches if shape.phase == "decode" else 1
    micro = [_micro_batch(b, shape, routing, owner, groups, tokens) for tokens in _split(owner, parts)]
    keep = b.scenario.runtime.kernel_records
    recorded = records is not None and (keep < 0 or step < keep)
    for stream in run.streams:
        stream.device.record_intervals(recorded and intervals)
    totals = [StreamTotals() for _ in run.streams]
    busy: list[list[tuple[float, float]]] = [[] for _ in run.streams]
    calls: list[tuple[float, float, str]] = []
    first = len(records) if recorded else 0
    t0 = env.now
    work_before = [stream.device.work() for stream in run.streams]
    n_seg = len(micro[0].segments[0])
    computed = [[[env.event() for _ in run.streams] for _ in range(n_seg)] for _ in micro]
    communicated = [[env.event() for _ in range(n_seg)] for _ in micro]
    for g in range(len(run.streams)):
        env.process(_gpu(b, g, micro, step, records if recorded and g == 0 else None, totals[g], busy[g],
                         computed, communicated))
    for m, mb in enumerate(micro):
        env.process(_comms(b, mb, computed[m], communicated[m], calls))
    env.run()
    for stream in run.streams:
        stream.device.sync()                     # private streams leave it to the pass's end
    if recorded:
        records.renumber(first)                  # one index per kernel of GPU 0's pass
    per_gpu = [stream.device.work() - before for stream, before in zip(run.streams, work_before)]
    return t0, totals, _stats(t0, env.now, busy, calls, imbalance), routing, _busiest_work(per_gpu)


def _busiest_work(per_gpu: list[Activity]) -> Activity:
    """Each kind of work (tensor flops, L2 bytes, HBM bytes) of the GPU that does the most of it
    in a pass (`per_gpu`: each GPU's units' work): under tensor parallelism every GPU's; under
    expert parallelism an upper bound on any one's."""
    return Activity(max(a.tensor_flops for a in per_gpu), max(a.l2_bytes for a in per_gpu),
                    max(a.hbm_bytes for a in per_gpu))


def _split(owner: np.ndarray, parts: int) -> list[np.ndarray]:
    """Token indices of each micro-batch: each attention group's sequences split in turn."""
    if parts == 1:
        return [np.arange(len(owner))]
    out: list[list[int]] = [[] for _ in range(parts)]
    for group in np.unique(owner):
        for m, chunk in enumerate(np.array_split(np.flatnonzero(owner == group), parts)):
            out[m] += chunk.tolist()
    return [np.array(ix, dtype=int) for ix in out]


def _micro_batch(b, shape: StepShape, routing, owner, groups, tokens: np.ndarray) -> MicroBatch:
    run: ParallelRun = b.gpus
    layout = run.layout
    mb_owner = owner[tokens]
    mb_routing = {layer: choice[tokens] for layer, choice in routing.items()}
    mb_groups = {layer: g[tokens] for layer, g in groups.items()}
    per_group = np.bincount(mb_owner, minlength=layout.attention_groups)
    mb_shape = StepShape(shape.phase, len(tokens) if shape.phase == "decode" else shape.batch, len(tokens),
                         shape.context)
    segments = []
    for gpu in range(layout.gpus):
        n = int(per_group[gpu // layout.tp])
        gpu_shape = StepShape(shape.phase, n, n, shape.context) if layout.all_to_all else mb_shape
        mine = {layer: lay.per_gpu_choice(layout, c, mb_groups[layer], gpu) for layer, c in mb_routing.items()}
        kernels = b.schedule.step(gpu_shape, mine, run.onchips[gpu])
        segments.append(cut_points(kernels, layout, set(routing), mb_shape, b.model.hidden, b.model.vocab))
    cuts = [c for _, c in segments[0]]
    assert all([c for _, c in s] == cuts for s in segments), "every GPU must reach the same collectives"
    return MicroBatch(mb_shape, mb_owner, mb_groups, segments)


def _gpu(b, g: int, micro: list[MicroBatch], step, records, totals, busy, computed, communicated):
    """Process body: GPU g's compute stream, micro-batches in turn at each segment; a segment
    starts once its micro-batch's previous collective has ended."""
    stream: Stream = b.gpus.streams[g]
    env = stream.env
    for s in range(len(micro[0].segments[g])):
        for m, mb in enumerate(micro):
            if s > 0 and not communicated[m][s - 1].triggered:
                yield communicated[m][s - 1]
            start = env.now
            yield from stream.run(mb.segments[g][s][0], step, records, totals)
            busy.append((start, env.now))
            computed[m][s][g].succeed()


def _comms(b, mb: MicroBatch, computed, communicated, calls):
    """Process body: a micro-batch's collectives, each once every GPU has reached it."""
    env = b.cluster.env
    for s, (_, cut) in enumerate(mb.segments[0]):
        yield env.all_of(computed[s])
        if cut is not None:
            start = env.now
            yield from COLLECTIVES[cut.kind](b, cut, mb.owner, mb.groups)
            calls.append((start, env.now, cut.kind))
        communicated[s].succeed()


def _all_reduce(b, c: Collective, owner, groups):
    """Tensor parallel: every GPU holds every token's partial sums."""
    yield from collectives.all_reduce(b.cluster, b.cluster.devices, c.nbytes, NCCL_RING, f"L{c.layer}.all-reduce")


def _all_gather(b, c: Collective, owner, groups):
    yield from collectives.all_gather(b.cluster, b.cluster.devices, c.nbytes, NCCL_GATHER_SCATTER,
                                      "logits all-gather")


def _dispatch(b, c: Collective, owner, groups):
    """Expert parallel: each (token, expert) choice's bytes from the token's GPU to the expert's.
    DeepEP's low-latency kernels send FP8 tokens; all_to_all_single the bf16 activations."""
    run: ParallelRun = b.gpus
    d = b.model.hidden
    per_choice = ll_dispatch_bytes(d) if run.dispatch_kernel is DEEPEP_LOW_LATENCY else d * ACT_BYTES
    yield from _moe_all_to_all(b, c, lay.dispatch_counts(run.layout, owner, groups[c.layer]) * per_choice)


def _combine(b, c: Collective, owner, groups):
    """The experts' bf16 outputs back to their tokens' GPUs: the dispatch reversed."""
    run: ParallelRun = b.gpus
    counts = lay.dispatch_counts(run.layout, owner, groups[c.layer])
    yield from _moe_all_to_all(b, c, counts.T * b.model.hidden * ACT_BYTES)


def _moe_all_to_all(b, c: Collective, matrix):
    yield from collectives.moe_low_latency(b.cluster, b.cluster.devices, matrix, b.gpus.dispatch_kernel,
                                           f"L{c.layer}.{c.kind}")


# process bodies: the collective at a cut, on every GPU of the cluster, by its kind
COLLECTIVES = {"all_reduce": _all_reduce, "all_gather": _all_gather,
               "dispatch": _dispatch, "combine": _combine}


def _stats(t0: float, t1: float, busy, calls, imbalance) -> PassStats:
    """Each GPU's idle time in the pass (outside its segments), split by what was in flight:
    a collective of some kind (exposed communication) or none (waiting for the slowest GPU)."""
    comm = dict.fromkeys(COMM_COMPONENT, 0.0)
    for start, end, what in calls:
        comm[what] += end - start
    cuts = sorted({t0, t1, *(t for c in calls for t in c[:2])})
    pieces = [(a, z, next((w for s, e, w in calls if s <= a and z <= e), None)) for a, z in zip(cuts, cuts[1:])]
    exposed = dict.fromkeys(COMM_COMPONENT, 0.0)
    wait = 0.0
    starts = np.array([a for a, _, _ in pieces])
    ends = np.array([z for _, z, _ in pieces])
    for spans in busy:
        idle = (ends - starts) - (_busy_until(spans, ends) - _busy_until(spans, starts))
        idle[np.abs(idle) < 1e-12] = 0.0            # rounding of event times, not idle time
        for (_, _, what), t in zip(pieces, idle.tolist()):
            if what is None:
                wait += t
            else:
                exposed[what] += t
    g = len(busy)
    wall = sum(z - a for a, z, what in pieces if what is not None)
    return PassStats(comm, wall, {k: v / g for k, v in exposed.items()}, wait / g, imbalance)


def _busy_until(spans: list[tuple[float, float]], t: np.ndarray) -> np.ndarray:
    """Busy seconds of a stream's (sorted, disjoint) segments up to each time in t."""
    if not spans:
        return np.zeros_like(t)
    edges = np.array(spans).ravel()                               # s0, e0, s1, e1, ...
    lengths = np.array([e - s for s, e in spans])
    done = np.repeat(np.concatenate(([0.0], np.cumsum(lengths)[:-1])), 2) + np.tile([0.0, 1.0], len(spans)) \
        * np.repeat(lengths, 2)
    return np.interp(t, edges, done)


def breakdown(totals: list[StreamTotals], stats: PassStats) -> dict[str, float]:
    """Seconds per component: the kernels' parts averaged over the GPUs, the mean GPU's idle
    time while collectives are in flight (by kind) and while waiting for the slowest GPU; they
    sum to the pass."""
    out = {c.value: sum(t.parts.get(c, 0.0) for t in totals) / len(totals) for c in Component}
    for c in CommComponent:
        out[c.value] = 0.0
    for what, secs in stats.exposed_s.items():
        out[COMM_COMPONENT[what].value] += secs
    out[CommComponent.GPU_WAIT.value] = stats.wait_s
    return out


def lanes(run: ParallelRun) -> dict[str, list]:
    """Trace and Gantt lanes: a lane group per GPU, every unit of it (its SM groups, L2, HBM
    stacks, bus, copy engines) and its ports, the ends of its links, each named after its GPU
    ('GPU3 NVLink out'); the Gantt chart draws a few of each (hwsim/plots/gantt_view.py)."""
    return {f"GPU{g} {u.name}": u.intervals or [] for g, stream in enumerate(run.streams)
            for u in stream.device.units}
