"""Power and SM clock under steady tensor-core and HBM load, for a power governor (issue 17:
compute-heavy steps settle at 1680 MHz at the 700 W limit, validation/data/h200_step_clocks.jsonl).

    python3 calibration/measure_power.py --out $OUT/h200_power.jsonl

Each workload runs back to back for SECONDS while nvidia-smi is sampled every 0.2 s. The record
holds the work done per second (tensor FLOP/s, HBM bytes/s) from CUDA events and the samples
(clock, power), so energy per FLOP and per byte can be read off them against the idle power.
"""

import argparse
import json
import time

import torch

from device_env import SMI_FIELDS, log, smi_line, smi_samples

SECONDS = 4.0


def run(name, fn, flops, nbytes, out):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with smi_samples() as samples:
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, t_end = 0, time.perf_counter() + SECONDS
        a.record()
        while time.perf_counter() < t_end:
            for _ in range(10):
                fn()
            n += 10
            torch.cuda.synchronize()
        e.record()
        e.synchronize()
    s = a.elapsed_time(e) / 1e3
    rec = {"workload": name, "calls": n, "seconds": s, "tflops_per_s": flops * n / s / 1e12,
           "tb_per_s": nbytes * n / s / 1e12, "smi_fields": SMI_FIELDS, "samples": samples}
    out.write(json.dumps(rec) + "\n")
    out.flush()
    log(f"{name}: {rec['tflops_per_s']:.0f} TFLOP/s, {rec['tb_per_s']:.2f} TB/s; last {samples[-1] if samples else '-'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    with open(args.out, "w") as out:
        out.write(json.dumps({"part": "idle", "smi": smi_line()}) + "\n")
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        run("gemm 8192^3 bf16 random", lambda: a @ b, 2 * n ** 3, 3 * n * n * 2, out)
        z = torch.zeros(n, n, device="cuda", dtype=torch.bfloat16)
        run("gemm 8192^3 bf16 zeros", lambda: z @ z, 2 * n ** 3, 3 * n * n * 2, out)
        src = torch.randn(2 ** 31 // 2, device="cuda", dtype=torch.bfloat16)   # 2 GiB
        dst = torch.empty_like(src)
        run("copy 2 GiB", lambda: dst.copy_(src), 0, 2 * src.numel() * 2, out)
        w = torch.randn(28672, 4096, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
        run("decode gemm x[8,4096] @ W[28672,4096]^T", lambda: x @ w.T, 2 * 8 * 4096 * 28672,
            28672 * 4096 * 2, out)
        x512 = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
        run("prefill gemm x[512,4096] @ W[28672,4096]^T", lambda: x512 @ w.T, 2 * 512 * 4096 * 28672,
            28672 * 4096 * 2, out)
        out.write(json.dumps({"part": "idle_after", "smi": smi_line()}) + "\n")


if __name__ == "__main__":
    main()
