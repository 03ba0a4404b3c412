"""Collectives as SimPy processes on a Cluster's links: every byte goes through the arbiter
(hwsim/engine/sharing.py) in the flows of hwsim/parallel/flows.py, so a collective shares ports,
HBM and SMs with whatever else runs, and its time comes from the bytes through the ports, the
latency of each message, the protocol of the kernel that drives it (hwsim/parallel/comm_kernels.py)
and the SMs that kernel holds.

- **ring** all-reduce (reduce-scatter then all-gather, 2(G-1) steps), all-gather and
  reduce-scatter (G-1 steps): at each step every device sends one 1/G slice to the next one;
  a step ends when its slowest hop has landed (the ring is as fast as its slowest link: a hop
  between nodes crosses the NICs).
- **all-to-all**: every device sends to every other at once; the bytes out of one device
  share its port out, those into one device its port in.
- **MoE dispatch and combine**, in the two styles serving engines use:
  - low-latency (decode, DeepEP's low-latency kernels): each token goes straight to the GPUs
    of its experts, one message per (token, expert), NVLink within a node and the NIC between
    nodes: an all-to-all of the per-expert byte matrix;
  - normal (prefill, DeepEP's normal kernels): a token is sent once per destination GPU within
    a node, and once per destination node between nodes, to the GPU of the same local index
    there, which forwards a copy to each of its destination GPUs in that node over NVLink.
    The network hop and the forwarding are pipelined in chunks by the real kernel; here they
    run concurrently (a simplification: the forwarding of the last chunk after its arrival is
    not charged: one chunk of ~16 tokens, microseconds against calls of milliseconds).
  Combine is dispatch reversed, with the combine's bytes (expert outputs, usually BF16).

Bytes a device keeps for itself are not sent. Each sender's bytes of a step are one arbiter
item (hwsim/parallel/flows.py), which holds the kernel's SMs (a share of the device's SM pool);
the kernel's fixed cost is an arbiter item holding those SMs on every participating device.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from hwsim.engine.cluster import Cluster
from hwsim.hw.device import Device
from hwsim.parallel import flows
from hwsim.parallel.comm_kernels import NCCL_ALL_TO_ALL, NCCL_GATHER_SCATTER, NCCL_RING, CommKernel
from hwsim.parallel.flows import Send


def fixed_cost(cluster: Cluster, devices: Iterable[Device], kernel: CommKernel, label: str):
    """The kernel's fixed cost on every device at once, holding its SMs."""
    if kernel.fixed_us <= 0:
        return
    items = []
    for d in devices:
        shares: dict = {}
        if kernel.sms:
            d.sm.share_sms(kernel.sms, shares)
        items.append(cluster.arbiter.submit(f"{label} setup", kernel.fixed_us * 1e-6, shares))
    yield cluster.env.all_of([it.done for it in items])
    for d, it in zip(devices, items):
        flows.record_sms(d, kernel, it.start, it.done.value, f"{label} setup")


def phase(cluster: Cluster, sends: Sequence[Send], kernel: CommKernel, label: str):
    """Process body: one step, every send at once (hwsim/parallel/flows.py); returns when the
    last byte has landed."""
    return (yield from flows.step(cluster, sends, kernel, label))


def protocol(cluster: Cluster, kernel: CommKernel, sends: Sequence[Send], steps: int = 1) -> CommKernel:
    """The protocol a call runs on: the one that would finish first alone, as NCCL chooses by its
    own cost model (the choice ignores what else runs, as NCCL's does)."""
    if not kernel.protocols:
        return kernel
    return min(kernel.protocols, key=lambda p: p.fixed_us * 1e-6 + steps * flows.alone_s(cluster, sends, p))


def _ring_hops(devices: Sequence[Device], slice_bytes: float) -> list[Send]:
    g = len(devices)
    return [(devices[i], devices[(i + 1) % g], slice_bytes) for i in range(g)]


def _ring(cluster: Cluster, devices: Sequence[Device], slice_bytes: float, steps: int,
          kernel: CommKernel, label: str):
    hops = _ring_hops(devices, slice_bytes)
    kernel = protocol(cluster, kernel, hops, steps)
    yield from fixed_cost(cluster, devices, kernel, label)
    for _ in range(steps):
        yield from phase(cluster, hops, kernel, label)
    return cluster.env.now


def all_reduce(cluster: Cluster, devices: Sequence[Device], nbytes: float,
               kernel: CommKernel = NCCL_RING, label: str = "all-reduce"):
    """Ring all-reduce of an nbytes buffer on every device: 2(G-1) steps of nbytes/G."""
    g = len(devices)
    return (yield from _ring(cluster, devices, nbytes / g, 2 * (g - 1), kernel, label))


def all_gather(cluster: Cluster, devices: Sequence[Device], nbytes: float,
               kernel: CommKernel = NCCL_GATHER_SCATTER, label: str = "all-gather"):
    """Ring all-gather into an nbytes buffer (each device contributes nbytes/G): G-1 steps."""
    g = len(devices)
    return (yield from _ring(cluster, devices, nbytes / g, g - 1, kernel, label))


