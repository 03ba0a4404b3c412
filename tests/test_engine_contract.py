"""workload.engine's contract where no engine is installed (as in CI): the keys load, a missing
engine (transformers or sglang) and a misplaced key are each one clear refusal."""

import sys
from pathlib import Path

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.config.engine_install import problems

SERVE = ["model=llama-3.1-8b", "workload.arrivals.kind=poisson"]


def test_default_engine_is_the_built_in_loop():
    cfg = load_scenario(None, SERVE)
    assert cfg.workload.engine.kind == "hwsim" and list(problems(cfg)) == []


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)      # as if not installed
    cfg = load_scenario(None, [*SERVE, "workload.engine.kind=hf-transformers"])
    [(key, msg)] = list(problems(cfg))
    assert key == "workload.engine.kind"
    assert "needs transformers==5.17.0" in msg and "not installed" in msg and "\n" not in msg


def test_missing_sglang_is_one_line_with_the_install_command(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)          # as if not installed
    cfg = load_scenario(None, [*SERVE, "workload.engine.kind=sglang"])
    [(key, msg)] = list(problems(cfg))
    assert key == "workload.engine.kind" and "\n" not in msg
    assert "needs sglang==0.5.4: not installed (pip install 'hwsim[sglang-engine]'" in msg
    closed = load_scenario(None, [*SERVE, "workload.engine.kind=sglang", "workload.arrivals.kind=closed"])
    assert [k for k, _ in problems(closed)] == ["workload.arrivals.kind"]


def test_engine_keys_need_a_real_engine_and_arrivals():
    with pytest.raises(ConfigError, match="config, host_trace and host are for a real engine"):
        load_scenario(None, [*SERVE, "workload.engine.config={block_size: 64}"])
    with pytest.raises(ConfigError, match=r"fixed-batch decode's engine is hf-generate .* hf-transformers schedules "
                                          r"arriving requests: set workload.arrivals") as e:
        load_scenario(None, ["workload.engine.kind=hf-transformers"])     # a scheduler: a key of serving
    assert e.value.key == "workload.engine.kind"
    with pytest.raises(ConfigError, match=r"hf-generate decodes one static batch: fixed-batch decode"):
        load_scenario(None, [*SERVE, "workload.engine.kind=hf-generate"])


def test_engine_host_and_host_trace_choose_the_hosts_numbers(tmp_path):
    """engine.host names the profile (a what-if host 1.5x as fast: every host part / 1.5);
    engine.host_trace reads the profile off the trace instead."""
    from types import SimpleNamespace

    from hwsim.serving.engines.run import engine_host
    from hwsim.serving.step_clock import StepBatch
    from test_engine_host_trace import _burst

    from hwsim.config.files import load_model
    b = SimpleNamespace(model=load_model("llama-3.1-8b").model_copy(update={"layers": 2}))
    hf = [*SERVE, "workload.engine.kind=hf-transformers"]
    base, name = engine_host(load_scenario(None, hf), b)
    fast, fast_name = engine_host(load_scenario(None, [*hf, "workload.engine.host=hf-transformers-h200-fast-host"]), b)
    # the names, then how the served model's layer scaled the profile's kernels (hwsim/serving/engines/hf_ops.py)
    assert name.startswith("hf-transformers-h200 (kernels per layer")
    assert fast_name.startswith("hf-transformers-h200-fast-host (kernels per layer")
    batch = [(1, 100)] * 4
    slow_step = base.step(batch, StepBatch.of(batch), 100, 1e-3)
    fast_step = fast.step(batch, StepBatch.of(batch), 100, 1e-3)
    assert fast_step.busy_s == pytest.approx(slow_step.busy_s / 1.5)
    trace = tmp_path / "burst.json"
    _burst(trace)
    traced, traced_name = engine_host(load_scenario(None, [*hf, f"workload.engine.host_trace={trace}"]), b)
    assert traced_name == f"host_trace {trace}" and traced.p.plan_ms.value == pytest.approx(40.0)


def test_the_hf_engine_runs_the_pass_as_the_library_does_unless_runtime_says():
    """transformers 5.17 runs MoE experts with grouped_mm and launches eagerly unless its config turns
    CUDA graphs on (config/scenario.py _hf_engine_runtime); the scenario's own runtime keys win, and
    no other engine is touched."""
    hf = Path(__file__).resolve().parents[1] / "scenarios" / "engines" / "hf-llama-chat.yaml"  # no runtime keys
    eager = load_scenario(hf).runtime
    graphs = load_scenario(hf, ["workload.engine.config.use_cuda_graph=true"]).runtime
    pinned = load_scenario(hf, ["workload.engine.config.use_cuda_graph=true", "runtime.launch=eager",
                                "runtime.moe_schedule=fused"]).runtime
    built_in = load_scenario(None, SERVE).runtime          # the default scenario writes launch: graph
    assert (eager.launch, eager.moe_schedule) == ("eager", "grouped")
    assert (graphs.launch, graphs.moe_schedule) == ("graph", "grouped")
    assert (pinned.launch, pinned.moe_schedule) == ("eager", "fused")
    assert (built_in.launch, built_in.moe_schedule) == ("graph", "per-expert")
