"""Where the tiers of a disaggregated run sit in a topology, and what a scenario's tiers cannot
fit (checked above the loader, hwsim/checks.py; the GPUs and their KV links are
hwsim/serving/kv_transfer.py's)."""

from __future__ import annotations

from typing import ClassVar

from hwsim.config.scenario import Disaggregation
from hwsim.errors import ConfigError
from hwsim.parallel.topology import Topology, for_chip, load_topology

KEY = "workload.disaggregation"


class OneNode:
    """link nvlink: both tiers on one node, the decode GPUs after the prefill GPUs."""
    nodes: ClassVar[int] = 1

    @staticmethod
    def first_decode(prefill_gpus: int, per_node: int) -> int:
        return prefill_gpus

    @staticmethod
    def check_fits(topo: Topology, name: str, p: int, dgpus: int) -> None:
        per_node = topo.gpus_per_node.value
        if p + dgpus > per_node:
            raise ConfigError(f"link nvlink puts both tiers on one {name} node of {per_node} GPUs, but "
                              f"prefill_gpus + decode_gpus = {p + dgpus}; use link: network",
                              key=f"{KEY}.decode_gpus")


class TwoNodes:
    """link network: each tier on a node of its own, the decode tier on the second."""
    nodes: ClassVar[int] = 2

    @staticmethod
    def first_decode(prefill_gpus: int, per_node: int) -> int:
        return per_node

    @staticmethod
    def check_fits(topo: Topology, name: str, p: int, dgpus: int) -> None:
        per_node = topo.gpus_per_node.value
        if max(p, dgpus) > per_node:
            raise ConfigError(f"link network puts each tier on one {name} node of {per_node} GPUs, but "
                              f"a tier has {max(p, dgpus)}", key=f"{KEY}.prefill_gpus")
        if not topo.interconnect.scaleout_bandwidth_gbps:
            raise ConfigError(f"topology {name} has no network ports (scaleout_bandwidth_gbps)",
                              key=f"{KEY}.link")


TIER_LINKS: dict[str, type[OneNode | TwoNodes]] = {"nvlink": OneNode, "network": TwoNodes}


def tier_link(link: str) -> type[OneNode | TwoNodes]:
    """Where `workload.disaggregation.link` puts the tiers."""
    return TIER_LINKS[link]


def placed_topology(d: Disaggregation, hardware: str, parallel_topology: str | None = None) -> Topology:
    """The topology the tiers are placed in; a ConfigError where they do not fit it."""
    name = d.topology or parallel_topology or for_chip(hardware)
    if name is None:
        raise ConfigError(f"no topology in hardware_profiles/topologies/ is built of {hardware}; "
                          f"name one with {KEY}.topology", key=f"{KEY}.topology")
    topo = load_topology(name)
    if topo.chip != hardware:
        raise ConfigError(f"topology {name} is built of {topo.chip}, not {hardware} (hardware)",
                          key=f"{KEY}.topology")
    tier_link(d.link).check_fits(topo, name, d.prefill_gpus, d.decode_gpus)
    return topo


def problems(cfg, hardware: str):
    """(key, message) of a disaggregation the scenario cannot run: checked above the loader
    (hwsim/checks.py), by `hwsim run` once it has loaded the scenario and by build."""
    d = cfg.workload.disaggregation if cfg.workload.serving else None    # a key of serving only
    if d is None:
        return
    if cfg.parallel.gpus > 1:
        yield KEY, "each instance of a disaggregated run is one GPU: parallel.gpus must be 1"
        return
    try:
        placed_topology(d, hardware, cfg.parallel.topology)
    except ConfigError as exc:
        yield exc.key, exc.message
