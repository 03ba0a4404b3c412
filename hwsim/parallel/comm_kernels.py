"""How a communication library's kernel drives the links: a property of the software (NCCL,
DeepEP), not of the chip, so one table serves every topology.

A kernel holds `sms` SMs while it runs (a share of the device's SM pool that compute kernels on
other streams then lack), pays `fixed_us` once per call (launch, setup, the flag handshakes
that are not bytes), and carries payload at `efficiency` of a port's line rate (the rest is its
protocol: headers, flags, chunk synchronisation). Each number says where it comes from;
the ones fitted to a measurement or a published figure name it, and docs/multi_gpu.md lists
which rows were fitted and which are held out.

NCCL has several protocols (LL: flags in every 8 bytes, little latency, half the bandwidth or
less; Simple: large chunks behind a fence, full bandwidth, more latency) and picks one per call
by its own cost model (src/graph/tuning.cc). A kernel with `protocols` does the same: each call
runs on the one that would finish first alone (hwsim/parallel/collectives.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class CommKernel:
    name: str
    sms: int                       # SMs held while it runs (0: driven by the NIC or copy engines)
    scaleup_efficiency: float      # payload / line rate on NVLink ports
    scaleout_efficiency: float     # payload / line rate on the NIC
    fixed_us: float                # once per call, on every participating device
    sources: dict[str, str] = field(repr=False)
    protocols: tuple["CommKernel", ...] = field(default=(), compare=False, repr=False)   # (): just this one

    def efficiency(self, port_kind: str) -> float:
        return self.scaleup_efficiency if port_kind == "scaleup" else self.scaleout_efficiency


H200X2 = "calibration/data/h200x2_collectives.jsonl (2 x H200 on NVSwitch, NV18, NCCL 2.28.9, CUDA graph)"
FIT = "fitted by calibration/fit_collectives.py"
NIC = 47 / 50
NIC_SOURCE = ("fit: NCCL maintainer, nvidia/nccl-tests#290 (2025-03-03): 'for NDR @ 400Gbps you should see "
              "46-48GB/s per NIC' (47 of 50 GB/s; quoted for the ring, taken for every NCCL kernel)")


def _nccl(name: str, calls: str, simple: tuple[float, float], ll: tuple[float, float],
          note: str = "", ll_note: str = "") -> CommKernel:
    """An NCCL kernel fitted on 2 x H200 to `calls`: its Simple and LL protocols, each (fixed us,
    NVLink efficiency); on the NIC, NCCL's published rate, LL keeping the share of it that it
    keeps of NVLink. The kernel as called is Simple with both in `protocols`."""
    (fixed, eff), (ll_fixed, ll_eff) = simple, ll
    sms = "NCCL's default on NVLink-switched Hopper: 16 channels, one thread block (SM) each (assumption)"
    kernel = CommKernel(name, sms=16, scaleup_efficiency=eff, scaleout_efficiency=NIC, fixed_us=fixed, sources={
        "sms": sms, "scaleup_efficiency": f"{FIT} to the {calls} of {H200X2}, Simple{note}",
        "scaleout_efficiency": NIC_SOURCE,
        "fixed_us": f"{FIT} to the {calls} of {H200X2}, Simple: its cost a call beside the link latencies"})
    low_latency = CommKernel(f"{name}/LL", sms=16, scaleup_efficiency=ll_eff, scaleout_efficiency=ll_eff * NIC,
                             fixed_us=ll_fixed, sources={
        "sms": sms, "scaleup_efficiency": f"{FIT} to the small {calls} of {H200X2}, LL (4 data bytes and a "
                                          f"4-byte flag in every store: at most half the line rate){ll_note}",
        "scaleout_efficiency": "assumption: the NIC keeps the share of NVLink's that LL keeps",
        "fixed_us": f"{FIT} to the small {calls} of {H200X2}, LL"})
    return replace(kernel, protocols=(replace(kernel, name=f"{name}/Simple"), low_latency))


NCCL_RING = _nccl("nccl-ring", "all-reduces", simple=(21.1, 0.667), ll=(7.1, 0.244), note=(
    " (300 GB/s bus bandwidth at 256 MB, still rising). Until 2026-12-04 it was 370/450, nccl-tests' "
    "8 GiB figure on 8 x H100 (nvidia/nccl-tests#212), which larger calls may reach: not modelled"))

NCCL_GATHER_SCATTER = _nccl("nccl-gather-scatter", "all-gathers and reduce-scatters", simple=(18.8, 0.525),
                            ll=(8.6, 0.236), note=(
    ": NCCL's kernels for them move 11-15% fewer bytes a second than its all-reduce on two GPUs"))

NCCL_ALL_TO_ALL = _nccl("nccl-all-to-all", "all-to-alls (all_to_all_single)", simple=(15.2, 0.584),
                        ll=(11.3, 0.2), ll_note=(
    "; at the fit's lower bound (an assumption: unbounded, a bump at 512 KB-1 MB drags it to 0.07)"))

DEEPEP_NORMAL = CommKernel(
    "deepep-normal", sms=24, scaleup_efficiency=0.669, scaleout_efficiency=NIC, fixed_us=10.0,
    sources={
        "sms": "DeepEP README (V1): Buffer.set_num_sms(24) in the prefill example",
        "scaleup_efficiency": "fit: DeepEP README (V1) intranode EP8 dispatch, 153 GB/s on H800 "
                              "(4096 tokens, 7168 hidden, top-8 of 256, FP8): the bytes a GPU receives "
                              "from the 7 others take 0.669 of the 200 GB/s port (153 x 7/8 / 200, "
                              "whatever the tokens' spread); combine and the internode forwarding "
                              "(EP16's bottleneck) held out",
        "scaleout_efficiency": "as NCCL's (an RDMA write stream over the same NIC); held out: "
                               "DeepEP's internode rows (EP32, EP64) are bound by it",
        "fixed_us": "assumption: layout exchange and launch; small against the ~1 ms calls it serves",
    })

DEEPEP_LOW_LATENCY = CommKernel(
    "deepep-low-latency", sms=132, scaleup_efficiency=370 / 450, scaleout_efficiency=NIC,
    fixed_us=34.6,
    sources={
        "sms": "assumption: DeepEP's low-latency kernels launch one warp group per expert over "
               "every SM and hold them until the receive phase ends (hook mode, which holds none, "
               "is not modelled)",
        "scaleup_efficiency": "NCCL's published ring figure, 370/450 (nvidia/nccl-tests#212; NVLink "
                              "stores of whole tokens, large transfers), not the 2 x H200 fit of NCCL's "
                              "protocols, which DeepEP does not use; held out",
        "scaleout_efficiency": "as NCCL's (RDMA puts of whole tokens); held out",
        "fixed_us": "fit: DeepEP README (V1) low-latency EP8 dispatch, 77 us for 128 tokens x top-8 "
                    "FP8 on H800: what its 6.6 MB over NVLink at the efficiency above and one "
                    "link latency leave (launch, FP8 cast, the per-expert receive layout, the "
                    "flag round trip); the 11 other rows are held out",
    })

KERNELS = {k.name: k for k in (NCCL_RING, NCCL_GATHER_SCATTER, NCCL_ALL_TO_ALL, DEEPEP_NORMAL, DEEPEP_LOW_LATENCY)}
