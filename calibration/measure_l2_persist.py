"""Expert weights held in the H200's L2 as persisting lines: what the brief's "experts in
on-chip SRAM" is on a Hopper GPU, measured (validation/predict_l2_persist.py is hwsim's
prediction, written first).

P expert GEMMs of Qwen3-30B-A3B's gate_up shape (x[B, 2048] @ W[1536, 2048]^T, bf16, as
torch.nn.functional.linear runs them) are captured in one CUDA graph and replayed, each replay
timed with CUDA events, and the same weights as one GEMM (x @ W[6144, 2048]^T, one kernel
launched eagerly), in three conditions:
- cold: 512 MB written before each replay evicts the weights: they stream from HBM;
- warm: no flush: the weights (25 MB) stay in the 50 MB L2 by themselves;
- persisting: an access-policy window (driver API: cuStreamSetAttribute, the graph's kernel
  nodes too) marks the weights' lines persisting, in a set-aside of cuCtxSetLimit
  (CU_LIMIT_PERSISTING_L2_CACHE_SIZE), and the same 512 MB flush runs before each replay;
  persisting_warm: the window, no flush.
A third shape, `read`, sums the weights (a reduction kernel: their bytes alone, no GEMM).
Each row: batch, condition, median and min microseconds of the replay over REPEATS.

    python calibration/measure_l2_persist.py --out DIR [--traffic | --profile]    (on the device machine)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

HIDDEN, GATE_UP = 2048, 1536
BATCHES = (1, 4, 16, 64)
EXPERTS = 4
REPEATS = 200
FLUSH_BYTES = 512 * 2**20

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108
CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE = 109
CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_ACCESS_PROPERTY_STREAMING, CU_ACCESS_PROPERTY_PERSISTING = 1, 2


class AccessPolicyWindow(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class AttrValue(ctypes.Union):          # CUlaunchAttributeValue: 64 bytes
    _fields_ = [("accessPolicyWindow", AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    def check(name, *args):
        rc = getattr(cuda, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned CUresult {rc}")
    return cuda, check


def persist(weights: torch.Tensor, stream: torch.cuda.Stream, graph_nodes=None) -> dict:
    """Set aside the persisting L2 and mark `weights`' lines persisting on `stream`."""
    cuda, check = driver()
    dev = ctypes.c_int()
    check("cuCtxGetDevice", ctypes.byref(dev))
    max_persist, max_window = ctypes.c_int(), ctypes.c_int()
    check("cuDeviceGetAttribute", ctypes.byref(max_persist), CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev)
    check("cuDeviceGetAttribute", ctypes.byref(max_window), CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, dev)
    check("cuCtxSetLimit", CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(max_persist.value))
    nbytes = weights.numel() * weights.element_size()
    value = AttrValue()
    value.accessPolicyWindow = AccessPolicyWindow(weights.data_ptr(), min(nbytes, max_window.value), 1.0,
                                                  CU_ACCESS_PROPERTY_PERSISTING, CU_ACCESS_PROPERTY_STREAMING)
    check("cuStreamSetAttribute", ctypes.c_void_p(stream.cuda_stream), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW,
          ctypes.byref(value))
    return {"max_persisting_bytes": max_persist.value, "max_window_bytes": max_window.value,
            "window_bytes": min(nbytes, max_window.value)}


PROFILED = 50             # replays a profile records (--profile)
SPIN_CYCLES = 200_000     # the GPU kept busy (no memory traffic) while the host launches what is timed


