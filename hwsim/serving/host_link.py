"""The link between a GPU and its host's memory, for swap preemption (`workload.preemption:
swap`): a preempted request's KV cache is copied to host memory and back instead of being
recomputed, as vLLM's swap mode (v0) and its CPU-offload connectors do.

The link is one unit each way (PCIe and NVLink-C2C are full duplex) on the serving clock,
shared through an arbiter (hwsim/engine/sharing.py): a copy alone takes its latency plus
bytes / (line rate x efficiency), and copies in one direction at once share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from hwsim.engine.sharing import Arbiter
from hwsim.hw.host_links import HOST_LINKS, HostLink  # noqa: F401 - HOST_LINKS: read here by the serving loop
from hwsim.hw.units import Unit


@dataclass(frozen=True)
class Copy:
    direction: str                 # "out" (to the host) or "in" (back to the GPU)
    bytes: float
    start_s: float
    end_s: float


class HostCopies:
    """KV copies between one GPU and its host on the serving clock."""

    def __init__(self, env: simpy.Environment, link: HostLink):
        self.env = env
        self.link = link
        self.arbiter = Arbiter(env)
        rate = link.bytes_s * link.efficiency
        self.units = {"out": Unit("host link out", "host", rate, "bytes"),
                      "in": Unit("host link in", "host", rate, "bytes")}
        self.copies: list[Copy] = []

    def alone_s(self, nbytes: float) -> float:
        return self.link.latency_s + nbytes / self.units["out"].rate

    def copy(self, direction: str, nbytes: float):
        """Process body: nbytes to the host ("out") or back ("in"); returns when landed."""
        unit = self.units[direction]
        duration = self.alone_s(nbytes)
        start = self.env.now
        item = self.arbiter.submit(f"swap {direction}", duration, {unit: nbytes / unit.rate / duration})
        yield item.done
        self.copies.append(Copy(direction, nbytes, start, self.env.now))
