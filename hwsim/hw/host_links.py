"""The links between a GPU and its host's memory (PCIe, NVLink-C2C), each way: their rates and
their sources. The serving loop's swap copies (hwsim/serving/host_link.py) and a trace's host
copies (hwsim/ktrace/lower.py) are timed on them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostLink:
    name: str
    bytes_s: float                 # line rate, each way
    efficiency: float              # payload / line rate of a large pinned-memory copy
    latency_s: float               # per copy
    sources: dict[str, str]


HOST_LINKS = {
    "pcie-gen5": HostLink(
        "pcie-gen5", bytes_s=64e9, efficiency=0.85, latency_s=10e-6,
        sources={
            "bytes_s": "NVIDIA H200 datasheet: PCIe Gen5 x16, 128 GB/s (both directions), so 64 GB/s each way",
            "efficiency": "assumption: 128b/130b coding and PCIe transaction headers leave ~85% to a large "
                          "pinned cudaMemcpyAsync (not measured here)",
            "latency_s": "assumption: a copy's launch and DMA setup, about 10 us",
        }),
    "nvlink-c2c": HostLink(
        "nvlink-c2c", bytes_s=450e9, efficiency=0.85, latency_s=10e-6,
        sources={
            "bytes_s": "NVIDIA GH200 Grace Hopper Superchip: NVLink-C2C 900 GB/s (both directions), "
                       "so 450 GB/s each way",
            "efficiency": "assumption: as PCIe's (not measured here)",
            "latency_s": "assumption: as PCIe's",
        }),
}
