"""Measure issue 31's fast low-bit kernels on the H200 against bf16 and FP8, in one call.

    python3 calibration/measure_fast_kernels.py --out $OUT/h200_fast_kernels.jsonl [--parts ...]
    python3 calibration/measure_fast_kernels.py --dry --out /tmp/fast.jsonl    # CPU, interpreter
    python3 calibration/measure_fast_kernels.py --out $OUT/x.jsonl --parts check,kv --impls fast2,fast2_lean

Parts, in this order (--parts picks some; --budget-s stops starting rows past it). Every fast
kernel runs in two dequant variants: portable Triton, and `_asm` (inline PTX, GPU only).
- `ceiling`: a 2 GiB device-to-device copy (bytes read + written), the bandwidth to compare with.
- `check`: each kernel and variant against its pure-torch reference on the device (rel. L2
  error, output poisoned first; with the compiled kernel's shared memory, registers, spills and
  warps), before anything is timed: calibration/fast_kv_attn.py (16-,
  2-, 4-bit, adaptive-2, kivi-2 layouts) and calibration/fast_w4a16.py. A variant that fails
  its check is not timed (its rows carry the reason).
- `kv`: decode attention, Mixtral's GQA (32 query heads, 8 KV heads, head dim 128), batch 1-64 x
  context 4k-128k: torch SDPA on a bf16 cache with the flash, cuDNN and default backends,
  flash-attn's flash_attn_with_kvcache if installed, and the fast kernel at 16 bits (its own
  bf16-class control), 2 and 4 bits (group 128), adaptive-2 (4 sinks at 8 bits, 2% outliers at
  4, routine 2) and kivi-2 (routine 2 bits in groups of 32, the last 128 tokens at 16).
  fast2 and fast4 also run `_lean` (issue 44): the empty segment slots compiled at the layout's
  own width, not 16 bits, so no 128 KiB bf16 pipeline buffer holds the SM to one program. Each
  fast row records its compiled kernel's smem_bytes, regs, spills and warps.
- `gemm`: x[m, k] @ W[n, k]^T at m = 1-64 for the expert, dense and attention shapes of
  Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 (hwsim/data/models): bf16 torch.matmul, FP8
  (cast + torch._scaled_mm, calibration/moe_impls.py), int4 tinygemm (the kernel hwsim's
  software path is fitted on) and the fast W4A16.
- `floor`: the MMA floor of decode attention: the fast kernel (2 and 16 bits) and SDPA with a
  query group of 1, 4, 8 and 16 real rows per KV head (the kernel's tl.dot pads to 16 rows).
- `tune`: block/warps/stages of the fast KV kernel and BN/warps of the W4A16 at a few shapes.
hwsim's prediction of every kv, gemm and floor row was written before the first run:
validation/fast_kernels_predictions.md, calibration/data/h200_fast_kernels_predicted.jsonl.

Timing as the other calibration scripts (shared/calibration/README.md): the calls are captured
as one CUDA graph over enough distinct copies of the cache or weights (>= 256 MiB in all) that
every call streams from HBM, not L2; each row is the median (p10, p90) of REPLAYS replays timed
with CUDA events (device_env.time_replays), divided by the calls per replay. One JSON object a
line; `gbps` is the bytes the call must read (codes, scales, zeros, q; or weights) over its time.
"""

import argparse
import os
import statistics
import sys
import time

if "--dry" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"        # before triton is imported: kernels run on CPU tensors

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fast_kv_attn as kv  # noqa: E402
from fast_grid import (BATCHES, CONTEXTS, FLOOR_GROUPS, FLOOR_SHAPES, GEMM_MODELS, GEMM_ROWS,  # noqa: E402
                       GQA, KV_BLOCK, KV_WARPS, LAYOUTS, W4_BN, layout, model_shapes)
import fast_w4a16 as w4  # noqa: E402
import moe_impls  # noqa: E402
from device_env import jsonl_out, log, time_replays, triton_version  # noqa: E402

COPIES_BYTES = 256 * 2 ** 20        # distinct copies per replay: past the 60 MB L2
MAX_COPIES = 128
REPLAYS, WARM = 20, 3
LEAN_LAYOUTS = ["fast2", "fast4"]   # also run lean: empty slots at their own width, no 16-bit code (issue 44)
KV_TUNE_SHAPES = [(16, 32768), (1, 131072)]
KV_TUNE = [(b, w, 2) for b in (32, 64, 128) for w in (4, 8)] + [(64, 4, 3), (128, 8, 3)]
GEMM_TUNE = [(bn, w) for bn in (64, 128) for w in (4, 8)]
# dry: the same code paths on CPU through Triton's interpreter, at shapes it runs in seconds
DRY = dict(GQA=dict(H=8, KVH=2, D=64), BATCHES=[1], CONTEXTS=[96], FLOOR_SHAPES=[(1, 64)],
           FLOOR_GROUPS=[2], GEMM_ROWS=[5], KV_TUNE_SHAPES=[(1, 64)], KV_TUNE=[(16, 4, 2)],
           GEMM_TUNE=[(64, 4)], REPLAYS=1, WARM=0)


