"""hwsim's predictions of validation/measure_hf_serving.py's runs, written before they are measured
(issue 43, item 5): the same seeded request traces, served by the HF adapter (workload.engine.kind
hf-transformers: transformers 5.17's own scheduler on a virtual clock, hwsim's step clock and the
engine host profile), for each chip a call might get.

    python validation/predict_hf_serving.py --rates light=2,near=6,past=12 --window-s 6 \
        --out validation/data/hf_serving/predicted.jsonl
    python validation/predict_hf_serving.py --compare MEASURED_SUMMARY.jsonl \
        --predictions validation/data/hf_serving/predicted.jsonl

The traces are measure_hf_serving's own (its plan_load; hf_serving_trace's make_trace and
load_seed), with the rates fixed by --rates as the measuring call fixes them, so both sides
serve the same requests.

One engine per config serves every load, in the measured order, as measure_hf_serving's one
ContinuousBatchingManager does: its attention plans (cuDNN's cache is the process's) and CUDA
graphs (the IO pairs' CudaGraphBuffer) carry from the 8-request warm-up burst (hf_serving_engine:
seed 1, 16-token replies) to light, near, past and burst. `--fresh` gives each run a new engine
(what s18's predictions did).

The configs are made in the order given in one process, as measure_hf_serving makes them: an
engine made after another holds less free memory when it sizes its cache (what the earlier one
left in the process, LEFTOVER_MIB), so its num_blocks is smaller (`--no-leftover`: each engine
sized as a fresh process's). Measured runs made in a process of their own (the s19 Qwen3 graphs
near/past) are predicted by a run of their own: `--configs graphs --loads near past`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import dataclasses
import tempfile
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hf_serving_trace import load_seed, make_trace, write_trace  # noqa: E402

from hwsim.pipeline import system  # noqa: E402
from hwsim.config.load import load_scenario  # noqa: E402
from hwsim.pipeline import run_config  # noqa: E402
from hwsim.serving.engines import run as engine_run  # noqa: E402

SCENARIO = HERE.parent / "scenarios" / "engines" / "hf-llama-chat.yaml"
ENGINE = {"defaults": [], "graphs": ["workload.engine.config.use_cuda_graph=true",
                                     "workload.engine.config.use_async_batching=true"]}
FIELDS = ("ttft_ms", "itl_ms")
# What an HF engine (defaults: eager, cuDNN SDPA) leaves in its process for the next one: DERIVED
# from num_blocks alone (not from any latency): Llama-3.1-8B graphs 1345 (h100_call_s18) and
# Qwen3-30B-A3B graphs 456 (h100_call_s19), each made after the defaults engine, need 370-404 MiB
# beyond hwsim's fresh sizing (1354, 467); the Qwen3 graphs engine of a fresh process measured 467,
# as hwsim sizes it. Likely cuDNN/cuBLAS kernels and workspaces the first engine loaded.
LEFTOVER_MIB = 387


def plan(load: str, rates: dict, window_s: float, burst: int) -> tuple[str, float | None, int]:
    """measure_hf_serving.plan_load with the rates fixed."""
    if load == "burst":
        return "chat", None, burst
    rate = rates[load]
    return ("long" if load == "long" else "chat"), rate, max(4, round(rate * window_s))


def config_without_notes(model: str, folder: Path) -> str:
    """A configs/*.json as the measuring script reads it: its `_source`-style notes dropped (hwsim's
    importer refuses fields it does not know), under the same name."""
    if not model.endswith(".json"):
        return model
    kw = {k: v for k, v in json.loads(Path(model).read_text()).items() if not k.startswith("_")}
    copy = folder / Path(model).name
    copy.write_text(json.dumps(kw))
    return str(copy)


def serve(cfg, process: dict | None, held_mib: float = 0.0):
    """run_scenario's summary; `process` (plans and graphs of the config's one engine) kept across
    runs; `held_mib`: memory the process holds beside the engine's weights when it sizes its cache."""
    if held_mib:
        free = engine_run.hf_free_bytes
        with mock.patch.object(engine_run, "hf_free_bytes", lambda b: free(b) - held_mib * 2**20):
            return serve(cfg, process)
    if process is None:
        return run_config(cfg, system(cfg), intervals=False).summary
    real = engine_run.engine_host

    def carried(cfg, b):
        host, name = real(cfg, b)
        host.planned = process.setdefault("planned", set())
        host.graphs = process.setdefault("graphs", set())
        return host, name
    with mock.patch.object(engine_run, "engine_host", carried):
        return run_config(cfg, system(cfg), intervals=False).summary


HOST_TRACE: str | None = None    # --host-trace: a profiled burst per (model, config), the engine's host read off it


def scenario(chip, model, config, rows, trace: Path):
    write_trace(rows, trace)
    host = [f"workload.engine.host_trace={HOST_TRACE.format(model=model_label(model), config=config)}"] \
        if HOST_TRACE else []
    return load_scenario(SCENARIO, [f"hardware={chip}", f"model={config_without_notes(model, trace.parent)}",
                                    "workload.arrivals.kind=trace",
                                    f"workload.arrivals.trace={trace}", *ENGINE[config], *host])


def warm(chip, model, config, folder: Path, process: dict, held_mib: float = 0.0) -> None:
    """The measuring engine's warm-up burst (hf_serving_engine.HfServingEngine.start)."""
    rows = [dataclasses.replace(r, output_tokens=16) for r in make_trace("chat", None, 8, seed=1)]
    serve(scenario(chip, model, config, rows, folder / f"{chip}-{config}-warm.trace.jsonl"), process, held_mib)


def predict(chip: str, model: str, config: str, load: str, rates, window_s, burst, folder: Path,
            process: dict | None = None, held_mib: float = 0.0) -> dict:
    shape, rate, n = plan(load, rates, window_s, burst)
    trace = folder / f"{chip}-{config}-{load}.trace.jsonl"
    cfg = scenario(chip, model, config, make_trace(shape, rate, n, load_seed(load)), trace)
    s = serve(cfg, process, held_mib)
    return {"chip": chip, "model": model_label(model), "config": config, "load": load, "rate_per_s": rate,
            "requests": n, **{f: {k: s[f][k] for k in ("p50", "p90", "mean")} for f in FIELDS},
            "e2e_ms_mean": s["serving"]["e2e_ms"]["mean"], "throughput_tok_s": s["serving"]["throughput_tok_s"]}


def model_label(model: str) -> str:
    """The measuring script's name for a model: a hwsim model name, or a config.json's stem."""
    return Path(model).stem if model.endswith(".json") else model


def compare(measured: Path, predictions: Path) -> None:
    pred = {(p["chip"], p["model"], p["config"], p["load"]): p for p in map(json.loads, predictions.read_text().splitlines())}
    rows = [json.loads(x) for x in measured.read_text().splitlines() if x.strip()]
    runs = [r for r in rows if r.get("event") == "run" and r.get("ttft_ms")]
    chip = "h100-sxm" if any("H100" in str(r.get("gpu", "")) for r in rows) else "h200-sxm"
    print(f"| model | config | load | requests | TTFT p50 meas / hwsim | ITL p50 meas / hwsim | ITL mean | "
          f"E2E mean | throughput tok/s |  ({chip})")
    print("|---|---|---|---:|---|---|---|---|---|")
    errs = {"ttft": [], "itl": []}
    for r in runs:
        p = pred.get((chip, r["model"], r["config"], r["load"]))
        if p is None:
            continue

        def cell(m, h):
            return f"{m:.0f} / {h:.0f} ({h / m - 1:+.0%})" if m else "-"
        errs["ttft"].append(p["ttft_ms"]["p50"] / r["ttft_ms"]["p50"] - 1)
        errs["itl"].append(p["itl_ms"]["p50"] / r["itl_ms"]["p50"] - 1)
        print(f"| {r['model']} | {r['config']} | {r['load']} | {r.get('finished', '?')}/{r['requests']} "
              f"| {cell(r['ttft_ms']['p50'], p['ttft_ms']['p50'])} | {cell(r['itl_ms']['p50'], p['itl_ms']['p50'])} "
              f"| {cell(r['itl_ms']['mean'], p['itl_ms']['mean'])} | {cell(r['e2e_ms']['mean'], p['e2e_ms_mean'])} "
              f"| {cell(r['throughput_tok_s'], p['throughput_tok_s'])} |")
    for k, e in errs.items():
        if e:
            print(f"{k} p50: median |error| {statistics.median(map(abs, e)):.1%}, max {max(map(abs, e)):.1%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chips", nargs="+", default=["h200-sxm", "h100-sxm"])
    ap.add_argument("--model", default="llama-3.1-8b",
                    help="a hwsim model name or a config.json (held-out models: configs/*.json)")
    ap.add_argument("--configs", nargs="+", default=list(ENGINE))
    ap.add_argument("--loads", nargs="+", default=["light", "near", "past", "burst"])
    ap.add_argument("--rates", default="light=2,near=6,past=12")
    ap.add_argument("--window-s", type=float, default=6.0)
    ap.add_argument("--burst", type=int, default=48)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--fresh", action="store_true", help="a new engine per run (no plans or graphs carried)")
    ap.add_argument("--no-leftover", action="store_true",
                    help="size every engine's cache as a fresh process's (no LEFTOVER_MIB after the first config)")
    ap.add_argument("--predictions", type=Path, default=HERE / "data" / "hf_serving" / "predicted.jsonl")
    ap.add_argument("--host-trace", help="the engine's host from a profiled burst (workload.engine.host_trace): "
                    "a path with {model} and {config}, e.g. DIR/{model}/{config}/profile_burst.json.gz")
    args = ap.parse_args()
    global HOST_TRACE
    HOST_TRACE = args.host_trace
    if args.compare:
        return compare(args.compare, args.predictions)
    rates = {k: float(v) for k, v in (x.split("=") for x in args.rates.split(","))}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for chip in args.chips:
            for i, config in enumerate(args.configs):
                process = None if args.fresh else {}
                held = LEFTOVER_MIB if i and not args.no_leftover else 0.0    # made after an earlier engine
                if process is not None:
                    warm(chip, args.model, config, Path(tmp), process, held)
                for load in args.loads:
                    row = predict(chip, args.model, config, load, rates, args.window_s, args.burst, Path(tmp),
                                  process, held)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
