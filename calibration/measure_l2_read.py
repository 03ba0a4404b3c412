"""The H200's L2 read bandwidth as a streaming kernel sees it (session 17; hardware.md's 9.7-10.5
TB/s [M1-h200] is a published microbenchmark's, the profile's `l2.bandwidth_gbps`): a Triton
kernel of many programs, each summing its share of a buffer with wide loads, run over buffers
of 4 MB to 1 GB. Buffers that fit the L2 are read warm (the same buffer every replay); each
replay reads the buffer READS times in one launch (the grid walks it READS times), so the
launch's own cost is a small share. Rows: bytes, reads, median microseconds, TB/s.

    python calibration/measure_l2_read.py --out DIR     (on the device machine)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

SIZES_MB = (4, 8, 16, 24, 32, 40, 48, 64, 128, 1024)
READS = 8
REPEATS = 50
BLOCK = 4096


@triton.jit
def read_kernel(x, out, n, reads: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(reads):
        for start in range(pid * BLOCK, n, programs * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out + pid * BLOCK + tl.arange(0, BLOCK), acc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    a0 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(200):
        a0 @ a0
    rows = []
    for mb in SIZES_MB:
        n = mb * 2**20 // 2
        x = torch.randn(n, device=dev, dtype=torch.bfloat16)
        for programs in (sms, 2 * sms, 4 * sms):
            out = torch.empty(programs * BLOCK, device=dev, dtype=torch.float32)
            run = lambda: read_kernel[(programs,)](x, out, n, READS, BLOCK, num_warps=8)  # noqa: E731
            for _ in range(3):
                run()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            us = []
            for _ in range(REPEATS):
                torch.cuda._sleep(200_000)
                start.record()
                run()
                end.record()
                end.synchronize()
                us.append(start.elapsed_time(end) * 1e3)
            med = statistics.median(us)
            rows.append({"bytes": n * 2, "reads": READS, "programs": programs, "median_us": med,
                         "min_us": min(us), "tb_s": n * 2 * READS / med / 1e6})
            print(rows[-1], flush=True)
        del x
    (a.out / "l2_read.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
