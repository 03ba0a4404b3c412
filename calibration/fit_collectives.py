#!/usr/bin/env python3
"""NCCL's communication kernels (hwsim/parallel/comm_kernels.py) fitted to the collectives
measured on 2 x H200 (calibration/data/h200x2_collectives*.jsonl, measure_collectives.py), then
every measured call replayed through hwsim's simulated links and compared (issue 20).

    python calibration/fit_collectives.py [--markdown]

Fit: CUDA-graph calls (as a graph-mode decode step launches them), the two runs averaged per
size. A kernel's time alone on G GPUs is, per protocol (LL and Simple, NCCL's own choice per
call: the faster one), `fixed + steps x (link latency + slice / (450 GB/s x efficiency))`:
what hwsim's collectives take alone (tests/test_collectives.py holds the ring to this to 1e-6).
Fitted: `nccl-ring` to the all-reduces (the collective of tensor-parallel steps),
`nccl-gather-scatter` to the all-gathers and reduce-scatters (NCCL's kernels for them are slower
on two GPUs), `nccl-all-to-all` to the all-to-alls; the MoE dispatch and combine records and the
whole steps (docs/multi_gpu.md) are held out. Least squares of log(model / measured), bounded: LL carries at most half
the line rate (4 data bytes in every 8) and, an assumption, at least 0.2 of it (the ring's LL
reaches 0.24; the all-to-all's small sizes alone would put it at 0.07, bent by a bump at
512 KB-1 MB that no choice of protocol explains). The link latency stays the topology's 2 us: on two
GPUs it cannot be told from the fixed cost (each step pays it once).

Check: every graph record (collectives and MoE all-to-alls, from their message counts)
simulated by hwsim/parallel/collectives.py on a 2-GPU hgx-h200-8 with the kernels as the code
defines them (not the fit's numbers: they must have been copied in).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from hwsim.parallel import collectives as col
from hwsim.parallel.comm_kernels import NCCL_ALL_TO_ALL
from hwsim.parallel.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
DATA = [ROOT / "calibration/data/h200x2_collectives.jsonl", ROOT / "calibration/data/h200x2_collectives_repeat.jsonl"]
TOPOLOGY = "hgx-h200-8"
STEPS = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1}   # G = 2: each sends N/2 a step
FITTED = {"nccl-ring": ("all_reduce",), "nccl-gather-scatter": ("all_gather", "reduce_scatter"),
          "nccl-all-to-all": ("all_to_all",)}
BOUNDS = [(0.0, 50.0), (0.2, 0.5), (0.0, 80.0), (0.2, 1.0)]      # LL fixed us, eff; Simple fixed us, eff


def records(launch: str = "graph") -> list[dict]:
    out = []
    for path in DATA:
        out += [r for r in map(json.loads, path.open()) if r.get("launch") == launch and r["part"] != "meta"]
    return out


def collective_means(recs: list[dict]) -> dict[tuple[str, int], float]:
    """(op, bytes) -> microseconds a call, the runs averaged."""
    by: dict[tuple[str, int], list[float]] = {}
    for r in recs:
        if r["part"] == "collective" and r["gpus"] == 2:
            by.setdefault((r["op"], r["bytes"]), []).append(r["us_per_call"])
    return {k: float(np.mean(v)) for k, v in sorted(by.items())}


def alone_us(op: str, nbytes: float, params, latency_us: float, rate_bytes_us: float) -> float:
    """Closed form of a 2-GPU call alone: the faster protocol."""
    ll_fixed, ll_eff, simple_fixed, simple_eff = params
    steps = STEPS[op]
    return min(fixed + steps * (latency_us + nbytes / 2 / (rate_bytes_us * eff))
               for fixed, eff in ((ll_fixed, ll_eff), (simple_fixed, simple_eff)))


def fit(means: dict, ops: tuple[str, ...], latency_us: float, rate: float) -> np.ndarray:
    rows = [(op, n, t) for (op, n), t in means.items() if op in ops]

    def loss(p):
        return sum(np.log(alone_us(op, n, p, latency_us, rate) / t) ** 2 for op, n, t in rows)
    starts = ([5, 0.3, 17, 0.65], [8, 0.2, 20, 0.6], [3, 0.45, 30, 0.8])
    best = min((minimize(loss, x0, method="L-BFGS-B", bounds=BOUNDS) for x0 in starts), key=lambda r: r.fun)
    return best.x


def simulate_us(op: str, nbytes: float = 0.0, matrix=None) -> float:
    cluster = load_topology(TOPOLOGY).cluster(2)
    devs = cluster.devices
    if op == "all_to_all":
        matrix = matrix if matrix is not None else [[0, nbytes / 2], [nbytes / 2, 0]]
        body = col.all_to_all(cluster, devs, matrix, NCCL_ALL_TO_ALL)
    else:       # each collective on the kernel the code gives it by default
        body = getattr(col, op)(cluster, devs, nbytes)
    return col.time_alone(cluster, body) * 1e6


def check(recs: list[dict]) -> list[tuple[str, str, float, float]]:
    """(what, role, measured us, hwsim us) for every 2-GPU graph record."""
    out = []
    for (op, n), t in collective_means(recs).items():
        role = "fit" if any(op in ops for ops in FITTED.values()) else "held out"
        out.append((f"{op} {n / 1024:.0f} KB", role, t, simulate_us(op, n)))
    moe: dict[tuple, list] = {}
    for r in recs:
        if r["part"] == "moe" and r["gpus"] == 2:
            moe.setdefault((r["shape"], r["what"], r["tokens_per_gpu"]), []).append(r)
    for (shape, what, tokens), rs in sorted(moe.items()):
        matrix = np.array(rs[0]["counts"], dtype=float) * rs[0]["message_bytes"]
        np.fill_diagonal(matrix, 0.0)
        t = float(np.mean([r["us_per_call"] for r in rs]))
        out.append((f"{shape} {what} {tokens} tok/GPU", "held out", t, simulate_us("all_to_all", matrix=matrix)))
    return out


def summary(rows, role=None) -> str:
    errs = np.array([h / m - 1 for _, r, m, h in rows if role in (None, r)])
    return (f"{len(errs)} rows: median |error| {np.median(np.abs(errs)) * 100:.1f}%, "
            f"max {np.max(np.abs(errs)) * 100:.1f}%, mean signed {errs.mean() * 100:+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true", help="the check as a markdown table")
    args = ap.parse_args()
    chip = load_topology(TOPOLOGY).cluster(2).devices[0].chip
    latency_us, rate = chip.scaleup_latency_s * 1e6, chip.scaleup_bytes_s / 1e6
    recs = records()
    means = collective_means(recs)
    print(f"fit ({TOPOLOGY}: {rate / 1e3:.0f} GB/s a direction, link latency {latency_us:.1f} us)")
    for kernel, ops in FITTED.items():
        p = fit(means, ops, latency_us, rate)
        print(f"  {kernel} ({', '.join(ops)}): LL fixed {p[0]:.1f} us, efficiency {p[1]:.3f}; "
              f"Simple fixed {p[2]:.1f} us, efficiency {p[3]:.3f}")
    rows = check(recs)
    print("\ncheck: hwsim's simulation of every 2-GPU graph call, kernels as comm_kernels.py defines them")
    if args.markdown:
        print("| call | role | measured us | hwsim us | error |\n|---|---|---|---|---|")
    for what, role, m, h in rows:
        print(f"| {what} | {role} | {m:.1f} | {h:.1f} | {(h / m - 1) * 100:+.1f}% |" if args.markdown
              else f"  {what:38s} {role:9s} {m:8.1f} {h:8.1f} {(h / m - 1) * 100:+7.1f}%")
    for op in STEPS:
        print(f"{op}: " + summary([r for r in rows if r[0].startswith(op + " ")]))
    print("MoE all-to-alls: " + summary([r for r in rows if "tok/GPU" in r[0]]))


if __name__ == "__main__":
    main()
