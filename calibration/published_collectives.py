"""Published multi-GPU figures reproduced by hwsim's collectives on simulated links.

No multi-GPU machine has been measured for hwsim yet (issue 20), so the links and the
communication kernels are calibrated from figures others published (docs/multi_gpu.md):
- nccl-tests bus bandwidths on 8 x H100 HGX as NCCL's maintainers state them;
- DeepEP's README tables (V1) for its normal (prefill) and low-latency (decode) kernels on H800.
Each row says whether a number of hwsim/parallel/comm_kernels.py was fitted to it ("fit") or
not ("held out"), or whether a measurement on H200 replaced it ("superseded": nccl-ring's NVLink
numbers are fitted to 2 x H200 up to 256 MB since 2026-12-04, calibration/fit_collectives.py;
8 GiB calls on 8 GPUs reach more than that range shows, which hwsim does not model). Prints the table:
`python calibration/published_collectives.py [--fast] [--markdown]` (--fast skips the EP64-256
low-latency rows: 5 s to minutes each).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hwsim.parallel import collectives as col
from hwsim.parallel import routing
from hwsim.parallel.comm_kernels import DEEPEP_LOW_LATENCY, DEEPEP_NORMAL, NCCL_RING
from hwsim.parallel.topology import load_topology

NCCL_212 = "nvidia/nccl-tests#212, NCCL maintainer (2024-05-06)"
NCCL_290 = "nvidia/nccl-tests#290, NCCL maintainer (2025-03-03)"
NCCL_119 = "nvidia/nccl-tests#119, NCCL maintainer (2022-11-17)"
DEEPEP = "deepseek-ai/DeepEP README (V1, docs/legacy.md today), H800 + CX7 400 Gb/s"

HIDDEN = 7168
FP8_TOKEN = HIDDEN + HIDDEN // 128 * 4          # FP8 values + one fp32 scale per 128 (DeepEP normal)
LL_FP8_TOKEN = FP8_TOKEN + 16                   # + DeepEP low-latency's per-message header
BF16_TOKEN = HIDDEN * 2
EXPERTS, TOPK = 256, 8


@dataclass(frozen=True)
class Row:
    system: str
    what: str
    metric: str             # "busbw GB/s", "GB/s", "us"
    published: float
    role: str               # "fit", "held out" or "superseded"
    source: str
    simulate: object        # () -> simulated value in the metric
    slow: bool = False      # seconds to minutes (EP64 and up: the arbiter solves ~G items x G ports)

    @property
    def simulated(self) -> float:
        return self.simulate()

    def error(self) -> float:
        return self.simulated / self.published - 1.0


def _ring_busbw(op: str, nbytes: float, gpus: int, topology: str, nic_gbs: float | None = None) -> float:
    """nccl-tests' bus bandwidth of a ring collective, GB/s; nic_gbs: another NIC line rate."""
    cluster = load_topology(topology).cluster(gpus)
    if nic_gbs is not None:
        for d in cluster.devices:
            d.nic.rate = d.nic_rx.rate = nic_gbs * 1e9
    body = {"all-reduce": col.all_reduce, "all-gather": col.all_gather,
            "reduce-scatter": col.reduce_scatter}[op](cluster, cluster.devices, nbytes)
    t = col.time_alone(cluster, body)
    g = gpus
    factor = 2 * (g - 1) / g if op == "all-reduce" else (g - 1) / g    # nccl-tests' busbw factors
    return factor * nbytes / t / 1e9


def _ll(ep: int, combine: bool) -> float:
    """DeepEP low-latency: 128 tokens per GPU, top-8 of 256 experts, one message per (token,
    expert); microseconds."""
    cluster = load_topology("h800-cx7").cluster(ep)
    placement = routing.gpu_of_expert(EXPERTS, ep)
    probs = routing.expert_probabilities(EXPERTS)
    m = routing.per_expert_matrix(128, TOPK, BF16_TOKEN if combine else LL_FP8_TOKEN, ep, placement, probs)
    body = col.moe_low_latency(cluster, cluster.devices, m.T if combine else m, DEEPEP_LOW_LATENCY,
                               "combine" if combine else "dispatch")
    return col.time_alone(cluster, body) * 1e6


