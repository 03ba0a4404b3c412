"""Measure gemlite's Triton low-bit GEMV/GEMM (issue 44, item 2) against bf16 on the H200.

    python3 calibration/measure_gemlite.py --out $OUT/h200_gemlite.jsonl [--budget-s 110]
    python3 calibration/measure_gemlite.py --dry --out /tmp/gemlite.jsonl    # CPU: plan + arguments

gemlite (the backend of HQQ and of low-bit paths in SGLang and vLLM) comes as a wheel carried to
the device (.whl/, DEVICE_READY.txt). Its A16Wn path: bf16 activations, uint8 codes packed over K
into int32, a bf16 scale and zero per `--group` weights ((W_q - zero) * scale, applied as one FMA),
at 8, 4 and 2 bits. Rows: x[m, k] @ W[n, k]^T at m = 1-64 for the expert and attention shapes of
Mixtral-8x7B and Qwen3-30B-A3B (calibration/fast_grid.py's model_shapes, the keys of
measure_fast_kernels.py's gemm rows), bf16 torch.matmul beside them, timed exactly as that script
times its rows (one CUDA graph over enough distinct weight copies to stream from HBM, median of
REPLAYS replays, CUDA events).

gemlite picks its kernel by m (GEMV_REVSPLITK for m <= 4 below 8 bits, GEMV_SPLITK for m <= 2 at 8
bits, GEMM_SPLITK up to 63, GEMM from 64) and its launch config from a cache of autotuned configs,
autotuning (17-23 configs, tens of seconds a shape) on a miss. Autotuning is kept out of this run:
`--tune h100` (the default) fills the cache from gemlite's own configs/h100.json (the H100 is the
same GH100 die, sm_90 with 132 SMs; gemlite loads that file itself only on a card named "h100"):
the exact signature where the file has it (4-bit rows mostly), else the file's config of the same
kernel at the nearest m, n, k and group (block K clamped to the group and the packing), and each
row says which (`config_source`, `config`). `--tune fast` lets gemlite autotune (its "fast" list)
and records the tuning time per row (`tune_s`), outside the timing. A `check` row per width first
compares gemlite's output with the dequantized reference (rel. L2 error).
"""

import argparse
import copy
import importlib.util
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from device_env import jsonl_out, log, triton_version  # noqa: E402
from library_grid import BITS, GROUP, MODELS, ROWS, fill_cache, gemm_plan, matmul_type  # noqa: E402

COPIES_BYTES = 256 * 2 ** 20
MAX_COPIES = 128
REPLAYS, WARM = 20, 3


