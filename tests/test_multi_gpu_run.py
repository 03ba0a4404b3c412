"""Whole runs on several GPUs (hwsim/parallel/multi.py): the three scenarios of issue 18, the
`parallel` keys, the breakdown still summing to the step, collectives timed on the links, the
memory check, and the layouts that are refused."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.parallel import collectives, layout as lay
from hwsim.parallel.comm_kernels import NCCL_ALL_TO_ALL
from hwsim.parallel.topology import load_topology

REPO = Path(__file__).resolve().parents[1]
KEYS = {"gpus", "tp", "ep", "dp_attention", "per_gpu_memory_gb", "fits", "comm_ms_per_step", "all_to_all_ms",
        "all_reduce_ms", "gpu_load_imbalance", "wait_for_slowest_ms", "overlap_fraction"}
COMM = ("all_reduce", "all_to_all", "all_gather", "gpu_wait")
_runs: dict = {}


def run(name: str, *overrides: str) -> dict:
    key = (name, overrides)
    if key not in _runs:
        cfg = load_scenario(REPO / "scenarios" / f"{name}.yaml", ["workload.decode_steps=1", *overrides])
        _runs[key] = run_config(cfg)
    return _runs[key]


@pytest.mark.parametrize("name,gpus", [("deepseek-v3-ep8", 8), ("qwen3-235b-ep4", 4), ("mixtral-8x22b-tp2", 2)])
def test_the_scenarios_fit_and_report_the_parallel_keys(name, gpus):
    r = run(name)
    p = r.summary["parallel"]
    assert set(p) == KEYS
    assert p["gpus"] == gpus and p["fits"] and p["per_gpu_memory_gb"] < 141
    assert p["comm_ms_per_step"] > 0 and p["overlap_fraction"] == 0.0
    assert p["comm_ms_per_step"] >= (p["all_to_all_ms"] + p["all_reduce_ms"]) * (1 - 1e-9)   # one micro-batch
    assert p["gpu_load_imbalance"] >= 1.0
    step = r.steps[0]
    parts = step.breakdown_s
    assert set(COMM) <= set(parts)
    assert sum(parts.values()) == pytest.approx(step.duration_s, rel=1e-6)     # still sums to the step
    assert parts["gpu_wait"] * 1e3 == pytest.approx(p["wait_for_slowest_ms"])
    assert not r.summary["warnings"]
    assert r.summary["topology"] == "hgx-h200-8"


def test_ep8_dispatches_and_combines_and_tensor_parallel_all_reduces():
    ds, qw, mx = run("deepseek-v3-ep8"), run("qwen3-235b-ep4"), run("mixtral-8x22b-tp2")
    assert ds.summary["parallel"]["all_to_all_ms"] > 0 and ds.summary["parallel"]["all_reduce_ms"] == 0
    assert qw.summary["parallel"]["all_reduce_ms"] > 0 and qw.summary["parallel"]["all_to_all_ms"] == 0
    # experts spread over GPUs make some GPUs wait for others; a pure TP split does not
    assert ds.summary["parallel"]["wait_for_slowest_ms"] > 0 and ds.summary["parallel"]["gpu_load_imbalance"] > 1
    assert mx.summary["parallel"]["gpu_load_imbalance"] == 1.0
    assert mx.summary["parallel"]["wait_for_slowest_ms"] == pytest.approx(0.0, abs=1e-9)


def test_the_step_s_all_reduces_are_the_collective_alone_on_the_links():
    """Mixtral-8x22B on TP2 at batch 8: two all-reduces of 8 x 6144 bf16 a layer, each as long as
    the same all-reduce alone on an idle pair of GPUs of the topology."""
    r = run("mixtral-8x22b-tp2")
    cluster = load_topology("hgx-h200-8").cluster(2)
    alone = collectives.time_alone(cluster, collectives.all_reduce(cluster, cluster.devices, 8 * 6144 * 2))
    assert r.steps[0].parallel.comm_s["all_reduce"] == pytest.approx(2 * 56 * alone, rel=1e-9)
    assert cluster.devices[0].scaleup_tx.served == pytest.approx(8 * 6144 * 2 / 2 * 2)   # 2(G-1)/G N


def test_same_seed_same_result():
    cfg = load_scenario(REPO / "scenarios" / "qwen3-235b-ep4.yaml", ["workload.decode_steps=1",
                                                                      "workload.batch_size=8"])
    a, b = run_config(cfg), run_config(cfg)
    assert a.summary["itl_ms"] == b.summary["itl_ms"]
    assert a.summary["parallel"] == b.summary["parallel"]


def test_one_gpu_reports_no_communication():
    p = run_config(load_scenario(None, ["workload.decode_steps=1"])).summary["parallel"]
    assert set(p) == KEYS
    assert (p["gpus"], p["comm_ms_per_step"], p["gpu_load_imbalance"], p["wait_for_slowest_ms"]) == (1, 0.0, 1.0, 0.0)


def test_uniform_dispatch_sends_g_minus_1_over_g_of_the_choices_off_the_gpu():
    layout = lay.Layout(gpus=8, tp=1, ep=8, gpus_per_node=8, dp_attention=True)
    experts = lay.ExpertMap("contiguous", 256, 8, 0, {0: np.full(256, 1 / 256)})
    choice = np.random.default_rng(0).integers(0, 256, size=(4096, 8))
    owner = lay.owners(layout, 4096)
    counts = lay.dispatch_counts(layout, owner, experts.groups(0, choice))
    assert counts.sum() == choice.size
    assert 1 - np.trace(counts) / counts.sum() == pytest.approx(7 / 8, abs=0.01)


def test_a_balanced_routing_on_a_balanced_placement_has_imbalance_1():
    experts = lay.ExpertMap("round-robin", 64, 8, 0, {0: np.full(64, 1 / 64)})
    choice = np.arange(64 * 4).reshape(-1, 8) % 64            # every expert chosen 4 times
    load = experts.gpu_load([experts.groups(0, choice)])
    assert load.max() / load.mean() == 1.0


def test_redundant_copies_share_a_hot_expert_s_tokens():
    load = np.array([8.0, 1, 1, 1, 1, 1, 1, 1])
    experts = lay.ExpertMap("redundant", 8, 4, 4, {0: load})     # 3 slots a GPU: 4 spare
    choice = np.zeros((80, 1), dtype=int)                       # every token to the hot expert
    per_gpu = experts.gpu_load([experts.groups(0, choice)])
    assert (per_gpu > 0).sum() > 1                              # its copies take turns


@pytest.mark.parametrize("overrides,match", [
    (["parallel.gpus=8", "parallel.tp=2"], "tp = gpus"),
    (["parallel.gpus=8", "parallel.ep=4", "parallel.dp_attention=true"], "ep = 8"),
    (["parallel.gpus=8", "parallel.tp=8", "parallel.dp_attention=true"], "tp: 1"),
    (["parallel.gpus=8", "parallel.ep=8", "parallel.dp_attention=true", "workload.batch_size=4"], "sequences"),
    (["parallel.gpus=8", "parallel.ep=8", "parallel.dp_attention=true", "workload.batch_size=8",
      "parallel.micro_batches=2"], "micro-batch"),
    (["parallel.gpus=2", "parallel.tp=2", "hardware=mi300x"], "topology"),
    (["parallel.gpus=2", "parallel.tp=2", "workload.arrivals.kind=poisson"], "arrivals"),
    (["parallel.gpus=8", "parallel.ep=8", "parallel.dp_attention=true", "workload.batch_size=8",
      "workload.prompt_tokens=128"], "prefill"),
    (["parallel.gpus=16", "parallel.tp=16"], "nodes"),
])
def test_layouts_that_cannot_be_simulated_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        system(load_scenario(None, overrides))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "hwsim.cli", "run", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_single_gpu_deepseek_v3_exits_2_naming_the_numbers():
    res = _cli("--set", "model=deepseek-v3", "--json")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert "one GPU needs 67" in res.stderr and "141 GB of HBM" in res.stderr and "weights" in res.stderr


def test_overcommit_runs_and_says_so():
    cfg = load_scenario(None, ["model=deepseek-v3", "parallel.allow_overcommit=true", "workload.decode_steps=1"])
    s = run_config(cfg).summary
    assert not s["parallel"]["fits"]
    assert any("as if it fit" in w for w in s["warnings"])


def test_two_micro_batches_hide_the_collectives_behind_compute():
    """One micro-batch's all-reduces run while the other computes: most of their time is
    hidden, the breakdown still sums to the step, and (decode being weight-bound) each
    micro-batch streams the weights again, so the step is slower."""
    one, two = run("mixtral-8x22b-tp2"), run("mixtral-8x22b-tp2", "parallel.micro_batches=2")
    p = two.summary["parallel"]
    assert one.summary["parallel"]["overlap_fraction"] == 0.0 and p["overlap_fraction"] > 0.9
    step = two.steps[0]
    assert sum(step.breakdown_s.values()) == pytest.approx(step.duration_s, rel=1e-6)
    assert step.breakdown_s["all_reduce"] * 1e3 < 0.1 * p["all_reduce_ms"]
    assert two.summary["bytes"]["weights"] > 1.5 * one.summary["bytes"]["weights"]
    assert step.duration_s > one.steps[0].duration_s


def test_a_gpu_whose_experts_no_token_chose_still_runs_its_layer():
    """Batch 8, top-8 of 128 experts over 8 GPUs with skewed routing: some layer leaves a GPU
    without tokens for its experts (the fused schedule then has no expert kernels there)."""
    cfg = load_scenario(REPO / "scenarios" / "qwen3-235b-ep4.yaml", [
        "workload.decode_steps=1", "workload.batch_size=8", "moe.routing.kind=zipf",
        "parallel.gpus=8", "parallel.tp=8", "parallel.ep=8"])
    b = system(cfg)
    r = run_config(cfg, b)
    assert r.summary["parallel"]["gpu_load_imbalance"] > 1.5
    step = r.steps[0]
    assert sum(step.breakdown_s.values()) == pytest.approx(step.duration_s, rel=1e-6)


def test_tensor_parallel_prefill_all_reduces_its_prompt():
    r = run("mixtral-8x22b-tp2", "workload.prompt_tokens=256")
    prefill = r.steps[0]
    assert prefill.phase == "prefill" and r.summary["ttft_ms"]["p50"] > 0
    assert prefill.parallel.comm_s["all_reduce"] > r.steps[1].parallel.comm_s["all_reduce"]   # 256 rows, not 8
    assert sum(prefill.breakdown_s.values()) == pytest.approx(prefill.duration_s, rel=1e-6)


def test_kv_summary_is_one_gpu_s():
    one = run_config(load_scenario(None, ["workload.decode_steps=1", "workload.batch_size=8"])).summary["kv"]
    two = run_config(load_scenario(None, ["workload.decode_steps=1", "workload.batch_size=8", "parallel.gpus=2",
                                            "parallel.tp=2"])).summary["kv"]
    assert two["bytes_per_token"] == pytest.approx(one["bytes_per_token"] / 2)     # half the KV heads
    assert two["max_context_tokens_fitting"] > 2 * one["max_context_tokens_fitting"]


def test_two_nodes_send_over_the_nics():
    """Mixtral-8x22B on TP4 over two nodes of two GPUs: the ring crosses the NICs, so the same
    all-reduces take longer than on one node's NVLink."""
    one = run("mixtral-8x22b-tp2", "parallel.gpus=4", "parallel.tp=4")
    two = run("mixtral-8x22b-tp2", "parallel.gpus=4", "parallel.tp=4", "parallel.nodes=2")
    assert two.summary["parallel"]["all_reduce_ms"] > 2 * one.summary["parallel"]["all_reduce_ms"]
    assert two.summary["parallel"]["overlap_fraction"] == 0.0


