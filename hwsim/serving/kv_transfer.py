"""The GPUs of a disaggregated run and the links that carry each prompt's KV cache from the
prefill GPU that computed it to the decode GPU that continues it.

The GPUs are devices of a topology profile (hwsim/parallel/topology.py): with `link: nvlink`
both tiers sit on one node and a transfer goes out of the sender's NVLink port and into the
receiver's (NVSwitch); with `link: network` the prefill tier is node 0 and the decode tier node
1, and a transfer goes through both NICs. A transfer is one flow of hwsim/parallel/flows.py
through the cluster's arbiter, so its time is its bytes through the ports at the kernel's
efficiency plus the link latency, and transfers into one decode GPU (or out of one prefill GPU)
share its port and slow together. The cluster's clock is the serving clock of the run: the
instances' iterations and the transfers interleave on it.

One simplification: the transfer's HBM reads and writes are not seen by the iterations, which
are timed on their own by the hardware engine (hwsim/serving/loop.py StepOracle).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.config.scenario import Disaggregation
from hwsim.hw.chip import ChipSpec
from hwsim.engine.cluster import Cluster
from hwsim.parallel import collectives, flows
from hwsim.parallel.comm_kernels import NCCL_ALL_TO_ALL
from hwsim.parallel.tiers import KEY, placed_topology, problems, tier_link  # noqa: F401 - KEY, problems: their old home

# vLLM's P2pNcclConnector (vLLM docs, features/disagg_prefill.md) and Megatron-core's NCCL transfer
# backend (core.inference.disaggregation.transfer_backends.nccl) send the KV blocks with NCCL
# send/recv, the calls NCCL's all-to-all is made of: its kernel, fitted to all_to_all_single on
# 2 x H200 (hwsim/parallel/comm_kernels.py), times them, protocol choice included.
KV_SEND = NCCL_ALL_TO_ALL


@dataclass(frozen=True)
class Transfer:
    request: int
    src: int                  # prefill GPU (index in the tier)
    dst: int                  # decode GPU (index in the tier)
    bytes: float
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


class KvFabric:
    """The prefill and decode GPUs in a topology, and the KV transfers between them."""

    def __init__(self, chip: ChipSpec, hardware: str, d: Disaggregation, parallel_topology: str | None = None):
        topo = placed_topology(d, hardware, parallel_topology)
        self.topology = topo.name
        self.link = d.link
        per_node = topo.gpus_per_node.value
        p, dgpus = d.prefill_gpus, d.decode_gpus
        chip = topo.apply(chip)
        placed = tier_link(d.link)
        self.cluster = Cluster(chip, per_node * placed.nodes, per_node)
        first_decode = placed.first_decode(p, per_node)
        self.prefill_gpus = self.cluster.devices[:p]
        self.decode_gpus = self.cluster.devices[first_decode:first_decode + dgpus]
        self.kernel = KV_SEND
        self.transfers: list[Transfer] = []

    @property
    def env(self):
        return self.cluster.env

    def alone_s(self, nbytes: float) -> float:
        """A transfer's time on idle links: fixed cost + latency + bytes / (rate x efficiency),
        on the protocol NCCL would pick for it."""
        sends = [(self.prefill_gpus[0], self.decode_gpus[0], nbytes)]
        kernel = collectives.protocol(self.cluster, self.kernel, sends)
        return kernel.fixed_us * 1e-6 + flows.alone_s(self.cluster, sends, kernel)

    def send(self, request: int, src: int, dst: int, nbytes: float):
        """Process body: request's KV (nbytes) from prefill GPU src to decode GPU dst; returns
        the Transfer when the last byte has landed."""
        a, b = self.prefill_gpus[src], self.decode_gpus[dst]
        label = f"kv r{request}"
        start = self.env.now
        sends = [(a, b, nbytes)]
        kernel = collectives.protocol(self.cluster, self.kernel, sends)
        yield from collectives.fixed_cost(self.cluster, [a, b], kernel, label)
        yield from flows.step(self.cluster, sends, kernel, label)
        t = Transfer(request, src, dst, nbytes, start, self.env.now)
        self.transfers.append(t)
        return t
