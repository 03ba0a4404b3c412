"""The engine steps of a measured HF serving run, read off its per-request token stamps, and the
two speeds its eager host steps at (issue 43's "eager floor").

    python validation/hf_serving_steps.py validation/data/hf_serving/h100_call_s18/hf_serving.tar.xz

A step is the tokens stamped within SAME_STEP_S of each other (the engine stamps a step's tokens
in one update_batch; its time is its last stamp); a token that is its request's first ends a prompt (the step prefilled it),
a later one is a decode whose KV holds the prompt and the tokens before it. A step's time is the
gap since the step before it.

What the H100 runs show (h100_call_s18, h100_call_s19; `modes`): every eager (defaults) run's
decode-only steps lie on two lines of the same slope, a fast one and one ~40-60 ms above it
(Llama-3.1-8B +38 ms, Qwen2.5-7B +61 ms at the median), and a run switches between them for
seconds at a time whatever its batch (the same 33-sequence batch alternates 84 and 120 ms), the
switch landing mid-step (steps of intermediate time). CUDA-graph runs, whose host is off the
critical path, show no such switch. So it is the measuring host's own speed, not a per-shape
cost of the engine: the share of slow steps (Llama 1-56%, Qwen2.5 8-73% per run) sets each
run's ITL p50 more than its load does. Qwen3-30B-A3B's eager steps sit mostly at ~215-230 ms
whatever the batch, with stretches of ~150-170 (its fast line here is not a clean fit: its slow
steps are the majority). validation/host_threads.py samples where the threads ran so that a next
device call can say why.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import tarfile
from pathlib import Path

import numpy as np

SAME_STEP_S = 0.003     # a step's tokens are stamped within microseconds; steps are >= 40 ms apart
IDLE_S = 0.4            # a gap this long holds an idle engine or a graph capture, not one step


def engine_steps(records: list[dict]) -> list[dict]:
    """[{t, gap_s, decodes, prompts, prompt_tokens, kv}] of a run's records (measure_hf_serving's
    requests.jsonl lines), in time order; the first step's gap_s is None."""
    stamps = sorted((t, k, r["prompt_tokens"]) for r in records for k, t in enumerate(r.get("token_s") or []))
    out: list[dict] = []
    for t, k, prompt in stamps:
        if not out or t - out[-1]["t"] >= SAME_STEP_S:
            out.append({"t": t, "gap_s": t - out[-1]["t"] if out else None, "decodes": 0, "prompts": 0,
                        "prompt_tokens": 0, "kv": 0})
        s = out[-1]
        s["t"] = t                          # the step's last stamp: the next gap is measured from it
        s["decodes" if k else "prompts"] += 1
        s["prompt_tokens"] += 0 if k else prompt
        s["kv"] += prompt + k
    return out


def decode_steps(steps: list[dict]) -> list[dict]:
    """The steps that ended no prompt, idle gaps left out."""
    return [s for s in steps if s["gap_s"] is not None and not s["prompts"] and s["gap_s"] < IDLE_S]


def decode_only(steps: list[dict]) -> list[tuple[int, float]]:
    """(sequences, ms) of the decode-only steps."""
    return [(s["decodes"], s["gap_s"] * 1e3) for s in decode_steps(steps)]


def host_modes(points: list[tuple[int, float]], split_ms: float = 20.0) -> dict:
    """The fast line (least squares ms = a + b x sequences over the steps within split_ms above it,
    refitted until it holds), the slow steps (the rest) and their median offset above the line."""
    n = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    fast = np.ones(len(y), bool)
    for _ in range(20):
        b, a = np.polyfit(n[fast], y[fast], 1)
        nxt = y - (a + b * n) < split_ms
        if (nxt == fast).all():
            break
        fast = nxt
    off = y - (a + b * n)
    return {"fast_ms": round(float(a), 2), "fast_us_per_seq": round(float(b) * 1e3, 1), "steps": len(y),
            "slow": int((~fast).sum()), "slow_share": round(float((~fast).mean()), 4),
            "slow_offset_ms": round(float(np.median(off[~fast])), 1) if (~fast).any() else None,
            "slow_flags": (~fast).tolist()}


