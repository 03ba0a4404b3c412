"""`hwsim validate`: predict measured whole steps and report the error.

Dataset format (a public contract, docs/validation.md): CSV with columns
name, hardware, model, phase, batch, context_tokens, prompt_tokens, kv_bits, launch,
measured_ms[, notes, split, overrides, moe_schedule, weights]. Decode rows are one decode step
of the whole batch with each sequence holding context_tokens of KV; prefill rows are one forward pass over
prompt_tokens tokens of one sequence. The simulator follows the measured software schedule (runtime.moe_schedule
per-expert, uniform random top-k routing); no per-row or per-model factor is applied.
Optional columns: `split` (e.g. cal / test) groups the summary; `overrides` holds scenario
overrides the row was measured with, `key=value` pairs separated by `;` (as `--set` takes them);
`moe_schedule` and `weights` name the row's MoE kernel schedule and the format of its attention
and expert linears (router and LM head stay bf16), as the MoE grid was measured; `notes` is for
people. `kernel_trace` (with `trace_batch` and `trace_context_tokens`, default the row's batch and
context) predicts the row from a profiler trace of the measured stack (docs/traces.md).
Any other column is an error: a column the simulator did not read would silently change what a
row means.
"""

from __future__ import annotations

import csv
import functools
import math
import statistics
from pathlib import Path

from pydantic import ValidationError

from hwsim import pipeline
from hwsim.cost import estimate
from hwsim.config.load import apply_overrides, load_model
from hwsim.config.names import check_name
from hwsim.config.scenario import Scenario
from hwsim.config.yaml_lines import LoadedYaml
from hwsim.errors import ConfigError
from hwsim.hw.power import Activity, clock_choice, settle
from hwsim.io.bounded import LIMITS, open_text
from hwsim.io.forked import map_side_by_side
from hwsim.results import cyclic_gc_paused
from hwsim.run import power_model
from hwsim.step import PassPlan, simulate_pass
from hwsim.model.schedule import StepShape

REQUIRED = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens",
            "kv_bits", "launch", "measured_ms"]
OPTIONAL = ["notes", "split", "overrides", "moe_schedule", "weights", "kernel_trace", "trace_batch",
            "trace_context_tokens"]
ROUTING_DRAWS = 3     # decode rows: mean over this many routing draws (the measured routing is one draw)


def load_dataset(path: Path) -> list[dict]:
    try:
        with open_text(path, LIMITS["validation CSV"], newline="") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                trace = " (a kernel trace: validation/compare_kernels.py reads it)" if "kernel" in header else ""
                raise ConfigError(f"missing column(s): {', '.join(missing)}{trace}", file=str(path), line=1)
            unknown = [c for c in header if c not in OPTIONAL and c not in REQUIRED]
            if unknown:
                raise ConfigError(f"unknown column; a dataset has {', '.join(REQUIRED)} and optionally "
                                  f"{', '.join(OPTIONAL)} (docs/validation.md)", file=str(path), line=1,
                                  key=unknown[0])
            rows = []
            for i, raw in enumerate(reader, start=2):
                if None in raw:
                    raise ConfigError("more fields than the header has columns (quote a notes field "
                                      "that contains a comma)", file=str(path), line=i)
                row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
                row["_line"] = i
                _check_row(row, path)
                rows.append(row)
                if len(rows) > MAX_ROWS:
                    raise ConfigError(f"more than {MAX_ROWS} rows; split the dataset", file=str(path), line=i)
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"cannot read CSV: {exc}", file=str(path)) from None
    if not rows:
        raise ConfigError("no data rows (only a header)", file=str(path), line=2)
    return rows


INT_COLUMNS = ("batch", "context_tokens", "prompt_tokens")
MAX_ROW_INT = 10_000_000      # tokens or sequences in one measured step
MAX_ROWS = 10_000             # cases in one dataset (each is simulated)


