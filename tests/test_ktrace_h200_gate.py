"""Issue 30's accuracy gate on real H200 data: six Hugging Face traces of
validation/data/hf_traces_h200 (README there), each predicted from its kernels' shapes (not their
durations) at a measured point, against the device-busy time measured there without the
profiler. Same point and cross point, eager, per-expert loop and compiled, and two models held
out of every fix (call 4); the issue's bound for a single row is 12% (same point) to 15% (cross
point). Each of these rows was 0-7% off when written; before that day's fixes the compiled
Mixtral row was +88% and the loop's cross-point row +200%."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hwsim.config.load import load_scenario
from hwsim.pipeline import run_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
from trace_store import trace_path  # noqa: E402  (the traces are archived: README there)

DATA = ROOT / "validation" / "data" / "hf_traces_h200"
BOUND = 0.12

# (call, model, stack, traced batch, traced context, predicted batch, predicted context)
ROWS = [
    (1, "llama-3.1-8b", "eager", 8, 4096, 8, 4096),
    (1, "mixtral-8x7b", "eager", 32, 2048, 1, 8192),
    (1, "qwen1.5-moe-a2.7b", "eager", 1, 1024, 32, 2048),
    (1, "olmoe-1b-7b", "eager-loop", 1, 1024, 8, 4096),
    (3, "mixtral-8x7b", "compiled", 8, 4096, 8, 4096),
    (3, "qwen3-30b-a3b", "compiled", 1, 1024, 1, 1024),
    (4, "qwen2-57b-a14b", "eager", 1, 1024, 32, 2048),     # held out: predicted blind at +1.3%
    (4, "gpt-oss-20b", "eager", 32, 2048, 1, 1024),        # +64% blind (its bmm held), -6% now
    (4, "gpt-oss-20b", "eager", 8, 4096, 64, 1024),        # +23% before the scores' context and HBM-read grid
]
AS_CAPTURED = {"gpt-oss-20b": ["weights.experts.format=bf16"]}   # random bf16 experts, not MXFP4


def _predict(model: str, trace: Path, traced: tuple[int, int], point: tuple[int, int]) -> float:
    """Device-busy ms of the trace at the point, as the validation script predict_hf_traces predicts it."""
    cfg = load_scenario(ROOT / "scenarios" / "kernel-trace.yaml", [
        *AS_CAPTURED.get(model, []), f"model={model}", "hardware=h200-sxm", f"workload.kernel_trace.path={trace}",
        f"workload.kernel_trace.batch_size={traced[0]}", f"workload.kernel_trace.context_tokens={traced[1]}",
        f"workload.batch_size={point[0]}", f"workload.context_tokens={point[1]}", "workload.decode_steps=1"])
    return run_config(cfg, intervals=False).summary["device_busy_ms"]


def _measured(call: int, model: str, stack: str, batch: int, context: int) -> float:
    for row in map(json.loads, (DATA / f"call_{call}" / "steps.jsonl").read_text().splitlines()):
        if (row["model"], row["stack"], row["batch"], row["context_tokens"]) == (model, stack, batch, context):
            return row["device_busy_ms"]
    raise LookupError((call, model, stack, batch, context))


@pytest.mark.parametrize("call, model, stack, tb, tc, b, c", ROWS)
def test_an_h200_trace_predicts_the_measured_device_time(call, model, stack, tb, tc, b, c):
    trace = trace_path(DATA / f"call_{call}" / "traces" / f"hf-{model}-{stack}-b{tb}-l{tc}.json.gz")
    predicted = _predict(model, trace, (tb, tc), (b, c))
    measured = _measured(call, model, stack, b, c)
    error = predicted / measured - 1
    print(f"{trace.name} at {b}x{c}: measured {measured:.2f} ms, hwsim {predicted:.2f} ms ({error:+.1%})")
    assert abs(error) <= BOUND
