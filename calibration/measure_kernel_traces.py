"""CUPTI traces of three things the operator comparison could not explain from the other files.

    python3 calibration/measure_kernel_traces.py --out $OUT/h200_kernel_traces.jsonl [--dry]

- `prefill_attention`: causal SDPA over one prompt (flash forced, GQA) at T = 128..4096: which
  kernels run and how long each takes on the device. The shared calibration's prefill rows are
  CUDA-event times of a graph, so they cannot tell the attention kernel from any copy it needs.
- `launch`: the shared launch benchmark (200 tiny element-wise kernels in one graph), with each
  kernel's device duration and the gap to the next, so the per-kernel time splits into the
  kernel and the dispatch.
- `after_gemm`: the per-expert small kernels, each right after a weight-streaming GEMM (as in a
  step) and right after a tiny one, REPS pairs in one graph: does a big GEMM before them slow
  them down (they run 20-40% longer inside a step than alone, validation/data/h200_kernels.csv)?
- `after_gemm_cause`: what slows the kernel after a big GEMM down, told apart by position in a
  repeated pattern: the GEMM's own output as input (as in a step) or a tensor the GEMM's
  stream evicted from L2; a 235 MB non-GEMM read (no shared memory) instead of the GEMM; a
  tiny kernel between the GEMM and the small kernel; the small kernel twice; a GEMM whose
  weights stay in L2.
- `page_sweep`: a kernel touching one element in each of 1..10240 pages, then SiLU on a
  resident tensor: address translation (TLB reach) against L2 contents. The sweep runs as one
  block, so it tests the chip-wide translation cache, not every SM's own TLB.
- `code_vs_data`: after a read that flushes the L2, SiLU with its code or its data (or both, or
  neither) cold; and a page sweep run by many blocks (every SM's TLB), then SiLU (issue 17).
- `clock`: the SM clock and power nvidia-smi reports while a step-like graph replays for a few
  seconds.

One JSON object a line, kernels summarised per name as in measure_small_kernels.py.
"""

import argparse
import itertools
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_env import SMI_FIELDS, flash_sdpa, jsonl_out, log, profile_graph, smi_samples
from measure_small_kernels import summarise

REPS = 20
PREFILL_T = [128, 256, 512, 1024, 2048, 4096]
SMALL_ROWS = [4, 64, 512]


def prefill_attention(write, sdpa_ctx, dry):
    H, hd = (4, 64) if dry else (32, 128)
    for kvh in ((2,) if dry else (8, 4)):
        for T in (PREFILL_T[:2] if dry else PREFILL_T):
            q = torch.randn(1, H, T, hd, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kvh, T, hd, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, kvh, T, hd, device="cuda", dtype=torch.bfloat16)
            reps = 4   # as in the shared calibration's prefill rows

            def fn(q=q, k=k, v=v, reps=reps):
                for _ in range(reps):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            kernels = profile_graph(fn, sdpa_ctx)
            write({"part": "prefill_attention", "T": T, "H": H, "KVH": kvh, "D": hd, "reps": reps,
                   "kernels": summarise(kernels)})
            log(f"prefill T={T} KVH={kvh}: " + ", ".join(f"{k['name'][:40]} {k['dur']:.2f}" for k in kernels[:3]))


