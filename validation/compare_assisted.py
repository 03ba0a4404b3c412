"""hwsim against transformers' assisted generation on the GPU (issue 45, item 2), from the folder
validation/measure_assisted.py wrote:

    python validation/compare_assisted.py FOLDER [--hardware h200-sxm]

1. Each traced step (the target's plain step, Q = 1; its verification of Q = 5 tokens; the
   2-layer draft's step), predicted through the kernel-trace path at its own point
   (validation/predict_hf_traces.py predict_point: scenarios/kernel-trace.yaml, the traced
   host): wall and device-busy ms against the unprofiled median and the trace's own.
2. Tokens per second of each generate() run with K = 4 (the traced verification) and of the
   plain runs, at the acceptance measured there: the run's measured prefill (target, and the
   draft's for a draft model) + its verification steps x hwsim's verification step + its
   proposed draft tokens x hwsim's draft step (prompt lookup: no draft step), against the
   measured tokens per second. transformers' own bookkeeping between steps (the draft's
   generate() call, cache crops) is not in the prediction: it shows as the error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from predict_hf_traces import predict_point  # noqa: E402

TRACED_K = 4


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_predictions(folder: Path, steps: list[dict], hardware: str) -> dict:
    """{(model, role, queries): (measured row, prediction)} for every traced step."""
    out = {}
    for r in steps:
        if not r.get("trace"):
            continue
        point = (r["batch"], r["context_tokens"])
        pred = predict_point(r["model"], folder / r["trace"], point, point, hardware)
        out[r["model"], r["role"], r["queries"]] = (r, pred)
    return out


def pct(pred: float, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+.1f}%"


def step_table(preds: dict) -> None:
    print("| model | step | measured wall ms | hwsim wall ms | measured busy ms | hwsim busy ms |")
    print("|---|---|---:|---:|---:|---:|")
    for (model, role, q), (r, p) in preds.items():
        name = f"{role} Q={q}" + (f" ({r['layers']} layers)" if role == "draft" else "")
        print(f"| {model} | {name} | {r['wall_ms']:.2f} | {p['wall_ms']:.2f} ({pct(p['wall_ms'], r['wall_ms'])}) | "
              f"{r['device_busy_ms']:.2f} | {p['device_busy_ms']:.2f} ({pct(p['device_busy_ms'], r['device_busy_ms'])}) |")


def predicted_tokens_per_s(run: dict, preds: dict, prefill_ms: dict) -> float | None:
    """hwsim's tokens/s for one generate() run (module docstring, 2), or None if untraced."""
    model, method = run["model"], run["method"]
    if method == "none":
        verify = preds.get((model, "target", 1))
        if verify is None:
            return None
        ms = prefill_ms[model, "target"] + (run["new_tokens"] - 1) * verify[1]["wall_ms"]
        return run["new_tokens"] / ms * 1e3
    verify, draft = preds.get((model, "target", run["k"] + 1)), preds.get((model, "draft", 1))
    if verify is None or run["k"] != TRACED_K or (method != "lookup" and draft is None):
        return None
    ms = prefill_ms[model, "target"] + run["verify_steps"] * verify[1]["wall_ms"]
    if method != "lookup":
        ms += prefill_ms[model, "draft"] + run["proposed"] * draft[1]["wall_ms"]
    return run["new_tokens"] / ms * 1e3


def run_table(runs: list[dict], preds: dict, prefill_ms: dict) -> None:
    print("| model | method | K | sampling | acceptance | tokens/step | measured tok/s | hwsim tok/s |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for r in runs:
        p = predicted_tokens_per_s(r, preds, prefill_ms)
        if p is None:
            continue
        acc = "" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        per = "1" if r["tokens_per_step"] is None else f"{r['tokens_per_step']:.2f}"
        print(f"| {r['model']} | {r['method']} | {r['k']} | {r['sampling']} | {acc} | {per} | "
              f"{r['tokens_per_s']:.2f} | {p:.2f} ({pct(p, r['tokens_per_s'])}) |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--hardware", default="h200-sxm")
    args = ap.parse_args()
    steps = rows(args.folder / "verify_steps.jsonl")
    prefill_ms = {(r["model"], r["role"]): r["wall_ms"] for r in steps if r["context_tokens"] == 0}
    preds = step_predictions(args.folder, steps, args.hardware)
    step_table(preds)
    print()
    run_table(rows(args.folder / "assisted.jsonl"), preds, prefill_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
