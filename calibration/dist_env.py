"""Helpers shared by the scripts that measure on several GPUs (calibration/measure_collectives.py,
validation/measure_ep_steps.py, issue 20): one process per rank, the process group (NCCL with
rank r on GPU r; gloo on the CPU for --dry, so the scripts run before a multi-GPU machine is
lent), device-side timing, and the ranks' numbers reduced on every rank.

A script calls spawn(worker, world, ...) once per world size; each worker calls init() first
and dist.destroy_process_group() last (finish())."""

import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker, world, *args):
    """Run worker(rank, world, *args) in `world` processes on this host; returns when all end
    (an exception in one rank is raised here)."""
    mp.spawn(_entry, args=(worker, world, free_port(), args), nprocs=world, join=True)


def _entry(rank, worker, world, port, args):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    worker(rank, world, *args)


def init(rank, world, dry):
    """The default process group; returns the rank's device (cuda:rank, or cpu with --dry)."""
    if dry:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        return torch.device("cpu")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    return device


def finish():
    dist.barrier()
    dist.destroy_process_group()


def op(new, old):
    """torch.distributed's newer name for a collective where it has one (2.13 renamed
    all_gather_into_tensor and reduce_scatter_tensor), else the older."""
    return getattr(dist, new, None) or getattr(dist, old)


ALL_GATHER = op("all_gather_single", "all_gather_into_tensor")
REDUCE_SCATTER = op("reduce_scatter_single", "reduce_scatter_tensor")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn, device, calls, reps, warm=3):
    """Seconds per call of fn, `reps` times: `calls` calls back to back after a barrier, timed
    with CUDA events on a GPU (perf_counter on the CPU), divided by `calls` (as nccl-tests
    times its iterations)."""
    for _ in range(warm):
        fn()
    sync(device)
    out = []
    for _ in range(reps):
        dist.barrier()
        sync(device)
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e-3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls)
    return out


def capture(fn, calls, warm=3):
    """A CUDA graph of `calls` calls of fn (after `warm` eager ones on a side stream: NCCL's
    communicator and the allocator set up before capture); returns the graph and its output."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    dist.barrier()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            out = fn()
    torch.cuda.synchronize()
    return g, out


def time_replays(graph, reps, warm=3):
    """Seconds of each of `reps` replays of a graph, each started after a barrier (the ranks
    enter together; the graph's collectives then keep them in step), CUDA events."""
    for _ in range(warm):
        graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e-3)
    return out


def max_over_ranks(values, device):
    """Element-wise max of a list of numbers over the ranks (a collective ends with its slowest
    rank, so its time is the max)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def gather_lists(values, device):
    """Every rank's list of numbers (all of one length), on every rank: [rank][i]."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    out = torch.empty(dist.get_world_size() * t.numel(), dtype=torch.float64, device=device)
    ALL_GATHER(out, t)
    return out.view(dist.get_world_size(), -1).tolist()


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def topo_text():
    """`nvidia-smi topo -m` (which GPUs share NVLink, NICs): the machine the numbers belong to."""
    import subprocess
    try:
        r = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
        return r.stdout.strip() or r.stderr.strip()
    except Exception as e:
        return f"unavailable: {e!r}"
