"""The Hugging Face continuous-batching adapter: the pinned version's private names exist (the
contract), its real scheduler serves requests on hwsim's clock, and bad input exits 2 with one
line. Skipped, saying why, where transformers is not installed (CI installs '.[test]' only)."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers", reason="the hf-engine extra (pip install 'hwsim[hf-engine]') "
                                   "is not installed: the HF adapter's tests need transformers==5.17.0")

from hwsim.pipeline import system  # noqa: E402
from hwsim.config.load import load_scenario  # noqa: E402
from hwsim.serving.engine_host import EngineHost, load_engine_host  # noqa: E402
from hwsim.serving.engines import hf  # noqa: E402
from hwsim.serving.requests import Request  # noqa: E402
from hwsim.serving.step_clock import StepClock  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_pinned_version_and_every_hooked_name_exist():
    """Fails loudly when transformers moves: the version pinned in pyproject's hf-engine extra,
    and each private name the adapter reaches into."""
    assert transformers.__version__ == hf.PINNED, (
        f"transformers {transformers.__version__} installed; the adapter is pinned to {hf.PINNED}: re-check every "
        f"name in hwsim.serving.engines.hf.HOOKS against the new version before moving the pin")
    assert f'"transformers=={hf.PINNED}"' in (ROOT / "pyproject.toml").read_text()
    for module, dotted in hf.HOOKS:
        obj = importlib.import_module(module)
        for part in dotted.split("."):
            if part == "_timestamps":          # a dataclass field: on the class's fields, not an attribute
                assert "_timestamps" in obj.__dataclass_fields__, f"{module}.{dotted} is gone"
                continue
            if part in ("requests_in_batch", "output_ids"):   # set in __init__ / _setup_static_tensors
                import inspect
                assert f"self.{part}" in inspect.getsource(obj), f"{module}.{dotted} is gone"
                continue
            assert hasattr(obj, part), f"{module}.{dotted} is gone in transformers {transformers.__version__}"
            obj = getattr(obj, part)
    from transformers.generation.continuous_batching import requests
    assert requests.time.__name__ == "time", "requests.py no longer stamps with the time module"


def test_unknown_config_field_is_refused():
    with pytest.raises(hf.EngineError, match="has no field 'max_batch_size'"):
        hf.cb_config({"max_batch_size": 8})


def test_wrong_version_is_refused(monkeypatch):
    # the module imported now: building a model (hf_ops counts its ops) rebinds sys.modules' entry
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "5.18.0")
    with pytest.raises(hf.EngineError, match="pinned to transformers==5.17.0; 5.18.0 is installed"):
        hf.check_version()


@pytest.fixture(scope="module")
def built():
    return system(load_scenario(None, ["model=llama-3.1-8b", "workload.arrivals.kind=poisson"]))


def _requests(n, rate, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [Request(i, float(t[i]), int(rng.integers(64, 1500)), int(rng.integers(8, 120))) for i in range(n)]


def test_fifty_requests_end_to_end(built):
    host = EngineHost(load_engine_host("hf-transformers-h200"), built.model.layers)
    clock = StepClock(built, host=host)
    eng = hf.HfEngine(built.model, clock, {}, built.chip.hbm_capacity_bytes - built.schedule.weight_bytes_total())
    assert (eng.cuda_graph, eng.async_batching) == (False, False)      # the library's call for SDPA
    reqs = _requests(50, 2.0)
    run = eng.serve(reqs)
    assert run.max_batch_tokens == 8192 and run.num_blocks > 1000
    for r in reqs:
        times = run.token_times[r.rid]
        assert len(times) == r.output_tokens                       # every token, none lost
        assert times[0] > r.arrival_s and np.all(np.diff(times) > 0)
    # the clock advanced by exactly the steps' times: the last token is the end of the last step
    t0, last, _ = run.steps[-1]
    assert max(t[-1] for t in run.token_times.values()) == pytest.approx(t0 + last.total_s)
    # a decode step's gap is one engine step: host-bound eager (launches + a new cuDNN plan)
    gaps = np.concatenate([np.diff(run.token_times[r.rid]) for r in reqs])
    assert 0.080 < np.median(gaps) < 0.110                           # 68.3 ms launches + 11 ms plan + masks
    # chunked prefill: a prompt over the budget is split (the library's scheduler, not hwsim's)
    assert max(sum(q for q, _ in b) for _, _, b in run.steps) <= 8192


def test_budget_splits_a_long_prompt(built):
    clock = StepClock(built)
    eng = hf.HfEngine(built.model, clock, {"max_batch_tokens": 1024, "num_blocks": 64},
                      built.chip.hbm_capacity_bytes - built.schedule.weight_bytes_total())
    run = eng.serve([Request(0, 0.0, 3000, 4)])
    firsts = [b[0] for _, _, b in run.steps[:3]]
    assert firsts == [(1024, 0), (1024, 1024), (952, 2048)]       # chunks over the cached prefix
    assert len(run.token_times[0]) == 4


def _cli(*sets):
    return subprocess.run([sys.executable, "-m", "hwsim.launch", "run", "--json", "--no-plots",
                           "--set", "model=llama-3.1-8b", "--set", "workload.arrivals.kind=poisson",
                           "--set", "workload.arrivals.requests=12", "--set", "workload.engine.kind=hf-transformers",
                           *[a for s in sets for a in ("--set", s)]],
                          capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_cli_reports_engine_latency_and_refuses_bad_fields():
    ok = _cli()
    assert ok.returncode == 0, ok.stderr
    d = json.loads(ok.stdout)
    assert set(d["ttft_ms"]) == set(d["itl_ms"]) == {"p50", "p90", "p99", "mean"}
    assert d["serving"]["throughput_tok_s"] > 0 and d["serving"]["engine"]["kind"] == "hf-transformers"
    bad = _cli("workload.engine.config={max_batch_size: 8}")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "no field 'max_batch_size'" in bad.stderr


def test_preempted_requests_keep_every_token(built):
    """16 blocks of 256 tokens for ten 900-token requests: the library soft-resets some (its
    preemption) and serves them again; their tokens before and after are all kept."""
    eng = hf.HfEngine(built.model, StepClock(built), {"num_blocks": 16, "max_batch_tokens": 2048}, 100e9)
    run = eng.serve([Request(i, 0.0, 600, 300) for i in range(10)])
    assert run.preemptions >= 1
    for i in range(10):
        times = run.token_times[i]
        assert len(times) == 300 and all(b > a for a, b in zip(times, times[1:]))


def test_cuda_graphs_time_the_padded_queries(built):
    """With CUDA graphs the library pads a step's queries to 64 tokens: a step of 3 decodes
    is timed as 64 query rows, and the host is off the critical path but for one launch."""
    avail = built.chip.hbm_capacity_bytes - built.schedule.weight_bytes_total()
    host = EngineHost(load_engine_host("hf-transformers-h200"), built.model.layers)
    clock = StepClock(built, host=host)
    eng = hf.HfEngine(built.model, clock, {"use_cuda_graph": True}, avail)
    assert eng.cuda_graph and not eng.async_batching
    assert eng._padding(eng.io, [(1, 100), (1, 200), (1, 300)]) == [(61, 16384 - 603 - 61)]
    run = eng.serve([Request(i, 0.0, 100, 5) for i in range(3)])
    _, step, batch = run.steps[-1]
    assert batch == [(1, 103), (1, 103), (1, 103)]
    assert step.total_s == pytest.approx((85 + 3 * (47.3 + 747)) * 1e-6 + 9.85e-6 + step.device_s)   # a replay
    assert host.h2d_bytes == hf.io_copy_bytes(8192, run.num_blocks * 256)


def test_lean_inputs_schedule_exactly_as_the_librarys_own(built):
    """The adapter skips the library's input tensors (hf.HfEngine lean_inputs): on a seeded trace
    with chunked prefill and preemption, every step's batch and every request's token times are
    those of the library's own prepare_batch_tensors."""
    from hwsim.serving.step_clock import StepTime

    class Clock:              # a step time from the batch alone: no passes, the test stays fast
        host = None

        def time(self, batch, padding=()):
            t = 0.01 + 2e-6 * sum(q + c / 64 for q, c in batch)
            return StepTime(t, 0.0, t)
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.exponential(1 / 4.0, 24))
    reqs = [Request(i, float(t[i]), int(rng.integers(64, 2500)), int(rng.integers(8, 120))) for i in range(24)]
    runs = [hf.HfEngine(built.model, Clock(), {"num_blocks": 16, "max_batch_tokens": 1024}, 100e9,
                        lean_inputs=lean).serve(reqs) for lean in (False, True)]
    assert runs[0].preemptions >= 1 and max(len(b) for _, _, b in runs[0].steps) > 1
    assert [b for _, _, b in runs[0].steps] == [b for _, _, b in runs[1].steps]
    assert runs[0].token_times == runs[1].token_times
