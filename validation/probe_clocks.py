"""SM clock and power while whole steps replay back to back (issue 17): do sustained
tensor-core steps run below the 1980 MHz boost clock (the 700 W power limit)?

    python3 validation/probe_clocks.py --out $OUT/h200_step_clocks.jsonl
    python3 validation/probe_clocks.py --out $OUT/h200_step_clocks_2.jsonl --idle-s 3 \
        --cases mixtral-8x7b:prefill:1:0:1024 ...

For each case (cal rows of validation/general_grid.md, or rows of the first grid,
validation/data/h200_steps.csv; never a test row), the whole step (all layers) is captured as
one CUDA graph and replayed for a few seconds while nvidia-smi is sampled every 0.2 s; the
record holds the replay times (CUDA events) and the samples. `--idle-s` lets the board cool
for that long before each case's replays, so the first replays show the clock before the power
limit takes hold and the record shows how soon it does.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure_general as mg  # noqa: E402
import measure_steps as ms  # noqa: E402
from device_env import SMI_FIELDS, log, smi_samples  # noqa: E402

CASES = [("llama-3.1-8b", "prefill", 1, 0, 512), ("mixtral-8x7b", "prefill", 1, 0, 8192),
         ("qwen3-30b-a3b", "prefill", 1, 0, 8192), ("qwen3-30b-a3b", "decode", 256, 1024, 0)]
SECONDS = 4.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", nargs="*", default=None,
                    help="model:phase:batch:context:prompt (default: the four cal rows above)")
    ap.add_argument("--idle-s", type=float, default=0.0, help="idle before each case's replays")
    args = ap.parse_args()
    cases = CASES if not args.cases else [
        (m, ph, int(b), int(c), int(t)) for m, ph, b, c, t in (x.split(":") for x in args.cases)]
    torch.backends.cuda.matmul.allow_tf32 = False
    ms.pick_sdpa_backend("cuda")
    with open(args.out, "w") as out:
        out.write(json.dumps({"part": "meta", "script": "validation/probe_clocks.py", "argv": sys.argv[1:],
                              "gpu": torch.cuda.get_device_name(), "idle_s": args.idle_s,
                              "uuid": os.popen("nvidia-smi --query-gpu=uuid,serial --format=csv,noheader").read().strip()})
                  + "\n")
        for model, phase, b, ctx, prompt in cases:
            cfg = mg.MODELS[model]
            W = mg.Weights(cfg, "cuda")
            ntok = b if phase == "decode" else prompt
            st = {"B": b, "ctx": ctx, "T": prompt,
                  "x": torch.randn((ntok, cfg["d"]), dtype=torch.bfloat16, device="cuda"),
                  "route": ms.make_routing(cfg, ntok, "cuda", seed=1000 + ntok) if cfg["E"] else [[]] * cfg["L"]}
            if phase == "decode":
                st["cache"] = mg.make_cache(cfg, b, ctx, "cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), ms.run_ctx():
                mg.step(W, cfg, st, phase)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g), ms.run_ctx():
                mg.step(W, cfg, st, phase)
            torch.cuda.synchronize()
            time.sleep(args.idle_s)
            times, t_end = [], time.perf_counter() + SECONDS
            with smi_samples(timed=True) as samples:
                while time.perf_counter() < t_end:
                    a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    g.replay()
                    e.record()
                    e.synchronize()
                    times.append(a.elapsed_time(e))
            case = mg.case_name(model, phase, b, ctx, prompt)
            out.write(json.dumps({"case": case, "replay_ms": times, "smi_fields": SMI_FIELDS,
                                  "samples": samples}) + "\n")
            out.flush()
            log(f"{case}: {len(times)} replays, first {times[0]:.2f} ms, last {times[-1]:.2f} ms; "
                f"smi mid {samples[len(samples) // 2][1] if samples else '-'}")
            del g, st, W
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
