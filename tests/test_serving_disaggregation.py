"""Prefill/decode disaggregation: the KV transfer timed on the topology's links, decode
iterations free of prefill chunks, per-tier figures, and bad input exiting 2."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hwsim.pipeline import run_config, system
from hwsim import pipeline
from hwsim.config.load import load_model, load_scenario
from hwsim.config.scenario import Disaggregation
from hwsim.errors import ConfigError
from hwsim.io.tables import rows_to_columns, write_parquet
from hwsim.parallel.topology import load_topology
from hwsim.serving.disaggregation import DisaggregatedLoop
from hwsim.serving.kv_transfer import KV_SEND, KvFabric

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
DISAGG = ["workload.disaggregation.prefill_gpus=1", "workload.disaggregation.decode_gpus=1"]


def scenario(*sets):
    return load_scenario(None, [f"model={TINY}", "workload.arrivals.kind=poisson", *sets])


def one_request(*sets):
    """One request alone: nothing shares the links or the GPUs."""
    cfg = scenario("workload.arrivals.requests=1", "workload.prompt.tokens=3000",
                   "workload.output.tokens=4", *DISAGG, *sets)
    built = system(cfg)
    loop = DisaggregatedLoop(built)
    (req,) = loop.run()
    return cfg, loop, req


def hand_kv_bytes(prompt: int, bytes_per_element: float) -> float:
    """K and V of every layer for the prompt's tokens, from the model shape alone."""
    m = load_model(TINY)
    return prompt * m.layers * 2 * m.attention.kv_heads * m.attention.head_dim * bytes_per_element


@pytest.mark.parametrize("link", ["nvlink", "network"])
def test_one_transfer_is_its_bytes_over_the_link_plus_latency(link):
    cfg, loop, req = one_request(f"workload.disaggregation.link={link}")
    net = load_topology("hgx-h200-8").interconnect
    if link == "nvlink":
        rate = net.scaleup_bandwidth_gbps.value * 1e9 * KV_SEND.scaleup_efficiency
        latency = net.scaleup_latency_us.value * 1e-6
    else:
        rate = net.scaleout_bandwidth_gbps.value * 1e9 * KV_SEND.scaleout_efficiency
        latency = net.scaleout_latency_us.value * 1e-6
    nbytes = hand_kv_bytes(3000, 2)                     # bf16 KV cache
    assert req.kv_transfer_bytes == pytest.approx(nbytes, rel=1e-9)
    assert req.kv_transfer_s == pytest.approx(KV_SEND.fixed_us * 1e-6 + latency + nbytes / rate, rel=1e-6)
    # the second token: the transfer, then one batch-1 decode pass on the idle decode GPU
    decode = loop.oracle.time(1, 3001, 0, 0).duration_s
    assert loop.gaps.of(req)[0] == pytest.approx(req.kv_transfer_s + decode, rel=1e-9)
    # the first token: its prefill, two chunks of the 2048-token budget on the prefill GPU
    chunks = loop.prefill[0].iterations
    assert [it.prefill_tokens for it in chunks] == [2048, 952]
    assert req.first_token_s - req.arrival_s == pytest.approx(sum(it.duration_s for it in chunks), rel=1e-9)


def test_a_quantized_kv_cache_sends_fewer_bytes_sooner():
    _, _, bf16 = one_request()
    _, _, fp8 = one_request("kv_cache.preset=fp8")
    assert fp8.kv_transfer_bytes == pytest.approx(hand_kv_bytes(3000, 1), rel=1e-9)
    # half the bytes: half the time on the wire; the call's fixed cost and latency stay
    overhead = KV_SEND.fixed_us * 1e-6 + load_topology("hgx-h200-8").interconnect.scaleup_latency_us.value * 1e-6
    assert fp8.kv_transfer_s - overhead == pytest.approx(0.5 * (bf16.kv_transfer_s - overhead), rel=1e-6)


def test_transfers_into_one_decode_gpu_share_its_port():
    cfg = scenario(*DISAGG)
    built = system(cfg)
    fabric = KvFabric(built.chip, "h200-sxm", Disaggregation(prefill_gpus=2, decode_gpus=2))
    n = 2e9
    alone = fabric.alone_s(n)
    env = fabric.env
    same = [env.process(fabric.send(i, i, 0, n)) for i in range(2)]       # both into decode GPU 0
    env.run()
    both = [p.value.seconds for p in same]
    assert both[0] == pytest.approx(both[1])
    assert both[0] == pytest.approx(2 * alone, rel=0.01)      # its NVLink port in, shared
    apart = [env.process(fabric.send(2 + i, i, i, n)) for i in range(2)]  # to different GPUs
    env.run()
    assert [p.value.seconds for p in apart] == pytest.approx([alone, alone], rel=1e-6)


PREFILL_HEAVY = ["workload.arrivals.rate_per_s=40", "workload.arrivals.requests=24",
                 "workload.prompt.kind=uniform", "workload.prompt.low=2048", "workload.prompt.high=8192",
                 "workload.output.kind=uniform", "workload.output.low=16", "workload.output.high=48",
                 "workload.token_budget=4096"]


@pytest.fixture(scope="module")
def prefill_heavy():
    colocated = run_config(scenario(*PREFILL_HEAVY))
    disaggregated = run_config(scenario(*PREFILL_HEAVY, *DISAGG))
    return colocated, disaggregated


