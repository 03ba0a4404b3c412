"""The run bundle: manifest.json, events.parquet, breakdown.csv, and on request (`hwsim run
--plots`) its figures: breakdown.png, channels.png, gantt.png.

The whole bundle is written into a temporary folder beside the target and swapped in at the
end (hwsim.io.atomic.replace_folder): an interrupted or failed run leaves the earlier bundle
as it was, and no file of an earlier run survives into a new one. manifest.json is written
last and lists every other file with its SHA-256, so a bundle can be checked whole; with its
marker (BUNDLE_MARKER) and that list it is also what makes a folder provably a bundle, the
only kind of folder `hwsim run --out` replaces (bundle_files).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hwsim.io import strict_json
from hwsim.io import folder_lock
from hwsim.io.atomic import atomic_write, check_folder_target, keep_aside, replace_folder
from hwsim.io.tables import records_columns, rows_to_columns, write_csv, write_parquet
from hwsim.results import RunResult, cyclic_gc_paused


def breakdown_columns(result: RunResult) -> dict[str, list]:
    """One entry per simulated pass (prefill is step -1): duration and ms per component."""
    steps = result.steps
    cols = {"step": [s.step for s in steps], "phase": [s.phase for s in steps],
            "batch": [s.batch for s in steps], "context": [s.context for s in steps],
            "duration_ms": [s.duration_s * 1e3 for s in steps]}
    for k in (steps[0].breakdown_s if steps else ()):
        cols[k] = [s.breakdown_s[k] * 1e3 for s in steps]
    return cols


def iterations_columns(result: RunResult) -> dict[str, list]:
    """iterations.csv: one entry per serving iteration."""
    its = result.iterations
    cols = {"t_start_ms": [it.t_start * 1e3 for it in its],
            "duration_ms": [it.duration_s * 1e3 for it in its],
            "decodes": [it.decodes for it in its], "prefill_tokens": [it.prefill_tokens for it in its],
            "waiting": [it.waiting for it in its]}
    for k in (its[0].breakdown_s if its else ()):
        cols[k] = [it.breakdown_s[k] * 1e3 for it in its]
    return cols


def json_text(obj) -> str:
    return strict_json.dumps(obj, indent=2) + "\n"


def write_manifest(folder: Path, manifest: dict) -> Path:
    """The one manifest writer: `manifest` as folder/manifest.json, replaced whole (a run's
    bundle, a sweep's folder, a what-if's; hwsim/pipeline.py makes them)."""
    path = Path(folder) / "manifest.json"
    atomic_write(path, lambda p: Path(p).write_text(json_text(manifest), encoding="utf-8"))
    return path


BUNDLE_MARKER = "hwsim_bundle"     # manifest.json's key saying hwsim wrote it: the format version
BUNDLE_FORMAT = 1
REPORT_PAGE = "index.html"         # written into a bundle by `hwsim report`, from the bundle
_REPORT_TITLE = b"<title>hwsim report</title>"


def bundle_files(folder: Path) -> set[str] | None:
    """The files of the hwsim run bundle in `folder` (manifest.json and those it lists), or None
    when the folder is not provably one: manifest.json is a regular file that hwsim wrote (its
    marker, and the file list written with it), and every entry of the folder is a regular file
    it lists, or the report page that `hwsim report` made of it. Anything else (a sweep folder,
    someone's project that happens to hold a manifest.json, a bundle with a file added) is not
    ours to replace."""
    from hwsim.errors import ConfigError
    from hwsim.io.bounded import LIMITS, read_json

    folder = Path(folder)
    try:
        manifest = read_json(folder / "manifest.json", LIMITS["manifest"])
    except (ConfigError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    if manifest.get(BUNDLE_MARKER) != BUNDLE_FORMAT and not _legacy_manifest(manifest):
        return None
    listed = {"manifest.json", *manifest["files"]}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    for entry in entries:
        if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
            return None
        if entry.name not in listed and not (entry.name == REPORT_PAGE and _is_report_page(entry.path)):
            return None
    return {entry.name for entry in entries}


def _legacy_manifest(manifest: dict) -> bool:
    """A bundle of an hwsim from before the marker: its manifest's own keys, all present."""
    return {"summary", "resolved_config", "hardware_profile", "model_shape", "provenance"} <= set(manifest)


def _is_report_page(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return _REPORT_TITLE in fh.read(4096)
    except OSError:
        return False


def is_bundle(folder: Path) -> bool:
    return bundle_files(folder) is not None


def check_out(out: Path) -> None:
    """Fail before simulating if `out` can never take a bundle (reading only)."""
    check_folder_target(out, is_bundle)


def hold_out(out: Path) -> None:
    """check_out, and fail if another hwsim process is writing a bundle there; from here until
    the bundle is written (or release_locks), this process holds `out`'s lock
    (hwsim.io.folder_lock)."""
    check_out(out)
    folder_lock.acquire(out)


def release_locks() -> None:
    folder_lock.release_all()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


PNG_COST = 0.3          # relative costs, to deal the files out evenly (seconds, roughly)


def _tables(result: RunResult, out: Path) -> list:
    """The bundle's tables, as jobs (file name, relative cost, write it)."""
    if result.iterations:                   # a serving run
        n_req, n_it = len(result.requests), len(result.iterations)
        return [("requests.parquet", 2e-5 * n_req,
                 lambda: write_parquet(rows_to_columns(result.requests), out / "requests.parquet")),
                ("iterations.csv", 2e-5 * n_it, lambda: write_csv(iterations_columns(result), out / "iterations.csv"))]
    n = len(result.records)
    return [("events.parquet", 8e-6 * n, lambda: write_parquet(records_columns(result.records), out / "events.parquet")),
            ("breakdown.csv", 0.01, lambda: write_csv(breakdown_columns(result), out / "breakdown.csv"))]


def _figures(result: RunResult, out: Path) -> list:
    """The bundle's figures (hwsim.io.plotter.Figure: file name, relative cost, "module:function",
    arguments), small enough to pickle to the process that draws them."""
    cfg, s = result.scenario, result.run_summary
    if result.iterations:
        cdf = "hwsim.plots.serving:save_cdf_png"
        figures = [
            ("itl_cdf.png", PNG_COST + 1e-6 * len(result.gaps_ms), cdf,
             (result.gaps_ms, cfg.budget_ms, "inter-token latency", f"budget {cfg.budget_ms:g} ms", out / "itl_cdf.png")),
            ("ttft_cdf.png", PNG_COST, cdf,
             ([r["ttft_ms"] for r in result.requests], cfg.workload.ttft_target_ms, "time to first token",
              f"target {cfg.workload.ttft_target_ms:g} ms", out / "ttft_cdf.png")),
            ("timeline.png", PNG_COST + 5e-5 * len(result.iterations), "hwsim.plots.serving:save_timeline_png",
             (result.iterations, cfg.budget_ms, f"{s.model} on {s.hardware}: iterations over time",
              out / "timeline.png")),
        ]
    else:
        from hwsim.plots.gantt_view import step_view

        recorded = max((r.step for r in result.records), default=0)   # runtime.kernel_records
        lanes, items = step_view(result.lanes, [r for r in result.records if r.step == recorded])
        figures = [("gantt.png", PNG_COST + 1e-5 * len(items), "hwsim.plots.gantt:save_gantt_png",
                    (lanes, items, f"unit occupancy during one token (step {recorded})", out / "gantt.png"))]
    channel_bytes = result.channel_bytes
    channel_title = (f"{s.model} on {s.hardware}: HBM bytes per channel "
                     f"(max/mean {max(channel_bytes) / (sum(channel_bytes) / len(channel_bytes)):.2f})"
                     if sum(channel_bytes) else "HBM bytes per channel")
    return figures + [
        ("breakdown.png", PNG_COST, "hwsim.plots.breakdown:save_breakdown_png", (s, out / "breakdown.png")),
        ("channels.png", PNG_COST, "hwsim.plots.channels:save_channel_png",
         (channel_bytes, result.channels_per_stack, channel_title, out / "channels.png"))]


def write_bundle(result: RunResult, out: Path, manifest: dict, extra: dict | None = None,
                 plots: bool = False, plotter=None, last: dict | None = None) -> dict[str, Path]:
    """Write the bundle to `out`, replacing an earlier bundle there whole. `extra` maps more
    file names to writers (write(path)), e.g. trace.json. `plots`: draw the figures too; by
    `plotter` (hwsim.io.plotter), if given. `last`: more writers, run in this process once the
    others are done (a file another process is still making: the default run's breakdown.png,
    drawn by the plotting helper while the tables are written). Returns the final paths."""
    held = folder_lock.held(out)
    hold_out(out)
    try:
        # a big run holds millions of objects; the cyclic collector would rescan them on every
        # burst of allocation while the tables and plots are built (hwsim.results.cyclic_gc_paused)
        with replace_folder(out, remove_old=_remove_bundle, check=check_out) as tmp, cyclic_gc_paused():
            staged = _write_files(result, tmp, {BUNDLE_MARKER: BUNDLE_FORMAT, **manifest}, extra or {},
                                  plots, plotter, last or {})
    finally:
        if not held:
            folder_lock.release(out)
    return {name: out / path.name for name, path in staged.items()}


def _remove_bundle(old: Path) -> None:
    """Delete an earlier bundle swapped out of the way: only the files it lists; a folder that
    still holds anything else (added while this run wrote) is left where it is."""
    if old.is_symlink():        # never delete through a link (replace_folder swaps none in)
        return
    for name in bundle_files(old) or ():
        (old / name).unlink(missing_ok=True)
    try:
        os.rmdir(old)
    except OSError:
        keep_aside(old)


def _write_files(result: RunResult, out: Path, manifest: dict, extra: dict, plots: bool,
                 plotter, last: dict) -> dict[str, Path]:
    from hwsim.io.forked import call, write_all

    tables = _tables(result, out)
    figures = _figures(result, out) if plots else []
    for name, write in extra.items():
        tables.append((name, PNG_COST, lambda write=write, p=out / name: write(p)))
    if plotter is not None:
        plotter.draw(figures)                  # drawn there while the tables are written here
        write_all(tables)
        plotter.wait()
    else:
        if figures:
            # matplotlib imported once, before forking: children inherit it instead of each
            # paying for the import (0.6 s of CPU) on a machine whose cores may be busy
            from hwsim.plots.loading import import_for_drawing
            import_for_drawing()
        write_all(tables + [(name, cost, call(target, args)) for name, cost, target, args in figures])
    for name, write in last.items():
        write(out / name)
    paths = {name: out / name for name in ["manifest.json", *(job[0] for job in tables + figures), *last]}
    files = {name: _sha256(path) for name, path in sorted(paths.items()) if name != "manifest.json"}
    write_manifest(out, {**manifest, "files": files})
    return paths