def _check_row(row: dict, path: Path) -> None:
    """Malformed values are errors in the dataset (exit 2), named by file, line and column;
    a row that names an unknown model or profile is only a failed row."""
    line = row["_line"]
    for col in INT_COLUMNS:
        value = row[col] or "0"
        if not (value.isascii() and value.isdigit()) or len(value) > 12:
            raise ConfigError(f"expected a whole number >= 0, got {value!r}", file=str(path), line=line, key=col)
    for col in ("kv_bits", "measured_ms"):
        try:
            value = float(row[col])
        except ValueError:
            raise ConfigError(f"expected a number, got {row[col]!r}", file=str(path), line=line, key=col) from None
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"expected a positive finite number, got {row[col]!r}", file=str(path),
                              line=line, key=col)
    if row["phase"] not in ("decode", "prefill"):
        raise ConfigError(f"phase must be decode or prefill, got {row['phase']!r}", file=str(path),
                          line=line, key="phase")
    needed = "batch" if row["phase"] == "decode" else "prompt_tokens"
    if int(row[needed] or 0) < 1:
        raise ConfigError(f"a {row['phase']} row needs {needed} of at least 1", file=str(path),
                          line=line, key=needed)
    for col in INT_COLUMNS:
        if int(row[col] or 0) > MAX_ROW_INT:
            raise ConfigError(f"{row[col]} is more than a measured case can have (at most {MAX_ROW_INT})",
                              file=str(path), line=line, key=col)
    if row["launch"] not in ("graph", "eager"):
        raise ConfigError(f"launch must be graph or eager, got {row['launch']!r}", file=str(path),
                          line=line, key="launch")


def _row_scenario(row: dict, sets: list[str] | None = None) -> tuple[Scenario, StepShape]:
    def num(key: str) -> int:
        return int(row[key] or 0)

    phase = row["phase"]
    batch, context, prompt = num("batch"), num("context_tokens"), num("prompt_tokens")
    if phase == "decode":
        shape = StepShape("decode", batch, batch, context)
    else:
        shape = StepShape("prefill", 1, prompt, 0)
    data = {
        "name": check_name_or_default(row["name"]), "hardware": row["hardware"], "model": row["model"],
        "workload": {"batch_size": max(batch, 1), "context_tokens": max(context, 1),
                     "decode_steps": 1, "prompt_tokens": prompt},
        "runtime": {"launch": row["launch"]}, "kv_cache": {"bits": float(row["kv_bits"])},
    }
    if row.get("kernel_trace"):
        data["workload"]["kernel_trace"] = trace_columns(row, batch, context)
    sets = [*(sets or []), *row_overrides(row)]
    if sets:    # --set overrides on every row (e.g. runtime.attention_kernel=cudnn), then the row's own
        apply_overrides(data, sets, LoadedYaml({}, {}, "--set"))
    try:
        cfg = _scenario(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{key}: {err['msg']} (got {err.get('input')!r})") from None
    return cfg, shape


def trace_columns(row: dict, batch: int, context: int) -> dict:
    """The row's workload.kernel_trace: the trace and the point it was recorded at."""
    def point(key: str, default: int) -> int:
        value = row.get(key) or str(default)
        if not (value.isascii() and value.isdigit()):
            raise ValueError(f"{key}: expected a whole number, got {value!r}")
        return int(value)
    return {"path": row["kernel_trace"], "batch_size": point("trace_batch", batch),
            "context_tokens": point("trace_context_tokens", context)}


def row_overrides(row: dict) -> list[str]:
    """The row's own scenario overrides: its `moe_schedule` and `weights` columns, then its
    `overrides` column (key=value;key=value)."""
    sets = []
    if row.get("moe_schedule"):
        sets.append(f"runtime.moe_schedule={row['moe_schedule']}")
    if row.get("weights"):
        sets += [f"weights.experts.format={row['weights']}", f"weights.attention.format={row['weights']}"]
    return sets + [part.strip() for part in (row.get("overrides") or "").split(";") if part.strip()]


def check_name_or_default(name: str) -> str:
    """A row's name, if it is a valid scenario name (it never becomes a path here)."""
    try:
        return check_name(name)
    except ValueError:
        return "validation-row"


def _scenario(data: dict) -> Scenario:
    return Scenario.model_validate(data)


def predict_ms(row: dict, sets: list[str] | None = None) -> float:
    """The row's pass on an idle chip (decode rows: the mean over ROUTING_DRAWS routings), at the
    SM clock the power limit settles it at when replayed back to back, as the row was measured
    (hwsim/hw/power.py; `runtime.sm_clock` says otherwise)."""
    cfg, shape = _row_scenario(row, sets)
    # a row keeps no kernel records (its passes run with records=None): say so, so that the
    # cost check does not count their memory
    cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"kernel_records": 0})})
    loaded = pipeline.from_config(cfg)
    pipeline.cost(loaded)              # a row is one step: refuse one that takes hours
    draws = ROUTING_DRAWS if shape.phase == "decode" else 1
    built = pipeline.checked_build(loaded)     # at a locked runtime.sm_clock, if one is set
    passes: dict[float, list] = {}
    # each draw's kernels, built at the first clock and replayed at the others: the schedule
    # does not read the clock (plan_pass), and building them was half of every probe
    plans: list[PassPlan] = []

    def simulate(clock_hz: float) -> tuple[float, Activity]:
        if clock_hz not in passes:
            b = built.at_sm_clock(clock_hz)
            passes[clock_hz] = []
            for draw in range(draws):
                b.env.run()                       # a fresh pass on an idle chip
                if len(plans) == draw:            # several GPUs: None, each pass plans itself
                    plans.append(b.gpus.plan(b, shape, draw))
                plan = plans[draw]
                passes[clock_hz].append(simulate_pass(b, shape, draw, None, plan=plan))
        done = passes[clock_hz]
        return sum(p.duration_s for p in done), sum((p.activity for p in done), Activity())

    power = power_model(built)
    settled = power and clock_choice(cfg.runtime.sm_clock).settles
    clock_hz = settle(power, simulate).clock_hz if settled else built.chip.clock_hz
    simulate(clock_hz)
    return statistics.fmean(p.duration_s for p in passes[clock_hz]) * 1e3


