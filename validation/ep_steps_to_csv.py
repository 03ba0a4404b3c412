#!/usr/bin/env python3
"""The raw JSONL of validation/measure_ep_steps.py as a dataset `hwsim validate` reads, like
the single-GPU CSVs (docs/validation.md): one row per measured step, its layout in the
`overrides` column as hwsim's `parallel:` block (docs/multi_gpu.md), so every row is predicted
on as many simulated GPUs as it was measured on.

    python3 validation/ep_steps_to_csv.py RAW.jsonl [RAW2.jsonl ...] --out validation/data/h200x8_ep_steps.csv
    hwsim validate validation/data/h200x8_ep_steps.csv
"""

import argparse
import csv
import json
import sys

FIELDS = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens", "kv_bits",
          "launch", "measured_ms", "split", "overrides", "notes"]
TOPOLOGY = "hgx-h200-8"        # the measured host: 8 x H200 on NVSwitch


def weight_formats(step: dict) -> list[str]:
    return ["weights.experts.format=fp8", "weights.attention.format=fp8"] if step["weights"] == "fp8" else []


def overrides(step: dict) -> str:
    """The scenario keys that make hwsim run the measured layout and schedule."""
    if step.get("solo"):                    # one GPU's shard: a single-GPU step of the shard model
        return ";".join([f"runtime.moe_schedule={step['moe_schedule']}"] + weight_formats(step))
    sets = [f"parallel.gpus={step['gpus']}", f"parallel.ep={step['ep']}", f"parallel.topology={TOPOLOGY}",
            f"runtime.moe_schedule={step['moe_schedule']}"]
    if step["layout"] == "dp-ep":
        # the script dispatches with all_to_all_single, not DeepEP
        sets += ["parallel.tp=1", "parallel.dp_attention=true", "parallel.dispatch_kernel=nccl-all-to-all"]
    else:
        sets.append(f"parallel.tp={step['tp']}")
    return ";".join(sets + weight_formats(step))


def model_of(step: dict) -> str | None:
    """The model a row names: the layout's shard for a solo tp step (validation/shards/, what
    each GPU computes alone); a solo tp-ep step has none (a shard of half the experts routed
    top-k of all of them is no model of its own), so it is left out."""
    if not step.get("solo"):
        return step["model"]
    if step["layout"] != "tp":
        return None
    return f"validation/shards/{step['model']}-tp{step['gpus']}.yaml"


def rows(lines, hardware="h200-sxm"):
    """Dataset rows from JSONL lines; a dry run's rows are marked as not measured on hardware."""
    meta, out = {}, []
    for line in lines:
        rec = json.loads(line)
        if rec.get("part") == "meta":
            meta = rec
        if rec.get("part") != "step" or model_of(rec) is None:
            continue
        dry = meta.get("dry", False)
        where = (f"rank 0's shard of {rec['gpus']} GPUs' {rec['layout']} alone on one GPU, collectives left out "
                 f"({rec['collectives_left_out']})" if rec.get("solo") else f"{rec['gpus']} GPUs, {rec['layout']}")
        out.append({
            "name": rec["name"], "hardware": f"dry-{hardware}" if dry else hardware, "model": model_of(rec),
            "phase": rec.get("phase", "decode"), "batch": rec["batch"], "context_tokens": rec["context_tokens"],
            "prompt_tokens": rec.get("prompt_tokens", 0),
            "kv_bits": 16, "launch": "graph", "measured_ms": f"{rec['ms']:.4f}", "split": rec["split"],
            "overrides": overrides(rec),
            "notes": (f"{where}; slowest rank's graph replay, median of "
                      f"{len(rec['replays_ms'])} (p10 {rec['p10']:.3f} p90 {rec['p90']:.3f} ms); ops {rec['ops']}; "
                      f"fixed uniform top-k routing; no RoPE; {meta.get('device', '?')}")})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", default=None, help="CSV path (default: stdout)")
    args = ap.parse_args(argv)
    out = []
    for path in args.jsonl:
        with open(path) as fh:
            out += rows(fh)
    fh = open(args.out, "w", newline="") if args.out else sys.stdout
    w = csv.DictWriter(fh, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(out)
    if args.out:
        fh.close()
    print(f"{len(out)} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
