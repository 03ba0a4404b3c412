"""hwsim's predictions of every row of the two library-stack measurements of issue 44 (item 2),
written down before the H200 runs them: calibration/measure_quantized_cache.py (transformers'
QuantizedCache, HQQ 2/4-bit, against the bf16 DynamicCache) and calibration/measure_gemlite.py
(gemlite's A16W8/W4/W2 GEMV/GEMM against bf16).

    python validation/predict_library_stacks.py --jsonl calibration/data/h200_library_stacks_predicted_s22.jsonl
    python validation/predict_library_stacks.py --hardware h100-sxm --jsonl calibration/data/h100_library_stacks_predicted.jsonl

Nothing is fitted to these stacks; every number is hwsim's own code on the h200-sxm profile:
- decode steps (`part: step`, keys model, cache, batch, context_tokens): the scenario people run,
  scenarios/engines/hf-generate-quantized-cache.yaml (workload.engine.kind hf-generate:
  transformers' generate() loop, its cache under the library's names) at the row's model, point
  and cache: bf16 is `cache_implementation: dynamic` (the DynamicCache, grown by a cat of the
  whole cache each step), hqq2/hqq4 `quantized` with cache_config {backend hqq, nbits 2 or 4,
  q_group_size 64, residual_length 128}, which is the kv_cache {bits, group 64, the last 128
  tokens at 16 bits, dequant unfused, expansion hqq}: HQQ's dequant as the chain of PyTorch
  kernels it is (hwsim/model/hqq_dequant.py), then cuDNN's SDPA over the bf16 copy; the step
  issued by generate()'s eager host (hwsim/serving/engines/generate_host.py; the plan cuDNN builds
  for a new KV length only where the measuring process had not built it: PLANS_BUILT_BEFORE).
  `step_ms` is the step (ITL p50), `device_busy_ms` its kernels' busy time, `kernels` the
  schedule's, `host` what issued them. bf16 rows also carry `trace_step_ms` /
  `trace_device_busy_ms`: the H200 HF Llama eager trace of issue 30
  (validation/data/hf_traces_h200/call_1) re-timed at the row's point by the kernel-trace path
  (validation/predict_hf_traces.py predict_point). The flush step (whole-cache re-quantization)
  has no hwsim kernel: not predicted.
- GEMMs (`part: gemm`, keys impl, model, shape, m): bf16 as operators.gemm_kernels; gemlite
  rows as the existing weight-only GEMM families at the row's bytes per weight (codes + a bf16
  scale and zero per 64): `us` the `fast` family (hwsim/model/fast_gemm.py at the profile's
  counts, predicted, unmeasured), `naive_us` tinygemm's fit (moe_kernels.weight_only_gemm). Both
  charge a weight's dequant the same at 8, 4 and 2 bits (docs/weights.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "calibration"), str(ROOT / "validation")]

from hwsim import operators as mb  # noqa: E402
from hwsim.pipeline import system  # noqa: E402
from hwsim.config.load import load_profile, load_scenario  # noqa: E402
from hwsim.hw.chip import ChipSpec  # noqa: E402
from hwsim.metrics import Component  # noqa: E402
from hwsim.model import moe_kernels  # noqa: E402
from hwsim.model.dequant_kernels import from_profile  # noqa: E402
from hwsim.model.fast_gemm import fast_weight_only_gemm  # noqa: E402
from hwsim.pipeline import run_config  # noqa: E402

HARDWARE = "h200-sxm"
GENERATE = ROOT / "scenarios" / "engines" / "hf-generate-quantized-cache.yaml"
# calibration/measure_quantized_cache.py runs a point's caches in one process in library_grid.CACHES'
# order (bf16, hqq2, hqq4) over the same KV lengths: the bf16 run builds cuDNN's plan for each, the
# HQQ runs find it built (their traces: first-layer SDPA 0.1 ms against bf16's 36 ms)
PLANS_BUILT_BEFORE = {"hqq2", "hqq4"}
HF_TRACES = ROOT / "validation" / "data" / "hf_traces_h200" / "call_1" / "traces"
# the HF Llama eager traces of issue 30 nearest each measured batch: (batch, context) traced
TRACED = {1: (1, 1024), 4: (8, 4096)}


def step_sets(model: str, cache: str, batch: int, context: int, hardware: str,
              expansion: str = "hqq") -> list[str]:
    """--set of GENERATE for one measured row (library_grid.CACHES): the cache under
    generate()'s own names; `expansion` one-pass: the one-kernel expansion before issue 44's chain."""
    from library_grid import CACHES, KV_GROUP, RESIDUAL
    bits = CACHES[cache]
    sets = [f"model={model}", f"hardware={hardware}", f"workload.batch_size={batch}",
            f"workload.context_tokens={context}", "workload.decode_steps=1", "parallel.allow_overcommit=true",
            f"workload.engine.attention_plans={'built' if cache in PLANS_BUILT_BEFORE else 'per-step'}"]
    if bits is None:
        return sets + ["workload.engine.config.cache_implementation=dynamic", "workload.engine.config.cache_config=null"]
    return sets + [f"workload.engine.config.cache_config.nbits={bits}",
                   f"workload.engine.config.cache_config.q_group_size={KV_GROUP}",
                   f"workload.engine.config.cache_config.residual_length={RESIDUAL}",
                   *([f"kv_cache.expansion={expansion}"] if expansion != "hqq" else [])]


def step_row(model: str, cache: str, batch: int, context: int) -> dict:
    cfg = load_scenario(GENERATE, step_sets(model, cache, batch, context, HARDWARE))
    built = system(cfg)
    s = run_config(cfg, built, intervals=False).summary
    row = {"part": "step", "model": model, "cache": cache, "batch": batch, "context_tokens": context,
           "step_ms": s["itl_ms"]["p50"], "device_busy_ms": s["device_busy_ms"], "kernels": s["kernels_per_step"],
           "host": next((w for w in built.warnings if w.startswith("engine hf-generate")), ""),
           "basis": f"{GENERATE.relative_to(ROOT)} (hf-generate: generate()'s eager host, cuDNN SDPA"
                    + (", HQQ's dequant chain)" if cache != "bf16" else ", bf16 DynamicCache)")}
    if cache != "bf16":
        row.update(byte_ratio=s["kv"]["byte_ratio"], attention_speedup=s["kv"]["attention_speedup"],
                   bits_per_element=s["kv"]["effective_bits_per_element"])
    elif model == "llama-3.1-8b" and batch in TRACED:
        from predict_hf_traces import predict_point, trace_path
        traced = TRACED[batch]
        trace = HF_TRACES / f"hf-{model}-eager-b{traced[0]}-l{traced[1]}.json.gz"
        p = predict_point(model, trace_path(trace), traced, (batch, context), hardware=HARDWARE)
        row.update(trace_step_ms=p["wall_ms"], trace_device_busy_ms=p["device_busy_ms"], trace=trace.name)
    return row


def gemm_row(chip: ChipSpec, families, impl: str, model: str, label: str, m: int, k: int, n: int) -> dict:
    from library_grid import GROUP
    row = {"part": "gemm", "impl": impl, "model": model, "shape": label, "m": m, "k": k, "n": n}
    if impl == "bf16":
        return {**row, "us": mb.device_time_s(chip, mb.gemm_kernels(chip, m, k, n)) * 1e6}
    bits = int(impl.removeprefix("gemlite_a16w"))
    per_weight = (bits + 2 * 16 / GROUP) / 8               # codes, a bf16 scale and a bf16 zero per group
    fast = families.weights["fast"]
    ks = fast_weight_only_gemm("q", 0, m, k, n, chip, weight_addr=mb.GEMM_WEIGHT_ADDR, weight_bytes=per_weight,
                               data=Component.WEIGHT_READ, ops_per_weight=fast.ops(m))
    naive = moe_kernels.weight_only_gemm("q", 0, m, k, n, chip, weight_addr=mb.GEMM_WEIGHT_ADDR,
                                         weight_bytes=per_weight, data=Component.WEIGHT_READ,
                                         kernel=families.weights["naive"])
    return {**row, "bits": bits, "group": GROUP, "bytes": round(per_weight * k * n),
            "us": mb.device_time_s(chip, ks) * 1e6, "naive_us": mb.device_time_s(chip, [naive]) * 1e6,
            "family": "fast (" + ("fitted on an H100" if fast.measured else "predicted, unmeasured") + ")", "ops_per_weight": round(fast.ops(m), 3)}


def predict_all() -> list[dict]:
    import library_grid as grid
    rows = [step_row(model, cache, b, c)
            for model, b, c, cache in grid.step_plan(["llama-3.1-8b"], list(grid.CACHES), grid.POINTS)]
    profile = load_profile(HARDWARE)
    chip, families = ChipSpec.from_profile(profile), from_profile(profile)
    for model, label, m, k, n, bits in grid.gemm_plan(grid.MODELS, grid.ROWS, grid.BITS, "cuda"):
        rows.append(gemm_row(chip, families, f"gemlite_a16w{bits}" if bits else "bf16", model, label, m, k, n))
    return rows


def markdown(rows: list[dict]) -> str:
    """The tables of validation/library_stacks_predictions.md (its prose is written by hand)."""
    out = ["Decode steps of Llama-3.1-8B (eager, one token a sequence), ms; every cell is the "
           "hf-generate scenario (generate()'s eager host; hqq: HQQ's dequant chain):", "",
           "| batch | context | bf16: step / device | bf16 from the HF trace: step / device "
           "| hqq4: step / device | hqq2: step / device | hqq2 attention speedup |",
           "|---:|---:|---|---|---|---|---:|"]
    steps = {(r["cache"], r["batch"], r["context_tokens"]): r for r in rows if r["part"] == "step"}
    for (cache, b, c), r in steps.items():
        if cache != "bf16":
            continue
        h4, h2 = steps[("hqq4", b, c)], steps[("hqq2", b, c)]
        pair = lambda x, a="step_ms", d="device_busy_ms": f"{x[a]:.1f} / {x[d]:.1f}"  # noqa: E731
        tr = pair(r, "trace_step_ms", "trace_device_busy_ms") if "trace_step_ms" in r else "-"
        out.append(f"| {b} | {c // 1024}k | {pair(r)} | {tr} | {pair(h4)} | {pair(h2)} | {h2['attention_speedup']:.2f}x |")
    out += ["", "GEMMs x[m, k] @ W[n, k]^T, µs; gemlite cells are the fast family (predicted) / "
            "tinygemm's fit (naive):", "",
            "| model | GEMM (k x n) | m | bf16 | A16W8 | A16W4 | A16W2 |", "|---|---|---:|---:|---|---|---|"]
    gemm = {(r["impl"], r["model"], r["shape"], r["m"]): r for r in rows if r["part"] == "gemm"}
    for (impl, model, shape, m), r in gemm.items():
        if impl != "bf16":
            continue
        cell = lambda b: (lambda x: f"{x['us']:.1f} / {x['naive_us']:.1f}")(gemm[(f"gemlite_a16w{b}", model, shape, m)])  # noqa: E731
        out.append(f"| {model} | {shape} ({r['k']} x {r['n']}) | {m} | {r['us']:.1f} | {cell(8)} | {cell(4)} | {cell(2)} |")
    return "\n".join(out) + "\n"


def main() -> int:
    global HARDWARE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--markdown", help="write the tables here, after the text above '## The tables'")
    ap.add_argument("--hardware", default=HARDWARE, help="profile to predict on (h100-sxm: post-hoc, issue 44's call got an H100)")
    args = ap.parse_args()
    HARDWARE = args.hardware
    rows = predict_all()
    with open(args.jsonl, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    if args.markdown:
        path = Path(args.markdown)
        head = path.read_text().split("## The tables")[0] if path.exists() else ""
        path.write_text(head + "## The tables\n\n" + markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
