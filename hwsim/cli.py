"""The command line: a thin typer app over run_scenario and friends.

Exit status (README, "Exit status"), the same for every command:
  0  ok
  1  some results failed (sweep points, validation rows), or hwsim itself failed (a bug)
  2  bad input: a scenario, profile, spec, dataset or option that cannot be used; a run
     estimated to take hours or many GB; an output folder that cannot be written
  130 interrupted (Ctrl-C)
Every error is one line on stderr naming the file, line and key where it can; no traceback
(set HWSIM_DEBUG=1 to see one for an internal error).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Optional

import click
import typer

from hwsim import __version__
from hwsim.errors import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="hwsim: where does each token's latency budget go when a sparse MoE LLM decodes?")


@functools.cache
def err_console():
    """The stderr console, made on first use (rich is imported only when something prints)."""
    from rich.console import Console
    return Console(stderr=True)


def Console(**kwargs):                   # noqa: N802 - rich's class, imported when first used
    from rich.console import Console as RichConsole
    return RichConsole(**kwargs)


def Table(**kwargs):                     # noqa: N802
    from rich.table import Table as RichTable
    return RichTable(**kwargs)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
MAX_WORKERS = 256
STUDY_PLOTS = {"breakdown.png", "pareto.png", "heatmap.png"}
LONG_RUN_S = 60          # a run estimated longer than this says so before it starts


def _say(kind: str, message: str) -> None:
    one_line = " ".join(str(message).split())
    err_console().print(f"[bold red]{kind}:[/] {one_line}", highlight=False, soft_wrap=True, markup=True)


def _fail(exc: ConfigError) -> None:
    _say("error", exc.render())
    raise typer.Exit(EXIT_BAD_INPUT)


def cli_errors(command):
    """Map every way a command can end to one line on stderr and the documented exit code."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from hwsim.config.load import forget_scenario, locate
        forget_scenario()
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except ConfigError as exc:
            _fail(locate(exc))     # a key found wrong after loading: at its scenario file and line
        except KeyboardInterrupt:
            _say("interrupted", "stopped; earlier results and bundles are left as they were")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except OSError as exc:          # an unwritable --out, a full disk, a vanished file
            where = f"{exc.filename}: " if exc.filename else ""
            _say("error", f"{where}{exc.strerror or exc}")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except MemoryError:
            from hwsim.config.cost import uncap_memory
            uncap_memory()            # room to report it
            _say("error", "out of memory: the run needed more than its memory limit (--max-gb, "
                          "HWSIM_MAX_GB, default 8 GB) allows; make it smaller or raise the limit")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except Exception as exc:        # noqa: BLE001 - a bug: say so in one line, keep the exit code
            if os.environ.get("HWSIM_DEBUG"):
                raise
            _say("internal error", f"{type(exc).__name__}: {exc} (a bug in hwsim; "
                                   f"HWSIM_DEBUG=1 shows the traceback)")
            raise typer.Exit(EXIT_FAILED) from None
    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hwsim {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")):
    """hwsim: where does each token's latency budget go when a sparse MoE LLM decodes?"""


MAX_WALL_HELP = "refuse a run estimated to take longer than this (default 1800 s, or HWSIM_MAX_WALL_S)"
MAX_GB_HELP = "refuse a run estimated to need more memory than this (default 8 GB, or HWSIM_MAX_GB)"
# Figures are drawn on request: matplotlib's import and layout cost more than the default
# run's whole simulation and tables (docs/performance.md, issue 19)
PLOTS_HELP = ("also draw the bundle's figures: breakdown.png, channels.png and gantt.png "
              "(serving: itl_cdf.png, ttft_cdf.png, timeline.png)")


def _positive(value: float | None, key: str) -> float | None:
    import math
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise ConfigError(f"expected a positive number, got {value!r}", key=key)
    return value


def _writable_parent(out: Path) -> None:
    """Fail before simulating if the folder that will hold `out` cannot be written."""
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("cannot write here (permission denied)", file=str(parent), key="--out")
    if len(out.name.encode()) > 200:
        raise ConfigError(f"the folder name is {len(out.name)} characters long (at most 200)",
                          file=str(out)[:80] + "...", key="--out")


def _json_line(obj) -> None:
    from hwsim.io.strict_json import dumps
    sys.stdout.write(dumps(obj) + "\n")


@app.command()
@cli_errors
def run(
    scenario: Optional[Path] = typer.Argument(None, help="scenario YAML (default: scenarios/default.yaml)"),
    set_: list[str] = typer.Option([], "--set", help="override a key: dotted.key=value (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="bundle folder (default: reports/<scenario name>)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    trace: bool = typer.Option(False, "--trace", help="also write trace.json (Chrome/Perfetto trace events)"),
    max_wall_s: Optional[float] = typer.Option(None, "--max-wall-s", help=MAX_WALL_HELP),
    max_gb: Optional[float] = typer.Option(None, "--max-gb", help=MAX_GB_HELP),
    plots: bool = typer.Option(False, "--plots", help=PLOTS_HELP),
):
    """Simulate a scenario and write a run bundle (replacing an earlier bundle there whole)."""
    _no_cycle_collection()
    plotter = None
    if plots:
        import numpy  # noqa: F401 - before the fork: the plotting helper needs it too, imported once
        from hwsim.io.plotter import Plotter

        plotter = Plotter.start()    # imports matplotlib while this process simulates
    try:
        _run(scenario, set_, out, json_out, trace, max_wall_s, max_gb, plots, plotter)
    finally:
        from hwsim.io.bundle import release_locks
        release_locks()               # --out's lock, taken by check_out (hwsim.io.folder_lock)
        if plotter:
            plotter.close()


def _run(scenario, set_, out, json_out, trace, max_wall_s, max_gb, plots, plotter) -> None:
    from hwsim.build import build
    from hwsim.config.cost import cap_memory, estimate
    from hwsim.config.fingerprint import fingerprint
    from hwsim.config.load import load_scenario
    from hwsim.io.bundle import check_out, write_bundle
    from hwsim.provenance import provenance
    from hwsim.run import run_scenario

    limits = (_positive(max_wall_s, "--max-wall-s"), _positive(max_gb, "--max-gb"))
    cfg = load_scenario(scenario, set_, cost_limits=limits)
    out = out or Path("reports") / cfg.name
    _writable_parent(out)
    check_out(out)
    built = build(cfg)
    cost = estimate(cfg, built.model)
    cap_memory(limits[1])                # a wrong estimate ends in MemoryError: exit 2
    if cost.wall_s > LONG_RUN_S:
        err_console().print(f"[dim]note: a long run, estimated (on the high side) at {cost.describe()}[/]",
                          highlight=False)
    started = time.time()
    with _progress(enabled=not (json_out and sys.stderr.isatty())) as progress:
        # the busy intervals of every step only for the trace; the Gantt chart draws one step;
        # without either, none
        result = run_scenario(cfg, built, progress=progress, every_interval=trace, intervals=trace or plots)
    resolved = cfg.model_dump(mode="json")
    manifest = {
        "summary": result.summary,
        "scenario_file": str(scenario) if scenario else "scenarios/default.yaml",
        "overrides": set_,
        "resolved_config": resolved,
        "hardware_profile": built.profile.model_dump(mode="json"),
        "model_shape": built.model.model_dump(mode="json"),
        "seed": cfg.seed,
        "started_unix": started,
        "wall_s": result.summary["sim"]["wall_s"],
        "inputs": fingerprint(resolved),
        "provenance": provenance(),
        "error": None,
    }
    extra = {}
    if trace:
        from hwsim.io.trace import write_trace
        extra["trace.json"] = lambda p: write_trace(result, built, p)
    paths = write_bundle(result, out, manifest, extra, plots=plots, plotter=plotter)
    _left_to_exit((result, built))
    if json_out:
        _json_line(result.summary)
        return
    _print_summary(result.summary, paths)


class _progress:
    """Progress on stderr (requests, steps or points done) once a run has taken SHOW_AFTER_S:
    a bar on a terminal; elsewhere (a log, CI, a pipe) one line every LINE_EVERY_S with the
    rate and the time left. Short runs print nothing extra; stdout (--json) is never touched."""

    SHOW_AFTER_S = 2.0
    LINE_EVERY_S = 10.0

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.started = time.perf_counter()
        self.terminal = sys.stderr.isatty()
        self.last_line = self.started

    def __enter__(self):
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        if not self.terminal:
            self._line(done, total)
            return
        if self.bar is None:
            if time.perf_counter() - self.started < self.SHOW_AFTER_S:
                return
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn,
                                       TimeRemainingColumn)
            self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                console=err_console(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("simulating", total=None)
        self.bar.update(self.task, completed=done, total=total)

    def _line(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last_line < self.LINE_EVERY_S or not total:
            return
        self.last_line = now
        elapsed = now - self.started
        left = (total - done) * elapsed / done if done else None
        eta = f", about {_seconds(left)} left" if left is not None else ""
        sys.stderr.write(f"progress: {done} of {total} done ({done / total:.0%}) in {_seconds(elapsed)}{eta}\n")
        sys.stderr.flush()

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _print_summary(s: dict, paths: dict) -> None:
    console = Console()
    itl = s["itl_ms"]
    verdict = "[green]within[/]" if itl["p99"] <= s["budget_ms"] else "[red]over[/]"
    shape = (f"batch {s['batch_size']}, context {s['context_tokens']}" if s["batch_size"] is not None
             else "continuous batching")
    console.print(f"[bold]{s['model']}[/] on [bold]{s['hardware']}[/], {shape}, {s['launch']} launch")
    console.print(f"inter-token latency p50 {itl['p50']:.3f} ms, p99 {itl['p99']:.3f} ms: "
                  f"{verdict} the {s['budget_ms']:g} ms budget")
    console.print(f"[dim]how far to trust it: {s['hardware_uncertainty']}[/]")
    if s.get("serving"):
        v = s["serving"]
        console.print(f"serving {v['requests_completed']} requests: TTFT p50 {s['ttft_ms']['p50']:.1f} ms, "
                      f"p99 {s['ttft_ms']['p99']:.1f} ms; {v['throughput_tok_s']:.0f} tokens/s; "
                      f"{v['slo_attainment']:.1%} of tokens within budget; goodput {v['goodput_rps']:.2f} req/s; "
                      f"queue p99 {v['queue_ms_p99']:.1f} ms")
    elif s["ttft_ms"]:
        console.print(f"time to first token (one prefill) {s['ttft_ms']['p50']:.3f} ms")
    title = ("where an iteration's time goes (mean over iterations)" if s.get("serving")
             else "where one token's time goes (critical path)")
    table = Table(title=title, show_edge=False)
    table.add_column("component")
    table.add_column("ms / token", justify="right")
    table.add_column("share", justify="right")
    total = sum(s["breakdown_ms"].values())
    for comp, ms in sorted(s["breakdown_ms"].items(), key=lambda kv: -kv[1]):
        if ms > 0:
            table.add_row(comp, f"{ms:.3f}", f"{ms / total:.1%}")
    console.print(table)
    gb = {k: v / 1e9 for k, v in s["bytes"].items()}
    console.print(f"HBM bytes per step: weights {gb['weights']:.2f} GB, KV {gb['kv']:.3f} GB; "
                  f"{s['kernels_per_step']:g} kernels per step")
    if s.get("moe"):
        m = s["moe"]
        line = (f"MoE: {m['distinct_experts_per_layer']:.1f} distinct experts per layer, "
                f"active parameters {m['active_param_fraction']:.1%}")
        if m["cache"]["hit_rate"] is not None and (m["cache"]["policy"] != "none" or m["prefetch"]["enabled"]):
            line += f", SRAM hit rate {m['cache']['hit_rate']:.1%}"
        if m["prefetch"]["enabled"]:
            line += (f", prefetch precision {m['prefetch']['precision']:.0%} recall {m['prefetch']['recall']:.0%}, "
                     f"wait {m['prefetch']['expert_load_wait_ms']:.3f} ms")
        if m["placement"] == "per-expert":
            line += f", expert bytes per stack max/mean {m['expert_stack_imbalance']:.2f}"
        console.print(line)
    if s["kv"]["effective_bits_per_element"] < 16:
        k = s["kv"]
        console.print(f"KV cache: {k['effective_bits_per_element']:.2f} bits per element "
                      f"({k['effective_bandwidth_multiplier']:.1f}x fewer bytes), {k['dequant']} dequant, "
                      f"attention output error {k['attention_rel_error']:.3f}")
    if p := s.get("power"):
        clock = (f"settled at {p['sm_clock_mhz']:.0f} MHz (the limit; {p['watts_at_max_clock']:.0f} W "
                 f"at {p['max_clock_mhz']:.0f} MHz)" if p["throttled"] else f"{p['sm_clock_mhz']:.0f} MHz")
        per_token = f", {p['joules_per_token']:.2f} J per token" if p["joules_per_token"] else ""
        console.print(f"power: {p['watts']:.0f} W of {p['limit_w']:.0f} W, SMs {clock}{per_token}")
    for w in s["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
    figures = "" if any(name.endswith(".png") for name in paths) else "; figures: run with --plots"
    console.print(f"bundle: {paths['manifest.json'].parent}/ ({', '.join(paths)}){figures}")
    console.print(f"[dim]{s['sim']['events']} events in {s['sim']['wall_s']:.2f} s wall[/]")


@app.command()
@cli_errors
def validate(
    dataset: Path = typer.Argument(..., help="CSV of measured cases (see docs/validation.md)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
    sets: list[str] = typer.Option([], "--set", help="scenario override applied to every row, "
                                   "e.g. runtime.attention_kernel=cudnn (repeatable)"),
):
    """Predict each measured case and report the error (exit 1 if any row failed)."""
    from hwsim.config.load import load_scenario

    _no_cycle_collection()
    from hwsim.validate import load_dataset, validate_rows

    load_scenario(None, sets)          # a bad override fails here, once, before any row runs
    rows = load_dataset(dataset)
    report = validate_rows(rows, sets)
    _left_to_exit(report)              # what this process built for its rows: freed by the exit
    if json_out:
        _json_line(report)
    else:
        _print_validation(report)
    if report["failed"]:
        first = next(r["error"] for r in report["rows"] if r.get("error"))
        _say("error", f"{report['failed']} of {len(report['rows'])} rows failed; first: {first}")
        raise typer.Exit(EXIT_FAILED)


def _print_validation(report: dict) -> None:
    console = Console()
    table = Table(show_edge=False)
    for col in ("name", "predicted_ms", "measured_ms", "error_pct"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in report["rows"]:
        if r.get("error"):
            table.add_row(r["name"], "[red]failed[/]", f"{r['measured_ms']}", r["error"])
        else:
            table.add_row(r["name"], f"{r['predicted_ms']:.3f}", f"{r['measured_ms']:.3f}",
                          f"{r['error_pct']:+.1f}%")
    console.print(table)
    if report["median_abs_error_pct"] is not None:
        console.print(f"median |error| {report['median_abs_error_pct']:.1f}%, "
                      f"max |error| {report['max_abs_error_pct']:.1f}%, "
                      f"mean signed error {report['mean_signed_error_pct']:+.1f}%, failed rows {report['failed']}")
        for key in ("by_split", "by_model"):
            for group, s in report.get(key, {}).items():
                if s["rows_predicted"]:
                    console.print(f"  {group}: {s['rows_predicted']} rows, median |error| "
                                  f"{s['median_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%, "
                                  f"mean signed {s['mean_signed_error_pct']:+.1f}%")


@app.command()
@cli_errors
def sweep(
    spec: Path = typer.Argument(..., help="sweep spec YAML (docs/sweeps.md)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of a running Dask scheduler"),
    workers: Optional[int] = typer.Option(None, "--workers", help="workers of the embedded LocalCluster"),
    out: Optional[Path] = typer.Option(None, "--out", help="results folder (default: reports/<sweep name>)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    max_wall_s: Optional[float] = typer.Option(None, "--max-wall-s", help=MAX_WALL_HELP + ", per point"),
    max_gb: Optional[float] = typer.Option(None, "--max-gb", help=MAX_GB_HELP + ", per point"),
):
    """Run every point of a what-if study on Dask; resumable, results in Parquet (exit 1 if
    any point failed)."""
    from hwsim.provenance import provenance
    from hwsim.sweep.runner import check_sweep_out, run_sweep
    from hwsim.sweep.spec import load_sweep

    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"expected 1 to {MAX_WORKERS} workers, got {workers}", key="--workers")
    limits = (_positive(max_wall_s, "--max-wall-s"), _positive(max_gb, "--max-gb"))
    sweep_spec, points = load_sweep(spec, cost_limits=limits)
    out = out or Path("reports") / sweep_spec.name
    _writable_parent(out)
    check_sweep_out(out)
    out.mkdir(exist_ok=True)
    try:
        with _progress(enabled=not (json_out and sys.stderr.isatty())) as progress:
            summary = run_sweep(points, out, scheduler=scheduler, workers=workers, progress=progress)
    except KeyboardInterrupt:
        _say("interrupted", "finished points are kept; run the same command to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    import pandas as pd

    from hwsim.io.atomic import atomic_write
    from hwsim.io.bundle import json_text
    from hwsim.plots.study import save_study_pngs

    table = pd.read_parquet(summary["results"])
    budget = float(points[0]["scenario"]["budget_ms"])
    plots = save_study_pngs(table, budget, out)
    for name in STUDY_PLOTS - set(plots):      # a plot this study does not make is not left from another
        (out / name).unlink(missing_ok=True)
    manifest = {"sweep": sweep_spec.model_dump(mode="json"), "spec_file": str(spec),
                "summary": summary, "plots": [str(p) for p in plots.values()],
                "points": {p["hash"]: {"factors": p["factors"], "inputs": p["inputs"]} for p in points},
                "provenance": provenance()}
    atomic_write(out / "manifest.json", lambda p: Path(p).write_text(json_text(manifest), encoding="utf-8"))
    if json_out:
        _json_line(summary)
    else:
        Console().print(f"{summary['points']} points: {summary['computed']} computed, {summary['reused']} "
                        f"reused, {summary['failed']} failed; results {summary['results']}")
    if summary["failed"]:
        _say("error", f"{summary['failed']} of {summary['points']} points failed; first: "
                      f"{summary.get('first_error') or 'see the error column of results.parquet'}")
        raise typer.Exit(EXIT_FAILED)


@app.command()
@cli_errors
def report(folder: Path = typer.Argument(..., help="a run bundle or sweep folder")):
    """Write a self-contained index.html for a run or a sweep."""
    from hwsim.report import write_report

    path = write_report(folder)
    Console().print(f"wrote {path}")


# Set by main(): this process ends when its one command does (not so under CliRunner or a
# library caller, which go on to other work).
_process_ends_with_command = False


def _no_cycle_collection() -> None:
    """Switch the cyclic garbage collector off for the rest of a process that ends with this
    command. A run pauses it while it allocates (hwsim.run.cyclic_gc_paused), and switched
    back on it would traverse every object the run made, all still young: 10 s of a DeepSeek-V3
    batch-64 run, to free cycles that the process's exit frees anyway."""
    if _process_ends_with_command:
        import gc
        gc.disable()


_kept: list = []


def _left_to_exit(obj) -> None:
    """Leave `obj` for the exit of a process that ends with this command to free: freeing a
    large run object by object took a second (a DeepSeek-V3 batch-64 run's million kernel
    records), where the exit returns the process's memory at once. main() then ends the
    process without tearing anything down."""
    if _process_ends_with_command:
        _kept.append(obj)


def main() -> None:
    global _process_ends_with_command
    _process_ends_with_command = True
    try:
        app()
        code = 0
    except SystemExit as exc:
        if not _kept or not (exc.code is None or isinstance(exc.code, int)):
            raise
        code = exc.code or 0
    if _kept:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            raise SystemExit(code) from None        # the usual exit, which reports it
        os._exit(code)


if __name__ == "__main__":
    main()
