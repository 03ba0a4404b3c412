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


def decode_only(steps: list[dict]) -> list[tuple[int, float]]:
    """(sequences, ms) of the steps that ended no prompt, idle gaps left out."""
    return [(s["decodes"], s["gap_s"] * 1e3) for s in steps
            if s["gap_s"] is not None and not s["prompts"] and s["gap_s"] < IDLE_S]


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


def read_runs(tar: Path) -> dict:
    """{(model, config, load): records} of a measured call's tar."""
    runs = {}
    with tarfile.open(fileobj=lzma.open(tar)) as tf:
        for m in tf.getmembers():
            if m.name.endswith(".requests.jsonl"):
                *_, model, config, name = m.name.split("/")
                lines = tf.extractfile(m).read().splitlines()
                runs[(model, config, name.split(".")[0])] = [json.loads(x) for x in lines if x.strip()]
    return runs


def report(runs: dict, split_ms: float) -> list[str]:
    """Per model's eager runs: the fast line and slow offset over all its runs, each run's slow share."""
    lines = []
    for model in sorted({k[0] for k in runs}):
        keys = [k for k in runs if k[0] == model and k[1] == "defaults"]
        points = {k: decode_only(engine_steps(runs[k])) for k in keys}
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
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tars", nargs="+", type=Path)
    ap.add_argument("--split-ms", type=float, default=20.0, help="a step this far above the fast line is slow")
    args = ap.parse_args()
    for tar in args.tars:
        print("\n".join(report(read_runs(tar), args.split_ms)))


if __name__ == "__main__":
    main()
