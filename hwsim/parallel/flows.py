"""One device's sends of one step of a collective, as one item of the sharing arbiter.

A collective step can have every device send to every other (an all-to-all on 256 GPUs is
65,280 pairs). One arbiter item per pair would make the fluid solver's work grow with the
square of that. Instead each sender's bytes of the step are one item: alone, it takes the
slowest of its ports out (line rate x the kernel's protocol efficiency) plus the longest link
latency; meanwhile it uses its ports out, each receiver's port in (in proportion to the bytes
it gets), the HBM of the sender (reads) and of every receiver (writes), and the SMs of the
kernel that drives it. Sharing then divides ports, HBM and SMs among all items in flight (of
this collective, of others, of compute kernels): where many senders aim at one receiver, its
port in saturates and they slow together. The parts of one sender's item progress together,
a simplification: a sender's NVLink bytes are stretched to end with its network bytes.
A device's HBM stacks are asked as one group (the bytes spread over them all alike), which the
arbiter treats as each stack asked on its own (hwsim/engine/sharing.py, unit groups).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from hwsim.engine.cluster import Cluster
from hwsim.hw.device import Device
from hwsim.hw.units import Unit
from hwsim.parallel.comm_kernels import CommKernel

Send = tuple[Device, Device, float]          # (from, to, bytes)


def _plan(cluster: Cluster, src: Device, sends: Sequence[Send], kernel: CommKernel):
    """src's sends of one step: wire bytes (payload / efficiency) and payload per port, bytes
    into each receiver, and the seconds it takes alone."""
    port_bytes: dict[Unit, float] = defaultdict(float)
    payload: dict[Unit, float] = defaultdict(float)
    into: dict[Device, float] = defaultdict(float)
    latency = 0.0
    links, efficiency = cluster.links_from(src), {}     # efficiency: per port kind, asked once
    for _, dst, n in sends:
        link = links.get(dst) or cluster.link(src, dst)
        ports = link.ports
        kind = ports[0].kind
        eff = efficiency.get(kind)
        if eff is None:
            eff = efficiency[kind] = kernel.efficiency(kind)
        wire = n / eff
        for port in ports:
            port_bytes[port] += wire
            payload[port] += n
        into[dst] += n
        if link.latency_s > latency:
            latency = link.latency_s
    out_ports = [p for p in port_bytes if p in (src.scaleup_tx, src.nic)]
    return port_bytes, payload, into, latency + max(port_bytes[p] / p.rate for p in out_ports)


def alone_s(cluster: Cluster, sends: Sequence[Send], kernel: CommKernel) -> float:
    """Seconds one step of these sends takes with nothing else running: its slowest sender."""
    return max((_plan(cluster, s, group, kernel)[3] for s, group in by_sender(sends).items()), default=0.0)


def flow(cluster: Cluster, src: Device, sends: Sequence[Send], kernel: CommKernel, label: str):
    """Process body: src's sends of one step, as one arbiter item; returns when all have landed."""
    port_bytes, payload, into, duration = _plan(cluster, src, sends, kernel)
    total = sum(into.values())
    shares: dict[Unit, float] = {}
    for port, b in port_bytes.items():
        port.share_bytes(b, duration, shares)
    # the bytes spread over every HBM stack alike: asked of their group, one unit of the arbiter
    src.hbm_all.share_bytes(total, src.chip.hbm_read_efficiency, duration, shares)
    for dst, n in into.items():
        dst.hbm_all.share_bytes(n, dst.chip.hbm_write_efficiency, duration, shares)
    if kernel.sms:
        src.sm.share_sms(kernel.sms, shares)
    item = cluster.arbiter.submit(label, duration, shares)
    yield item.done
    end = cluster.env.now
    stretch = (end - item.start) / duration
    for port, b in port_bytes.items():
        port.carry(b, payload[port])
        if src.recording:
            port.record(item.start, end, label, shares[port] / stretch)
    record_sms(src, kernel, item.start, end, label)
    return end


def record_sms(device: Device, kernel: CommKernel, start: float, end: float, label: str) -> None:
    """While the device records, the SMs a communication kernel holds, on its SM-group lanes
    (filled in order, as thread blocks fill them), so the chart shows what compute lost."""
    if device.recording and kernel.sms:
        device.sm.fill(kernel.sms, start, end, label)


def by_sender(sends: Sequence[Send]) -> dict[Device, list[Send]]:
    """The sends grouped by sender, without those a device keeps for itself or that are empty."""
    out: dict[Device, list[Send]] = defaultdict(list)
    for s, d, n in sends:
        if s is not d and n > 0:
            out[s].append((s, d, n))
    return out


def step(cluster: Cluster, sends: Sequence[Send], kernel: CommKernel, label: str):
    """Process body: one step of a collective, every sender at once; returns when the last
    byte has landed. Bytes a device keeps for itself are not sent."""
    by_src = by_sender(sends)
    if not by_src:
        return cluster.env.now
    yield cluster.env.all_of([cluster.env.process(flow(cluster, s, group, kernel, label))
                              for s, group in by_src.items()])
    return cluster.env.now
