"""workload.engine's contract where no engine is installed (as in CI): the keys load, a missing
engine, SGLang and a misplaced key are each one clear refusal."""

import sys

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.serving.engines.checks import problems

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


def test_sglang_is_refused_for_now():
    cfg = load_scenario(None, [*SERVE, "workload.engine.kind=sglang"])
    [(key, msg)] = list(problems(cfg))
    assert key == "workload.engine.kind" and "sglang is not available" in msg


def test_engine_keys_need_a_real_engine_and_arrivals():
    with pytest.raises(ConfigError, match="config, host_trace and host are for a real engine"):
        load_scenario(None, [*SERVE, "workload.engine.config={block_size: 64}"])
    with pytest.raises(ConfigError, match="needs arrivals"):
        load_scenario(None, ["workload.engine.kind=hf-transformers"])
