"""A topology profile: how many GPUs of which chip, how many to a node, and the links between
them. It names a chip profile (hardware_profiles/<chip>.yaml, loaded unchanged) instead of
repeating its numbers, so a chip's calibration lives in one file; its own `interconnect:` block
(the same schema as a chip profile's) replaces the chip's, because the ports a GPU gets
depend on the system it is built into (an H800 and an H100 share a die but not their NVLink).

Topology profiles live in hardware_profiles/topologies/, apart from the chip profiles, so that
the list of chips (`--set hardware=...`) and single-GPU loading stay as they were.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import Field

from hwsim.errors import ConfigError
from hwsim.config.files import load_profile, search_dirs, validate
from hwsim.config.profile import Interconnect
from hwsim.config.sourced import Count
from hwsim.config.strict import Strict
from hwsim.config.yaml_lines import load_yaml_file
from hwsim.hw.chip import ChipSpec
from hwsim.engine.cluster import Cluster


class Topology(Strict):
    name: str
    description: str = ""
    uncertainty: str = Field(min_length=10)
    chip: str = Field(description="a chip profile in hardware_profiles/, loaded unchanged")
    gpus: Count
    gpus_per_node: Count = Field(description="GPUs of one scale-up (NVLink) domain")
    interconnect: Interconnect

    def chip_spec(self) -> ChipSpec:
        return self.apply(ChipSpec.from_profile(load_profile(self.chip)))

    def apply(self, chip: ChipSpec) -> ChipSpec:
        """The chip (a scenario's, what-if overrides included) with this system's ports."""
        net = self.interconnect
        return replace(
            chip,
            scaleup_bytes_s=net.scaleup_bandwidth_gbps.value * 1e9,
            scaleup_latency_s=net.scaleup_latency_us.value * 1e-6,
            scaleout_bytes_s=net.scaleout_bandwidth_gbps.value * 1e9 if net.scaleout_bandwidth_gbps else None,
            scaleout_latency_s=net.scaleout_latency_us.value * 1e-6 if net.scaleout_latency_us else 0.0)

    def cluster(self, gpus: int | None = None) -> Cluster:
        """A cluster of this topology (of `gpus` GPUs: fewer or more nodes of the same kind)."""
        return Cluster(self.chip_spec(), gpus or self.gpus.value, self.gpus_per_node.value)


def topology_path(name: str) -> Path | None:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    for d in search_dirs("hardware_profiles"):
        candidate = d / "topologies" / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def for_chip(chip: str) -> str | None:
    """The shipped topology built of this chip profile, an HGX board first (hgx-h200-8 for
    h200-sxm; h800-cx7 is an H100 die with fewer NVLinks, chosen only by name)."""
    names = sorted({p.stem for d in search_dirs("hardware_profiles") for p in (d / "topologies").glob("*.yaml")},
                   key=lambda n: (not n.startswith("hgx-"), n))
    for name in names:
        if load_topology(name).chip == chip:
            return name
    return None


def resolve(name: str | None, chip: str, key: str) -> Topology:
    """The topology a scenario on this chip profile runs in: `name` (its `key`), else the
    shipped one built of the chip (for_chip); refused when none is, or when it is built of
    another chip."""
    name = name or for_chip(chip)
    if name is None:
        raise ConfigError(f"{key}: no topology in hardware_profiles/topologies/ is built of {chip}; "
                          f"name one with parallel.topology", key="parallel.topology")
    topo = load_topology(name)
    if topo.chip != chip:
        raise ConfigError(f"topology {name} is built of {topo.chip}, not {chip} (hardware)",
                          key="parallel.topology")
    return topo


def load_topology(name: str) -> Topology:
    path = topology_path(name)
    if path is None:
        raise ConfigError(f"unknown topology '{name}' (hardware_profiles/topologies/)", key="topology")
    topo = validate(Topology, load_yaml_file(path))
    if topo.gpus.value % topo.gpus_per_node.value:
        raise ConfigError(f"{topo.gpus.value} GPUs do not make whole nodes of {topo.gpus_per_node.value}",
                          file=str(path), key="gpus")
    return topo
