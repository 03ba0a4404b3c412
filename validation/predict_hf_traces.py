"""hwsim's predictions from the Hugging Face traces of issue 30, written down before the
unprofiled steps are measured, and their errors once they are (docs/traces.md, "Validation").

    # predictions: every trace of FOLDER/captured.jsonl at its own point and at the measured grid
    # (calibration/hf_validation_call.sh runs this on the device, between capture and measure)
    python validation/predict_hf_traces.py predict --traces FOLDER --hardware h100-sxm > predictions.jsonl
    # (FOLDER: captured*.jsonl, and the traces beside them or in FOLDER/traces)
    # each trace at its own point against its own kernel durations
    python validation/predict_hf_traces.py selfcheck --traces validation/data/hf_traces_h100 --hardware h100-sxm
    # errors against calibration/capture_hf_traces.py measure's rows
    python validation/predict_hf_traces.py compare hf_steps.jsonl \
        --predictions validation/data/hf_traces_h100/predictions_2.jsonl

Each prediction runs `scenarios/kernel-trace.yaml` (no `runtime.launch`: the traced host) with
the trace's model, the trace and its point, and the predicted point; one decode step. Wall time
is the step's time (summary itl_ms p50), device-busy the union of its kernels (device_busy_ms).
The same-point device-busy target is also held against the trace's own (durations wiped:
hwsim reads shapes, not durations)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario

HERE = Path(__file__).resolve().parent
BASE = HERE.parent / "scenarios" / "kernel-trace.yaml"
sys.path.insert(0, str(HERE.parent / "calibration"))
from trace_store import ARCHIVE, trace_path  # noqa: E402  (validation/ is this script's own folder)


# what the capture ran where the model's file says otherwise: random bf16 weights, not the
# checkpoint's MXFP4 experts
AS_CAPTURED = {"gpt-oss-20b": ["weights.experts.format=bf16"]}


def predict_point(model: str, trace: Path, traced: tuple[int, int], point: tuple[int, int],
                  hardware: str = "h200-sxm", launch: str | None = None) -> dict:
    sets = [*AS_CAPTURED.get(model, []), *([f"runtime.launch={launch}"] if launch else []), f"model={model}", f"hardware={hardware}", f"workload.kernel_trace.path={trace}",
            f"workload.kernel_trace.batch_size={traced[0]}",
            f"workload.kernel_trace.context_tokens={traced[1]}",
            f"workload.batch_size={point[0]}", f"workload.context_tokens={point[1]}",
            "workload.decode_steps=1"]
    cfg = load_scenario(BASE, sets)
    s = run_config(cfg, system(cfg), intervals=False).summary
    return {"wall_ms": s["itl_ms"]["p50"], "device_busy_ms": s["device_busy_ms"],
            "host_busy_ms": s["host"]["busy_ms"], "fallback_share": s["trace"]["fallback_share"],
            "classified_by": s["trace"]["classified_by"], "not_rescaled": s["trace"]["not_rescaled"]}


def captured(folder: Path):
    """(row, trace path) of each capture row in the folder's captured*.jsonl whose trace is
    there (beside it, or in its traces/); a missing trace is said on stderr."""
    for f in sorted(folder.glob("captured*.jsonl")):
        for cap in map(json.loads, f.read_text().splitlines()):
            path = next((p for p in (folder / cap["trace"], folder / "traces" / cap["trace"]) if p.exists()
                         or (p.parent / ARCHIVE).exists()), None)
            if path is None:
                print(f"missing {folder / cap['trace']}", file=sys.stderr)
                continue
            yield cap, trace_path(path)


def predict(traces: Path, jobs: int, hardware: str) -> None:
    from capture_hf_traces import points_of
    caps = list(captured(traces))
    tasks = []
    for cap, path in caps:
        traced = (cap["batch"], cap["context_tokens"])
        if cap["stack"].startswith("harness"):        # the harness measured its traced points only
            grid = [(c["batch"], c["context_tokens"]) for c, _ in caps
                    if (c["model"], c["stack"]) == (cap["model"], cap["stack"])]
        else:
            grid = points_of("measure", cap["stack"])
        for point in dict.fromkeys([traced, *grid]):
            tasks.append({"model": cap["model"], "stack": cap["stack"], "trace": cap["trace"],
                          "trace_batch": traced[0], "trace_context_tokens": traced[1],
                          "batch": point[0], "context_tokens": point[1], "_path": str(path),
                          "_hardware": hardware})
    if jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            rows = pool.map(predict_row, tasks, chunksize=1)
    else:
        rows = map(predict_row, tasks)
    for row in rows:                          # in the tasks' order, whatever the pool did
        print(json.dumps(row), flush=True)


def predict_row(task: dict) -> dict:
    row = {k: v for k, v in task.items() if not k.startswith("_")}
    try:
        args = (task["model"], Path(task["_path"]), (task["trace_batch"], task["trace_context_tokens"]),
                (task["batch"], task["context_tokens"]), task["_hardware"])
        row.update(predict_point(*args))
        if task["stack"].startswith("harness"):       # also replayed as one CUDA graph, as measured
            row["graph_ms"] = predict_point(*args, launch="graph")["wall_ms"]
    except Exception as exc:                  # noqa: BLE001 (a row that fails is reported as such)
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def err(pred: float, meas: float) -> float:
    return (pred - meas) / meas * 100


def table(title: str, errors: list[float]) -> str:
    if not errors:
        return f"| {title} | 0 | - | - | - |"
    absolute = [abs(e) for e in errors]
    return (f"| {title} | {len(errors)} | {statistics.median(absolute):.1f}% | {max(absolute):.1f}% | "
            f"{statistics.mean(errors):+.1f}% |")


def compare(measured: Path, predictions: Path, captured: Path) -> None:
    meas = {(r["model"], r["stack"], r["batch"], r["context_tokens"]): r
            for r in map(json.loads, measured.read_text().splitlines())}
    traced_busy = {r["trace"]: r["device_busy_ms"] for r in map(json.loads, captured.read_text().splitlines())}
    groups: dict[str, list[float]] = {}
    rows = []
    for p in map(json.loads, predictions.read_text().splitlines()):
        if "error" in p:
            rows.append(f"| {p['trace']} | {p['batch']}x{p['context_tokens']} | error: {p['error'][:80]} |||||")
            continue
        m = meas.get((p["model"], p["stack"], p["batch"], p["context_tokens"]))
        same = (p["batch"], p["context_tokens"]) == (p["trace_batch"], p["trace_context_tokens"])
        kind = p["stack"]          # eager, eager-loop (the per-expert loop), compiled
        if same:
            groups.setdefault(f"{kind}, same point, device-busy vs the trace's own",
                              []).append(err(p["device_busy_ms"], traced_busy[p["trace"]]))
        if m is None:
            continue
        where = "same point" if same else "cross point"
        e_busy, e_wall = err(p["device_busy_ms"], m["device_busy_ms"]), err(p["wall_ms"], m["wall_ms"])
        groups.setdefault(f"{kind}, {where}, device-busy", []).append(e_busy)
        groups.setdefault(f"{kind}, {where}, wall", []).append(e_wall)
        if m.get("graph_ms") and p.get("graph_ms"):     # the harness: its step as one graph
            groups.setdefault(f"{kind}, {where}, graph replay", []).append(err(p["graph_ms"], m["graph_ms"]))
        rows.append(f"| {p['trace']} | {p['batch']}x{p['context_tokens']} | {m['device_busy_ms']:.2f} | "
                    f"{p['device_busy_ms']:.2f} ({e_busy:+.1f}%) | {m['wall_ms']:.2f} | "
                    f"{p['wall_ms']:.2f} ({e_wall:+.1f}%) | {p['fallback_share']:.3f} |")
    print("| group | rows | median abs | max abs | mean signed |\n|---|---:|---:|---:|---:|")
    for title in sorted(groups):
        print(table(title, groups[title]))
    ratios = sorted(r["profiled_step_ms"] / r["wall_ms"] for r in meas.values() if r.get("profiled_step_ms"))
    if ratios:      # no constant: the host profile takes a cost per event (calibration/fit_profiler_overhead.py)
        print(f"\nprofiler overhead at the measured points (profiled step / unprofiled wall, same process): "
              f"median {statistics.median(ratios):.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} points")
    print("\n| trace | predicted point | measured busy ms | predicted busy ms | measured wall ms | "
          "predicted wall ms | fallback share |\n|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


def selfcheck(traces: Path, hardware: str) -> None:
    """Each trace at its own point: hwsim's device-busy (from shapes) against the trace's own
    (its kernels' durations), and the predicted wall against the profiled step."""
    errors = []
    print("| trace | traced busy ms | hwsim busy ms | error | profiled step ms | hwsim wall ms |\n"
          "|---|---:|---:|---:|---:|---:|")
    for cap, path in captured(traces):
        point = (cap["batch"], cap["context_tokens"])
        p = predict_point(cap["model"], path, point, point, hardware)
        e = err(p["device_busy_ms"], cap["device_busy_ms"])
        errors.append(e)
        print(f"| {cap['trace']} | {cap['device_busy_ms']:.2f} | {p['device_busy_ms']:.2f} | {e:+.1f}% | "
              f"{cap['profiled_step_ms']:.2f} | {p['wall_ms']:.2f} |")
    print("\n" + table("same point, device-busy vs the trace's own", errors))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("predict")
    pr.add_argument("--traces", type=Path, required=True, help="a folder: captured.jsonl and the traces")
    pr.add_argument("--hardware", default="h200-sxm", help="the chip profile the traces ran on")
    pr.add_argument("--jobs", type=int, default=1, help="rows predicted side by side (processes)")
    co = sub.add_parser("compare")
    co.add_argument("measured", type=Path)
    co.add_argument("--predictions", type=Path, default=HERE / "data" / "hf_traces_h100" / "predictions_2.jsonl")
    co.add_argument("--captured", type=Path, default=HERE / "data" / "hf_traces_h100" / "captured_1.jsonl")
    sc = sub.add_parser("selfcheck", help="each trace at its own point against its own durations")
    sc.add_argument("--traces", type=Path, required=True)
    sc.add_argument("--hardware", default="h200-sxm")
    args = p.parse_args()
    if args.cmd == "selfcheck":
        selfcheck(args.traces, args.hardware)
    elif args.cmd == "predict":
        predict(args.traces, args.jobs, args.hardware)
    else:
        compare(args.measured, args.predictions, args.captured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
