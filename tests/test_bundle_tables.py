"""The bundle's tables, now built column by column without pandas, hold exactly what the
row-dict pandas frames of earlier revisions held (values, types, CSV text)."""

from pathlib import Path

import pandas as pd
import pytest

from hwsim.config.load import load_scenario
from hwsim.io.bundle import breakdown_columns, iterations_columns
from hwsim.io.tables import records_columns, rows_to_columns, write_csv, write_parquet
from hwsim.metrics import Component
from hwsim.pipeline import run_config

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def old_records_frame(result) -> pd.DataFrame:
    """events.parquet as the row-dict code of earlier revisions built it."""
    rows = []
    for r in result.records:
        row = {"step": r.step, "index": r.index, "kernel": r.name, "layer": r.layer,
               "t_ready_us": r.t_ready * 1e6, "t_start_us": r.t_start * 1e6, "t_end_us": r.t_end * 1e6,
               "tiles": r.tiles, "waves": r.waves, "hbm_read_bytes": r.hbm_read_bytes,
               "hbm_write_bytes": r.hbm_write_bytes, "l2_bytes": r.l2_bytes, "data": r.data.value}
        attribution = r.attribution
        for c in Component:
            row[f"{c.value}_us"] = attribution.get(c, 0.0) * 1e6
        rows.append(row)
    return pd.DataFrame(rows)


def old_breakdown_frame(result) -> pd.DataFrame:
    rows = []
    for s in result.steps:
        row = {"step": s.step, "phase": s.phase, "batch": s.batch, "context": s.context,
               "duration_ms": s.duration_s * 1e3}
        row.update({k: v * 1e3 for k, v in s.breakdown_s.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def tables(tmp_path, *sets):
    """The run's tables written as write_bundle writes them (without the plots)."""
    result = run_config(load_scenario(None, list(sets)))
    paths = {name: tmp_path / name for name in
             ("events.parquet", "breakdown.csv", "requests.parquet", "iterations.csv")}
    if result.iterations:
        write_parquet(rows_to_columns(result.requests), paths["requests.parquet"])
        write_csv(iterations_columns(result), paths["iterations.csv"])
    else:
        write_parquet(records_columns(result.records), paths["events.parquet"])
        write_csv(breakdown_columns(result), paths["breakdown.csv"])
    return result, paths


def test_events_and_breakdown_equal_the_pandas_frames(tmp_path):
    # prefetch waits and a prefill pass (step -1) exercise every attribution term
    result, paths = tables(tmp_path, "workload.decode_steps=2", "moe.prefetch.enabled=true",
                           "workload.prompt_tokens=64")
    old = old_records_frame(result)
    new = pd.read_parquet(paths["events.parquet"])
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    (tmp_path / "old.csv").write_text(old_breakdown_frame(result).to_csv(index=False))
    assert paths["breakdown.csv"].read_text() == (tmp_path / "old.csv").read_text()


def test_serving_tables_equal_the_pandas_frames(tmp_path):
    result, paths = tables(tmp_path, f"model={TINY}", "workload.arrivals.kind=poisson",
                           "workload.arrivals.rate_per_s=50", "workload.arrivals.requests=6",
                           "workload.prompt.tokens=128", "workload.output.tokens=4")
    pd.testing.assert_frame_equal(pd.read_parquet(paths["requests.parquet"]),
                                  pd.DataFrame(result.requests), check_exact=True)
    old = pd.DataFrame([{"t_start_ms": it.t_start * 1e3, "duration_ms": it.duration_s * 1e3,
                         "decodes": it.decodes, "prefill_tokens": it.prefill_tokens,
                         "waiting": it.waiting, **{k: v * 1e3 for k, v in it.breakdown_s.items()}}
                        for it in result.iterations])
    assert paths["iterations.csv"].read_text() == old.to_csv(index=False)
    assert list(iterations_columns(result)) == list(old.columns)
    assert breakdown_columns(result) == {"step": [], "phase": [], "batch": [], "context": [],
                                         "duration_ms": []}