def launch(write):
    x = torch.zeros(1024, device="cuda", dtype=torch.float32)
    kernels = profile_graph(lambda: [x.add_(1.0) for _ in range(200)], torch.no_grad)
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in itertools.pairwise(kernels)]
    span = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
    gaps.sort()
    write({"part": "launch", "kernels_in_graph": len(kernels), "span_us": span,
           "us_per_kernel": span / len(kernels), "gap_median_us": gaps[len(gaps) // 2],
           "kernel": summarise(kernels)})
    log(f"launch: {span / len(kernels):.3f} us per kernel, median gap {gaps[len(gaps) // 2]:.3f} us")


def after_gemm(write, dry):
    d, ff = (256, 512) if dry else (4096, 14336)
    big = torch.randn(2 * ff, d, device="cuda", dtype=torch.bfloat16)     # 235 MB: the gate+up weights
    tiny = torch.randn(64, d, device="cuda", dtype=torch.bfloat16)
    for rows in SMALL_ROWS:
        x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
        gu = torch.randn(rows, 2 * ff, device="cuda", dtype=torch.bfloat16)
        ops = {"silu_gate_half": lambda gu=gu: F.silu(gu[:, :ff]),
               "mul_up_half": lambda gu=gu: gu[:, :ff] * gu[:, ff:]}
        for op, fn in ops.items():
            for before, w in (("big_gemm", big), ("tiny_gemm", tiny)):
                def pairs(fn=fn, w=w, x=x):
                    for _ in range(REPS):
                        x @ w.T
                        fn()
                kernels = profile_graph(pairs, torch.no_grad)
                write({"part": "after_gemm", "op": op, "rows": rows, "before": before,
                       "kernels": summarise(kernels)})
        log(f"after_gemm rows {rows} done")


def by_position(kernels, reps):
    """Kernels of `reps` repeats of one pattern: per position in the pattern, its name, launch
    shape and median/p10/p90 device time (us)."""
    period = len(kernels) // reps
    out = []
    for pos in range(period):
        ks = kernels[pos::period][:reps]
        d = sorted(k["dur"] for k in ks)
        out.append({"pos": pos, "kernel": ks[0]["name"][:120], "same_name": len({k["name"] for k in ks}) == 1,
                    "us": d[len(d) // 2], "p10": d[len(d) // 10], "p90": d[(9 * len(d)) // 10],
                    "grid": ks[0]["grid"], "smem": ks[0]["smem"]})
    return out


def write_positions(write, reps, record):
    """Profile `reps` (REPS repeats of one pattern) and write `record` with its per-position
    kernel times; log them on one line."""
    pos = by_position(profile_graph(reps, torch.no_grad), REPS)
    write({**record, "positions": pos})
    log(" ".join(f"{k}={v}" for k, v in record.items() if k != "part") + ": "
        + ", ".join(f"{p['kernel'][:24]} {p['us']:.2f}" for p in pos))


def after_gemm_cause(write, dry):
    d, ff = (256, 512) if dry else (4096, 14336)
    big = torch.randn(2 * ff, d, device="cuda", dtype=torch.bfloat16)      # 235 MB, streamed
    in_l2 = torch.randn(2 * ff, 256, device="cuda", dtype=torch.bfloat16)  # 14.7 MB: stays in L2
    tiny = torch.randn(64, d, device="cuda", dtype=torch.bfloat16)
    dot = torch.zeros(1024, device="cuda")
    for rows in (4, 16, 64):
        x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
        x256 = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16)
        gu = torch.randn(rows, 2 * ff, device="cuda", dtype=torch.bfloat16)
        silu = lambda t: F.silu(t[:, :ff])  # noqa: E731
        patterns = {
            "big_gemm>silu(own out)": lambda: silu(x @ big.T),
            "big_gemm>silu(own out)>mul": lambda: (lambda y: silu(y) * y[:, ff:])(x @ big.T),
            "l2_gemm>silu(own out)": lambda: silu(x256 @ in_l2.T),
            "big_gemm>silu(evicted)": lambda: (x @ big.T, silu(gu)),
            "big_gemm>silu(evicted)>silu(again)": lambda: (x @ big.T, silu(gu), silu(gu)),
            "big_gemm>tiny>silu(evicted)": lambda: (x @ big.T, dot.add_(1.0), silu(gu)),
            "big_read>silu(evicted)": lambda: (big.sum(dim=0), silu(gu)),
            "tiny_gemm>silu(resident)": lambda: (x @ tiny.T, silu(gu)),
        }
        for name, fn in patterns.items():
            def reps(fn=fn):
                for _ in range(REPS):
                    fn()
            write_positions(write, reps, {"part": "after_gemm_cause", "pattern": name, "rows": rows})


def page_sweep(write, dry):
    """A kernel that touches one element in each of many 2 MiB pages (moving almost no bytes,
    so the L2 keeps its contents), then SiLU on a tensor resident in L2: is the cost after a
    big GEMM the pages it touched (address translation) rather than the bytes it moved?"""
    d, ff = (256, 512) if dry else (4096, 14336)
    page = 1 << 20                                   # bf16 elements in 2 MiB
    pool = torch.empty((64 if dry else 10240) * page, device="cuda", dtype=torch.bfloat16)
    for rows in (4, 64):
        gu = torch.randn(rows, 2 * ff, device="cuda", dtype=torch.bfloat16)
        for pages in (1, 16, 128, 1024, 10240):
            if dry and pages > 64:
                continue
            sweep = pool[:pages * page:page]

            def reps(sweep=sweep, gu=gu):
                for _ in range(REPS):
                    sweep.sum()
                    F.silu(gu[:, :ff])
            write_positions(write, reps, {"part": "page_sweep", "pages": pages, "rows": rows})


def code_vs_data(write, dry):
    """Issue 17: small kernels run 15-25% longer inside a step than the model says, even where
    their inputs stay in L2 (Qwen3's 9 MB experts). Tell apart, after a 235 MB read that flushes
    the L2, a SiLU whose code is cold but whose data was just brought back (a different kernel,
    a max, read it), one whose code is warm (a SiLU on another tensor ran) but whose data is cold,
    both cold, and both warm; and a sweep of one element in each of many 2 MiB pages run by many
    blocks (every SM's own TLB, not just the chip's), then SiLU on a resident tensor."""
    d, ff = (256, 512) if dry else (4096, 768)
    big = torch.randn(2 * (14336 if not dry else 512), 4096 if not dry else 256, device="cuda",
                      dtype=torch.bfloat16)
    other = torch.randn(16, 2 * ff, device="cuda", dtype=torch.bfloat16)
    for rows in (1, 16, 64):
        gu = torch.randn(rows, 2 * ff, device="cuda", dtype=torch.bfloat16)
        silu = lambda t: F.silu(t[:, :ff])  # noqa: E731
        patterns = {
            "silu(resident)": lambda: silu(gu),
            "big_read>silu(code cold, data cold)": lambda: (big.sum(dim=0), silu(gu)),
            "big_read>max(data)>silu(code cold, data warm)": lambda: (big.sum(dim=0), gu.amax(), silu(gu)),
            "big_read>silu(other)>silu(code warm, data cold)": lambda: (big.sum(dim=0), silu(other), silu(gu)),
        }
        for name, fn in patterns.items():
            def reps(fn=fn):
                for _ in range(REPS):
                    fn()
            write_positions(write, reps, {"part": "code_vs_data", "pattern": name, "rows": rows})
    page = 1 << 20
    pages_max = 64 if dry else 10240
    pool = torch.empty(pages_max * page, device="cuda", dtype=torch.bfloat16)
    gu = torch.randn(16, 2 * ff, device="cuda", dtype=torch.bfloat16)
    for pages in (16, 1024, pages_max):
        sweep = pool[:pages * page].view(pages, page)[:, :64]      # 128 B of each page, many blocks

        def reps(sweep=sweep):
            for _ in range(REPS):
                sweep.sum(dim=1)
                F.silu(gu[:, :ff])
        write_positions(write, reps, {"part": "page_sweep_blocks", "pages": pages, "rows": 16})


def clock(write, dry):
    d, ff = (256, 512) if dry else (4096, 14336)
    w = torch.randn(2 * ff, d, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, d, device="cuda", dtype=torch.bfloat16)

    def step():
        for _ in range(8):
            F.silu(x @ w.T)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), torch.no_grad():
        step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        step()
    with smi_samples() as samples:
        t_end = time.perf_counter() + (0.5 if dry else 4.0)
        replays = 0
        while time.perf_counter() < t_end:
            for _ in range(50):
                g.replay()
            replays += 50
            torch.cuda.synchronize()
    write({"part": "clock", "workload": "8 x (x[8, 4096] @ W[28672, 4096]^T, SiLU), replayed",
           "replays": replays, "smi_fields": SMI_FIELDS, "samples": samples})
    log(f"clock: {samples[len(samples) // 2] if samples else 'no samples'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes (still needs CUDA)")
    ap.add_argument("--parts", default="prefill_attention,launch,after_gemm,clock")
    args = ap.parse_args()
    sdpa_ctx, backend = flash_sdpa("cuda")
    parts = args.parts.split(",")
    with jsonl_out(args.out, "calibration/measure_kernel_traces.py", sdpa_backend=backend,
                   reps=REPS) as write:
        if "prefill_attention" in parts:
            prefill_attention(write, sdpa_ctx, args.dry)
        if "launch" in parts:
            launch(write)
        if "after_gemm" in parts:
            after_gemm(write, args.dry)
        if "after_gemm_cause" in parts:
            after_gemm_cause(write, args.dry)
        if "page_sweep" in parts:
            page_sweep(write, args.dry)
        if "code_vs_data" in parts:
            code_vs_data(write, args.dry)
        if "clock" in parts:
            clock(write, args.dry)


if __name__ == "__main__":
    main()