def engine_thread(samples: list[dict]) -> list[dict]:
    """The busiest thread's samples (the engine loop's; host_threads.py rows) as [{t, share, cpu,
    moved}]: its CPU seconds per wall second since the sample before, the CPU it last ran on, and
    whether that CPU changed. CPU time comes in clock ticks (10 ms at USER_HZ 100): one share is
    coarse at <= 50 ms between samples, a median over a stretch's samples is not."""
    used: dict[int, float] = {}
    for r in samples:
        used[r["tid"]] = max(used.get(r["tid"], 0.0), r["cpu_s"])
    first = {}
    for r in samples:
        first.setdefault(r["tid"], r["cpu_s"])
    tid = max(used, key=lambda k: used[k] - first[k])
    rows = [r for r in samples if r["tid"] == tid]
    return [{"t": b["t"], "share": (b["cpu_s"] - a["cpu_s"]) / (b["t"] - a["t"]), "cpu": b["cpu"],
             "moved": b["cpu"] != a["cpu"]} for a, b in zip(rows, rows[1:]) if b["t"] > a["t"]]


def read_runs(tar: Path, suffix: str = ".requests.jsonl") -> dict:
    """{(model, config, load): rows} of a measured call's tar: its request records, or with
    suffix ".threads.jsonl" its thread samples."""
    runs = {}
    with tarfile.open(fileobj=lzma.open(tar)) as tf:
        for m in tf.getmembers():
            if m.name.endswith(suffix):
                *_, model, config, name = m.name.split("/")
                lines = tf.extractfile(m).read().splitlines()
                runs[(model, config, name.split(".")[0])] = [json.loads(x) for x in lines if x.strip()]
    return runs


def threads_by_mode(steps: list[dict], slow: list[bool], samples: list[dict]) -> str:
    """The engine thread's median CPU share and CPU moves during the run's fast and slow decode-only
    steps (each step takes the thread's samples that fall inside it)."""
    th = engine_thread(samples)
    out = []
    for mode in (False, True):
        spans = [(s["t"] - s["gap_s"], s["t"]) for s, f in zip(steps, slow) if f == mode]
        inside = [x for x in th if any(a < x["t"] <= b for a, b in spans)]
        share = statistics.median(x["share"] for x in inside) if inside else float("nan")
        out.append(f"{'slow' if mode else 'fast'}: CPU share {share:.2f}, moves {sum(x['moved'] for x in inside)}"
                   f" in {len(inside)} samples")
    return "; ".join(out)


def report(runs: dict, split_ms: float, threads: dict | None = None) -> list[str]:
    """Per model's eager runs: the fast line and slow offset over all its runs, each run's slow
    share (and, where `threads` has the run's samples, the engine thread's by speed)."""
    lines = []
    for model in sorted({k[0] for k in runs}):
        keys = [k for k in runs if k[0] == model and k[1] == "defaults"]
        steps = {k: decode_steps(engine_steps(runs[k])) for k in keys}
        points = {k: [(s["decodes"], s["gap_s"] * 1e3) for s in steps[k]] for k in keys}
        if not keys:
            continue
        m = host_modes([p for k in keys for p in points[k]], split_ms)
        lines.append(f"{model} defaults: fast line {m['fast_ms']} ms + {m['fast_us_per_seq']} us/seq; "
                     f"{m['slow']} of {m['steps']} decode-only steps slow, median {m['slow_offset_ms']} ms above it")
        flags = iter(m["slow_flags"])
        for k in keys:
            slow = [next(flags) for _ in points[k]]
            ms = [p[1] for p in points[k]]
            lines.append(f"  {k[2]:6s} {len(ms):4d} steps, slow {sum(slow) / max(1, len(slow)):6.1%}, "
                         f"median step {statistics.median(ms):6.1f} ms")
            if threads and threads.get(k):
                lines.append("         engine thread " + threads_by_mode(steps[k], slow, threads[k]))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tars", nargs="+", type=Path)
    ap.add_argument("--split-ms", type=float, default=20.0, help="a step this far above the fast line is slow")
    args = ap.parse_args()
    for tar in args.tars:
        print("\n".join(report(read_runs(tar), args.split_ms, read_runs(tar, ".threads.jsonl"))))


if __name__ == "__main__":
    main()