# ----------------------------------------------------------------------------- timing
def time_calls(calls, dev, replays, warm):
    """Milliseconds per call (median, p10, p90) of `calls` (closures, one per data copy) run
    back to back: one CUDA graph of all of them, replayed; on CPU, one host-timed pass."""
    if dev != "cuda":
        t = time.perf_counter()
        for c in calls:
            c()
        ms = (time.perf_counter() - t) * 1e3 / len(calls)
        return ms, ms, ms
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:                  # compiles Triton kernels, creates handles
            c()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    ms = sorted(m / len(calls) for m in time_replays(graph, replays, warm))
    return statistics.median(ms), ms[len(ms) // 10], ms[(9 * len(ms)) // 10]


def copies_for(nbytes, dev):
    return 1 if dev != "cuda" else max(1, min(MAX_COPIES, COPIES_BYTES // max(nbytes, 1)))


def timed_row(base, calls, nbytes, dev, cfg):
    ms, p10, p90 = time_calls(calls, dev, cfg["REPLAYS"], cfg["WARM"])
    return {**base, "copies": len(calls), "bytes": nbytes, "ms": ms, "p10": p10, "p90": p90,
            "gbps": nbytes / (ms * 1e-3) / 1e9}


# ----------------------------------------------------------------------------- decode attention
def sdpa_calls(backend, B, L, H, KVH, D, dev, ctx):
    """Closures over enough bf16 caches; `backend` None (default), "flash" or "cudnn"."""
    nbytes = 2 * B * KVH * L * D * 2 + B * H * D * 2
    q = torch.randn(B, H, 1, D, device=dev, dtype=torch.bfloat16)
    caches = [(torch.randn(B, KVH, L, D, device=dev, dtype=torch.bfloat16),
               torch.randn(B, KVH, L, D, device=dev, dtype=torch.bfloat16))
              for _ in range(copies_for(nbytes, dev))]

    def call(k, v):
        with ctx():
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return [lambda k=k, v=v: call(k, v) for k, v in caches], nbytes


def flash_attn_calls(B, L, H, KVH, D, dev):
    flash_attn_with_kvcache = flash_attn_function()
    nbytes = 2 * B * KVH * L * D * 2 + B * H * D * 2
    q = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
    caches = [(torch.randn(B, L, KVH, D, device=dev, dtype=torch.bfloat16),
               torch.randn(B, L, KVH, D, device=dev, dtype=torch.bfloat16))
              for _ in range(copies_for(nbytes, dev))]
    return [lambda k=k, v=v: flash_attn_with_kvcache(q, k, v) for k, v in caches], nbytes


def fast_kv(name, B, L, H, KVH, D, dev, block=KV_BLOCK, warps=KV_WARPS, stages=2, asm=False, seed=0,
            lean=False):
    """FastKVAttention objects over enough random caches of a layout (one per copy)."""
    classes, gk, gv = layout(name, L, D)
    make = lambda i: kv.FastKVAttention(kv.random_cache(B, KVH, D, classes, gk, gv, dev, seed + i),  # noqa: E731
                                        B, H, KVH, D, gk=gk, gv=gv, block=min(block, gk), warps=warps,
                                        stages=stages, asm=asm, lean=lean)
    one = make(0)
    return [one] + [make(i) for i in range(1, copies_for(one.bytes_read(), dev))], classes


def fast_variant(impl):
    """(layout name, inline-PTX dequant?, lean slots?) of a fast row's name: fast2,
    fast_adaptive2_asm, fast2_lean (empty slots compiled at 2 bits, not 16), fast2_lean_asm, ..."""
    base = impl.removesuffix("_asm")
    return base.removesuffix("_lean").removeprefix("fast_"), impl.endswith("_asm"), base.endswith("_lean")


def kv_row(write, cfg, dev, impl, B, L, H, KVH, D, part="kv", **tune):
    base = {"part": part, "impl": impl, "B": B, "L": L, "H": H, "KVH": KVH, "D": D}
    if impl.startswith("fast"):
        name, asm, lean = fast_variant(impl)
        atts, classes = fast_kv(name, B, L, H, KVH, D, dev, asm=asm, lean=lean, **tune)
        q = torch.randn(B, H, D, device=dev, dtype=torch.float16)
        a = atts[0]
        base.update(classes={k: list(v) for k, v in classes.items()}, splits=a.splits,
                    block=a.block, warps=a.warps, stages=a.stages, gk=a.gk, gv=a.gv,
                    bits_per_element=round(8 * (a.bytes_read() - B * H * D * 2) / (2 * B * KVH * L * D), 4))
        row = timed_row(base, [lambda a=a: a(q) for a in atts], a.bytes_read(), dev, cfg)
        write({**row, **a.program_metadata()})      # smem_bytes, regs, spills, warps: its occupancy
        return
    if impl == "flash_attn":
        calls, nbytes = flash_attn_calls(B, L, H, KVH, D, dev)
    else:
        calls, nbytes = sdpa_calls(impl, B, L, H, KVH, D, dev, sdpa_context(impl, dev))
    write(timed_row({**base, "bits_per_element": 16}, calls, nbytes, dev, cfg))


def sdpa_context(impl, dev):
    if dev != "cuda" or impl == "sdpa_default":
        return torch.no_grad
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}[impl]
    return lambda: sdpa_kernel([backend])


def flash_attn_function():
    """flash-attn's decode entry point where the machine has flash-attn (an optional baseline), else None."""
    try:
        from flash_attn import flash_attn_with_kvcache
    except Exception:        # not installed, or built for another torch
        return None
    return flash_attn_with_kvcache


def has_flash_attn():
    return flash_attn_function() is not None


def fast_layout_impl(name):
    """Row name of a fast-kernel layout: fast16, fast2, fast4, fast_adaptive2, fast_kivi2."""
    return name if name.startswith("fast") else f"fast_{name}"


# ----------------------------------------------------------------------------- GEMMs
def gemm_calls(impl, m, k, n, dev, bn=W4_BN, warps=4):
    """Closures over enough weight copies, and the weight bytes one call reads."""
    per_copy = {"bf16": 2 * k * n, "fp8": k * n}.get(impl, k * n // 2)
    copies = copies_for(per_copy, dev)
    if impl.startswith("fast_w4a16"):
        x = torch.randn(m, k, device=dev, dtype=torch.float16)
        one = w4.W4A16Linear(torch.randn(n, k, device=dev), m, bn=bn, warps=warps, asm=impl.endswith("_asm"))
        lins = [one] + [one.replica() for _ in range(copies - 1)]
        return [lambda lin=lin: lin(x) for lin in lins], one.weight_bytes(), {"bn": bn, "warps": warps,
                                                                              "split_k": one.split_k}
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    if impl == "bf16":
        return [lambda w=w: torch.matmul(x, w.t()) for w in ws], 2 * k * n, {}
    if impl == "fp8":
        qs = [moe_impls.Fp8Weight(w) for w in ws]
        return [lambda q=q: moe_impls.fp8_linear(x, q) for q in qs], qs[0].nbytes, {}
    qs = [moe_impls.Int4Weight(w, tinygemm=True, triton_pack=False) for w in ws]
    return [lambda q=q: moe_impls.int4_linear(x, q) for q in qs], qs[0].nbytes, {}


def gemm_row(write, cfg, dev, impl, model, label, m, k, n, part="gemm", **tune):
    calls, nbytes, extra = gemm_calls(impl, m, k, n, dev, **tune)
    row = timed_row({"part": part, "impl": impl, "model": model, "shape": label, "m": m, "k": k,
                     "n": n, **extra}, calls, nbytes, dev, cfg)
    row["tflops"] = 2 * m * k * n / (row["ms"] * 1e-3) / 1e12
    write(row)


# ----------------------------------------------------------------------------- checks
def check_rows(dev, gqa, variants, wanted=None):
    """Each kernel on the device against its reference (fresh random data; rel. L2 error), in
    each dequant variant (the inline-PTX one only on a GPU)."""
    H, KVH, D = gqa["H"], gqa["KVH"], gqa["D"]
    B, L = (2, 1000) if dev == "cuda" else (1, 96)
    for suffix in variants:
        for name, lean in [(n, False) for n in LAYOUTS] + [(n, True) for n in LEAN_LAYOUTS]:
            impl = fast_layout_impl(name) + "_lean" * lean + suffix
            if wanted is not None and impl not in wanted:
                continue
            classes, gk, gv = layout(name, L, D)
            segments = kv.random_cache(B, KVH, D, classes, gk, gv, dev, seed=7)
            q = torch.randn(B, H, D, device=dev, dtype=torch.float16)
            yield _check(impl, {"B": B, "L": L},
                         kv.reference(q, segments, KVH, gk, gv),
                         lambda: kv.FastKVAttention(segments, B, H, KVH, D, gk=gk, gv=gv,
                                                    block=min(KV_BLOCK, gk) if dev == "cuda" else 16,
                                                    asm=bool(suffix), lean=lean), lambda att: att(q))
        if wanted is not None and "fast_w4a16" + suffix not in wanted:
            continue
        n, k, m = (4096, 1024, 16) if dev == "cuda" else (128, 256, 3)
        x = torch.randn(m, k, device=dev, dtype=torch.float16)
        lin = w4.W4A16Linear(torch.randn(n, k, device=dev), m, asm=bool(suffix))
        yield _check("fast_w4a16" + suffix, {"m": m, "k": k, "n": n}, lin.reference(x), lambda: lin, lambda f: f(x))


def _check(impl, shape, ref, build, call):
    """One check row; a kernel that fails to build or run is a row with its error."""
    try:
        kernel = build()
        kernel.out.fill_(float("nan"))              # poison: every element must be written
        out = call(kernel).float()
        meta = kernel.program_metadata() if hasattr(kernel, "program_metadata") else {}
        return {"part": "check", "impl": impl, **shape, "rel_err": ((out - ref).norm() / ref.norm()).item(),
                "nan": bool(out.isnan().any()), **meta}
    except Exception as e:
        return {"part": "check", "impl": impl, **shape, "error": repr(e)[:300]}


def check_passed(row) -> bool:
    return "error" not in row and not row["nan"] and row["rel_err"] < 1e-2


def ceiling_row(dev, cfg):
    nbytes = (2 * 2 ** 30) if dev == "cuda" else 2 ** 20
    src = torch.randn(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    row = timed_row({"part": "ceiling", "op": "copy"}, [lambda: dst.copy_(src)], 2 * nbytes, dev, cfg)
    return {**row, "gbps_rw": row.pop("gbps")}


# ----------------------------------------------------------------------------- plan
def plan(cfg, parts, dev, variants):
    """Every row to run, in order of importance, as (part, impl, its key, function of write);
    the key is what calibration/fast_predictions.py's rows are matched on."""
    g = cfg["GQA"]
    H, KVH, D = g["H"], g["KVH"], g["D"]
    baselines = ["sdpa_flash", "sdpa_cudnn", "sdpa_default"] + (["flash_attn"] if has_flash_attn() else [])
    fast = ["fast16"] + [fast_layout_impl(n) + v for v in variants for n in LAYOUTS if n != "fast16"]
    fast += [fast_layout_impl(n) + "_lean" + v for v in variants for n in LEAN_LAYOUTS]
    w4s = ["fast_w4a16" + v for v in variants]
    rows = []
    if "kv" in parts:
        for B in cfg["BATCHES"]:
            for L in cfg["CONTEXTS"]:
                for impl in baselines + fast:
                    rows.append(("kv", impl, dict(B=B, L=L, H=H),
                                 lambda w, i=impl, B=B, L=L: kv_row(w, cfg, dev, i, B, L, H, KVH, D)))
    if "gemm" in parts:
        for model in GEMM_MODELS:
            shapes = model_shapes(model) if dev == "cuda" else [("dry", 256, 128)]
            for label, k, n in shapes:
                for m in cfg["GEMM_ROWS"]:
                    for impl in ["bf16", "fp8", "int4_tinygemm"] + w4s:
                        rows.append(("gemm", impl, dict(model=model, shape=label, m=m),
                                     lambda w, i=impl, mo=model, la=label, m=m, k=k, n=n:
                                     gemm_row(w, cfg, dev, i, mo, la, m, k, n)))
            if dev != "cuda":
                break
    if "floor" in parts:
        for B, L in cfg["FLOOR_SHAPES"]:
            for G in cfg["FLOOR_GROUPS"]:
                for impl in ["fast16", "sdpa_flash", "sdpa_cudnn"] + ["fast2" + v for v in variants]:
                    rows.append(("floor", impl, dict(B=B, L=L, H=KVH * G), lambda w, i=impl, B=B, L=L, G=G:
                                 kv_row(w, cfg, dev, i, B, L, KVH * G, KVH, D, part="floor")))
    if "tune" in parts:
        for B, L in cfg["KV_TUNE_SHAPES"]:
            for block, warps, stages in cfg["KV_TUNE"]:
                for impl in ["fast2" + v for v in variants]:
                    rows.append(("tune", impl, dict(B=B, L=L, block=block, warps=warps, stages=stages),
                                 lambda w, i=impl, B=B, L=L, b=block, wa=warps, s=stages:
                                 kv_row(w, cfg, dev, i, B, L, H, KVH, D, part="kv_tune",
                                        block=b, warps=wa, stages=s)))
        tune_shapes = [("mixtral-8x7b", "expert_gate_up", 4096, 28672), ("mixtral-8x7b", "expert_down", 14336, 4096)]
        for model, label, k, n in (tune_shapes if dev == "cuda" else [("dry", "dry", 256, 128)]):
            for m in ([1, 64] if dev == "cuda" else [1]):
                for bn, warps in cfg["GEMM_TUNE"]:
                    for impl in w4s:
                        rows.append(("tune", impl, dict(model=model, shape=label, m=m, bn=bn, warps=warps),
                                     lambda w, i=impl, mo=model, la=label, m=m, k=k, n=n, bn=bn,
                                     wa=warps: gemm_row(w, cfg, dev, i, mo, la, m, k, n, part="gemm_tune",
                                                        bn=bn, warps=wa)))
    return rows


def estimate_s(rows, cfg):
    """A rough device-time estimate: setup and capture per row, Triton compiles, replays."""
    per_row = {"kv": 0.45, "floor": 0.45, "gemm": 0.3, "tune": 1.8}     # tune rows mostly compile
    compiles = 40 * 1.5
    return sum(per_row[p] for p, *_ in rows) + compiles


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    ap.add_argument("--parts", default="ceiling,check,kv,floor,gemm,tune")
    ap.add_argument("--budget-s", type=float, default=450.0, help="start no row after this")
    ap.add_argument("--impls", help="only these impls (comma list: rows and checks), e.g. "
                    "fast2,fast2_lean,fast2_lean_asm,sdpa_cudnn")
    args = ap.parse_args()
    dev = "cpu" if args.dry else "cuda"
    cfg = dict(GQA=GQA, BATCHES=BATCHES, CONTEXTS=CONTEXTS, FLOOR_SHAPES=FLOOR_SHAPES,
               FLOOR_GROUPS=FLOOR_GROUPS, GEMM_ROWS=GEMM_ROWS, KV_TUNE_SHAPES=KV_TUNE_SHAPES,
               KV_TUNE=KV_TUNE, GEMM_TUNE=GEMM_TUNE, REPLAYS=REPLAYS, WARM=WARM)
    if args.dry:
        cfg.update(DRY)
    parts = set(args.parts.split(","))
    variants = ("", "_asm") if dev == "cuda" else ("",)      # the interpreter runs no inline PTX
    wanted = set(args.impls.split(",")) if args.impls else None      # None: every impl
    rows = [r for r in plan(cfg, parts, dev, variants) if wanted is None or r[1] in wanted]
    est = estimate_s(rows, cfg)
    counts = ", ".join(f"{p} {sum(r[0] == p for r in rows)}" for p in ("kv", "gemm", "floor", "tune"))
    log(f"planned {len(rows)} timed rows ({counts}); "
        f"estimate {est:.0f} s of device time; budget {args.budget_s:.0f} s")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    with jsonl_out(args.out, "calibration/measure_fast_kernels.py", dry=args.dry, triton=triton_version(),
                   flash_attn=has_flash_attn(), planned_rows=len(rows), estimate_s=round(est),
                   replays=cfg["REPLAYS"], copies_bytes=COPIES_BYTES) as write:
        if "ceiling" in parts:
            write(ceiling_row(dev, cfg))
        failed = set()          # kernels whose check failed: their rows are not timed
        if "check" in parts:
            for row in check_rows(dev, cfg["GQA"], variants, wanted):
                write(row)
                log(f"check {row['impl']}: {row.get('rel_err', row.get('error'))}")
                if not check_passed(row):
                    failed.add(row["impl"])
        done = skipped = 0
        for i, (part, impl, _, run) in enumerate(rows):
            if time.perf_counter() - t0 > args.budget_s:
                skipped = len(rows) - i
                break
            if impl in failed:
                write({"part": part, "impl": impl, "error": "its check failed: not timed", "row": i})
                done += 1
                continue
            try:
                run(write)
            except Exception as e:        # one refused backend or shape must not end the batch
                write({"part": part, "impl": impl, "error": repr(e)[:300], "row": i})
            done += 1
            if dev == "cuda":
                torch.cuda.empty_cache()
            if done % 25 == 0:
                log(f"{done}/{len(rows)} rows")
        write({"part": "end", "rows_done": done, "rows_skipped": skipped, "failed_checks": sorted(failed),
               "wall_s": round(time.perf_counter() - t0, 1)})
        log(f"done {done} rows, skipped {skipped}, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
