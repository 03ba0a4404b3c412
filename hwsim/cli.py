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
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import click
import typer

from hwsim import __version__
from hwsim.errors import ConfigError


class _FlagsAsFlags:
    """Help shows an on/off option as the bare flag it is (`--json`; `--json true` is an
    error): typer 0.29 writes `<bool>` after each flag, as if it took a value (issue 28)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class FlagCommand(_FlagsAsFlags, typer.core.TyperCommand):
    pass


class FlagGroup(_FlagsAsFlags, typer.core.TyperGroup):
    pass


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=FlagGroup,
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


def _worker_died(exc: Exception) -> bool:
    """A Dask worker killed while it ran a task, or while its nanny started it."""
    name, module = type(exc).__name__, type(exc).__module__
    return (module.startswith("distributed") and name in ("KilledWorker", "CommClosedError")) or \
        "Nanny failed to start" in str(exc) or "Worker failed to start" in str(exc)


def _where(exc: OSError) -> str:
    """The path an OSError is about: its own, else the working folder where that is gone (a
    relative path, the default reports/ folder, resolve against it)."""
    if exc.filename:
        return f"{exc.filename}: "
    try:
        os.getcwd()
    except OSError:
        return "the working folder (removed while hwsim ran, or before): "
    return ""


def cli_errors(command):
    """Map every way a command can end to one line on stderr and the documented exit code."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError:         # the reader of stdout stopped reading (| head): not an error
            _discard_stdout()
            raise typer.Exit(EXIT_OK) from None
        except ConfigError as exc:
            _fail(exc)     # one found after loading is at its scenario's line (LoadedScenario.located)
        except KeyboardInterrupt:
            _say("interrupted", "stopped; earlier results and bundles are left as they were")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except OSError as exc:          # an unwritable --out, a full disk, a vanished file
            _say("error", f"{_where(exc)}{exc.strerror or exc}")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except MemoryError:
            from hwsim.cost import uncap_memory
            uncap_memory()            # room to report it
            from hwsim.cost import OUT_OF_MEMORY
            _say("error", OUT_OF_MEMORY)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except Exception as exc:        # noqa: BLE001 - a bug: say so in one line, keep the exit code
            if os.environ.get("HWSIM_DEBUG"):
                raise
            if _worker_died(exc):       # the machine's doing (out of memory, a kill), not a bug
                _say("error", f"a Dask worker process died ({type(exc).__name__}: {exc}); out of memory "
                              f"or killed? fewer --workers, or more memory; a sweep resumes where it stopped")
                raise typer.Exit(EXIT_BAD_INPUT) from None
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
# By default a run draws breakdown.png only, what users come for (about 0.2 s, its import
# overlapped with the simulation by hwsim.io.plotter); the other figures cost more than the
# default run's whole simulation and tables (docs/performance.md, issues 19 and 28)
PLOTS_HELP = ("--plots: draw all the bundle's figures, breakdown.png, channels.png and gantt.png "
              "(serving: itl_cdf.png, ttft_cdf.png, timeline.png; slower); --no-plots: none, for "
              "scripts. Default: breakdown.png only")
DRY_RUN_HELP = "print the resolved scenario, its estimated cost and where the bundle would go; write nothing"


def _positive(value: float | None, key: str) -> float | None:
    import math
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise ConfigError(f"expected a positive number, got {value!r}", key=key)
    return value


def _writable_parent(out: Path) -> None:
    """Fail before simulating if the folder that will hold `out` cannot be written."""
    _check_out_name(out)
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("cannot write here (permission denied)", file=str(parent), key="--out")


def _check_out_name(out: Path) -> None:
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:      # bytes the file system's encoding could not decode
        raise ConfigError("the folder name is not UTF-8 text (a bundle's manifest names it)",
                          file=ascii(str(out)), key="--out") from None
    if len(out.name.encode()) > 200:
        raise ConfigError(f"the folder name is {len(out.name)} characters long (at most 200)",
                          file=str(out)[:80] + "...", key="--out")


def _check_bundle_target(out: Path) -> None:
    """Fail, reading only (a dry run is refused where the run would be), if `out` can never
    take a run bundle."""
    from hwsim.io.bundle import check_out

    _check_out_name(out)
    if out.is_symlink():            # e.g. reports/latest: replacing it would replace the link
        raise ConfigError("is a symbolic link; give the folder it points to, or a new one",
                          file=str(out), key="--out")
    check_out(out)