def test_decode_iterations_never_hold_prefill_chunks(prefill_heavy):
    colocated, disaggregated = prefill_heavy
    its = disaggregated.iterations
    decode = [it for it in its if it.decodes]
    prefill = [it for it in its if it.prefill_tokens]
    assert decode and prefill and len(decode) + len(prefill) == len(its)
    assert all(it.prefill_tokens == 0 for it in decode) and all(it.decodes == 0 for it in prefill)
    assert any(it.decodes and it.prefill_tokens for it in colocated.iterations)   # the load mixes them
    # so the tail of the inter-token gaps drops: no decode waits behind a prompt chunk
    assert disaggregated.summary["itl_ms"]["p99"] < 0.5 * colocated.summary["itl_ms"]["p99"]
    s = disaggregated.summary["serving"]
    assert s["requests_completed"] == 24 and s["kv_transfer"]["transfers"] == 24
    assert colocated.summary["serving"]["tiers"] is None


def test_per_tier_gpus_and_one_row_per_request(tmp_path):
    r = run_config(scenario(*PREFILL_HEAVY[:4], "workload.prompt.high=4096", "workload.output.kind=fixed",
                              "workload.output.tokens=8", "workload.disaggregation.prefill_gpus=2",
                              "workload.disaggregation.decode_gpus=3"))
    tiers = r.summary["serving"]["tiers"]
    assert (tiers["prefill"]["gpus"], tiers["decode"]["gpus"]) == (2, 3)
    for t in tiers.values():
        assert 0 < t["utilisation"] <= 1
    path = tmp_path / "requests.parquet"
    write_parquet(rows_to_columns(r.requests), path)
    rows = pd.read_parquet(path)
    assert len(rows) == 24 and sorted(rows["request"]) == list(range(24))
    assert set(rows["prefill_gpu"]) == {0, 1} and set(rows["decode_gpu"]) <= {0, 1, 2}
    assert len(set(rows["decode_gpu"])) > 1
    assert rows["kv_transfer_bytes"].sum() == pytest.approx(r.summary["serving"]["kv_transfer"]["bytes_total"])


def test_a_full_decode_gpu_makes_prefilled_requests_wait():
    r = run_config(scenario(*PREFILL_HEAVY[:4], "workload.prompt.high=4096", "workload.max_batch_size=2",
                              *DISAGG))
    assert max(it.decodes for it in r.iterations) <= 2
    waits = [row["decode_wait_ms"] for row in r.requests]
    assert max(waits) > 0 and r.summary["serving"]["tiers"]["decode"]["queue_ms"]["p99"] > 0
    # a request's second token comes after its wait and its transfer
    for row in r.requests:
        assert row["itl_max_ms"] >= row["decode_wait_ms"] + row["kv_transfer_ms"]


def test_same_seed_same_requests():
    a = run_config(scenario("workload.arrivals.requests=8", "workload.disaggregation.prefill_gpus=2", *DISAGG[1:]))
    b = run_config(scenario("workload.arrivals.requests=8", "workload.disaggregation.prefill_gpus=2", *DISAGG[1:]))
    assert a.requests == b.requests


@pytest.mark.parametrize("sets, key", [
    (["workload.disaggregation.prefil_gpus=2"], "workload.disaggregation.prefil_gpus"),
    (["workload.disaggregation.prefill_gpus=0"], "workload.disaggregation.prefill_gpus"),
    (["workload.disaggregation.link=pcie"], "workload.disaggregation.link"),
    ([*DISAGG, "workload.kv_allocation=as_needed"], "workload"),
])
def test_bad_disaggregation_keys_are_named(sets, key):
    with pytest.raises(ConfigError) as e:
        scenario(*sets)
    assert e.value.key == key


def test_tiers_that_do_not_fit_their_topology_are_refused_above_the_loader(tmp_path):
    # hwsim/checks.py: by `hwsim run` right after loading (at file:line:key), and by
    # the pipeline's system (load, check, build)
    unplaced = scenario("workload.disaggregation.prefill_gpus=5", "workload.disaggregation.decode_gpus=4")
    for check, arg in ((pipeline.check, pipeline.from_config(unplaced)), (system, unplaced)):
        with pytest.raises(ConfigError, match="use link: network") as e:
            check(arg)
        assert e.value.key == "workload.disaggregation.decode_gpus"
    p = tmp_path / "s.yaml"
    p.write_text(f"hardware: h200-sxm\nmodel: {TINY}\nworkload:\n  disaggregation: {{topology: h800-cx7}}\n")
    with pytest.raises(ConfigError, match="unknown key of fixed-batch decode") as e:   # a key of serving only
        pipeline.load(p)
    assert (e.value.file, e.value.line, e.value.key) == (str(p), 4, "workload.disaggregation")
    with pytest.raises(ConfigError, match="built of h100-sxm") as e:
        pipeline.check(pipeline.load(p, ["workload.arrivals.kind=poisson"]))
    assert (e.value.file, e.value.key) == (str(p), "workload.disaggregation.topology")
    run_config(scenario("workload.arrivals.requests=2", "workload.disaggregation.prefill_gpus=5",
                          "workload.disaggregation.decode_gpus=4", "workload.disaggregation.link=network"))


def test_bad_key_in_a_file_exits_2_with_its_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("hardware: h200-sxm\nmodel: qwen3-30b-a3b\nworkload:\n  arrivals: {kind: poisson}\n"
                 "  disaggregation:\n    prefill_gpus: 1\n    link: infiniband\n")
    out = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", str(p), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"{p}:7" in out.stderr and "workload.disaggregation.link" in out.stderr
