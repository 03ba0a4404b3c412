"""Several devices and the links between them, on one simulation clock.

Devices of one node reach each other through the node's switch fabric (NVSwitch): a link
between two of them is the sender's scale-up port out and the receiver's port in, so two
transfers into one device share its port, and transfers between other pairs do not (a
non-blocking switch). Devices of different nodes reach each other through their NICs and the
network. Every link has the fabric's one-way latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.engine.environment import CountingEnvironment
from hwsim.engine.sharing import Arbiter
from hwsim.hw.chip import ChipSpec
from hwsim.hw.device import Device
from hwsim.hw.units import Unit


@dataclass(frozen=True)
class Link:
    name: str
    src: Device
    dst: Device
    ports: tuple[Unit, Unit]          # the sender's port out, the receiver's port in
    bytes_s: float                    # per direction
    latency_s: float


class Cluster:
    def __init__(self, chip: ChipSpec, gpus: int = 1, gpus_per_node: int | None = None, sram_bytes: float = 0.0):
        """`sram_bytes`: each device's on-chip SRAM set aside for experts (hw/device.py)."""
        self.env = CountingEnvironment()
        self.arbiter = Arbiter(self.env)
        self.gpus_per_node = gpus_per_node or gpus
        self.devices = [Device(chip, index=i, sram_bytes=sram_bytes) for i in range(gpus)]
        self._links: dict[Device, dict[Device, Link]] = {}    # src -> dst -> link, made once a pair

    def node_of(self, device: Device) -> int:
        return device.index // self.gpus_per_node

    def link(self, src: Device, dst: Device) -> Link:
        """The path a transfer from src to dst takes (made once per pair: every collective step
        of a many-GPU pass asks for it again)."""
        return self.links_from(src).get(dst) or self._add_link(src, dst)

    def links_from(self, src: Device) -> dict[Device, Link]:
        """The links from src made so far, by receiver: a sender's flow looks up each of its
        receivers here (hwsim/parallel/flows.py), and link() makes the missing ones."""
        links = self._links.get(src)
        if links is None:
            links = self._links[src] = {}
        return links

    def _add_link(self, src: Device, dst: Device) -> Link:
        link = self.links_from(src)[dst] = self._make_link(src, dst)
        return link

    def _make_link(self, src: Device, dst: Device) -> Link:
        if src is dst:
            raise ValueError("a device does not link to itself")
        if self.node_of(src) == self.node_of(dst):
            ports, kind = (src.scaleup_tx, dst.scaleup_rx), "scale-up"
            latency = src.chip.scaleup_latency_s
        else:
            ports, kind = (src.nic, dst.nic_rx), "scale-out"
            latency = max(src.chip.scaleout_latency_s, dst.chip.scaleout_latency_s)
        if None in ports:
            raise ValueError(f"{src.name} and {dst.name} have no {kind} ports (the profile's interconnect)")
        return Link(f"{src.name} -> {dst.name}", src, dst, ports, min(p.rate for p in ports), latency)
