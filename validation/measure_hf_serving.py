#!/usr/bin/env python3
"""Serve seeded request traces through Hugging Face transformers continuous batching on one GPU and
record every request's token times: the measurements of issue 43, item 5.

    # on the H200 (torch 2.11, transformers 5.17.0, no network): one process per model
    PYTHONUNBUFFERED=1 python3 validation/measure_hf_serving.py --models llama-3.1-8b --out $OUT/hf_serving
    # CPU smoke test of the control flow (tiny random Llama, a few requests, one profiled burst)
    python3 validation/measure_hf_serving.py --models tiny-llama --device cpu --quick --out /tmp/hfs

Models are built from the real config.json values in validation/data/hf_serving/configs/ with random
bf16 weights, initialised on the device (torch.manual_seed(0)). Engine configs:
  defaults  ContinuousBatchingConfig() as the library resolves it (paged|sdpa when no flash-attn is
            installed, hence no CUDA graphs and no async batching; cuDNN SDPA allowed)
  graphs    ContinuousBatchingConfig(use_cuda_graph=True, use_async_batching=True), attention
            "paged|sdpa", torch.backends.cuda.enable_cudnn_sdp(False)
One engine (ContinuousBatchingManager) per (model, config), warmed up as the library does
(manager.warmup()), then an unprofiled 8-request warm-up burst, then the loads in order, served
by the engine's own background thread: a run's requests are submitted (add_request, EOS off,
max_new_tokens = the trace's reply length) at their trace arrival times from this thread.
The profiled bursts (16 requests under torch.profiler, CPU + CUDA, the engine loop run on the
profiled thread) come from a second process per model (--phase profile, after the same warm-up),
so that no measured run follows a profiler; --phase all (the default) runs both processes.
Loads: burst (N chat requests at t = 0), light (Poisson, min(2, 0.4 x saturation) req/s), near
(0.8 x saturation), past (1.6 x saturation), long (6k-token prompts at 1 req/s), where saturation
= the burst's throughput / its mean reply length (fixed fallbacks when the burst failed; --rates
overrides). Lengths: validation/hf_serving_trace.py.

Out (--out DIR), written as each run ends:
  <model>/<config>/<load>.trace.jsonl    the request trace (hwsim's workload.arrivals trace reader)
  <model>/<config>/<load>.requests.jsonl one record per request (times in s from the run's start)
  <model>/<config>/<load>.threads.jsonl  the process's threads sampled during the run (host_threads.py:
                                         CPU last run on, CPU seconds used; --no-thread-samples: none)
  <model>/<config>/profile_burst.json.gz the profiled burst (hwsim's workload.engine.host_trace)
  summary.jsonl                          one line per run (and per engine: build/warm-up times)
A failing run is recorded (error) and the next one runs; --budget-s stops starting new runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hf_serving_engine import Engine, build_model, describe_env  # noqa: E402
from host_threads import ThreadSampler  # noqa: E402
from hf_serving_stats import summarize  # noqa: E402
from hf_serving_trace import LOADS, load_seed, make_trace, write_trace  # noqa: E402

CONFIG_DIR = HERE / "data" / "hf_serving" / "configs"
MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "qwen2.5-7b"]
CONFIGS = ["defaults", "graphs"]
FALLBACK_SAT = {"defaults": 4.0, "graphs": 30.0}   # req/s when the burst gave no throughput


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def plan_load(load: str, sat: float, args) -> tuple[str, float | None, int]:
    """(shape, rate or None for a burst, requests) of one load."""
    if args.quick:
        return "tiny", (None if load == "burst" else 4.0), 4
    rate = {"light": min(2.0, 0.4 * sat), "near": 0.8 * sat, "past": 1.6 * sat, "long": 1.0}.get(load)
    rate = args.rates.get(load, rate)
    if load == "burst":
        return "chat", None, min(args.burst, args.max_requests)
    n = round(rate * args.window_s)
    return ("long" if load == "long" else "chat"), rate, max(4, min(args.max_requests, n))


def append_jsonl(path: Path, obj: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(obj, default=str) + "\n")


def one_run(engine: Engine, model: str, config: str, load: str, sat: float, args, folder: Path) -> dict:
    shape, rate, n = plan_load(load, sat, args)
    seed = load_seed(load)
    rows = make_trace(shape, rate, n, seed)
    trace_path = folder / f"{load}.trace.jsonl"
    write_trace(rows, trace_path)
    head = {"event": "run", "model": model, "config": config, "load": load, "shape": shape,
            "rate_per_s": rate, "requests": n, "seed": seed, "trace": str(trace_path),
            "saturation_req_s": round(sat, 3)}
    log(f"{model} {config} {load}: {n} requests, rate {rate if rate is None else round(rate, 2)} req/s")
    threads = None if args.no_thread_samples else ThreadSampler()
    records, info = engine.serve(rows, seed, args.run_timeout_s, threads)
    with open(folder / f"{load}.requests.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    if threads is not None:
        with open(folder / f"{load}.threads.jsonl", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in threads.rows)
    return {**head, **info, **summarize(records)}


def saturation(summary: dict | None, config: str, args) -> float:
    """Requests/s the engine sustains, from the burst: throughput / mean reply tokens."""
    if summary and summary.get("throughput_tok_s") and summary.get("finished"):
        return summary["throughput_tok_s"] / (summary["generated_tokens"] / summary["finished"])
    return FALLBACK_SAT.get(config, 4.0)


def run_config(model_obj, model: str, config: str, args, deadline: float) -> None:
    folder = args.out / model / config
    folder.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.jsonl"
    if time.monotonic() > deadline:
        append_jsonl(summary_path, {"event": "engine", "model": model, "config": config,
                                    "error": "skipped: --budget-s reached"})
        return
    try:
        engine = Engine(model_obj, config, args.device)
        meta = engine.start(warmup_requests=0 if args.quick else 8, profile_path=(
            folder / "profile_burst.json.gz") if args.profile else None, profile_requests=args.profile_requests,
            profile_tokens=args.profile_tokens, quick=args.quick)
    except Exception as exc:                         # the whole config fails: say so, go on
        log(f"{model} {config}: engine failed: {exc!r}")
        append_jsonl(summary_path, {"event": "engine", "model": model, "config": config, "error": repr(exc)})
        return
    append_jsonl(summary_path, {"event": "engine", "model": model, "config": config, "phase": args.phase,
                                **meta})
    log(f"{model} {config} engine: {json.dumps(meta, default=str)}")
    sat, loads = None, args.loads
    for load in loads:
        if time.monotonic() > deadline:
            append_jsonl(summary_path, {"event": "run", "model": model, "config": config, "load": load,
                                        "error": "skipped: --budget-s reached"})
            log(f"{model} {config} {load}: skipped (budget)")
            continue
        try:
            s = one_run(engine, model, config, load, sat if sat is not None else saturation(None, config, args),
                        args, folder)
        except Exception as exc:
            s = {"event": "run", "model": model, "config": config, "load": load, "error": repr(exc)}
        if load == "burst":
            sat = saturation(s, config, args)
        append_jsonl(summary_path, s)
        log("SUMMARY " + json.dumps({k: s.get(k) for k in (
            "model", "config", "load", "rate_per_s", "requests", "finished", "ttft_ms", "itl_ms", "e2e_ms",
            "throughput_tok_s", "wall_s", "steps", "error")}))
    engine.close()


def run_model(model: str, args) -> int:
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    log(f"{model}: {json.dumps(describe_env(args.device))}")
    t = time.perf_counter()
    try:
        model_obj = build_model(CONFIG_DIR / f"{model}.json", args.device)
    except Exception as exc:
        log(f"{model}: build failed: {exc!r}")
        append_jsonl(args.out / "summary.jsonl", {"event": "model", "model": model, "error": repr(exc)})
        return 1
    build_s = time.perf_counter() - t
    log(f"{model}: built with random weights on {args.device} in {build_s:.1f} s")
    append_jsonl(args.out / "summary.jsonl", {"event": "model", "model": model, "phase": args.phase,
                                              "build_s": round(build_s, 2),
                                              **describe_env(args.device)})
    for config in args.configs:
        run_config(model_obj, model, config, args, deadline)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=MODELS, help=f"config names under {CONFIG_DIR.name}/")
    p.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    p.add_argument("--loads", nargs="+", default=LOADS, choices=LOADS)
    p.add_argument("--max-requests", type=int, default=600, help="at most this many requests a run")
    p.add_argument("--window-s", type=float, default=8.0, help="Poisson loads: requests = rate x this")
    p.add_argument("--burst", type=int, default=48, help="requests of the burst load")
    p.add_argument("--rates", default="", help="fixed rates, e.g. light=2,near=8,past=16 (req/s)")
    p.add_argument("--run-timeout-s", type=float, default=45.0,
                   help="cancel a run's unfinished requests this long after its last arrival")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="start no run after this many s of the model's process (a run can take ~55 s more)")
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--profile-requests", type=int, default=16)
    p.add_argument("--profile-tokens", type=int, default=32, help="reply tokens of the profiled burst")
    p.add_argument("--phase", default="all", choices=["all", "runs", "profile"],
                   help="all: a process per model for the runs, then one for the profiled bursts")
    p.add_argument("--no-thread-samples", action="store_true",
                   help="do not sample the process's threads during the runs (host_threads.py)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="one tiny burst per config: a smoke test")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "hf_serving")
    args = p.parse_args(argv)
    args.rates = {k: float(v) for k, v in (kv.split("=") for kv in args.rates.split(",") if kv)}
    if args.quick:
        args.loads = ["burst"]
        args.profile_requests, args.profile_tokens = 2, 4
    if args.phase == "runs":
        args.profile = False
    elif args.phase == "profile":
        args.loads, args.profile = [], True
    return args


def without(argv: list[str], flag: str) -> list[str]:
    """argv less `flag` and the values that follow it."""
    if flag not in argv:
        return argv
    i = j = argv.index(flag)
    j += 1
    while j < len(argv) and not argv[j].startswith("--"):
        j += 1
    return argv[:i] + argv[j:]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.phase != "all" and len(args.models) == 1:
        return run_model(args.models[0], args)
    # One process per model and phase: the runs, then the profiled bursts. A process's GPU memory is
    # all freed before the next, and no run is measured after a profiler (CUPTI stays attached
    # after Kineto traces unless TEARDOWN_CUPTI=1, which CUDA graphs do not survive).
    rest = without(without(list(argv if argv is not None else sys.argv[1:]), "--models"), "--phase")
    rc = 0
    for model in args.models:
        phases = [args.phase] if args.phase != "all" else ["runs", "profile"] if args.profile else ["runs"]
        for phase in phases:
            r = subprocess.run([sys.executable, __file__, "--models", model, "--phase", phase, *rest]).returncode
            log(f"{model} {phase}: process exit {r}")
            rc = rc or r
    return rc


if __name__ == "__main__":
    sys.exit(main())
