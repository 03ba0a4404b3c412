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
Between two cuts every GPU runs its kernels at once; a stream of one GPU touches only its own
device, so each runs alone (Stream.private). The collective starts when the slowest GPU
arrives (the others wait: `gpu_wait`) and runs on the cluster: bytes through NVLink and NIC
ports, HBM and SMs, through the arbiter (collectives.py). Nothing overlaps a collective
(one micro-batch: overlap_fraction 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwsim.engine.records import KernelRecord, StreamTotals
from hwsim.engine.stream import Stream
from hwsim.hw.cluster import Cluster
from hwsim.metrics import CommComponent, Component
from hwsim.model.kernel import Kernel
from hwsim.model.onchip import OnChipState
from hwsim.model.schedule import Schedule, StepShape
from hwsim.parallel import collectives, layout as lay
from hwsim.parallel.comm_kernels import DEEPEP_LOW_LATENCY, NCCL_RING
from hwsim.parallel.memory import GpuMemory

ACT_BYTES = 2                               # hidden states and logits in bf16

COMM_COMPONENT = {"all_reduce": CommComponent.ALL_REDUCE, "dispatch": CommComponent.ALL_TO_ALL,
                  "combine": CommComponent.ALL_TO_ALL, "all_gather": CommComponent.ALL_GATHER}


def ll_dispatch_bytes(hidden: int) -> float:
    """One low-latency dispatch message: FP8 values, an fp32 scale per 128, a 16-byte header
    (DeepEP README, V1; as calibration/published_collectives.py sends them)."""
    return hidden + hidden // 128 * 4 + 16


@dataclass
class ParallelRun:
    """What build() makes for a multi-GPU run, and what the passes add up."""
    layout: lay.Layout
    topology: str
    streams: list[Stream]
    onchips: list[OnChipState]
    experts: lay.ExpertMap | None
    memory: GpuMemory
    comm_s: dict[str, float] = field(default_factory=dict)   # decode steps: seconds per collective kind
    wait_s: float = 0.0
    imbalance: list[float] = field(default_factory=list)      # per MoE layer and decode step: max / mean
    decode_steps: int = 0


Cut = tuple[str, int] | None                 # (collective, layer) after a segment, or None at the end


def cut_points(items: list, layout: lay.Layout, moe_layers: set[int]) -> list[tuple[list, Cut]]:
    """The GPU's stream cut into segments, each followed by the collective that ends it."""
    out: list[tuple[list, Cut]] = []
    cur: list = []
    dispatched: set[int] = set()

    def cut(what: str, layer: int):
        nonlocal cur
        out.append((cur, (what, layer)))
        cur = []

    for k in items:
        if type(k) is Kernel:
            name, layer = k.name, k.layer
            moe = layer in moe_layers and layout.all_to_all
            if name == f"L{layer}.residual_add" and layout.tp > 1:
                cut("all_reduce", layer)
            elif name == f"L{layer}.ffn_residual_add":
                if moe:
                    if layer not in dispatched:
                        cut("dispatch", layer)
                    cut("combine", layer)
                elif layout.tp > 1:
                    cut("all_reduce", layer)
            elif moe and layer not in dispatched and (name == f"L{layer}.moe_zero"
                                                      or name.startswith(f"L{layer}.expert")):
                cut("dispatch", layer)
                dispatched.add(layer)
        cur.append(k)
    out.append((cur, ("all_gather", -1) if layout.tp > 1 else None))
    return out


def simulate(b, shape: StepShape, step: int, records: list[KernelRecord]):
    """Process-free entry: run one pass on every GPU; returns (t0, totals per GPU, comm
    seconds by kind, mean wait, routing, per-layer imbalance)."""
    run: ParallelRun = b.parallel
    layout, cluster = run.layout, b.cluster
    env = cluster.env
    routing = b.router.step(step, shape.tokens) if b.router else {}
    owner = lay.owners(layout, shape.tokens)
    groups = {layer: run.experts.groups(layer, choice) for layer, choice in routing.items()} if routing else {}
    imbalance = []
    for g in groups.values():
        load = run.experts.gpu_load([g])
        imbalance.append(float(load.max() / load.mean()) if load.mean() > 0 else 1.0)
    shapes = _shapes(layout, shape)
    moe_layers = set(routing)
    segments = []
    for gpu, stream in enumerate(run.streams):
        mine = {layer: lay.per_gpu_choice(layout, choice, groups[layer], gpu) for layer, choice in routing.items()}
        kernels = b.schedule.step(shapes[gpu // layout.tp], mine, run.onchips[gpu])
        segments.append(cut_points(kernels, layout, moe_layers))
    cuts = [c for _, c in segments[0]]
    assert all([c for _, c in s] == cuts for s in segments), "every GPU must reach the same collectives"
    keep = b.scenario.runtime.kernel_records
    recorded = keep < 0 or step < keep
    for stream in run.streams:
        stream.device.record_intervals(recorded)
    totals = [StreamTotals() for _ in run.streams]
    comm = dict.fromkeys(COMM_COMPONENT, 0.0)
    waited = [0.0]
    first = len(records)
    t0 = env.now
    env.process(_driver(b, shape, segments, step, records if recorded else None, totals, comm, waited,
                        owner, groups))
    env.run()
    for i, r in enumerate(records[first:]):      # one index per kernel of GPU 0's pass
        r.index = i
    return t0, totals, comm, waited[0], routing, imbalance


def _shapes(layout: lay.Layout, shape: StepShape) -> list[StepShape]:
    """Each attention group's pass: its share of the sequences (decode) or all of them."""
    if not layout.all_to_all:
        return [shape]
    return [StepShape(shape.phase, n, n, shape.context) for n in layout.tokens_per_group(shape.tokens)]


def _gpu(stream: Stream, items: list, step: int, records, totals: StreamTotals):
    yield from stream.run(items, step, records, totals)
    return stream.env.now


def _driver(b, shape, segments, step, records, totals, comm, waited, owner, groups):
    run: ParallelRun = b.parallel
    env = b.cluster.env
    streams = run.streams
    for s, (_, cut) in enumerate(segments[0]):
        procs = [env.process(_gpu(st, segments[g][s][0], step, records if g == 0 else None, totals[g]))
                 for g, st in enumerate(streams)]
        yield env.all_of(procs)
        waited[0] += sum(env.now - p.value for p in procs) / len(procs)
        if cut is None:
            continue
        start = env.now
        yield from _collective(b, shape, cut, owner, groups)
        comm[cut[0]] += env.now - start


def _collective(b, shape: StepShape, cut: tuple[str, int], owner, groups):
    """Process body: the collective at a cut, on every GPU of the cluster."""
    run: ParallelRun = b.parallel
    cluster: Cluster = b.cluster
    devices = cluster.devices
    what, layer = cut
    d = b.model.hidden
    if what == "all_reduce":          # tensor parallel: every GPU holds every token
        yield from collectives.all_reduce(cluster, devices, shape.tokens * d * ACT_BYTES, NCCL_RING,
                                          f"L{layer}.all-reduce")
    elif what == "all_gather":
        rows = max(shape.lm_rows, 1)
        yield from collectives.all_gather(cluster, devices, rows * b.model.vocab * ACT_BYTES, NCCL_RING,
                                          "logits all-gather")
    else:
        counts = lay.dispatch_counts(run.layout, owner, groups[layer])
        if what == "dispatch":
            matrix = counts * ll_dispatch_bytes(d)
        else:
            matrix = counts.T * d * ACT_BYTES
        yield from collectives.moe_low_latency(cluster, devices, matrix, DEEPEP_LOW_LATENCY, f"L{layer}.{what}")


def breakdown(totals: list[StreamTotals], comm: dict[str, float], wait_s: float) -> dict[str, float]:
    """Seconds per component: the kernels' parts averaged over the GPUs, the collectives on the
    critical path, and the mean GPU's wait for the slowest; they sum to the pass."""
    out = {c.value: sum(t.parts.get(c, 0.0) for t in totals) / len(totals) for c in Component}
    for c in CommComponent:
        out[c.value] = 0.0
    for what, secs in comm.items():
        out[COMM_COMPONENT[what].value] += secs
    out[CommComponent.GPU_WAIT.value] = wait_s
    return out


def lanes(run: ParallelRun) -> dict[str, list]:
    """Trace and Gantt lanes: every unit of GPU 0, and of each other GPU its first SM group
    and its ports (when it computes, when it sends), each named after its GPU."""
    out = {}
    for g, stream in enumerate(run.streams):
        d = stream.device
        units = d.units if g == 0 else [d.sm_groups[0], *(u for u in (d.scaleup_tx, d.nic) if u is not None)]
        out.update({f"GPU{g} {u.name}": list(u.intervals or ()) for u in units})
    return out