def reduce_scatter(cluster: Cluster, devices: Sequence[Device], nbytes: float,
                   kernel: CommKernel = NCCL_GATHER_SCATTER, label: str = "reduce-scatter"):
    """Ring reduce-scatter of an nbytes buffer (each device keeps nbytes/G): G-1 steps."""
    g = len(devices)
    return (yield from _ring(cluster, devices, nbytes / g, g - 1, kernel, label))


def all_to_all(cluster: Cluster, devices: Sequence[Device], matrix: Sequence[Sequence[float]],
               kernel: CommKernel = NCCL_RING, label: str = "all-to-all"):
    """matrix[i][j]: bytes device i sends to device j, all at once. Only the pairs that send
    anything are listed (the others send nothing: flows.by_sender drops them), found by numpy:
    a 64-GPU dispatch of one token a GPU fills 512 of its 4,096 pairs."""
    matrix = np.asarray(matrix, dtype=float)
    rows, cols = np.nonzero(matrix)
    sends = [(devices[i], devices[j], n) for i, j, n in zip(rows.tolist(), cols.tolist(), matrix[rows, cols].tolist())]
    kernel = protocol(cluster, kernel, sends)
    yield from fixed_cost(cluster, devices, kernel, label)
    return (yield from phase(cluster, sends, kernel, label))


def moe_low_latency(cluster: Cluster, devices: Sequence[Device], matrix: Sequence[Sequence[float]],
                    kernel: CommKernel, label: str):
    """Low-latency dispatch (or combine, with the matrix transposed): matrix[i][j] are the
    bytes of the (token, expert) messages from device i to the GPU j of the expert."""
    return (yield from all_to_all(cluster, devices, matrix, kernel, label))


def moe_normal(cluster: Cluster, devices: Sequence[Device], rank_bytes: Sequence[Sequence[float]],
               node_bytes: Sequence[Sequence[float]], kernel: CommKernel, label: str):
    """Normal (throughput) dispatch or combine, as DeepSeek-V3's report (section 3.2.2) and
    DeepEP's README describe the cross-node all-to-all: a token crosses the network once per
    destination node, to the GPU of its sender's local index there, which forwards it over
    NVLink to each GPU of that node holding one of its experts.
    rank_bytes[i][j]: bytes of device i's tokens for device j, a copy per (token, destination
    GPU), for every j; node_bytes[i][n]: a copy per (token, destination node). Device i sends
    rank_bytes[i][j] over NVLink to the GPUs j of its own node, node_bytes[i][n] over the
    network to its relay in node n, and the relay forwards rank_bytes[i][j] to each j of node n
    (its own share stays). Combine is the same traffic reversed (the relay sums the node's
    partial outputs before the network hop), with the combine's bytes."""
    yield from fixed_cost(cluster, devices, kernel, label)
    per_node = cluster.gpus_per_node
    nodes = len(devices) // per_node
    sends: list[Send] = []
    for i, src in enumerate(devices):
        home, local = divmod(i, per_node)
        for n in range(nodes):
            members = range(n * per_node, (n + 1) * per_node)
            relay = src if n == home else devices[n * per_node + local]
            if n != home and node_bytes[i][n] > 0:
                sends.append((src, relay, node_bytes[i][n]))
            sends += [(relay, devices[j], rank_bytes[i][j]) for j in members]
    return (yield from phase(cluster, sends, kernel, label))


# kind -> (kernel, steps on G GPUs, sends of an nbytes buffer): the shapes of the processes above
def _ring_slices(devices: Sequence[Device], nbytes: float) -> list[Send]:
    return _ring_hops(devices, nbytes / len(devices))


def _to_every_peer(devices: Sequence[Device], nbytes: float) -> list[Send]:
    return [(a, b, nbytes / len(devices)) for a in devices for b in devices if a is not b]


ALONE = {
    "all_reduce": (NCCL_RING, lambda g: 2 * (g - 1), _ring_slices),
    "all_gather": (NCCL_GATHER_SCATTER, lambda g: g - 1, _ring_slices),
    "reduce_scatter": (NCCL_GATHER_SCATTER, lambda g: g - 1, _ring_slices),
    "all_to_all": (NCCL_ALL_TO_ALL, lambda g: 1, _to_every_peer),
}


def alone_s(cluster: Cluster, kind: str, nbytes: float) -> float | None:
    """Seconds an NCCL call of this kind on an nbytes buffer takes on every GPU of the cluster
    with nothing else running (an all-to-all: nbytes/G to each peer), in closed form: the
    protocol NCCL would choose, its fixed cost, then its steps alone. What the processes above
    take on an idle cluster (tests/test_ktrace_collectives.py); None for a kind they lack."""
    if kind not in ALONE or len(cluster.devices) < 2:
        return None
    kernel, steps, sends = ALONE[kind]
    step_sends, n_steps = sends(cluster.devices, nbytes), steps(len(cluster.devices))
    chosen = protocol(cluster, kernel, step_sends, n_steps)
    return chosen.fixed_us * 1e-6 + n_steps * flows.alone_s(cluster, step_sends, chosen)


def time_alone(cluster: Cluster, body) -> float:
    """Run one collective process on an otherwise idle cluster; its seconds."""
    start = cluster.env.now
    cluster.env.run(until=cluster.env.process(body))
    return cluster.env.now - start
