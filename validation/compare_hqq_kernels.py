"""HQQ's per-layer dequant kernels in the H100 QuantizedCache traces against hwsim's KV path, POST
HOC (issue 44 item 2; nothing fitted to them): kernel count and time per layer, by class.

    python validation/compare_hqq_kernels.py [--markdown FILE]

The traces (validation/data/library_stacks_h100/traces: two recorded decode steps each, 32 layers)
are split into classes by the ATen op that launched each kernel (the and, shift and cast of the
unpack, the zero's sub, the scale's mul, the cat with the residual, the residual's append, the
attention) and averaged per layer. hwsim's are the schedule's KV path of a layer
(Schedule.kv_path, the scenario path of validation/predict_library_stacks.py at the trace's point,
h100-sxm), each kernel alone on the device: `kv_cache.expansion: hqq` (the chain,
hwsim/model/hqq_dequant.py) and, before it, `one-pass` (one expansion kernel, charged against the
chain's classes together).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "calibration"), str(ROOT / "validation")]
TRACES = ROOT / "validation" / "data" / "library_stacks_h100" / "traces"
HARDWARE = "h100-sxm"
CHAIN = ("and", "shift", "cast", "sub", "mul", "cat")
CLASSES = CHAIN + ("append", "attention")
# the ATen op of a traced kernel -> its class (only the cache's: whole-cache sizes, > 1,000 blocks)
BIG = {"aten::bitwise_and": "and", "aten::__rshift__": "shift", "aten::copy_": "cast", "aten::sub": "sub",
       "aten::mul": "mul", "aten::cat": "cat"}


def traced_classes(path: Path) -> dict[str, list[float]]:
    """Durations (us) of each class's kernels over the trace's recorded steps."""
    ev = json.loads(path.read_text())["traceEvents"]
    op_of = {}
    for e in ev:
        if e.get("cat") == "cpu_op":
            op_of.setdefault(e["args"].get("External id"), []).append(e)
    out: dict[str, list[float]] = {}
    after_cat = False
    for k in sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        ops = op_of.get(k["args"].get("External id"))
        op = min(ops, key=lambda o: o.get("dur", 0))["name"] if ops else "?"
        blocks = (k["args"].get("grid") or [0])[0]
        cls = BIG.get(op) if blocks > 1000 else None
        if op == "aten::cat" and blocks <= 1000 and after_cat:
            cls = "append"                    # the residual's cats that follow the whole-cache cats
        if op == "aten::_cudnn_attention_forward":
            cls = "attention"
        after_cat = cls in ("cat", "append")
        if cls:
            out.setdefault(cls, []).append(k["dur"])
    return out


def hwsim_classes(bits: int, batch: int, context: int, expansion: str) -> dict[str, list[float]]:
    from predict_library_stacks import GENERATE, step_sets
    from hwsim import operators
    from hwsim.config.load import load_scenario
    from hwsim.model.schedule import StepShape
    from hwsim.pipeline import system
    cfg = load_scenario(GENERATE, step_sets("llama-3.1-8b", f"hqq{bits}", batch, context, HARDWARE, expansion))
    b = system(cfg)
    out: dict[str, list[float]] = {}
    for k in b.schedule.kv_path(0, StepShape("decode", batch, batch, context)):
        label = k.name.split(".", 1)[1]
        cls = ("attention" if label.startswith("attention") else "append" if label.endswith("_write")
               else next((c for c in CHAIN if re.search(rf"_{c}", label)), "chain"))
        out.setdefault(cls, []).append(operators.device_time_s(b.chip, [k]) * 1e6)
    return out


def point(name: str) -> tuple[int, int, int]:
    m = re.search(r"hqq(\d)-b(\d+)-l(\d+)", name)
    return int(m[1]), int(m[2]), int(m[3])


def compare() -> tuple[str, dict[str, list[float]]]:
    from trace_store import trace_path, traces_in
    rows = ["| trace | class | kernels a layer: trace / hwsim | us a layer: trace | hwsim (hqq chain) | err "
            "| hwsim before (one pass) | err |", "|---|---|---|---:|---:|---:|---:|---:|"]
    errs: dict[str, list[float]] = {"per class, after": [], "per kernel class (chain), after": [],
                                    "chain per layer, after": [], "chain per layer, before": [],
                                    "kv path per layer, after": [], "kv path per layer, before": []}
    for name in sorted(n for n in traces_in(TRACES) if "hqq" in n):
        bits, batch, context = point(name)
        t = traced_classes(trace_path(TRACES / name))
        per = len(t["sub"]) / 2               # layers x recorded steps: a sub for K and one for V a layer
        after, before = hwsim_classes(bits, batch, context, "hqq"), hwsim_classes(bits, batch, context, "one-pass")
        tot = {"t": 0.0, "a": 0.0, "tc": 0.0, "ac": 0.0}
        for c in CLASSES:
            tu, au = sum(t.get(c, [])) / per, sum(after.get(c, []))
            e = au / tu - 1 if tu else float("nan")
            errs["per class, after"].append(e)
            if c in CHAIN:
                errs["per kernel class (chain), after"].append(e)
                tot["tc"] += tu
                tot["ac"] += au
            tot["t"] += tu
            tot["a"] += au
            rows.append(f"| {name} | {c} | {len(t.get(c, [])) / per:g} / {len(after.get(c, []))} | {tu:.1f} "
                        f"| {au:.1f} | {e:+.1%} | | |")
        one = sum(before.get("chain", []))
        b_all = sum(sum(v) for v in before.values())
        errs["chain per layer, after"].append(tot["ac"] / tot["tc"] - 1)
        errs["chain per layer, before"].append(one / tot["tc"] - 1)
        errs["kv path per layer, after"].append(tot["a"] / tot["t"] - 1)
        errs["kv path per layer, before"].append(b_all / tot["t"] - 1)
        rows.append(f"| {name} | **dequant + cat** | | {tot['tc']:.1f} | {tot['ac']:.1f} | {errs['chain per layer, after'][-1]:+.1%} "
                    f"| {one:.1f} | {errs['chain per layer, before'][-1]:+.1%} |")
        rows.append(f"| {name} | **KV path** | | {tot['t']:.1f} | {tot['a']:.1f} | {errs['kv path per layer, after'][-1]:+.1%} "
                    f"| {b_all:.1f} | {errs['kv path per layer, before'][-1]:+.1%} |")
    return "\n".join(rows) + "\n", errs


def summary(name: str, errs: list[float]) -> str:
    return (f"{name}: {len(errs)}, median abs {statistics.median(map(abs, errs)):.1%}, "
            f"max abs {max(map(abs, errs)):.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="also write the table and summaries here")
    args = ap.parse_args()
    table, errs = compare()
    text = table + "\n" + "\n".join(f"- {summary(k, v)}" for k, v in errs.items()) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