def _json_line(obj) -> None:
    from hwsim.io.strict_json import dumps
    sys.stdout.write(dumps(obj) + "\n")


@app.command(cls=FlagCommand)
@cli_errors
def run(
    scenario: Optional[Path] = typer.Argument(None, help="scenario YAML, or the name of one hwsim ships "
                                              "(`hwsim list`; default: scenarios/default.yaml)"),
    set_: list[str] = typer.Option([], "--set", help="override a key: dotted.key=value (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="bundle folder (default: reports/<scenario name>, "
                                       "plus -<hash of the overrides> if any; reports/latest links to it)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    trace: bool = typer.Option(False, "--trace", help="also write trace.json (Chrome/Perfetto trace events)"),
    max_wall_s: Optional[float] = typer.Option(None, "--max-wall-s", help=MAX_WALL_HELP),
    max_gb: Optional[float] = typer.Option(None, "--max-gb", help=MAX_GB_HELP),
    plots: Optional[bool] = typer.Option(None, "--plots/--no-plots", help=PLOTS_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help=DRY_RUN_HELP),
):
    """Simulate a scenario and write a run bundle (replacing an earlier bundle there whole)."""
    _no_cycle_collection()
    figures = "none" if dry_run or plots is False else "all" if plots else "breakdown"
    plotter = None
    if figures != "none":
        from hwsim.io.plotter import _MODULES, BREAKDOWN, Plotter, take_early

        modules = _MODULES if figures == "all" else BREAKDOWN
        plotter = take_early(modules)    # forked by hwsim.launch before the command line was parsed
        if plotter is None:
            import numpy  # noqa: F401 - before the fork: the plotting helper needs it too, imported once

            plotter = Plotter.start(modules)    # imports matplotlib while this process simulates
    else:
        from hwsim.io.plotter import discard_early
        discard_early()
    try:
        _run(scenario, set_, out, json_out, trace, max_wall_s, max_gb, figures, plotter, dry_run)
    finally:
        from hwsim.io.bundle import release_locks
        release_locks()               # --out's lock, taken by check_out (hwsim.io.folder_lock)
        if plotter:
            plotter.close()


def _run(scenario, set_, out, json_out, trace, max_wall_s, max_gb, figures, plotter, dry_run) -> None:
    from hwsim import pipeline

    limits = (_positive(max_wall_s, "--max-wall-s"), _positive(max_gb, "--max-gb"))
    loaded = pipeline.load(scenario, set_)
    with loaded.located():          # a key found wrong after loading: at its scenario file and line
        pipeline.check(loaded)      # what needs the built system, above the loader (hwsim/checks.py)
        cost = pipeline.cost(loaded, limits)     # kept: a serving scenario's is a rehearsal of it
        default_out = out is None
        if default_out:
            from hwsim.io.run_folder import default_folder
            out = default_folder(loaded.cfg.name, set_)
        _check_bundle_target(out)
        if dry_run:
            _print_dry_run(loaded.cfg, cost, loaded.file, set_, out, json_out)
            return
        _run_loaded(loaded, cost, limits, out, default_out, json_out, trace, figures, plotter)


def _run_loaded(loaded, cost, limits, out, default_out, json_out, trace, figures, plotter) -> None:
    from hwsim import pipeline
    from hwsim.cost import cap_memory
    from hwsim.io.bundle import hold_out, write_bundle

    _writable_parent(out)
    hold_out(out)                        # one writer: a second run into `out` is refused
    built = pipeline.build(loaded)
    cap_memory(limits[1])                # a wrong estimate ends in MemoryError: exit 2
    if cost.wall_s > LONG_RUN_S:
        err_console().print(f"[dim]note: a long run, estimated (on the high side) at {cost.describe()}[/]",
                          highlight=False)
    started = time.time()
    with _progress(enabled=not (json_out and sys.stderr.isatty())) as progress:
        # the busy intervals of every step only for the trace; the Gantt chart draws one step;
        # without either, none
        result = pipeline.run(loaded, built, progress=progress, every_interval=trace,
                              intervals=trace or figures == "all")
    manifest = pipeline.run_manifest(loaded, result, built, started)
    extra = {}
    if trace:
        from hwsim.io.trace import write_trace
        extra["trace.json"] = lambda p: write_trace(result, built, p)
    last = {}
    with tempfile.TemporaryDirectory(prefix="hwsim-figure-") as drawn:
        if figures == "breakdown":
            # drawn by the helper while the tables are written; copied in once it is done
            drawn_png = _draw_breakdown(result.run_summary, Path(drawn), plotter)
            if not json_out:
                import rich.console, rich.table  # noqa: E401, F401 - for the summary, imported while the helper draws
            last["breakdown.png"] = lambda path: shutil.copyfile(drawn_png(), path)
        everything = figures == "all"         # else the helper, if any, draws breakdown.png only
        paths = write_bundle(result, out, manifest, extra, plots=everything, plotter=plotter if everything else None,
                             last=last)
    if default_out:
        from hwsim.io.run_folder import point_latest
        point_latest(out)
    _left_to_exit((result, built))
    if json_out:
        _json_line(result.summary)
        return
    _print_summary(result.run_summary, paths, figures)


def _draw_breakdown(summary, folder: Path, plotter):
    """breakdown.png drawn into `folder`, by the plotting helper if there is one (it imported
    matplotlib while this process simulated), else here; returns what to call for its path,
    which waits for the helper to finish it (the bundle's tables are written meanwhile)."""
    path = folder / "breakdown.png"
    target, args = "hwsim.plots.breakdown:save_breakdown_png", (summary, path)
    if plotter is None:
        from hwsim.io.forked import call
        from hwsim.plots.loading import import_for_drawing

        import_for_drawing()                 # matplotlib without its help text (hwsim/plots/loading.py)
        call(target, args)()
        return lambda: path
    plotter.draw([("breakdown.png", 1.0, target, args)])

    def finished() -> Path:
        plotter.wait()
        return path
    return finished


def _print_dry_run(cfg, cost, scenario_file: str, sets: list[str], out: Path, json_out: bool) -> None:
    """What `hwsim run` would do: the resolved scenario, its cost (the Cost the check made),
    the bundle's folder."""
    from hwsim.config.load import dump_yaml
    from hwsim.io.bundle import is_bundle

    resolved = cfg.model_dump(mode="json")
    ignored = _model_fields_ignored(cfg.model)
    if json_out:
        _json_line({"scenario_file": scenario_file, "overrides": sets, "out": str(out),
                    **({"model_read_and_ignored": ignored} if ignored is not None else {}),
                    "replaces_bundle": is_bundle(out),
                    "estimate": {"wall_s": cost.wall_s, "memory_gb": cost.memory_gb, "passes": cost.passes,
                                 "kernels_per_pass": cost.kernels_per_pass},
                    "resolved_config": resolved})
        return
    console = Console()
    where = "replacing the bundle there" if is_bundle(out) else "a new folder"
    for line in (f"scenario: {scenario_file}" + (f" with {' '.join(sets)}" if sets else ""),
                 f"estimated cost: {cost.describe()}",
                 f"bundle would go to: {out}/ ({where}); nothing written (dry run)",
                 *([f"model config fields read and ignored (no timing effect): {', '.join(ignored) or 'none'}"]
                   if ignored is not None else []), "resolved scenario:"):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    sys.stdout.flush()
    sys.stdout.write(dump_yaml(resolved))


def _model_fields_ignored(model: str) -> dict | None:
    """A config.json model's fields read and ignored (None: the model is not a config.json)."""
    from hwsim.model import hf_import
    return hf_import.import_config(model).ignored if hf_import.is_hf_path(model) else None


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
        self.terminal = None          # asked of the stderr console when first needed
        self.last_line = self.started

    def __enter__(self):
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        if self.terminal is None:
            # nothing shows before then either way (a bar after SHOW_AFTER_S, a line after
            # LINE_EVERY_S): ask rich (15 ms of imports) only then, so a short run never loads it
            if time.perf_counter() - self.started < min(self.SHOW_AFTER_S, self.LINE_EVERY_S):
                return
            self.terminal = err_console().is_terminal
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


def _headline(s, verdict: str) -> str:
    """The latency a user sees: a speculative step yields several tokens, so its time per accepted
    token (the step's own latency beside it); else the inter-token latency."""
    itl = s.itl_ms
    # a serving run's itl_ms is per accepted token already (its speculation: _speculation_line)
    if not (sp := s.speculative) or s.serving:
        return f"inter-token latency p50 {itl['p50']:.3f} ms, p99 {itl['p99']:.3f} ms: {verdict} the {s.budget_ms:g} ms budget"
    verdict = "[green]within[/]" if sp.ms_per_accepted_token <= s.budget_ms else "[red]over[/]"
    return (f"speculative decoding ({sp.method}, {sp.tokens} drafted, {sp.expected_tokens_per_step:.2f} tokens a "
            f"step): {sp.ms_per_accepted_token:.3f} ms per accepted token, {verdict} the {s.budget_ms:g} ms "
            f"budget; a step takes p50 {itl['p50']:.3f} ms, p99 {itl['p99']:.3f} ms")


def _speculation_line(sp) -> str:
    """A serving run's speculation (hwsim.summary.ServingSpeculativeSummary), measured against
    what was configured."""
    if sp.tokens_per_verification is None:
        return f"speculative decoding ({sp.method}, {sp.tokens} drafted): no sequence was verified"
    return (f"speculative decoding ({sp.method}, {sp.tokens} drafted): {sp.tokens_per_verification:.2f} tokens "
            f"per verification (configured {sp.expected_tokens_per_step:.2f}), drafts accepted "
            f"{sp.draft_acceptance_rate:.1%}; the drafts {sp.draft_share:.1%} of the iterations' time")


def _energy_per_token(p, s) -> str:
    if not p.joules_per_token:
        return ""
    if s.speculative:               # the summary's figure is per accepted token (run.power_summary)
        return f", {p.joules_per_token:.2f} J per accepted token"
    return f", {p.joules_per_token:.2f} J per token"


def _breakdown_table(s) -> Table:
    title = ("where an iteration's time goes (mean over iterations)" if s.serving
             else "where one token's time goes (critical path)")
    table = Table(title=title, show_edge=False)
    table.add_column("component")
    table.add_column("ms / token", justify="right")
    table.add_column("share", justify="right")
    total = sum(s.breakdown_ms.values())
    for comp, ms in sorted(s.breakdown_ms.items(), key=lambda kv: -kv[1]):
        if ms > 0:
            table.add_row(comp, f"{ms:.3f}", f"{ms / total:.1%}")
    return table


def _moe_line(m) -> str:
    from hwsim.model.expert_sram import cache_policy
    from hwsim.model.moe_dispatch import Placement
    line = (f"MoE: {m.distinct_experts_per_layer:.1f} distinct experts per layer, "
            f"active parameters {m.active_param_fraction:.1%}")
    if m.cache.hit_rate is not None and (cache_policy(m.cache.policy).keeps or m.prefetch.enabled):
        line += f", SRAM hit rate {m.cache.hit_rate:.1%}"
    if m.prefetch.enabled:
        line += (f", prefetch precision {m.prefetch.precision:.0%} recall {m.prefetch.recall:.0%}, "
                 f"wait {m.prefetch.expert_load_wait_ms:.3f} ms")
    if Placement(m.placement) is Placement.PER_EXPERT:
        line += f", expert bytes per stack max/mean {m.expert_stack_imbalance:.2f}"
    return line


def _print_summary(s, paths: dict, figures: str) -> None:
    """The run's summary (hwsim.summary.RunSummary), read by its parts, on the terminal."""
    console = Console()
    itl = s.itl_ms
    verdict = "[green]within[/]" if itl["p99"] <= s.budget_ms else "[red]over[/]"
    shape = (f"batch {s.batch_size}, context {s.context_tokens}" if s.batch_size is not None
             else "continuous batching")
    console.print(f"[bold]{s.model}[/] on [bold]{s.hardware}[/], {shape}, {s.launch} launch")
    console.print(_headline(s, verdict))
    console.print(f"[dim]how far to trust it: {s.hardware_uncertainty}[/]")
    if v := s.serving:
        console.print(f"serving {v.requests_completed} requests: TTFT p50 {s.ttft_ms['p50']:.1f} ms, "
                      f"p99 {s.ttft_ms['p99']:.1f} ms; {v.throughput_tok_s:.0f} tokens/s; "
                      f"{v.slo_attainment:.1%} of tokens within budget; goodput {v.goodput_rps:.2f} req/s; "
                      f"queue p99 {v.queue_ms_p99:.1f} ms")
        if sp := s.speculative:
            console.print(_speculation_line(sp))
    elif s.ttft_ms:
        console.print(f"time to first token (one prefill) {s.ttft_ms['p50']:.3f} ms")
    console.print(_breakdown_table(s))
    gb = {k: v / 1e9 for k, v in s.bytes.items()}
    console.print(f"HBM bytes per step: weights {gb['weights']:.2f} GB, KV {gb['kv']:.3f} GB; "
                  f"{s.kernels_per_step:g} kernels per step")
    if m := s.moe:
        console.print(_moe_line(m))
    if (k := s.kv).effective_bits_per_element < 16:
        verdict = (f"; its attention path {k.attention_speedup:.2f}x the speed of a bf16 cache's"
                   if k.attention_speedup is not None else "")
        console.print(f"KV cache: {k.effective_bits_per_element:.2f} bits per element "
                      f"({k.byte_ratio:.1f}x fewer bytes{verdict}), {k.dequant} dequant, "
                      f"attention output error {k.attention_rel_error:.3f}")
        from hwsim.model.dequant_kernels import spread_line     # the spread over kernel families
        if spread := spread_line(f"{k.effective_bits_per_element:.2f}-bit KV attention",
                                 k.attention_speedup_by_kernel, k.kernel_basis):
            console.print(spread, soft_wrap=True)       # one line, however narrow the terminal
    if by := s.weights.expert_gemm_speedup_by_kernel:
        from hwsim.model.dequant_kernels import spread_line
        console.print(spread_line(f"{s.weights.experts.format} expert GEMM at {by['rows']} rows", by,
                                  s.weights.kernel_basis, s.weights.expert_gemm_kernel), soft_wrap=True)
    if p := s.power:
        clock = (f"settled at {p.sm_clock_mhz:.0f} MHz (the limit; {p.watts_at_max_clock:.0f} W "
                 f"at {p.max_clock_mhz:.0f} MHz)" if p.throttled else f"{p.sm_clock_mhz:.0f} MHz")
        per_token = _energy_per_token(p, s)
        console.print(f"power: {p.watts:.0f} W of {p.limit_w:.0f} W, SMs {clock}{per_token}")
    for w in s.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    more = "; the other figures: run with --plots" if figures == "breakdown" else ""
    console.print(f"bundle: {paths['manifest.json'].parent}/ ({', '.join(paths)}){more}")
    console.print(f"[dim]{s.sim.events} events in {s.sim.wall_s:.2f} s wall[/]")


@app.command(cls=FlagCommand)
@cli_errors
def validate(
    dataset: Path = typer.Argument(..., help="CSV of measured cases (see docs/validation.md)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
    sets: list[str] = typer.Option([], "--set", help="scenario override applied to every row, "
                                   "e.g. runtime.attention_kernel=cudnn (repeatable)"),
):
    """Predict each measured case and report the error (exit 1 if any row failed)."""
    from hwsim import pipeline

    _no_cycle_collection()
    from hwsim.validate import load_dataset, validate_rows

    loaded = pipeline.load(None, sets)     # a bad override fails here, once, before any row runs
    with loaded.located():
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


@app.command(cls=FlagCommand)
@cli_errors
def sweep(
    spec: Path = typer.Argument(..., help="sweep spec YAML (docs/sweeps.md)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of a running Dask scheduler"),
    workers: Optional[int] = typer.Option(None, "--workers", help="worker processes of the embedded Dask "
                                          "LocalCluster (default: 1; ignored with --scheduler)"),
    out: Optional[Path] = typer.Option(None, "--out", help="results folder (default: reports/<sweep name>)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    max_wall_s: Optional[float] = typer.Option(None, "--max-wall-s", help=MAX_WALL_HELP + ", per point"),
    max_gb: Optional[float] = typer.Option(None, "--max-gb", help=MAX_GB_HELP + ", per point"),
):
    """Run every point of a what-if study on Dask; resumable, results in Parquet.

    Exit 1 if any point failed."""
    from hwsim.cost import limits_from_env
    from hwsim.config.load import scenario_path
    from hwsim.sweep.runner import check_sweep_out, run_sweep
    from hwsim.sweep.spec import load_sweep

    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"expected 1 to {MAX_WORKERS} workers, got {workers}", key="--workers")
    limits = (_positive(max_wall_s, "--max-wall-s"), _positive(max_gb, "--max-gb"))
    sweep_spec, points = load_sweep(scenario_path(spec), cost_limits=limits)
    out = out or Path("reports") / sweep_spec.name
    _writable_parent(out)
    check_sweep_out(out)
    out.mkdir(exist_ok=True)
    try:
        with _progress(enabled=not (json_out and sys.stderr.isatty())) as progress:
            summary = run_sweep(points, out, scheduler=scheduler, workers=workers, progress=progress,
                                announce=_announce_dashboard, max_gb=limits[1] or limits_from_env()[1])
    except KeyboardInterrupt:
        _say("interrupted", "finished points are kept; run the same command to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    import pandas as pd

    from hwsim.io.bundle import write_manifest
    from hwsim.pipeline import sweep_manifest
    from hwsim.plots.study import save_study_pngs

    table = pd.read_parquet(summary["results"])
    budget = float(points[0]["scenario"]["budget_ms"])
    plots = save_study_pngs(table, budget, out)
    for name in STUDY_PLOTS - set(plots):      # a plot this study does not make is not left from another
        (out / name).unlink(missing_ok=True)
    write_manifest(out, sweep_manifest(sweep_spec, spec, summary, plots, points))
    if json_out:
        _json_line(summary)
    else:
        Console().print(f"{summary['points']} points: {summary['computed']} computed, {summary['reused']} "
                        f"reused, {summary['failed']} failed; results {summary['results']}")
    if summary["failed"]:
        _say("error", f"{summary['failed']} of {summary['points']} points failed; first: "
                      f"{summary.get('first_error') or 'see the error column of results.parquet'}")
        raise typer.Exit(EXIT_FAILED)


def _announce_dashboard(link: str) -> None:
    import importlib.util

    served = "" if importlib.util.find_spec("bokeh") else " (its pages need bokeh: pip install bokeh)"
    err_console().print(f"Dask dashboard: {link}{served}", highlight=False, soft_wrap=True)


@app.command(cls=FlagCommand)
@cli_errors
def report(folder: Path = typer.Argument(..., help="a run bundle or sweep folder")):
    """Write a self-contained index.html for a run or a sweep."""
    from hwsim.report import write_report

    path, missing = write_report(folder)
    for line in missing:
        err_console().print(f"[yellow]note:[/] {line}", highlight=False, soft_wrap=True)
    Console().print(f"wrote {path}")


@app.command("list", cls=FlagCommand)
@cli_errors
def list_(json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout")):
    """List what can be named without a path: profiles, topologies, models, scenarios, sweeps, presets."""
    from hwsim.config.catalog import catalog

    found = catalog()
    if json_out:
        _json_line(found)
        return
    console = Console()
    for kind, names in found.items():
        console.print(f"[bold]{kind}[/] ({len(names)}): {', '.join(names)}", highlight=False, soft_wrap=True)
model_app = typer.Typer(no_args_is_help=True, cls=FlagGroup,
                        help="Model shapes: import a Hugging Face config.json.")
app.add_typer(model_app, name="model")


@model_app.command("import", cls=FlagCommand)
@cli_errors
def model_import(path: str = typer.Argument(..., help="a config.json, or a folder holding one (and "
                                                      "hf_quant_config.json)"),
                 out: Optional[Path] = typer.Option(None, "-o", "--out", help="write the model YAML here "
                                                    "(default: print it)"),
                 json_out: bool = typer.Option(False, "--json", help="print one JSON object: params.total, "
                                               "params.active_per_token, kv_bytes_per_token, "
                                               "sliding_window_layers")):
    """The model YAML equivalent to a Hugging Face config.json, each key commented with its field."""
    from hwsim.model.hf_import import import_config
    from hwsim.model.hf_import.yaml_out import model_yaml

    imported = import_config(path)
    text = model_yaml(imported)
    if out is not None:
        out.write_text(text)
    if json_out:
        _json_line(imported.figures() | ({"written": str(out)} if out is not None else {}))
    elif out is None:
        sys.stdout.write(text)
    else:
        Console().print(f"wrote {out}", highlight=False)


# -- what would change it (issue 34, docs/whatif.md): sensitivity and goal-seek ---------------

@app.command(cls=FlagCommand)
@cli_errors
def sensitivity(
    scenario: Optional[Path] = typer.Argument(None, help="scenario YAML (default: scenarios/default.yaml)"),
    set_: list[str] = typer.Option([], "--set", help="override a key: dotted.key=value (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder (default: reports/<scenario name>-sensitivity)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
    workers: Optional[int] = typer.Option(None, "--workers", help="workers of an embedded Dask LocalCluster"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of a running Dask scheduler"),
):
    """Rank every number the run reads by the token's elasticity to it; tornado.png.

    Each number changed alone by 5% either way (docs/whatif.md); the prefill's too where the
    scenario has one."""
    from hwsim.whatif.numbers import load_base
    from hwsim.whatif.sensitivity import sensitivity as run_sensitivity

    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"expected 1 to {MAX_WORKERS} workers, got {workers}", key="--workers")
    base = load_base(scenario, set_)
    with base.located():          # a key found wrong after loading: at its scenario file and line
        out = out or Path("reports") / f"{base.cfg.name}-sensitivity"
        _whatif_target(out)
        result, summary = run_sensitivity(base, workers=workers, scheduler=scheduler,
                                          progress=lambda line: typer.echo(line, err=True))
        _whatif_folder(out, base, summary, {"sensitivity": result},
                       lambda path: __import__("hwsim.plots.tornado", fromlist=["x"]).save_tornado_png(result, path),
                       "tornado.png")
        if json_out:
            _json_line(result)
            return
        table = Table(title=f"what moves the token ({result['itl_ms']:.3f} ms; each number +/-5%)", show_edge=False)
        for col in ("number", "elasticity", "ms gained by +10%", "TTFT elasticity"):
            table.add_column(col, justify="left" if col == "number" else "right")
        for r in result["rows"]:
            ttft = r["ttft_elasticity"]
            table.add_row(r["key"], f"{r['itl_elasticity']:+.3f}", f"{r['itl_ms_gained_10pct']:+.3f}",
                          "" if ttft is None else f"{ttft:+.3f}")
        console = Console()
        console.print(table)
        console.print(f"[dim]no effect: {', '.join(result['no_effect']) or 'none'}[/]")
        for f in result["failed"]:
            console.print(f"[yellow]not run:[/] {f['key']}: {f['error']}")
        console.print(f"folder: {out}/ ({result['runs']} runs in {result['wall_s']:.1f} s)")


@app.command(cls=FlagCommand)
@cli_errors
def goal(
    scenario: Optional[Path] = typer.Argument(None, help="scenario YAML (default: scenarios/default.yaml)"),
    vary: list[str] = typer.Option(..., "--vary", help="the number to find: a profile path "
                                   "(hbm.peak_bandwidth_gbps) or a scenario key; twice: a frontier"),
    target: str = typer.Option(..., "--target", help="METRIC=VALUE, e.g. itl_ms.p50=10"),
    set_: list[str] = typer.Option([], "--set", help="override a key: dotted.key=value (repeatable)"),
    bracket: Optional[str] = typer.Option(None, "--bracket", help="LO,HI: search only here (one --vary)"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder for a frontier (default: reports/<scenario name>-goal)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
):
    """Find the value of a number that meets a target; two --vary: a frontier (frontier.png).

    Exit 2 when no value in its bounds can, naming what then dominates (docs/whatif.md)."""
    from hwsim.whatif.goal import Unreachable, frontier, goal as run_goal, parse_target
    from hwsim.whatif.numbers import evaluate, load_base

    if len(vary) > 2 or len(set(vary)) < len(vary):
        raise ConfigError(f"--vary names {', '.join(vary)}: one number, or two different ones (a frontier)",
                          key="--vary")
    path, value = parse_target(target)
    span = _bracket_option(bracket) if bracket else None
    base = load_base(scenario, set_)
    with base.located():          # a key found wrong after loading: at its scenario file and line
        if len(vary) == 2:
            if span:
                raise ConfigError("--bracket is for one --vary", key="--bracket")
            out = out or Path("reports") / f"{base.cfg.name}-goal"
            _whatif_target(out)
            front = frontier(base, vary[0], vary[1], path, value)
            title = f"{base.cfg.model} on {base.cfg.hardware}: {path} = {value:g}"
            _whatif_folder(out, base, evaluate(base, {}), {"frontier": front},
                           lambda p: __import__("hwsim.plots.tornado", fromlist=["x"]).save_frontier_png(front, p, title),
                           "frontier.png")
            if json_out:
                _json_line(front)
                return
            a, b = front["keys"]
            for p in front["points"]:
                Console().print(f"{a} = {p[a]:.5g}: {b} = " + ("[red]none in its bounds[/]" if p[b] is None
                                                             else f"{p[b]:.5g}"))
            Console().print(f"figure: {out / 'frontier.png'}")
            return
        try:
            result = run_goal(base, vary[0], path, value, span)
        except Unreachable as exc:
            if json_out:
                _json_line(exc.report)
            raise
        if json_out:
            _json_line(result)
            return
        Console().print(f"{result['key']} = {result['value']:.6g} (now {result['present_value']:.6g}, "
                        f"x{result['change']:.3f}) gives {path} = {result['metric']:.4f}; there "
                        f"{result['dominant']} takes {result['dominant_share']:.0%} of the token "
                        f"[dim]({result['runs']} runs, bracket {result['bracket'][0]:.5g}..{result['bracket'][1]:.5g})[/]")


def _bracket_option(text: str) -> tuple[float, float]:
    import math
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        lo = hi = math.nan
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        raise ConfigError(f"expected LO,HI (two different numbers), got '{text}'", key="--bracket")
    return lo, hi


WHATIF_FILES = {"manifest.json", "tornado.png", "frontier.png", "index.html"}


def _whatif_target(out: Path) -> None:
    """Fail before the runs if `out` cannot take a what-if's folder: absent, empty or an earlier
    what-if's (manifest.json written over, as a run's bundle is replaced: never a run bundle's
    or anyone else's folder)."""
    from hwsim.io.atomic import check_folder_target

    _writable_parent(out)
    check_folder_target(out, _is_whatif_folder)


def _is_whatif_folder(folder: Path) -> bool:
    """Only files a what-if writes (and `hwsim report` beside them), its manifest one of ours."""
    from hwsim.io.bounded import LIMITS, read_json

    entries = list(folder.iterdir())
    if any(e.is_symlink() or not e.is_file() or e.name not in WHATIF_FILES for e in entries):
        return False
    try:
        manifest = read_json(folder / "manifest.json", LIMITS["manifest"])
    except (ConfigError, ValueError):
        return False
    return isinstance(manifest, dict) and "provenance" in manifest and \
        ("sensitivity" in manifest or "frontier" in manifest)


def _whatif_folder(out: Path, base, summary: dict | None, result: dict, draw, figure: str) -> None:
    """A what-if's folder: manifest.json (hwsim/pipeline.py whatif_manifest: `hwsim report`
    renders it) and its figure."""
    from hwsim.io.atomic import atomic_write
    from hwsim.io.bundle import write_manifest
    from hwsim.pipeline import whatif_manifest

    out.mkdir(exist_ok=True)
    manifest = whatif_manifest(base, result, summary)
    atomic_write(out / figure, draw)
    write_manifest(out, manifest)


# Set by main(): this process ends when its one command does (not so under CliRunner or a
# library caller, which go on to other work).
_process_ends_with_command = False


def _no_cycle_collection() -> None:
    """Switch the cyclic garbage collector off for the rest of a process that ends with this
    command. A run pauses it while it allocates (hwsim.results.cyclic_gc_paused), and switched
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


def _discard_stdout() -> None:
    """What is left for stdout goes nowhere (its reader is gone): Python's own flush at exit
    would otherwise fail again and exit 120."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _standard_streams() -> None:
    """A stream closed before hwsim started (`hwsim run >&-`) is None in Python: writes go nowhere."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))


def main() -> None:
    global _process_ends_with_command
    _process_ends_with_command = True
    _standard_streams()
    try:
        app()
        code = 0
    except SystemExit as exc:
        if not _kept or not (exc.code is None or isinstance(exc.code, int)):
            raise
        code = exc.code or 0
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        _discard_stdout()
    except OSError:
        raise SystemExit(code) from None        # the usual exit, which reports it
    if _kept:
        os._exit(code)


if __name__ == "__main__":
    main()
