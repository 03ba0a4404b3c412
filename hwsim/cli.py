"""The command line: a thin typer app over run_scenario and friends.

User errors (ConfigError) print one line to stderr and exit with status 2, no traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from hwsim.errors import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="hwsim: where does each token's latency budget go when a sparse MoE LLM decodes?")
err_console = Console(stderr=True)


def _fail(exc: ConfigError) -> None:
    err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command()
def run(
    scenario: Optional[Path] = typer.Argument(None, help="scenario YAML (default: scenarios/default.yaml)"),
    set_: list[str] = typer.Option([], "--set", help="override a key: dotted.key=value (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", help="bundle folder (default: reports/<scenario name>)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    trace: bool = typer.Option(False, "--trace", help="also write trace.json (Chrome/Perfetto trace events)"),
):
    """Simulate a scenario and write a run bundle."""
    from hwsim.build import build
    from hwsim.config.load import load_scenario
    from hwsim.io.bundle import write_bundle
    from hwsim.provenance import provenance
    from hwsim.run import run_scenario

    try:
        cfg = load_scenario(scenario, set_)
        built = build(cfg)
        out = out or Path("reports") / cfg.name
        if out.exists() and not out.is_dir():
            raise ConfigError("--out names a file, not a folder", file=str(out), key="--out")
        started = time.time()
        with _progress(enabled=not json_out and sys.stderr.isatty()) as progress:
            result = run_scenario(cfg, built, progress=progress)
    except ConfigError as exc:
        _fail(exc)
    manifest = {
        "summary": result.summary,
        "scenario_file": str(scenario) if scenario else "scenarios/default.yaml",
        "overrides": set_,
        "resolved_config": cfg.model_dump(mode="json"),
        "hardware_profile": built.profile.model_dump(mode="json"),
        "model_shape": built.model.model_dump(mode="json"),
        "seed": cfg.seed,
        "started_unix": started,
        "wall_s": result.summary["sim"]["wall_s"],
        "provenance": provenance(),
        "error": None,
    }
    paths = write_bundle(result, out, manifest)
    if trace:
        from hwsim.io.atomic import atomic_write
        from hwsim.io.trace import write_trace
        paths["trace.json"] = out / "trace.json"
        atomic_write(paths["trace.json"], lambda p: write_trace(result, built, p))
    if json_out:
        sys.stdout.write(json.dumps(result.summary, default=str) + "\n")
        return
    _print_summary(result.summary, paths)


class _progress:
    """A progress bar on stderr (requests or steps done); a no-op when stderr is no terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
        self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                            transient=True)
        self.bar.start()
        self.task = self.bar.add_task("simulating", total=None)
        return self.update

    def update(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False


def _print_summary(s: dict, paths: dict) -> None:
    console = Console()
    itl = s["itl_ms"]
    verdict = "[green]within[/]" if itl["p99"] <= s["budget_ms"] else "[red]over[/]"
    console.print(f"[bold]{s['model']}[/] on [bold]{s['hardware']}[/], batch {s['batch_size']}, "
                  f"context {s['context_tokens']}, {s['launch']} launch")
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
    for w in s["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"bundle: {paths['manifest.json'].parent}/ ({', '.join(paths)})")
    console.print(f"[dim]{s['sim']['events']} events in {s['sim']['wall_s']:.2f} s wall[/]")


@app.command()
def validate(
    dataset: Path = typer.Argument(..., help="CSV of measured cases (see docs/validation.md)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
    sets: list[str] = typer.Option([], "--set", help="scenario override applied to every row, "
                                   "e.g. runtime.attention_kernel=cudnn (repeatable)"),
):
    """Predict each measured case and report the error."""
    from hwsim.config.load import load_scenario
    from hwsim.validate import load_dataset, validate_rows

    try:
        load_scenario(None, sets)          # a bad override fails here, once, before any row runs
        rows = load_dataset(dataset)
    except ConfigError as exc:
        _fail(exc)
    report = validate_rows(rows, sets)
    if json_out:
        sys.stdout.write(json.dumps(report) + "\n")
        return
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
    console.print(f"median |error| {report['median_abs_error_pct']:.1f}%, "
                  f"max |error| {report['max_abs_error_pct']:.1f}%, failed rows {report['failed']}")


@app.command()
def sweep(
    spec: Path = typer.Argument(..., help="sweep spec YAML (docs/sweeps.md)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of a running Dask scheduler"),
    workers: Optional[int] = typer.Option(None, "--workers", help="workers of the embedded LocalCluster"),
    out: Optional[Path] = typer.Option(None, "--out", help="results folder (default: reports/<sweep name>)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
):
    """Run every point of a what-if study on Dask; resumable, results in Parquet."""
    from hwsim.provenance import provenance
    from hwsim.sweep.runner import run_sweep
    from hwsim.sweep.spec import load_sweep

    try:
        sweep_spec, points = load_sweep(spec)
    except ConfigError as exc:
        _fail(exc)
    out = out or Path("reports") / sweep_spec.name
    out.mkdir(parents=True, exist_ok=True)
    try:
        with _progress(enabled=not json_out and sys.stderr.isatty()) as progress:
            summary = run_sweep(points, out, scheduler=scheduler, workers=workers, progress=progress)
    except ConfigError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted: finished points are kept; run the same command to resume")
        raise typer.Exit(130) from None
    import pandas as pd

    from hwsim.io.atomic import atomic_write
    from hwsim.plots.study import save_study_pngs

    table = pd.read_parquet(summary["results"])
    budget = float(points[0]["scenario"]["budget_ms"])
    plots = save_study_pngs(table, budget, out)
    manifest = {"sweep": sweep_spec.model_dump(mode="json"), "spec_file": str(spec),
                "summary": summary, "plots": [str(p) for p in plots.values()],
                "provenance": provenance()}
    atomic_write(out / "manifest.json",
                 lambda p: Path(p).write_text(json.dumps(manifest, indent=2, default=str) + "\n"))
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    Console().print(f"{summary['points']} points: {summary['computed']} computed, {summary['reused']} "
                    f"reused, {summary['failed']} failed; results {summary['results']}")


@app.command()
def report(folder: Path = typer.Argument(..., help="a run bundle or sweep folder")):
    """Write a self-contained index.html for a run or a sweep."""
    from hwsim.report import write_report

    try:
        path = write_report(folder)
    except ConfigError as exc:
        _fail(exc)
    Console().print(f"wrote {path}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
