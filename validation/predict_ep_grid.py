#!/usr/bin/env python3
"""hwsim's predictions for the fresh 2-GPU test grid (validation/multi_gpu_grid.md), written down
before measure_ep_steps.py --cases fresh ran: a markdown table.

    python validation/predict_ep_grid.py
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ep_steps_to_csv as conv  # noqa: E402

from hwsim.validate import predict_ms  # noqa: E402

# measure_ep_steps.FRESH_CASES and FRESH_SETUPS (that script needs torch; a test holds them equal)
FRESH_CASES = [(2, 8192, "fresh"), (16, 2048, "fresh"), (48, 4096, "fresh"), (96, 1024, "fresh"),
               (192, 512, "fresh")]
FRESH_SETUPS = [("mixtral-8x22b", "tp", 2, "fp8"), ("mixtral-8x7b", "tp", 2, "bf16"),
                ("qwen3-30b-a3b", "tp-ep", 2, "bf16"), ("qwen3-30b-a3b", "dp-ep", 2, "bf16")]


def planned_steps() -> list[str]:
    """The grid as the JSONL lines the measurement will write, times left at 1 ms."""
    lines = [json.dumps({"part": "meta", "dry": False, "device": "NVIDIA H200"})]
    for model, layout, gpus, fmt in FRESH_SETUPS:
        for batch, ctx, split in FRESH_CASES:
            lines.append(json.dumps({
                "part": "step", "name": f"{model}-{layout}{gpus}-{fmt}-decode-b{batch}-l{ctx}-graph",
                "model": model, "layout": layout, "gpus": gpus, "tp": 1 if layout == "dp-ep" else gpus,
                "ep": 1 if layout == "tp" else gpus, "weights": fmt, "moe_schedule": "per-expert",
                "batch": batch, "context_tokens": ctx, "split": split, "ms": 1.0, "p10": 1.0, "p90": 1.0,
                "replays_ms": [1.0], "ops": 0}))
    return lines


def main() -> None:
    print("| step | hwsim's prediction, ms |\n|---|---|")
    for row in conv.rows(planned_steps()):
        print(f"| {row['name']} | {predict_ms({k: str(v) for k, v in row.items()}):.2f} |")


if __name__ == "__main__":
    main()
