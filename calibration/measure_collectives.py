#!/usr/bin/env python3
"""Measure NCCL collectives and MoE dispatch/combine on several GPUs of one host (issue 20):
the figures to re-calibrate hardware_profiles/topologies/hgx-h200-8.yaml and
hwsim/parallel/comm_kernels.py from, in place of the published ones (docs/multi_gpu.md).

    python3 calibration/measure_collectives.py --out $OUT/h200x8_collectives.jsonl --gpus 2,4,8
    python3 calibration/measure_collectives.py --dry      # gloo on the CPU, 2 ranks, tiny sizes

Parts, each on 2, 4 and 8 GPUs (one process per GPU, torch.distributed with NCCL):
- `collective`: all-reduce, all-gather, reduce-scatter and all-to-all (all_to_all_single) of
  bf16 buffers from 4 KB to 256 MB, sizes as nccl-tests counts them (all-reduce: the buffer;
  all-gather: the gathered output; reduce-scatter: the input; all-to-all: each rank's send
  buffer), eager (`calls` back to back, as nccl-tests) and captured in a CUDA graph (as a
  graph-mode decode step runs them); seconds per call = the slowest rank's, per repetition;
  algbw and busbw with nccl-tests' factors.
- `moe`: MoE dispatch and combine with all_to_all_single for decode batches (1-256 tokens per
  GPU) of a DeepSeek-V3 shape (hidden 7168, top-8 of 256) and a Qwen3-235B shape (4096, top-8
  of 128): each token's k experts drawn uniformly (seeded), one message per (token, expert)
  as DeepEP's low-latency kernels send them: dispatch FP8 values + an fp32 scale per 128
  (as uint8), combine bf16; the message counts between every pair of ranks are in the record,
  so hwsim can replay the exact bytes (hwsim/parallel/collectives.moe_low_latency).
Raw JSONL, one record per line: a meta record (torch, NCCL, GPU, nvidia-smi and its topology),
then one per measurement; every rank's times are reduced on rank 0, which writes.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dist_env as de  # noqa: E402

SIZES = [4096 << i for i in range(17)]                  # 4 KB .. 256 MB
DRY_SIZES = [4096, 65536]
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
BUSBW = {"all_reduce": lambda g: 2 * (g - 1) / g, "all_gather": lambda g: (g - 1) / g,
         "reduce_scatter": lambda g: (g - 1) / g, "all_to_all": lambda g: (g - 1) / g}
MOE_SHAPES = {"deepseek-v3": (7168, 256, 8), "qwen3-235b-a22b": (4096, 128, 8)}   # hidden, experts, k
MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DRY_MOE_TOKENS = (1, 8)


def collective(name, nbytes, world, device):
    """fn() issuing one call of the collective on buffers of nccl-tests' `size` nbytes."""
    n = max(nbytes // 2 // world * world, world)         # bf16 elements, a multiple of the ranks
    x = torch.ones(n, dtype=torch.bfloat16, device=device)
    if name == "all_reduce":
        return lambda: dist.all_reduce(x)
    if name == "all_gather":
        part, out = x[: n // world], torch.empty(n, dtype=torch.bfloat16, device=device)
        return lambda: de.ALL_GATHER(out, part)
    if name == "reduce_scatter":
        out = torch.empty(n // world, dtype=torch.bfloat16, device=device)
        return lambda: de.REDUCE_SCATTER(out, x)
    out = torch.empty_like(x)
    return lambda: dist.all_to_all_single(out, x)


def message_counts(tokens, experts, k, world, seed):
    """[src][dst]: (token, expert) messages rank src sends rank dst; every rank draws its
    tokens' k distinct experts uniformly with its own seeded generator (experts contiguous:
    expert e on rank e // (experts / world))."""
    counts = []
    for src in range(world):
        g = torch.Generator().manual_seed(seed * 1000 + src)
        choice = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :k]
        counts.append(torch.bincount((choice // (experts // world)).flatten(), minlength=world).tolist())
    return counts


def moe_calls(counts, rank, msg_bytes, device):
    """fn() for one all_to_all_single with counts[rank][j] messages of msg_bytes to each rank j
    (counts[j][rank] back), uint8 buffers."""
    send = [c * msg_bytes for c in counts[rank]]
    recv = [counts[j][rank] * msg_bytes for j in range(len(counts))]
    x = torch.ones(sum(send), dtype=torch.uint8, device=device)
    y = torch.empty(sum(recv), dtype=torch.uint8, device=device)
    return lambda: dist.all_to_all_single(y, x, recv, send)


def timings(fn, device, args, launch):
    """Per-repetition seconds per call on this rank, eager or replayed from a CUDA graph."""
    if launch == "eager":
        return de.time_calls(fn, device, args.calls, args.reps)
    graph, _ = de.capture(fn, args.calls)
    per = [t / args.calls for t in de.time_replays(graph, args.reps)]
    del graph
    return per


def worker(rank, world, args):
    device = de.init(rank, world, args.dry)
    launches = ("eager",) if args.dry else ("eager", "graph")
    write = None
    if rank == 0:
        out = open(args.out, "a")

        def write(obj):
            import json
            out.write(json.dumps(obj) + "\n")
            out.flush()
    t_start = time.perf_counter()

    def over_budget():
        late = [float(time.perf_counter() - t_start > args.budget_s)]
        return de.max_over_ranks(late, device)[0] > 0       # every rank stops at the same point

    for name in args.ops.split(","):
        for nbytes in (DRY_SIZES if args.dry else SIZES):
            for launch in launches:
                if over_budget():
                    write and write({"part": "skipped", "gpus": world, "op": name, "bytes": nbytes, "launch": launch})
                    continue
                fn = collective(name, nbytes, world, device)
                per = de.max_over_ranks(timings(fn, device, args, launch), device)
                t = de.median(per)
                if write:
                    write({"part": "collective", "op": name, "gpus": world, "bytes": nbytes, "dtype": "bf16",
                           "launch": launch, "calls": args.calls, "us_per_call": t * 1e6,
                           "reps_us": [round(x * 1e6, 3) for x in per], "algbw_gbs": nbytes / t / 1e9,
                           "busbw_gbs": nbytes / t / 1e9 * BUSBW[name](world)})
                del fn
    for shape, (hidden, experts, k) in MOE_SHAPES.items():
        dispatch_bytes, combine_bytes = hidden + hidden // 128 * 4, 2 * hidden
        for tokens in (DRY_MOE_TOKENS if args.dry else MOE_TOKENS):
            counts = message_counts(tokens, experts, k, world, seed=tokens)
            for what, msg in (("dispatch", dispatch_bytes), ("combine", combine_bytes)):
                pairs = counts if what == "dispatch" else [list(col) for col in zip(*counts)]
                for launch in launches:
                    if over_budget():
                        write and write({"part": "skipped", "gpus": world, "moe": shape, "tokens": tokens,
                                         "what": what, "launch": launch})
                        continue
                    fn = moe_calls(pairs, rank, msg, device)
                    per = de.max_over_ranks(timings(fn, device, args, launch), device)
                    if write:
                        write({"part": "moe", "shape": shape, "what": what, "gpus": world,
                               "tokens_per_gpu": tokens, "hidden": hidden, "experts": experts, "top_k": k,
                               "message_bytes": msg, "counts": pairs, "launch": launch, "calls": args.calls,
                               "us_per_call": de.median(per) * 1e6, "reps_us": [round(x * 1e6, 3) for x in per]})
                    del fn
    if rank == 0:
        out.close()
    de.finish()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry", action="store_true", help="gloo on the CPU: 2 ranks, tiny sizes")
    ap.add_argument("--gpus", default=None, help="world sizes, e.g. 2,4,8 (default: 2,4,8; --dry: 2)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--calls", type=int, default=20, help="calls per timed repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=150.0, help="per world size: stop measuring after")
    args = ap.parse_args()
    if not args.dry and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --dry")
    worlds = [int(g) for g in (args.gpus or ("2" if args.dry else "2,4,8")).split(",")]
    if not args.dry and max(worlds) > torch.cuda.device_count():
        sys.exit(f"{max(worlds)} GPUs asked, {torch.cuda.device_count()} here")
    if args.dry:
        args.calls, args.reps = min(args.calls, 3), min(args.reps, 2)
    args.out = args.out or ("/tmp/hwsim_dry/collectives_dry.jsonl" if args.dry
                            else os.path.join(HERE, "data", "h200x8_collectives.jsonl"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from device_env import jsonl_out, log
    with jsonl_out(args.out, "calibration/measure_collectives.py", dry=args.dry, worlds=worlds,
                   gpus_here=torch.cuda.device_count(),
                   nccl=".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
                   topology=de.topo_text() if torch.cuda.is_available() else None):
        pass                                            # the meta record; the ranks append
    for world in worlds:
        log(f"{world} ranks")
        de.spawn(worker, world, args)
    log(f"done -> {args.out}")


if __name__ == "__main__":
    main()
