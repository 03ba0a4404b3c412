"""How a communication library's kernel drives the links: a property of the software (NCCL,
DeepEP), not of the chip, so one table serves every topology.

A kernel holds `sms` SMs while it runs (a share of the device's SM pool that compute kernels on
other streams then lack), pays `fixed_us` once per call (launch, setup, the flag handshakes
that are not bytes), and carries payload at `efficiency` of a port's line rate (the rest is its
protocol: headers, flags, chunk synchronisation). Each number says where it comes from;
the ones fitted to a published figure name it, and docs/multi_gpu.md lists which published
rows were fitted and which are held out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommKernel:
    name: str
    sms: int                       # SMs held while it runs (0: driven by the NIC or copy engines)
    scaleup_efficiency: float      # payload / line rate on NVLink ports
    scaleout_efficiency: float     # payload / line rate on the NIC
    fixed_us: float                # once per call, on every participating device
    sources: dict[str, str]

    def efficiency(self, port_kind: str) -> float:
        return self.scaleup_efficiency if port_kind == "scaleup" else self.scaleout_efficiency


NCCL_RING = CommKernel(
    "nccl-ring", sms=16, scaleup_efficiency=370 / 450, scaleout_efficiency=47 / 50, fixed_us=5.0,
    sources={
        "sms": "NCCL's default on NVLink-switched H100: 16 channels, one thread block (SM) each "
               "(NCCL_MIN/MAX_NCHANNELS defaults; assumption: not measured here)",
        "scaleup_efficiency": "fit: NCCL maintainer, nvidia/nccl-tests#212 (2024-05-06): 8x H100 ring "
                              "all-reduce / all-gather reach busbw ~370 GB/s of the 450 GB/s line rate "
                              "(~20% protocol overhead)",
        "scaleout_efficiency": "fit: NCCL maintainer, nvidia/nccl-tests#290 (2025-03-03): 'for NDR @ "
                               "400Gbps you should see 46-48GB/s per NIC' (47 of 50 GB/s)",
        "fixed_us": "assumption: kernel launch and the first flag round trip, a few microseconds",
    })

DEEPEP_NORMAL = CommKernel(
    "deepep-normal", sms=24, scaleup_efficiency=0.669, scaleout_efficiency=47 / 50, fixed_us=10.0,
    sources={
        "sms": "DeepEP README (V1): Buffer.set_num_sms(24) in the prefill example",
        "scaleup_efficiency": "fit: DeepEP README (V1) intranode EP8 dispatch, 153 GB/s on H800 "
                              "(4096 tokens, 7168 hidden, top-8 of 256, FP8): the bytes a GPU receives "
                              "from the 7 others take 0.669 of the 200 GB/s port (153 x 7/8 / 200, "
                              "whatever the tokens' spread); combine and the internode forwarding "
                              "(EP16's bottleneck) held out",
        "scaleout_efficiency": "as nccl-ring's (an RDMA write stream over the same NIC); held out: "
                               "DeepEP's internode rows (EP32, EP64) are bound by it",
        "fixed_us": "assumption: layout exchange and launch; small against the ~1 ms calls it serves",
    })

DEEPEP_LOW_LATENCY = CommKernel(
    "deepep-low-latency", sms=132, scaleup_efficiency=370 / 450, scaleout_efficiency=47 / 50,
    fixed_us=34.6,
    sources={
        "sms": "assumption: DeepEP's low-latency kernels launch one warp group per expert over "
               "every SM and hold them until the receive phase ends (hook mode, which holds none, "
               "is not modelled)",
        "scaleup_efficiency": "as nccl-ring's (NVLink stores of whole tokens); held out",
        "scaleout_efficiency": "as nccl-ring's (RDMA puts of whole tokens); held out",
        "fixed_us": "fit: DeepEP README (V1) low-latency EP8 dispatch, 77 us for 128 tokens x top-8 "
                    "FP8 on H800: what its 6.6 MB over NVLink at the efficiency above and one "
                    "link latency leave (launch, FP8 cast, the per-expert receive layout, the "
                    "flag round trip); the 11 other rows are held out",
    })

KERNELS = {k.name: k for k in (NCCL_RING, DEEPEP_NORMAL, DEEPEP_LOW_LATENCY)}
