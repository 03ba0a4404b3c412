#!/usr/bin/env python3
"""hwsim's predictions for a 2-GPU test grid (validation/multi_gpu_grid.md), written down
before measure_ep_steps.py --cases GRID ran: a markdown table.

    python validation/predict_ep_grid.py [fresh|prefill]
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ep_steps_to_csv as conv  # noqa: E402
from ep_layouts import FRESH_CASES, FRESH_SETUPS, PREFILL_CASES, PREFILL_SETUPS  # noqa: E402

from hwsim.validate import predict_ms  # noqa: E402

GRIDS = {   # name: (setups, (rows, context, split) cases, phase), as measure_ep_steps.py runs them
    "fresh": (FRESH_SETUPS, FRESH_CASES, "decode"),
    "prefill": (PREFILL_SETUPS, PREFILL_CASES, "prefill"),
}


def planned_steps(grid: str) -> list[str]:
    """The grid as the JSONL lines the measurement will write, times left at 1 ms."""
    setups, cases, phase = GRIDS[grid]
    lines = [json.dumps({"part": "meta", "dry": False, "device": "NVIDIA H200"})]
    for model, layout, gpus, fmt in setups:
        for rows, ctx, split in cases:
            what = f"decode-b{rows}-l{ctx}" if phase == "decode" else f"prefill-t{rows}"
            lines.append(json.dumps({
                "part": "step", "name": f"{model}-{layout}{gpus}-{fmt}-{what}-graph",
                "model": model, "layout": layout, "gpus": gpus, "tp": 1 if layout == "dp-ep" else gpus,
                "ep": 1 if layout == "tp" else gpus, "weights": fmt, "moe_schedule": "per-expert",
                "phase": phase, "batch": rows if phase == "decode" else 1, "context_tokens": ctx,
                "prompt_tokens": rows if phase == "prefill" else 0, "split": split, "ms": 1.0, "p10": 1.0,
                "p90": 1.0, "replays_ms": [1.0], "ops": 0}))
    return lines


def main() -> None:
    grid = sys.argv[1] if len(sys.argv) > 1 else "fresh"
    print("| step | hwsim's prediction, ms |\n|---|---|")
    for row in conv.rows(planned_steps(grid)):
        print(f"| {row['name']} | {predict_ms({k: str(v) for k, v in row.items()}):.2f} |")


if __name__ == "__main__":
    main()
