"""An imported trace's NCCL collectives re-timed by hwsim's own collective model on one simulated
GPU (workload.kernel_trace.group_size, docs/traces.md). SYNTHETIC traces (hwsim.ktrace.synthetic):
they test the mechanism, never accuracy."""

import pytest
import yaml

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.engine.host import HeldWork
from hwsim.errors import ConfigError
from hwsim.ktrace import synthetic
from hwsim.model.schedule import StepShape
from hwsim.parallel import collectives as col
from hwsim.parallel.topology import load_topology, topology_path

MODEL, LAYERS, CONTEXT = "llama-3.1-8b", 2, 1024
HIDDEN_BYTES = 4096 * 2               # llama-3.1-8b's hidden state of one token, bf16


def _cfg(tmp_path, *sets, batch=8, all_reduces=True):
    path = tmp_path / f"b{batch}.json.gz"
    synthetic.write(path, synthetic.decode_step(MODEL, batch, CONTEXT, layers=LAYERS, all_reduces=all_reduces))
    return load_scenario(None, ["workload.decode_steps=1", f"model={MODEL}", "runtime.launch=eager",
                                f"workload.kernel_trace.path={path}", f"workload.kernel_trace.batch_size={batch}",
                                f"workload.kernel_trace.context_tokens={CONTEXT}", f"workload.batch_size={batch}",
                                f"workload.context_tokens={CONTEXT}", *sets])


def _all_reduces_s(cfg) -> list[float]:
    """The seconds of the pass's all-reduces, as lowered."""
    w = cfg.workload
    items = system(cfg).schedule.step(StepShape("decode", w.batch_size, w.batch_size, w.context_tokens), {})
    return [k.seconds for k in items if isinstance(k, HeldWork) and "AllReduce" in k.name]


def _simulated_all_reduce_s(topology: str, gpus: int, nbytes: float) -> float:
    """What hwsim's multi-GPU runs take for the call: the SimPy all-reduce on an idle cluster."""
    cluster = load_topology(topology).cluster(gpus)
    return col.time_alone(cluster, col.all_reduce(cluster, cluster.devices, nbytes))


def test_a_traced_all_reduce_takes_what_hwsims_two_gpu_model_gives(tmp_path):
    held = _all_reduces_s(_cfg(tmp_path))
    retimed = _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=2"))
    expected = _simulated_all_reduce_s("hgx-h200-8", 2, 8 * HIDDEN_BYTES)
    assert len(retimed) == len(held) == 2 * LAYERS
    assert retimed == pytest.approx([expected] * len(retimed), rel=1e-9)
    assert held != pytest.approx(retimed, rel=0.01)          # group_size 1: as traced, not modelled
    assert _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=4"))[0] > expected


def test_a_larger_message_takes_longer(tmp_path):
    small = _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=2"))[0]
    large = _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=2", batch=256))[0]
    assert large > small


def test_a_faster_link_shortens_it(tmp_path):
    spec = yaml.safe_load(topology_path("hgx-h200-8").read_text())
    spec["interconnect"]["scaleup_bandwidth_gbps"]["value"] *= 4
    fast = tmp_path / "fast.yaml"
    fast.write_text(yaml.safe_dump(spec))
    base = _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=2", batch=256))[0]
    quick = _all_reduces_s(_cfg(tmp_path, "workload.kernel_trace.group_size=2", f"parallel.topology={fast}",
                                batch=256))[0]
    assert quick < base


def test_the_summary_counts_retimed_and_held_collectives(tmp_path):
    held = run_config(_cfg(tmp_path), intervals=False).summary["trace"]["collectives"]
    retimed = run_config(_cfg(tmp_path, "workload.kernel_trace.group_size=2"), intervals=False).summary
    assert held == {"retimed": 0, "held": 2 * LAYERS, "group_size": 1}
    assert retimed["trace"]["collectives"] == {"retimed": 2 * LAYERS, "held": 0, "group_size": 2}
    assert not any("parallel.topology" in w for w in retimed["warnings"])


def test_a_topology_of_another_chip_or_none_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="built of h100-sxm"):
        system(_cfg(tmp_path, "workload.kernel_trace.group_size=2", "parallel.topology=hgx-h100-8"))
    with pytest.raises(ConfigError, match="no topology .* built of mi300x"):
        system(_cfg(tmp_path, "workload.kernel_trace.group_size=2", "hardware=mi300x"))
    system(_cfg(tmp_path, "hardware=mi300x"))        # group_size 1 needs no topology
