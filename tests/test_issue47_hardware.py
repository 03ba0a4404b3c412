"""Issue 47 item 10: impossible hardware is exit 2 at its key, never a run or an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hwsim.cli import app

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests" / "data" / "tiny-moe.yaml")


def run(tmp_path, *sets):
    args = ["run", "--out", str(tmp_path / "out"), "--no-plots", "--set", f"model={TINY}",
            "--set", "workload.decode_steps=1"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("sets, words", [
    (["hardware_overrides.l2.capacity_mib=1000000"], "larger than its HBM"),     # 1 TB of L2 on 141 GB
    (["hardware_overrides.power.tensor_clock_mhz=5000"], "above the maximum SM clock"),
    (["workload.kernel_trace.path=scenarios/traces/kernels/synthetic-mixtral-b8-l4096.json.gz",
      "workload.kernel_trace.batch_size=8", "workload.kernel_trace.context_tokens=4096",
      "workload.kernel_trace.host=../../x"], "host profile name"),
])
def test_impossible_hardware_is_refused(tmp_path, sets, words):
    res = run(tmp_path, *sets)
    assert res.exit_code == 2, res.stderr + res.stdout
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_l2_larger_than_hbm_in_a_profile_file_is_refused(tmp_path):
    prof = yaml.safe_load((ROOT / "hardware_profiles" / "h200-sxm.yaml").read_text())
    prof["l2"]["capacity_mib"]["value"] = 1_000_000
    (tmp_path / "big-l2.yaml").write_text(yaml.safe_dump(prof))
    res = run(tmp_path, f"hardware={tmp_path / 'big-l2.yaml'}")
    assert res.exit_code == 2 and "big-l2.yaml" in res.stderr and "l2.capacity_mib" in res.stderr


def test_a_host_profile_with_a_nonsense_profiler_overhead_is_refused(tmp_path, monkeypatch):
    from hwsim.config.files import validate
    from hwsim.config.yaml_lines import load_yaml_file
    from hwsim.errors import ConfigError
    from hwsim.ktrace.host import HostProfile
    host = yaml.safe_load((ROOT / "hardware_profiles" / "hosts" / "as-traced.yaml").read_text())
    host["profiler_overhead"]["value"] = 1e-9         # an 8 x 10^9 ms step
    (tmp_path / "tiny-overhead.yaml").write_text(yaml.safe_dump(host))
    with pytest.raises(ConfigError, match="profiler_overhead") as info:
        validate(HostProfile, load_yaml_file(tmp_path / "tiny-overhead.yaml"))
    assert "tiny-overhead.yaml" in str(info.value)


def test_two_nodes_without_a_nic_is_refused(tmp_path):
    topo = yaml.safe_load((ROOT / "hardware_profiles" / "topologies" / "hgx-h200-8.yaml").read_text())
    del topo["interconnect"]["scaleout_bandwidth_gbps"], topo["interconnect"]["scaleout_latency_us"]
    (tmp_path / "no-nic.yaml").write_text(yaml.safe_dump(topo))
    res = run(tmp_path, "parallel.gpus=2", "parallel.nodes=2", "parallel.tp=2",
              f"parallel.topology={tmp_path / 'no-nic.yaml'}", "workload.batch_size=16")
    assert res.exit_code == 2, res.stderr + res.stdout
    assert "NIC" in res.stderr and "parallel.topology" in res.stderr