@lru_cache(maxsize=None)
def deepep_spread(ep: int, tokens: int = 16384, seed: int = 0) -> tuple[float, float]:
    """(GPUs, nodes) a token goes to, on average, under the routing DeepEP's normal-kernel
    tests draw: scores |N(0,1)| + 1 over 256 experts; intranode (tests/test_intranode.py) its
    top-8; internode (tests/test_internode.py) group-limited, a group per node, the top
    min(nodes, 4) groups, then the top-8 of their experts."""
    nodes = max(1, ep // 8)
    scores = np.abs(np.random.default_rng(seed).standard_normal((tokens, EXPERTS))) + 1
    topk_groups = min(nodes, 4) if nodes > 1 else 1
    idx = routing.group_limited_topk(scores, nodes, topk_groups, TOPK)
    return routing.distinct_per_token(idx, EXPERTS, ep), routing.distinct_per_token(idx, EXPERTS, nodes)


def _normal(ep: int, combine: bool) -> float:
    """DeepEP normal: 4096 tokens per GPU (deepep_spread's routing); GB/s as DeepEP's tests
    count it: intranode, the tokens each GPU receives (its own included) in bytes per second of
    the kernel; internode, 'RDMA' bytes: a copy per (token, destination node), its own node
    included (test_internode.py's num_rdma_token_sent), though those never touch the network."""
    cluster = load_topology("h800-cx7").cluster(ep)
    nodes = ep // cluster.gpus_per_node
    tokens, token_bytes = 4096, BF16_TOKEN if combine else FP8_TOKEN
    gpus_per_token, nodes_per_token = deepep_spread(ep)
    rank = routing.per_destination_matrix(tokens, token_bytes, ep, gpus_per_token)
    node = routing.per_destination_matrix(tokens, token_bytes, nodes, nodes_per_token)
    node = np.repeat(node[:1], ep, axis=0)          # the same row for every GPU (uniform routing)
    body = col.moe_normal(cluster, cluster.devices, rank, node, DEEPEP_NORMAL,
                          "combine" if combine else "dispatch")
    t = col.time_alone(cluster, body)
    per_token = gpus_per_token if nodes == 1 else nodes_per_token
    return tokens * per_token * token_bytes / t / 1e9


GB = 2**30
ROWS = [
    Row("8 x H100 HGX", "ring all-reduce, 8 GiB (NCCL_ALGO=Ring)", "busbw GB/s", 370, "superseded",
        f"{NCCL_212}: ring busbw ~370 GB/s of the 450 GB/s line rate",
        lambda: _ring_busbw("all-reduce", 8 * GB, 8, "hgx-h100-8")),
    Row("8 x H100 HGX", "ring all-gather, 8 GiB", "busbw GB/s", 370, "superseded",
        f"{NCCL_212}: the same ~370 GB/s for non-allreduce operations",
        lambda: _ring_busbw("all-gather", 8 * GB, 8, "hgx-h100-8")),
    Row("8 x H100 HGX", "ring reduce-scatter, 8 GiB", "busbw GB/s", 370, "superseded",
        f"{NCCL_212}: the same ~370 GB/s for non-allreduce operations",
        lambda: _ring_busbw("reduce-scatter", 8 * GB, 8, "hgx-h100-8")),
    Row("2 x 8 H100, NDR 400 Gb/s", "ring all-reduce, 8 GiB", "busbw GB/s", 47, "fit",
        f"{NCCL_290}: 'for NDR @ 400Gbps you should see 46-48GB/s per NIC'",
        lambda: _ring_busbw("all-reduce", 8 * GB, 16, "hgx-h100-8")),
    Row("2 nodes, HDR 200 Gb/s", "ring all-reduce, 8 GiB", "busbw GB/s", 24, "held out",
        f"{NCCL_119}: 'We usually consider 24GB/s is the peak performance per 200G NIC'",
        lambda: _ring_busbw("all-reduce", 8 * GB, 16, "hgx-h100-8", nic_gbs=25)),
    Row("8 x H800", "DeepEP normal dispatch EP8 (FP8)", "GB/s", 153, "fit", DEEPEP,
        lambda: _normal(8, False)),
    Row("8 x H800", "DeepEP normal combine EP8 (BF16)", "GB/s", 158, "held out", DEEPEP,
        lambda: _normal(8, True)),
    *[Row(f"{ep // 8} x 8 H800", f"DeepEP normal {kind} EP{ep} (RDMA)", "GB/s", bw, "held out", DEEPEP,
          (lambda ep=ep, c=(kind == "combine"): _normal(ep, c)))
      for ep, kind, bw in ((16, "dispatch", 43), (32, "dispatch", 58), (64, "dispatch", 51),
                           (16, "combine", 43), (32, "combine", 57), (64, "combine", 50))],
    *[Row(f"{max(1, ep // 8)} x 8 H800", f"DeepEP low-latency {kind} EP{ep}, 128 tokens", "us", us,
          "fit" if (ep, kind) == (8, "dispatch") else "held out", DEEPEP,
          (lambda ep=ep, c=(kind == "combine"): _ll(ep, c)), slow=ep >= 64)
      for kind, table in (("dispatch", ((8, 77), (16, 118), (32, 155), (64, 173), (128, 192), (256, 194))),
                          ("combine", ((8, 114), (16, 195), (32, 273), (64, 314), (128, 369), (256, 360))))
      for ep, us in table],
]


def table(slow: bool = True) -> list[tuple[Row, float, float]]:
    out = []
    for row in ROWS:
        if row.slow and not slow:
            continue
        sim = row.simulated
        out.append((row, sim, sim / row.published - 1.0))
    return out


def main() -> None:
    import sys
    print(f"{'system':<26}{'collective':<44}{'metric':<12}{'published':>10}{'hwsim':>10}{'error':>8}  role")
    for row, sim, err in table(slow="--fast" not in sys.argv):
        if "--markdown" in sys.argv:
            print(f"| {row.system} | {row.what} | {row.metric} | {row.published:g} | {sim:.1f} | {err:+.1%} | {row.role} |")
            continue
        print(f"{row.system:<26}{row.what:<44}{row.metric:<12}{row.published:>10.1f}{sim:>10.1f}"
              f"{err:>+8.1%}  {row.role}")


if __name__ == "__main__":
    main()
