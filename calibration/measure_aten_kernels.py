"""Microbenchmarks of the ATen kernels an eager Hugging Face decode step spends its device time
in beyond GEMMs and attention (issue 30): DynamicCache's torch.cat of the whole cache, the
small D2H copy behind .item(), and the row reductions of RMSNorm, argmax, top-k and sort.
Each kernel's device duration comes from torch.profiler (CUDA activity), median of REPEATS.

    python3 calibration/measure_aten_kernels.py --out $OUT/aten_kernels.jsonl
    python3 calibration/measure_aten_kernels.py --dry --out /tmp/aten.jsonl   # tiny, CPU

One JSON row per (bench, shape, kernel): bench, shape, kernel (name, 120 chars), calls,
median_us, read_bytes, write_bytes, grid, block, device, torch."""

import argparse
import json
import os
import statistics
import sys
import tempfile

REPEATS = 20
CAT_SHAPES = [(1, 8, 1024, 128), (4, 8, 8192, 128), (8, 8, 4096, 128), (32, 8, 2048, 128),
              (32, 16, 2048, 128), (64, 4, 1024, 128), (1, 8, 256, 128), (8, 16, 512, 128)]
ROWS = [1, 8, 32, 64]


def benches(torch, device, dry):
    bf16, f32 = torch.bfloat16, torch.float32
    cat_shapes = [(1, 2, 16, 8)] if dry else CAT_SHAPES
    for b, h, length, d in cat_shapes:           # DynamicCache.update: cat([cache, new], dim=-2)
        old = torch.randn(b, h, length, d, device=device, dtype=bf16)
        new = torch.randn(b, h, 1, d, device=device, dtype=bf16)
        nbytes = old.numel() * 2 + new.numel() * 2
        yield "cat", [b, h, length, d], (lambda old=old, new=new: torch.cat([old, new], dim=-2)), nbytes, nbytes
        dst = torch.empty(b, h, length + 1, d, device=device, dtype=bf16)   # the same bytes, contiguous
        yield "copy", [b, h, length, d], (lambda dst=dst, old=old: dst[:, :, :length].copy_(old)), \
            old.numel() * 2, old.numel() * 2
    x = torch.ones(4, device=device, dtype=torch.int64)
    yield "item", [1], (lambda x=x: x[0].item()), 8, 8
    hidden, vocab = (64, 1000) if dry else (4096, 128256)
    for r in ROWS[:1] if dry else ROWS:
        a = torch.randn(r, hidden, device=device, dtype=f32)
        yield "mean", [r, hidden], (lambda a=a: a.pow(2).mean(-1, keepdim=True)), a.numel() * 4, r * 4
        logits = torch.randn(r, vocab, device=device, dtype=bf16)
        yield "argmax", [r, vocab], (lambda t=logits: t.argmax(-1)), logits.numel() * 2, r * 8
        for experts, k in ((64, 8), (128, 8), (8, 2)):
            g = torch.randn(r, experts, device=device, dtype=f32)
            yield "topk", [r, experts, k], (lambda g=g, k=k: torch.topk(g, k, dim=-1)), g.numel() * 4, r * k * 12
        flat = torch.randint(0, 64, (r * 8,), device=device)
        yield "sort", [r * 8], (lambda f=flat: torch.sort(f, stable=True)), flat.numel() * 8, flat.numel() * 16


def measure(torch, device, dry):
    from torch.profiler import ProfilerActivity, profile
    cuda = device == "cuda"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    for bench, shape, fn, rd, wr in benches(torch, device, dry):
        for _ in range(3):
            fn()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for _ in range(REPEATS):
                fn()
            if cuda:
                torch.cuda.synchronize()
        path = os.path.join(tempfile.gettempdir(), "aten_kernels_trace.json")
        prof.export_chrome_trace(path)          # kernels with their device durations, by name
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
        by_kernel = {}
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                args = e.get("args", {})
                by_kernel.setdefault(e["name"], []).append((e.get("dur", 0.0), args.get("grid"), args.get("block")))
        for kernel, times in by_kernel.items():
            yield {"bench": bench, "shape": shape, "kernel": kernel[:120], "calls": len(times),
                   "median_us": statistics.median(t[0] for t in times), "read_bytes": rd, "write_bytes": wr,
                   "grid": times[0][1], "block": times[0][2],
                   "device": name, "torch": torch.__version__}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dry", action="store_true", help="tiny shapes (CPU where there is no GPU)")
    args = p.parse_args()
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.dry:
        print("no GPU: run with --dry", file=sys.stderr)
        return 2
    with open(args.out, "w") as fh:
        for row in measure(torch, device, args.dry):
            fh.write(json.dumps(row) + "\n")
            print(json.dumps({k: row[k] for k in ("bench", "shape", "kernel", "calls", "median_us")})[:220],
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
