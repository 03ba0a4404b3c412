"""Run a sweep's points on Dask distributed; stream each result to its own Parquet part.

Results live in OUT/results/part-<hash>.parquet, one file per point, written atomically as
the point finishes. That directory is the Parquet table, and a resumed sweep (after Ctrl-C,
a killed worker or a killed client) reuses every part that holds a finished point and
recomputes the rest. A point that raises is recorded with status "failed" and its error;
it is retried on the next invocation. At the end, every part is gathered into
OUT/results.parquet.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pandas as pd

from hwsim.errors import ConfigError
from hwsim.io.atomic import atomic_write, check_folder_target
from hwsim.io.dask_client import dask_client, scheduler_address
from hwsim.sweep.groups import group_points, run_group

def _part(out: Path, h: str) -> Path:
    return out / "results" / f"part-{h}.parquet"


def is_sweep_folder(folder: Path) -> bool:
    from hwsim.io.bounded import LIMITS, read_json

    if (folder / "results").is_dir():
        return True
    try:
        return "sweep" in read_json(folder / "manifest.json", LIMITS["manifest"])
    except (ConfigError, ValueError, TypeError):
        return False


def check_sweep_out(out: Path) -> None:
    """A sweep folder is resumed in place: it may be new, empty or an earlier sweep's."""
    check_folder_target(out, is_sweep_folder)


def _write_part(out: Path, row: dict):
    """A finished point's part, written with pyarrow (the client writes one per point; through
    pandas each cost 12 ms of its CPU, this 4.5); returns its table."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pylist([row])
    atomic_write(_part(out, row["point"]), lambda p: pq.write_table(table, p))
    return table


def _gathered(written: dict, wanted: set[str]) -> list[pd.DataFrame]:
    """This run's parts (pyarrow tables) of the `wanted` points, as one frame."""
    import pyarrow as pa
    tables = [t for h, t in written.items() if h in wanted]
    return [pa.concat_tables(tables, promote_options="default").to_pandas()] if tables else []


def _remove_stale_parts(out: Path, wanted: set[str]) -> None:
    """Parts of points this sweep no longer has (an edited spec, profile or model changes the
    points' hashes) and parts that cannot be read: results.parquet, the index, is rewritten from
    the wanted points only, so these would only accumulate."""
    for part in (out / "results").glob("part-*.parquet"):
        h = part.name[len("part-"):-len(".parquet")]
        if h not in wanted or _read_part(part, columns=["point"]) is None:
            part.unlink(missing_ok=True)


def _read_part(part: Path, columns=None) -> pd.DataFrame | None:
    """A part, or None if it cannot be read (torn, truncated, unreadable): its point is then
    recomputed and the part replaced, and no later sweep trips over it."""
    try:
        return pd.read_parquet(part, columns=columns)
    except Exception:   # noqa: BLE001 - pyarrow raises many types for a bad file
        return None


def finished_points(out: Path) -> set[str]:
    done = set()
    for part in (out / "results").glob("part-*.parquet"):
        row = _read_part(part, columns=["point", "status"])
        if row is not None and len(row) and row["status"].iloc[0] == "ok":
            done.add(row["point"].iloc[0])
    return done


def _quiet_dask() -> None:
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _worker_count(client) -> int:
    try:
        return max(1, len(client.scheduler_info()["workers"]))
    except Exception:   # noqa: BLE001 - only a hint for splitting groups
        return 1


def run_sweep(points: list[dict], out: Path, *, scheduler: str | None = None, workers: int | None = None,
              progress=None, announce=None, max_gb: float | None = None) -> dict:
    """Run the points not yet in `out`; `announce(link)` is told the Dask dashboard's address
    once the cluster is up. `max_gb`: each point's memory cap (hwsim/sweep/groups.py run_group)."""
    from dask.distributed import as_completed

    scheduler_address(scheduler)        # a malformed address fails before anything is written
    (out / "results").mkdir(parents=True, exist_ok=True)
    for tmp in [*out.glob(".*.tmp"), *(out / "results").glob(".*.tmp")]:
        tmp.unlink(missing_ok=True)        # left by a sweep killed mid-write (atomic_write)
    done = finished_points(out)
    todo = [p for p in points if p["hash"] not in done]
    reused = len(points) - len(todo)
    computed = failed = 0
    written: dict = {}          # this run's parts, kept: gathered without reading them back
    if todo:
        with dask_client(scheduler, workers) as client:
            if announce:
                announce(client.dashboard_link)
            try:
                # points sharing their plans go to one worker together (hwsim/sweep/groups.py)
                groups = group_points(todo, _worker_count(client))
                futures = client.map(run_group, groups, pure=False, max_gb=max_gb, client_pid=os.getpid())
                size = {f.key: len(g) for f, g in zip(futures, groups)}
                finished = 0
                for future in as_completed(futures):
                    try:
                        rows = future.result()
                    except Exception as exc:   # noqa: BLE001 - a killed worker loses its group only
                        rows = [{"point": None, "status": "failed", "error": repr(exc)}] * size[future.key]
                    for row in rows:
                        if row.get("point"):
                            written[row["point"]] = _write_part(out, row)
                        computed += row["status"] == "ok"
                        failed += row["status"] != "ok"
                    finished += len(rows)
                    if progress:
                        progress(reused + finished, len(points))
            except KeyboardInterrupt:
                _quiet_dask()          # the shutdown below would log every cancelled task
                raise
    wanted = {p["hash"] for p in points}
    parts = [_read_part(_part(out, h)) for h in sorted(wanted - written.keys())]
    parts = [p for p in parts if p is not None] + _gathered(written, wanted)
    table = (pd.concat(parts, ignore_index=True).sort_values("point", kind="stable", ignore_index=True) if parts
             else pd.DataFrame({"point": [], "status": []}))
    _remove_stale_parts(out, wanted)
    results = out / "results.parquet"
    atomic_write(results, lambda p: table.to_parquet(p, index=False))
    bad = table[table["status"] != "ok"] if len(table) else table
    missing = len(wanted) - len(table)
    first_error = str(bad["error"].iloc[0]).splitlines()[-1] if len(bad) and "error" in bad else None
    return {"points": len(points), "computed": computed, "reused": reused,
            "failed": int(len(bad) + missing), "first_error": first_error, "results": str(results)}
