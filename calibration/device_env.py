"""Helpers shared by the scripts that run on the H200 (calibration/measure_*.py,
validation/measure_steps.py, validation/profile_step.py): progress logging, the card's
state, JSONL output with its meta record, CUPTI launch shapes of a graph replay, and forcing
PyTorch's flash SDPA backend when it accepts our shapes."""

import contextlib
import json
import subprocess
import tempfile
import threading
import time

import torch
import torch.nn.functional as F

T_START = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", flush=True)


class NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def smi_line():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,"
                            "power.limit,driver_version,temperature.gpu,power.draw",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=15)
        return r.stdout.strip() or r.stderr.strip()
    except Exception as e:
        return f"unavailable: {e!r}"


SMI_FIELDS = "clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver,temp,power.draw"   # smi_line's order


@contextlib.contextmanager
def smi_samples(every_s=0.2, timed=False):
    """Sample smi_line() every `every_s` on a thread while the block runs (the card's clock and
    power under load); yields the list, filled as it goes: lines, or (perf_counter s, line)."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            line = smi_line()
            samples.append((round(time.perf_counter(), 2), line) if timed else line)
            time.sleep(every_s)
    thread = threading.Thread(target=sample)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def jsonl_out(path, script, **meta):
    """Open `path` for one JSON object a line, write the run's meta record first (script,
    torch, device, nvidia-smi line, plus `meta`), and yield a write(obj) that flushes each
    line, so a run cut short keeps what it measured."""
    with open(path, "w") as out:
        def write(obj):
            out.write(json.dumps(obj) + "\n")
            out.flush()

        write({"part": "meta", "script": script, "torch": torch.__version__,
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "smi": smi_line(), **meta})
        yield write


def triton_version():
    try:
        import triton
        return triton.__version__
    except Exception:
        return None


def flash_sdpa(dev):
    """(a context-manager factory forcing the flash backend, or None; a description).

    Flash is what the measured schedule uses (shared/calibration/README.md); it is forced only
    after a decode-shaped and a causal-prefill-shaped call both succeed with it."""
    if dev != "cuda":
        return None, "default (no CUDA)"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])  # noqa: E731
        with ctx():
            q = torch.randn(2, 32, 1, 128, device=dev, dtype=torch.bfloat16)
            k = torch.randn(2, 4, 65, 128, device=dev, dtype=torch.bfloat16)
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            q = torch.randn(1, 32, 64, 128, device=dev, dtype=torch.bfloat16)
            k = torch.randn(1, 8, 64, 128, device=dev, dtype=torch.bfloat16)
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        torch.cuda.synchronize()
        return ctx, "flash (forced via torch.nn.attention.sdpa_kernel)"
    except Exception as e:
        return None, f"default selection (flash refused: {repr(e)[:150]})"


def time_replays(graph, replays, warm_replays):
    """Milliseconds of each of `replays` replays of a captured CUDA graph (CUDA events),
    after `warm_replays` untimed ones."""
    for _ in range(warm_replays):
        graph.replay()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(replays)]
    for a, b in ev:
        a.record()
        graph.replay()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in ev]


def launch_shapes(prof):
    """Every CUDA kernel of a torch.profiler profile, in start order, with its launch shape:
    name, ts and dur (us), grid and block as "x*y*z", dynamic shared memory and registers per
    thread, read from the Chrome trace CUPTI writes (prof.events() carries no launch shape)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") != "kernel":
            continue
        a = ev.get("args", {})
        out.append({"name": ev["name"], "ts": float(ev["ts"]), "dur": float(ev.get("dur", 0.0)),
                    "grid": "*".join(str(x) for x in a.get("grid", [])),
                    "block": "*".join(str(x) for x in a.get("block", [])),
                    "smem": a.get("shared memory", ""), "regs": a.get("registers per thread", "")})
    out.sort(key=lambda e: e["ts"])
    return out


def profile_graph(fn, context=NullContext, warm_eager=1, warm_replays=3):
    """Capture `fn` as a CUDA graph (after `warm_eager` eager runs on a side stream, all under
    `context()`), replay it `warm_replays` times, then profile one replay with CUPTI: its
    kernels as launch_shapes gives them."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), context():
        for _ in range(warm_eager):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), context():
        fn()
    for _ in range(warm_replays):
        g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    return launch_shapes(prof)