def gemlite_config_file() -> str | None:
    """configs/h100.json inside the installed gemlite, found without importing it (import needs a GPU)."""
    spec = importlib.util.find_spec("gemlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "configs", "h100.json")
    return path if os.path.exists(path) else None


# ----------------------------------------------------------------------------- weights
def random_quantized(n: int, k: int, bits: int, dev, seed: int):
    """Codes (uint8, [n, k]), bf16 scales and zeros ([n, k / GROUP]) of a random weight."""
    g = torch.Generator(device=dev).manual_seed(seed)        # on the device: 10^8 codes in no time
    codes = torch.randint(0, 2 ** bits, (n, k), generator=g, dtype=torch.uint8, device=dev)
    scales = (torch.rand(n, k // GROUP, generator=g, device=dev) * 0.02 + 0.001).to(torch.bfloat16)
    zeros = torch.full((n, k // GROUP), (2 ** bits - 1) / 2, device=dev).to(torch.bfloat16)
    return codes, scales, zeros


def dequantized(codes, scales, zeros):
    n, k = codes.shape
    w = (codes.view(n, k // GROUP, GROUP).float() - zeros.float()[..., None]) * scales.float()[..., None]
    return w.view(n, k).to(torch.bfloat16)


def gemlite_layer(codes, scales, zeros, bits):
    return gemlite_modules()[1].A16Wn(device=codes.device, dtype=torch.bfloat16).from_weights(
        codes, scales, zeros, W_nbits=bits, group_size=GROUP, quant_type="INT")


def gemlite_modules():
    """(gemlite.core, gemlite.helper): carried as a wheel (DEVICE_READY.txt); importing needs a GPU."""
    try:
        from gemlite import core, helper
    except ImportError as e:
        raise SystemExit(f"gemlite is not importable ({e}): install the carried wheels first (.whl/)")
    return core, helper


def copies_for(nbytes: int, dev) -> int:
    return 1 if dev != "cuda" else max(1, min(MAX_COPIES, COPIES_BYTES // max(nbytes, 1)))


def weight_bytes(n: int, k: int, bits: int) -> int:
    return n * k * bits // 8 + 2 * 2 * n * (k // GROUP)


# ----------------------------------------------------------------------------- rows
def gemlite_row(write, dev, timer, model, label, m, k, n, bits, chosen):
    """One gemlite row: a layer per copy (deep copies of one packed layer), warmed (so any
    autotune or compile runs here, timed as `tune_s`), then graph-timed."""
    cfg, source = chosen[(m, n, k, bits)]
    codes, scales, zeros = random_quantized(n, k, bits, dev, seed=m * 7 + bits)
    one = gemlite_layer(codes, scales, zeros, bits)
    del codes, scales, zeros
    nbytes = weight_bytes(n, k, bits)
    layers = [one] + [copy.deepcopy(one) for _ in range(copies_for(nbytes, dev) - 1)]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    t = time.perf_counter()
    one(x)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - t
    row = timer({"part": "gemm", "impl": f"gemlite_a16w{bits}", "model": model, "shape": label,
                 "m": m, "k": k, "n": n, "bits": bits, "group": GROUP, "matmul_type": matmul_type(m, bits),
                 "config_source": source, "config": cfg, "tune_s": round(tune_s, 3)},
                [lambda lay=lay: lay(x) for lay in layers], nbytes)
    row["tflops"] = 2 * m * k * n / (row["ms"] * 1e-3) / 1e12
    write(row)


def bf16_row(write, dev, timer, model, label, m, k, n):
    nbytes = 2 * k * n
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies_for(nbytes, dev))]
    row = timer({"part": "gemm", "impl": "bf16", "model": model, "shape": label, "m": m, "k": k, "n": n},
                [lambda w=w: torch.matmul(x, w.t()) for w in ws], nbytes)
    row["tflops"] = 2 * m * k * n / (row["ms"] * 1e-3) / 1e12
    write(row)


def check_row(dev, bits):
    """gemlite against the dequantized weight in bf16 (rel. L2 error) at one expert shape and m."""
    n, k, m = 4096, 1024, 16
    codes, scales, zeros = random_quantized(n, k, bits, dev, seed=99)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    ref = (x.float() @ dequantized(codes, scales, zeros).float().t())
    try:
        out = gemlite_layer(codes, scales, zeros, bits)(x).float()
        return {"part": "check", "impl": f"gemlite_a16w{bits}", "m": m, "k": k, "n": n,
                "rel_err": ((out - ref).norm() / ref.norm()).item()}
    except Exception as e:
        return {"part": "check", "impl": f"gemlite_a16w{bits}", "error": repr(e)[:300]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="CPU: plan, arguments and configs, no gemlite call")
    ap.add_argument("--tune", choices=["h100", "fast"], default="h100")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--budget-s", type=float, default=110.0, help="start no row after this")
    args = ap.parse_args()
    dev = "cpu" if args.dry else "cuda"
    rows = gemm_plan(args.models.split(","), ROWS if dev == "cuda" else [1, 8, 64], BITS, dev)
    cfg_file = gemlite_config_file()
    cache = json.load(open(cfg_file)) if cfg_file else {}
    filled, chosen = fill_cache(cache, [(m, n, k, b) for _, _, m, k, n, b in rows if b])
    n_exact = sum(s.startswith("h100.json exact") for _, s in chosen.values())
    log(f"planned {len(rows)} rows; gemlite configs: {n_exact} exact, {len(chosen) - n_exact} nearest "
        f"({cfg_file}); tune {args.tune}; budget {args.budget_s:.0f} s")
    torch.manual_seed(0)
    with jsonl_out(args.out, "calibration/measure_gemlite.py", dry=args.dry, triton=triton_version(),
                   tune=args.tune, group=GROUP, planned_rows=len(rows), replays=REPLAYS,
                   copies_bytes=COPIES_BYTES) as write:
        if args.dry:
            for model, label, m, k, n, b in rows:
                codes, scales, zeros = random_quantized(n, k, b or 4, dev, seed=0)
                write({"part": "dry", "model": model, "shape": label, "m": m, "k": k, "n": n,
                       "impl": f"gemlite_a16w{b}" if b else "bf16", "codes": list(codes.shape),
                       "scales": list(scales.shape), "matmul_type": matmul_type(m, b or 16),
                       "config": chosen.get((m, n, k, b), (None, None))[0],
                       "config_source": chosen.get((m, n, k, b), (None, "bf16"))[1]})
            return
        run_device(write, rows, chosen, filled, args)


def one_shot_autotuners():
    """Triton's autotuner times even a lone (cached) config, ~0.15 s a key: run it once instead."""
    import importlib

    from triton.runtime.autotuner import Autotuner

    def once(kernel_call, quantiles):
        kernel_call()
        return [0.0, 0.0, 0.0]
    for mod in ("gemv_kernels", "gemv_revsplitK_kernels", "gemv_splitK_kernels", "gemm_splitK_kernels",
                "gemm_splitK_persistent_kernels", "gemm_kernels"):
        for obj in vars(importlib.import_module(f"gemlite.triton_kernels.{mod}")).values():
            if isinstance(obj, Autotuner):
                obj.do_bench = once


def run_device(write, rows, chosen, filled, args):
    core = gemlite_modules()[0]             # its default autotune setting is "fast"
    from measure_fast_kernels import timed_row
    if args.tune == "h100":
        core.GemLiteLinear.reset_config()
        core.GEMLITE_TRITON_CONFIG_CACHE.update(filled)
        one_shot_autotuners()
    cfg = {"REPLAYS": REPLAYS, "WARM": WARM}
    timer = lambda base, calls, nbytes: timed_row(base, calls, nbytes, "cuda", cfg)  # noqa: E731
    torch.backends.cuda.matmul.allow_tf32 = False
    for bits in BITS:
        row = check_row("cuda", bits)
        write(row)
        log(f"check a16w{bits}: {row.get('rel_err', row.get('error'))}")
    t0 = time.perf_counter()
    done = skipped = 0
    for i, (model, label, m, k, n, bits) in enumerate(rows):
        if time.perf_counter() - t0 > args.budget_s:
            skipped = len(rows) - i
            break
        try:
            if bits:
                gemlite_row(write, "cuda", timer, model, label, m, k, n, bits, chosen)
            else:
                bf16_row(write, "cuda", timer, model, label, m, k, n)
        except Exception as e:          # one refused shape must not end the batch
            write({"part": "gemm", "impl": f"gemlite_a16w{bits}" if bits else "bf16", "model": model,
                   "shape": label, "m": m, "error": repr(e)[:300]})
        done += 1
        torch.cuda.empty_cache()
        if done % 25 == 0:
            log(f"{done}/{len(rows)} rows")
    write({"part": "end", "rows_done": done, "rows_skipped": skipped, "wall_s": round(time.perf_counter() - t0, 1)})
    log(f"done {done} rows, skipped {skipped}, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
