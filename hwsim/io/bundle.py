"""The run bundle: manifest.json, events.parquet, breakdown.csv, breakdown.png, channels.png.

Files are written to a temporary name in the target folder and renamed into place, so an
interrupted or failed run never leaves a half-written file over a good one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from hwsim.io.atomic import atomic_write
from hwsim.metrics import Component
from hwsim.run import RunResult


def records_frame(result: RunResult) -> pd.DataFrame:
    """One row per kernel: timing, bytes and the critical-path attribution (ms)."""
    rows = []
    for r in result.records:
        row = {"step": r.step, "index": r.index, "kernel": r.name, "layer": r.layer,
               "t_ready_us": r.t_ready * 1e6, "t_start_us": r.t_start * 1e6, "t_end_us": r.t_end * 1e6,
               "tiles": r.tiles, "waves": r.waves, "hbm_read_bytes": r.hbm_read_bytes,
               "hbm_write_bytes": r.hbm_write_bytes, "l2_bytes": r.l2_bytes, "data": r.data.value}
        attribution = r.attribution        # built from the record's parts on each access
        for c in Component:
            row[f"{c.value}_us"] = attribution.get(c, 0.0) * 1e6
        rows.append(row)
    return pd.DataFrame(rows)


def breakdown_frame(result: RunResult) -> pd.DataFrame:
    """One row per simulated pass (prefill is step -1): duration and ms per component."""
    rows = []
    for s in result.steps:
        row = {"step": s.step, "phase": s.phase, "batch": s.batch, "context": s.context,
               "duration_ms": s.duration_s * 1e3}
        row.update({k: v * 1e3 for k, v in s.breakdown_s.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _write_serving(result: RunResult, out: Path, paths: dict) -> None:
    from hwsim.plots.serving import save_cdf_png, save_timeline_png

    cfg = result.scenario
    for name in ("requests.parquet", "iterations.csv", "itl_cdf.png", "ttft_cdf.png", "timeline.png"):
        paths[name] = out / name
    requests = pd.DataFrame(result.requests)
    iterations = pd.DataFrame([{"t_start_ms": it.t_start * 1e3, "duration_ms": it.duration_s * 1e3,
                                "decodes": it.decodes, "prefill_tokens": it.prefill_tokens,
                                "waiting": it.waiting, **{k: v * 1e3 for k, v in it.breakdown_s.items()}}
                               for it in result.iterations])
    atomic_write(paths["requests.parquet"], lambda p: requests.to_parquet(p, index=False))
    atomic_write(paths["iterations.csv"], lambda p: iterations.to_csv(p, index=False))
    s = result.summary
    atomic_write(paths["itl_cdf.png"], lambda p: save_cdf_png(
        result.gaps_ms, cfg.budget_ms, "inter-token latency", f"budget {cfg.budget_ms:g} ms", p))
    atomic_write(paths["ttft_cdf.png"], lambda p: save_cdf_png(
        [r["ttft_ms"] for r in result.requests], cfg.workload.ttft_target_ms, "time to first token",
        f"target {cfg.workload.ttft_target_ms:g} ms", p))
    atomic_write(paths["timeline.png"], lambda p: save_timeline_png(
        result.iterations, cfg.budget_ms, f"{s['model']} on {s['hardware']}: iterations over time", p))


def write_bundle(result: RunResult, out: Path, manifest: dict) -> dict[str, Path]:
    from hwsim.plots.breakdown import save_breakdown_png
    from hwsim.plots.channels import save_channel_png

    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in
             ("manifest.json", "events.parquet", "breakdown.csv", "breakdown.png", "channels.png")}
    if result.iterations:
        paths.pop("events.parquet")
        paths.pop("breakdown.csv")
        _write_serving(result, out, paths)
    else:
        from hwsim.plots.gantt import save_gantt_png

        recorded = max((r.step for r in result.records), default=0)   # runtime.kernel_records
        last_step = [r for r in result.records if r.step == recorded]
        paths["gantt.png"] = out / "gantt.png"
        atomic_write(paths["gantt.png"], lambda p: save_gantt_png(
            last_step, result.sms, result.stacks, f"resource occupancy during one token (step {recorded})", p))
        events = records_frame(result)
        breakdown = breakdown_frame(result)
        atomic_write(paths["events.parquet"], lambda p: events.to_parquet(p, index=False))
        atomic_write(paths["breakdown.csv"], lambda p: breakdown.to_csv(p, index=False))
    atomic_write(paths["breakdown.png"], lambda p: save_breakdown_png(result.summary, p))
    s = result.summary
    title = (f"{s['model']} on {s['hardware']}: HBM bytes per channel "
             f"(max/mean {max(result.channel_bytes) / (sum(result.channel_bytes) / len(result.channel_bytes)):.2f})"
             if sum(result.channel_bytes) else "HBM bytes per channel")
    atomic_write(paths["channels.png"],
                  lambda p: save_channel_png(result.channel_bytes, result.channels_per_stack, title, p))
    atomic_write(paths["manifest.json"],
                  lambda p: Path(p).write_text(json.dumps(manifest, indent=2, default=str) + "\n"))
    return paths