def timed(replay, flush, repeats: int) -> list[float]:
    """Microseconds of each replay. Before it, the flush (if any), then a spin of the SMs
    without memory traffic, so that the start event and the replay are queued while the GPU is
    busy: the events then time the GPU's work, not the host's launch of it (call_1 timed that
    where nothing ran before the start event: its "warm" rows)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(repeats):
        if flush is not None:
            flush()
        torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def sweep_traffic(out: Path) -> None:
    """How much other traffic between two uses the weights survive in the L2, with and without
    the persisting window: the one-GEMM shape at batch 16 (and the weights' sum) after 0 to
    512 MB written (fill_) or read (sum) by another kernel, then the SMs' spin."""
    dev = torch.device("cuda")
    torch.manual_seed(0)
    weights = torch.randn(EXPERTS * GATE_UP, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02
    scratch = torch.empty(FLUSH_BYTES // 4, device=dev, dtype=torch.float32).fill_(1.0)
    x = torch.randn(16, HIDDEN, device=dev, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    a0 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(200):
        a0 @ a0
    torch.cuda.synchronize()
    rows, meta = [], {}
    for persisting in (False, True):
        if persisting:
            meta.update(persist(weights, stream))
        with torch.cuda.stream(stream):
            for mb in (0, 8, 16, 32, 64, 128, 512):
                part = scratch[: mb * 2**20 // 4]
                for traffic, flush in (("write", lambda: part.fill_(2.0)), ("read", lambda: part.sum())):
                    if mb == 0 and traffic == "read":
                        continue
                    for shape, run in (("one", lambda: F.linear(x, weights)),
                                       ("read", lambda: weights.sum(dtype=torch.float32))):
                        us = timed(run, flush if mb else None, REPEATS)
                        rows.append({"persisting": persisting, "traffic_mb": mb, "traffic": traffic,
                                     "shape": shape, "batch": 16, "median_us": statistics.median(us),
                                     "min_us": min(us)})
                        print(rows[-1], flush=True)
    (out / "l2_persist_traffic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "meta_traffic.json").write_text(json.dumps(meta, indent=1))


def profile_kernels(out: Path) -> None:
    """The GEMM kernels' device time (CUPTI, as calibration/measure_gemm_kernels.py takes it),
    not the events around them: each shape at B = 1, 16, 64, cold (512 MB *read* before each
    replay: the L2 full of clean lines, as hwsim's GEMMs are calibrated) and warm, PROFILED
    replays each (eager: the graph's four GEMMs launched one by one); the flush, the spin and their own kernels are left out by name."""
    import sys
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from device_env import launch_shapes

    dev = torch.device("cuda")
    torch.manual_seed(0)
    weights = torch.randn(EXPERTS, GATE_UP, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02
    together = weights.view(EXPERTS * GATE_UP, HIDDEN)
    scratch = torch.empty(FLUSH_BYTES // 4, device=dev, dtype=torch.float32).fill_(1.0)
    a0 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(200):
        a0 @ a0
    torch.cuda.synchronize()
    rows = []
    for batch in (1, 16, 64):
        x = torch.randn(batch, HIDDEN, device=dev, dtype=torch.bfloat16)
        shapes = {"graph": lambda: [F.linear(x, weights[e]) for e in range(EXPERTS)],
                  "one": lambda: F.linear(x, together)}
        for shape, run in shapes.items():
            for condition, flush in (("cold_read", lambda: scratch.sum()), ("warm", None)):
                for _ in range(3):
                    run()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(PROFILED):
                        if flush is not None:
                            flush()
                        torch.cuda._sleep(SPIN_CYCLES)
                        run()
                    torch.cuda.synchronize()
                kernels: dict[str, list[float]] = {}
                for ev in launch_shapes(prof):          # CUPTI's kernels, from the Chrome trace
                    name = ev["name"]
                    if "spin" in name or name.startswith("void at::native::"):
                        continue                        # the spin, the flush's sum
                    kernels.setdefault(name, []).append(ev["dur"])
                total = sum(sum(v) for v in kernels.values()) / PROFILED
                rows.append({"batch": batch, "experts": EXPERTS, "shape": shape, "condition": condition,
                             "device_us": total,
                             "kernels": {k: [len(v), statistics.median(v)] for k, v in kernels.items()}})
                print(rows[-1], flush=True)
    (out / "l2_persist_profile.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--traffic", action="store_true", help="sweep_traffic instead of the three conditions")
    ap.add_argument("--profile", action="store_true", help="profile_kernels: the GEMMs' device time")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.traffic:
        sweep_traffic(a.out)
        return
    if a.profile:
        profile_kernels(a.out)
        return
    torch.manual_seed(0)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    meta = {"device": props.name, "l2_bytes": props.L2_cache_size, "torch": torch.__version__}
    weights = torch.randn(EXPERTS, GATE_UP, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02
    scratch = torch.empty(FLUSH_BYTES // 4, device=dev, dtype=torch.float32)
    flush = lambda: scratch.fill_(1.0)          # noqa: E731: 512 MB written, every line evicted
    stream = torch.cuda.Stream()
    a0 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(200):                  # clocks up before the first timing
        a0 @ a0
    torch.cuda.synchronize()
    rows = []
    for persisting in (False, True):
        if persisting:
            try:
                meta.update(persist(weights, stream))
            except (OSError, AttributeError, RuntimeError) as e:
                meta["persist_error"] = str(e)
                break
        for batch in BATCHES:
            x = torch.randn(batch, HIDDEN, device=dev, dtype=torch.bfloat16)
            together = weights.view(EXPERTS * GATE_UP, HIDDEN)
            with torch.cuda.stream(stream):
                for _ in range(3):
                    [F.linear(x, weights[e]) for e in range(EXPERTS)]
                stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    outs = [F.linear(x, weights[e]) for e in range(EXPERTS)]
                for _ in range(10):
                    graph.replay()
                # the experts' GEMMs in one graph, and all their weights in one GEMM (eager: one
                # kernel, so no launch gap is timed)
                shapes = {"graph": graph.replay, "one": lambda: F.linear(x, together),
                          "read": lambda: together.sum(dtype=torch.float32)}    # its bytes alone
                conditions = ({"cold": flush, "warm": None} if not persisting else
                              {"persisting": flush, "persisting_warm": None})
                for shape, replay in shapes.items():
                    for name, before in conditions.items():
                        us = timed(replay, before, REPEATS)
                        rows.append({"batch": batch, "experts": EXPERTS, "shape": shape, "condition": name,
                                     "median_us": statistics.median(us), "min_us": min(us)})
                        print(rows[-1], flush=True)
            del graph, outs
    (a.out / "l2_persist.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a.out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(meta)


if __name__ == "__main__":
    main()