def validate_rows(rows: list[dict], sets: list[str] | None = None, workers: int | None = None) -> dict:
    """Predict every row (with the scenario overrides `sets`, as `hwsim run --set` takes them).
    Rows are independent (each builds its own chip and draws its own routing from its seed),
    so they run side by side on up to `workers` processes (default: one per CPU), each taking
    the next row, costliest first by estimate, as it finishes the last; the report is the same
    as row after row."""
    out = map_side_by_side(functools.partial(_predict_entry, sets=sets), rows,
                           [_row_cost(row, sets) for row in rows], workers)
    summary = error_summary([r["error_pct"] for r in out if r["error_pct"] is not None])
    report = {"rows": out, **summary, "failed": sum(1 for r in out if r["error_pct"] is None)}
    for column, key in (("model", "by_model"), ("split", "by_split")):
        groups = sorted({row.get(column) for row in rows if row.get(column)})
        if groups:
            report[key] = {g: error_summary([e["error_pct"] for row, e in zip(rows, out)
                                             if row.get(column) == g and e["error_pct"] is not None])
                           for g in groups}
    return report


def _system(cfg: Scenario):
    """A scenario made in code, built by the pipeline (a large serving row's cost rehearses on it)."""
    return pipeline.system(cfg)


def _row_cost(row: dict, sets: list[str] | None) -> float:
    """The row's estimated wall seconds (hwsim.cost), to start the costliest rows
    first; a row that cannot be set up costs nothing here (it fails where it runs)."""
    try:
        cfg, shape = _row_scenario(row, sets)
        passes = ROUTING_DRAWS if shape.phase == "decode" else 1
        return passes * estimate(cfg, load_model(cfg.model), _system).wall_s
    except Exception:            # noqa: BLE001 - reported by _predict_entry
        return 0.0


def _predict_entry(row: dict, sets: list[str] | None) -> dict:
    """One row's report entry: its prediction and error, or the one line saying why it failed."""
    name = row.get("name") or f"line {row['_line']}"
    entry = {"name": name, "model": row.get("model"), "predicted_ms": None, "measured_ms": None,
             "error_pct": None}
    if row.get("split"):
        entry["split"] = row["split"]
    try:
        measured = float(row["measured_ms"])
        entry["measured_ms"] = measured
        with cyclic_gc_paused():     # a row builds ~10^5 kernels: see hwsim/run.py
            predicted = predict_ms(row, sets)
        entry["predicted_ms"] = predicted
        entry["error_pct"] = (predicted - measured) / measured * 100
    except ConfigError as exc:
        entry["error"] = f"line {row['_line']}: {exc.render()}"
    except (ValueError, KeyError) as exc:
        entry["error"] = f"line {row['_line']}: {str(exc).splitlines()[0]}"
    except Exception as exc:   # noqa: BLE001 - one bad row fails alone, in one line
        entry["error"] = f"line {row['_line']}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return entry


def error_summary(errors: list[float]) -> dict:
    """Median and maximum absolute error, and the mean signed error (a bias: a simulator whose
    errors share one sign is missing a mechanism, however small the median), in percent."""
    return {
        "rows_predicted": len(errors),
        "median_abs_error_pct": statistics.median(abs(e) for e in errors) if errors else None,
        "max_abs_error_pct": max(abs(e) for e in errors) if errors else None,
        "mean_signed_error_pct": statistics.fmean(errors) if errors else None,
    }
