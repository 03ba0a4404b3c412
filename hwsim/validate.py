"""`hwsim validate`: predict measured whole steps and report the error.

Dataset format (a public contract, docs/validation.md): CSV with columns
name, hardware, model, phase, batch, context_tokens, prompt_tokens, kv_bits, launch,
measured_ms[, notes]. Decode rows are one decode step of the whole batch with each sequence
holding context_tokens of KV; prefill rows are one forward pass over prompt_tokens tokens of
one sequence. The simulator follows the measured software schedule (runtime.moe_schedule
per-expert, uniform random top-k routing); no per-row or per-model factor is applied.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from pydantic import ValidationError

from hwsim.build import build
from hwsim.config.scenario import Scenario
from hwsim.errors import ConfigError
from hwsim.run import simulate_pass
from hwsim.model.schedule import StepShape

REQUIRED = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens",
            "kv_bits", "launch", "measured_ms"]
ROUTING_DRAWS = 3     # decode rows: mean over this many routing draws (the measured routing is one draw)


def load_dataset(path: Path) -> list[dict]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise ConfigError(f"missing column(s): {', '.join(missing)}", file=str(path), line=1)
            rows = []
            for i, raw in enumerate(reader, start=2):
                row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
                row["_line"] = i
                rows.append(row)
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"cannot read CSV: {exc}", file=str(path)) from None
    return rows


def _row_scenario(row: dict) -> tuple[Scenario, StepShape]:
    def num(key: str) -> int:
        try:
            return int(float(row[key] or 0))
        except ValueError:
            raise ValueError(f"column {key}: not a number ({row[key]!r})") from None

    phase = row["phase"]
    if phase not in ("decode", "prefill"):
        raise ValueError(f"phase must be decode or prefill, got {phase!r}")
    batch, context, prompt = num("batch"), num("context_tokens"), num("prompt_tokens")
    if phase == "decode":
        shape = StepShape("decode", batch, batch, context)
    else:
        shape = StepShape("prefill", 1, prompt, 0)
    try:
        cfg = _scenario({
            "name": row["name"], "hardware": row["hardware"], "model": row["model"],
            "workload": {"batch_size": max(batch, 1), "context_tokens": max(context, 1),
                         "decode_steps": 1, "prompt_tokens": prompt},
            "runtime": {"launch": row["launch"]}, "kv_cache": {"bits": num("kv_bits")},
        })
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{key}: {err['msg']} (got {err.get('input')!r})") from None
    return cfg, shape


def _scenario(data: dict) -> Scenario:
    return Scenario.model_validate(data)


def predict_ms(row: dict) -> float:
    cfg, shape = _row_scenario(row)
    draws = ROUTING_DRAWS if shape.phase == "decode" else 1
    built = build(cfg)
    times = []
    for draw in range(draws):
        built.env.run()                       # a fresh pass on an idle chip
        times.append(simulate_pass(built, shape, draw, []).duration_s * 1e3)
    return statistics.fmean(times)


def validate_rows(rows: list[dict]) -> dict:
    out = []
    for row in rows:
        name = row.get("name") or f"line {row['_line']}"
        entry = {"name": name, "predicted_ms": None, "measured_ms": None, "error_pct": None}
        try:
            measured = float(row["measured_ms"])
            entry["measured_ms"] = measured
            if measured <= 0:
                raise ValueError("measured_ms must be > 0")
            predicted = predict_ms(row)
            entry["predicted_ms"] = predicted
            entry["error_pct"] = (predicted - measured) / measured * 100
        except ConfigError as exc:
            entry["error"] = f"line {row['_line']}: {exc.render()}"
        except (ValueError, KeyError) as exc:
            entry["error"] = f"line {row['_line']}: {str(exc).splitlines()[0]}"
        out.append(entry)
    errs = [abs(r["error_pct"]) for r in out if r["error_pct"] is not None]
    return {
        "rows": out,
        "median_abs_error_pct": statistics.median(errs) if errs else None,
        "max_abs_error_pct": max(errs) if errs else None,
        "failed": sum(1 for r in out if r["error_pct"] is None),
    }
