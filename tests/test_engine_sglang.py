"""The SGLang adapter: the pinned version's hooked names exist (the contract), SGLang's real
Scheduler serves requests on hwsim's clock on CPU (its chunked prefill, its running-request
limit), and bad input exits 2 with one line. The scheduler tests are skipped, saying why, where
sglang is not installed (its CPU-only install: docs/serving.md); the install checks always run."""

import importlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from hwsim.config import engine_install as ei
from hwsim.serving.requests import Request

ROOT = Path(__file__).resolve().parents[1]
try:
    INSTALLED = metadata.version("sglang")
except metadata.PackageNotFoundError:
    INSTALLED = None
needs_sglang = pytest.mark.skipif(INSTALLED is None, reason="sglang is not installed: the SGLang adapter's scheduler "
                                  "tests need sglang==0.5.4 on CPU (docs/serving.md, 'sglang')")


def test_not_installed_and_other_version_say_how_to_install(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(ei.EngineError, match=r"needs sglang==0.5.4: not installed \(pip install 'hwsim\[sglang-engine\]'"):
        ei.check_sglang()
    monkeypatch.setattr(metadata, "version", lambda name: "0.5.23")
    with pytest.raises(ei.EngineError, match="pinned to sglang==0.5.4; 0.5.23 is installed"):
        ei.check_sglang()


def test_extra_and_docs_pin_the_same_version():
    text = (ROOT / "pyproject.toml").read_text()
    assert "sglang-engine = [" in text
    assert f"sglang=={ei.SGLANG_PINNED}" in (ROOT / "docs/serving.md").read_text()


@needs_sglang
def test_pinned_version_and_every_hooked_name_exist():
    """Fails loudly when sglang moves: each name the adapter reaches into, in the pinned version."""
    from hwsim.serving.engines import sglang as adapter
    assert INSTALLED == ei.SGLANG_PINNED, (
        f"sglang {INSTALLED} installed; the adapter is pinned to {ei.SGLANG_PINNED}: re-check every name in "
        "hwsim.serving.engines.sglang.HOOKS against the new version before moving the pin")
    adapter.install_stubs()
    for module, dotted in adapter.HOOKS:
        obj = importlib.import_module(module)
        for part in dotted.split("."):
            assert hasattr(obj, part), f"{module}.{dotted} is gone in sglang {INSTALLED}"
            obj = getattr(obj, part)
    import inspect
    Scheduler = importlib.import_module("sglang.srt.managers.scheduler").Scheduler
    init = inspect.getsource(Scheduler.__init__)
    for used in ("TpModelWorker(", "self.tp_worker.get_worker_info()", "get_pp_group()", "self.init_sockets("):
        assert used in init, f"Scheduler.__init__ no longer calls {used}"


@needs_sglang
def test_unknown_and_fixed_fields_are_refused():
    with pytest.raises(ei.EngineError, match="config.max_batch_size: ServerArgs of sglang 0.5.4 has no field"):
        ei.sglang_fields({"max_batch_size": 8})
    with pytest.raises(ei.EngineError, match="config.device: set by hwsim's sglang adapter"):
        ei.sglang_fields({"device": "cuda"})
    ei.sglang_fields({"chunked_prefill_size": 512, "max_running_requests": 4, "schedule_policy": "lpm"})


@pytest.fixture(scope="module")
def built():
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    return system(load_scenario(None, ["model=llama-3.1-8b", "workload.arrivals.kind=poisson"]))


def _engine(b, fields, clock=None):
    from hwsim.serving.engines import sglang as adapter
    from hwsim.serving.engines.run import available_bytes
    from hwsim.serving.step_clock import StepClock
    return adapter.SglEngine(b.model, clock or StepClock(b), fields, b.chip.hbm_capacity_bytes, available_bytes(b))


@needs_sglang
def test_chunked_prefill_splits_a_long_prompt(built):
    """SGLang's own chunking: a 600-token prompt under chunked_prefill_size 256 takes three
    extend steps over its growing cached prefix, then decodes one token per step."""
    run = _engine(built, {"chunked_prefill_size": 256}).serve([Request(0, 0.0, 600, 4)])
    assert [b for _, _, b in run.steps] == [[(256, 0)], [(256, 256)], [(88, 512)],
                                            [(1, 600)], [(1, 601)], [(1, 602)]]
    times = run.token_times[0]
    assert len(times) == 4 and np.all(np.diff(times) > 0)
    # the first token ends the last chunk's step: the clock advanced by exactly the steps' walls
    assert times[0] == pytest.approx(sum(st.total_s for _, st, _ in run.steps[:3]))
    assert times[-1] == pytest.approx(run.steps[-1][0] + run.steps[-1][1].total_s)


@needs_sglang
def test_max_running_requests_limits_the_batch(built):
    reqs = [Request(i, 0.0, 100, 20) for i in range(5)]
    run = _engine(built, {"max_running_requests": 2}).serve(reqs)
    assert run.max_running_requests == 2
    assert max(len(b) for _, _, b in run.steps) == 2                # never more than two sequences
    assert all(len(run.token_times[i]) == 20 for i in range(5))     # and every request served
    assert run.token_times[4][0] > run.token_times[1][-1]           # the fifth waited for a slot


@needs_sglang
def test_a_full_kv_pool_retracts_and_keeps_every_token(built):
    """3,000 KV tokens for ten 200 + 300-token requests admitted optimistically
    (schedule_conservativeness 0.05): SGLang retracts some when decode runs out of pool, serves
    them again, and never holds more KV than the pool."""
    run = _engine(built, {"max_total_tokens": 3000, "schedule_conservativeness": 0.05}).serve(
        [Request(i, 0.0, 200, 300) for i in range(10)])
    assert run.preemptions >= 1
    assert max(sum(q + c for q, c in b) for _, _, b in run.steps) <= 3000
    for i in range(10):
        times = run.token_times[i]
        assert len(times) == 300 and all(b > a for a, b in zip(times, times[1:]))


@needs_sglang
def test_a_slower_chip_gives_longer_inter_token_latency(built):
    """The token times are the step clock's: the H100's decode steps (less HBM bandwidth) are
    longer than the H200's, so is every gap."""
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    h100 = system(load_scenario(None, ["model=llama-3.1-8b", "hardware=h100-sxm", "workload.arrivals.kind=poisson"]))
    reqs = [Request(i, 0.0, 200, 16) for i in range(4)]
    gap = {}
    for name, b in (("h200", built), ("h100", h100)):
        run = _engine(b, {}).serve(reqs)
        gap[name] = np.median(np.concatenate([np.diff(run.token_times[i]) for i in range(4)]))
    assert gap["h100"] > 1.1 * gap["h200"]


@needs_sglang
def test_scenario_reports_engine_latency():
    """workload.engine.kind sglang through run_scenario: the --json fields of issue 43."""
    from hwsim.config.load import load_scenario
    from hwsim.pipeline import run_config
    cfg = load_scenario(str(ROOT / "scenarios/engines/sglang-llama-chat.yaml"), ["workload.arrivals.requests=12"])
    s = run_config(cfg).run_summary
    assert set(s.ttft_ms) == set(s.itl_ms) == {"p50", "p90", "p99", "mean"}
    assert s.serving.requests_completed == 12 and s.serving.throughput_tok_s > 0
    e = s.serving.engine
    assert (e.kind, e.version, e.config["chunked_prefill_size"], e.config["mem_fraction_static"]) == \
        ("sglang", "0.5.4", 8192, 0.9)                   # SGLang's defaults for an H200's memory


@needs_sglang
def test_cli_refuses_a_bad_field_in_one_line():
    bad = subprocess.run([sys.executable, "-m", "hwsim.launch", "run", "--json", "--no-plots",
                          "--set", "model=llama-3.1-8b", "--set", "workload.arrivals.kind=poisson",
                          "--set", "workload.engine.kind=sglang", "--set", "workload.engine.config={max_batch_size: 8}"],
                         capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": ":".join([str(ROOT), *sys.path[1:]]), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr[-2000:]
    assert "workload.engine.config.max_batch_size: ServerArgs of sglang 0.5.4 has no field" in bad.stderr
