"""Topology profiles (hardware_profiles/topologies/): each loads, names its chip profile, sources
every number, and leaves the chip profiles and their list as they were."""

import pytest

from hwsim.config.files import builtin_profiles, load_profile
from hwsim.config.sourced import _Sourced
from hwsim.hw.chip import ChipSpec
from hwsim.parallel.topology import load_topology

TOPOLOGIES = ["hgx-h200-8", "hgx-h100-8", "h800-cx7", "gb200-nvl72", "hbm4-rack"]


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_topology_loads_with_sources_and_keeps_its_chip(name):
    topo = load_topology(name)
    numbers = [topo.gpus, topo.gpus_per_node, *(v for v in dict(topo.interconnect).values() if v is not None)]
    assert all(isinstance(v, _Sourced) and v.source.strip() for v in numbers)
    # it says what its collectives are calibrated from: 2 x H200 measured, or published figures
    assert ("Measured on 2 x H200" if name == "hgx-h200-8" else "published") in topo.uncertainty
    chip = ChipSpec.from_profile(load_profile(topo.chip))
    spec = topo.chip_spec()
    assert spec.scaleup_bytes_s == topo.interconnect.scaleup_bandwidth_gbps.value * 1e9
    assert (spec.sms, spec.hbm_peak_bytes_s) == (chip.sms, chip.hbm_peak_bytes_s)    # the chip as it is
    cluster = topo.cluster()
    assert len(cluster.devices) == topo.gpus.value


def test_topologies_are_not_chip_profiles():
    assert not set(TOPOLOGIES) & set(builtin_profiles())


def test_hgx_h200_8_is_eight_h200_on_nvlink_4_and_a_cluster_spans_nodes():
    topo = load_topology("hgx-h200-8")
    assert topo.chip == "h200-sxm" and topo.gpus.value == topo.gpus_per_node.value == 8
    cluster = topo.cluster(16)
    a, b = cluster.devices[0], cluster.devices[8]
    assert cluster.link(a, cluster.devices[1]).bytes_s == 450e9
    assert cluster.link(a, b).ports == (a.nic, b.nic_rx) and cluster.link(a, b).bytes_s == 50e9
