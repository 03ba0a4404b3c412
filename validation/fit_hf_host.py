"""Fits the HF engine host's per-step terms from the measured serving runs (issue 43): the steps
are read off the per-request token times (validation/data/hf_serving/h100_call_s18/hf_serving.tar.xz,
requests.jsonl token_s: tokens stamped within 3 ms of each other belong to one engine step).

    python validation/fit_hf_host.py [--tar PATH]

- defaults (eager, cuDNN SDPA): decode-only steps of the 4 runs, least squares
  step_ms = a + b * sequences; `a` less the profile's sourced launches and scheduling is the
  per-step attention plan (plan_ms), `b` less the scheduling per sequence is the per-sequence
  mask building (mask_us_per_seq: utils.build_attention_mask's ops per sequence, not run on CPU).
- graphs (CUDA graphs + async batching): every step copies the host IO's whole static buffers to
  the device (input_outputs.ContinuousBatchingIOs._transfer_inputs: the attention mask is
  max_batch_tokens x (num_pages + max_batch_tokens) bf16) on the H2D stream while the previous
  step computes (s22: hwsim/serving/engine_host.py), so a step whose forward is shorter is the
  copy: h2d_GBps = those bytes / median decode-only step (--device-ms 0, the default; before s22
  the copy was taken in series with hwsim's predicted device step, --device-ms 17.0).
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import tarfile
from pathlib import Path

import numpy as np

from hwsim.serving.engine_host import load_engine_host
from hwsim.serving.engines.hf import io_copy_bytes

HERE = Path(__file__).resolve().parent
TAR = HERE / "data" / "hf_serving" / "h100_call_s18" / "hf_serving.tar.xz"
LOADS = ("light", "near", "past", "burst")
SAME_STEP_S = 0.003


def steps(requests: list[dict]) -> list[dict]:
    """Engine steps from token stamps: time, sequences that got a token, prompt tokens that ended."""
    ev = sorted((t, k, r["prompt_tokens"]) for r in requests for k, t in enumerate(r["token_s"]))
    out: list[dict] = []
    for t, k, prompt in ev:
        if not out or t - out[-1]["t"] >= SAME_STEP_S:
            out.append({"t": t, "n": 0, "prefill": 0})
        s = out[-1]
        s["t"], s["n"] = t, s["n"] + 1
        s["prefill"] += prompt if k == 0 else 0
    return out


def decode_gaps(requests: list[dict]) -> list[tuple[int, float]]:
    """(sequences, seconds) of the steps in which no prompt ended (decode-only), idle gaps left out."""
    st = steps(requests)
    return [(b["n"], b["t"] - a["t"]) for a, b in zip(st, st[1:]) if b["prefill"] == 0 and b["t"] - a["t"] < 0.6]


def read_runs(tar: Path) -> dict:
    runs = {}
    with tarfile.open(fileobj=lzma.open(tar)) as tf:
        for m in tf.getmembers():
            if m.name.endswith(".requests.jsonl"):
                config, load = m.name.split("/")[-2], m.name.split("/")[-1].split(".")[0]
                runs[(config, load)] = [json.loads(x) for x in tf.extractfile(m).read().splitlines() if x.strip()]
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tar", type=Path, default=TAR)
    ap.add_argument("--device-ms", type=float, default=0.0, help="device time taken in series with the copy: 0 "
                    "since s22 (the copy overlaps the previous step's forward); s20 took hwsim's 17.0 ms graphs decode "
                    "step (s19's roofline: 14.1; s18: 6.9)")
    args = ap.parse_args()
    runs = read_runs(args.tar)
    for config in ("defaults", "graphs"):
        gaps = [g for load in LOADS for g in decode_gaps(runs[(config, load)])]
        n = np.array([g[0] for g in gaps], float)
        y = np.array([g[1] for g in gaps]) * 1e3
        a, b = np.linalg.lstsq(np.vstack([np.ones_like(n), n]).T, y, rcond=None)[0]
        med = statistics.median(y)
        print(f"{config}: {len(gaps)} decode-only steps, median {med:.1f} ms; fit {a:.2f} ms + {b * 1e3:.0f} us/seq")
        if config == "defaults":
            prof = load_engine_host("hf-transformers-h200")
            launches = (prof.kernels_per_layer.value * 32 + prof.kernels_fixed.value) * prof.launch_us.value / 1e3
            print(f"  plan_ms = {a:.2f} - launches {launches:.2f} - schedule {prof.schedule_us.value / 1e3:.3f} "
                  f"= {a - launches - prof.schedule_us.value / 1e3:.2f}; mask_us_per_seq = {b * 1e3:.0f} - "
                  f"{prof.schedule_us_per_seq.value} = {b * 1e3 - prof.schedule_us_per_seq.value:.0f}")
        if config == "graphs":
            nb = io_copy_bytes(8192, 1345 * 256)      # the run's engine config (run.log: num_blocks 1345, block 256)
            print(f"  h2d bytes/step {nb / 1e9:.3f} GB; h2d_GBps = {nb / 1e9 / ((med - args.device_ms) / 1e3):.1f}")


if __name__ == "__main__":
    main()