def test_a_dense_model_splits_over_tp_or_runs_as_replicas():
    tp = run_config(load_scenario(None, ["model=llama-3.1-8b", "workload.batch_size=8", "workload.decode_steps=1",
                                           "parallel.gpus=2", "parallel.tp=2"])).summary["parallel"]
    dp = run_config(load_scenario(None, ["model=llama-3.1-8b", "workload.batch_size=8", "workload.decode_steps=1",
                                           "parallel.gpus=2", "parallel.dp_attention=true"])).summary["parallel"]
    assert tp["all_reduce_ms"] > 0 and tp["wait_for_slowest_ms"] == 0.0
    assert dp["comm_ms_per_step"] == 0.0 and dp["per_gpu_memory_gb"] > tp["per_gpu_memory_gb"]


def test_nccl_all_to_all_dispatches_bf16_with_its_own_kernel():
    """parallel.dispatch_kernel: NCCL's all_to_all_single (bf16 tokens, ~11-15 us a call) in
    place of DeepEP's low-latency kernels (FP8 tokens, 34.6 us a call and every SM)."""
    cfg = load_scenario(REPO / "scenarios" / "deepseek-v3-ep8.yaml",
                        ["workload.decode_steps=1", "parallel.dispatch_kernel=nccl-all-to-all"])
    assert system(cfg).gpus.dispatch_kernel is NCCL_ALL_TO_ALL
    deepep = run("deepseek-v3-ep8").summary["parallel"]
    nccl = run("deepseek-v3-ep8", "parallel.dispatch_kernel=nccl-all-to-all").summary["parallel"]
    # 58 MoE layers x (dispatch + combine): the fixed costs alone differ by ~2.5 ms a step
    assert 1.0 < deepep["all_to_all_ms"] - nccl["all_to_all_ms"] < 4.0
