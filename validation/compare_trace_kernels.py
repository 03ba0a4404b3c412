"""Per kernel kind: an imported trace's own kernel durations against hwsim's re-timing of the
same items at the traced point (the "durations wiped" check of issue 30, kernel by kernel).

    python validation/compare_trace_kernels.py TRACE.json.gz --model llama-3.1-8b \\
        --batch 8 --context 4096 [--hardware h100-sxm] [--top 25]

Groups by (item kind, the op that launched it, the kernel's name up to its template) so a
device-busy error can be traced to the kernels that cause it."""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.model import ir

BASE = Path(__file__).resolve().parent.parent / "scenarios" / "kernel-trace.yaml"


def family(name: str) -> str:
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0][-48:]


def key(tk) -> tuple[str, str, str]:
    """A traced kernel's group: its item's kind, the op that launched it, its name's family."""
    return ir.kind_of(tk.item), tk.op, family(tk.name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--hardware", default="h200-sxm")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    cfg = load_scenario(BASE, [f"model={a.model}", f"hardware={a.hardware}",
                               f"workload.kernel_trace.path={a.trace}",
                               f"workload.kernel_trace.batch_size={a.batch}",
                               f"workload.kernel_trace.context_tokens={a.context}",
                               f"workload.batch_size={a.batch}", f"workload.context_tokens={a.context}",
                               "workload.decode_steps=1", "runtime.kernel_records=1"])
    built = system(cfg)
    result = run_config(cfg, built)
    traced = built.schedule.traced.kernels
    groups: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for rec in result.records:
        m = re.match(r"trace\.(\d+)\.", rec.kernel.name)
        if not m:
            continue
        groups[key(traced[int(m.group(1))])][2] += (rec.t_end - rec.t_start) * 1e6
    for tk in traced:
        g = groups[key(tk)]
        g[0] += 1
        g[1] += tk.traced_s * 1e6
    total_t = sum(g[1] for g in groups.values())
    total_p = sum(g[2] for g in groups.values())
    print(f"traced {total_t / 1e3:.2f} ms, predicted {total_p / 1e3:.2f} ms ({(total_p / total_t - 1) * 100:+.1f}%)")
    print(f"{'kind':12s} {'op':28s} {'kernel':48s} {'n':>5s} {'traced us':>10s} {'hwsim us':>10s} {'err':>7s}")
    for (kind, op, fam), (n, t, pr) in sorted(groups.items(), key=lambda kv: -abs(kv[1][2] - kv[1][1]))[:a.top]:
        print(f"{kind:12s} {op[:28]:28s} {fam:48s} {n:5d} {t:10.1f} {pr:10.1f} "
              f"{(pr / t - 1) * 100 if t else 0:+6.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
