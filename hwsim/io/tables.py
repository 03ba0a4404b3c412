"""The bundle's tables built column by column and written with pyarrow / csv, not pandas.

A bundle of 8,000 kernel records spent 0.6 s building one dict a row for pandas, and pandas'
import alone cost as much again; the columns here carry the same values and types, so a
reader (pandas.read_parquet, pyarrow) sees the same table.
"""

from __future__ import annotations

import csv
from pathlib import Path

from hwsim.metrics import Component

# events.parquet column order (README, "The run bundle")
EVENT_COLUMNS = ("step", "index", "kernel", "layer", "t_ready_us", "t_start_us", "t_end_us", "tiles",
                 "waves", "hbm_read_bytes", "hbm_write_bytes", "l2_bytes", "data",
                 *(f"{c.value}_us" for c in Component))


def records_columns(records) -> dict[str, list]:
    """One list per events.parquet column, one entry per kernel record (attribution in us)."""
    cols: dict[str, list] = {name: [] for name in EVENT_COLUMNS}
    simple = [(cols[name], attr) for name, attr in (
        ("step", "step"), ("index", "index"), ("waves", "waves"))]
    comp_cols = [(c, cols[f"{c.value}_us"]) for c in Component]
    launch, wait = Component.LAUNCH_OVERHEAD, Component.EXPERT_LOAD_WAIT
    kernel, layer, tiles, data = cols["kernel"], cols["layer"], cols["tiles"], cols["data"]
    t_ready, t_start, t_end = cols["t_ready_us"], cols["t_start_us"], cols["t_end_us"]
    hbm_r, hbm_w, l2 = cols["hbm_read_bytes"], cols["hbm_write_bytes"], cols["l2_bytes"]
    for r in records:
        for col, attr in simple:
            col.append(getattr(r, attr))
        k = r.kernel
        kernel.append(k.name)
        layer.append(k.layer)
        tiles.append(k.tiles)
        data.append(k.data.value)
        t_ready.append(r.t_ready * 1e6)
        t_start.append(r.t_start * 1e6)
        t_end.append(r.t_end * 1e6)
        hbm_r.append(k.tiles * k.hbm_read)
        hbm_w.append(k.tiles * k.hbm_write)
        l2.append(k.tiles * (k.l2_read + k.l2_write))
        parts = r.parts
        for c, col in comp_cols:          # the same sums as KernelRecord.attribution
            v = parts.get(c, 0.0)
            if c is launch:
                v = v + r.launch_s
            elif c is wait and r.wait_s:
                v = v + r.wait_s
            col.append(v * 1e6)
    return cols


def _arrow_column(values: list):
    """A column typed as pandas types it: int64 (float64 if any float or None), large_string,
    bool or float64. Built from buffers: pyarrow.array() imports pandas (a second of a run)
    only to ask whether the values are a pandas Series."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    if n and all(type(v) is str for v in values):
        encoded = [v.encode("utf-8") for v in values]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(b"".join(encoded))])
    if n and all(type(v) is bool for v in values):
        return pa.array(values, type=pa.bool_())
    if all(type(v) is int for v in values):
        data = np.array(values, dtype=np.int64)
        return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(data)])
    if any(type(v) is str for v in values):
        return pa.array(values)                     # mixed text: let pyarrow type it
    data = np.array([float("nan") if v is None else v for v in values], dtype=np.float64)
    nulls = np.isnan(data)
    if nulls.any():                                 # pandas writes NaN as null
        return pa.array(data, mask=nulls)
    return pa.Array.from_buffers(pa.float64(), n, [None, pa.py_buffer(data)])


def write_parquet(columns: dict[str, list], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays([_arrow_column(v) for v in columns.values()], names=list(columns))
    pq.write_table(table, path)


def rows_to_columns(rows: list[dict]) -> dict[str, list]:
    names = list(rows[0]) if rows else []
    return {name: [row[name] for row in rows] for name in names}


def _csv_float(v) -> float | str:
    return "" if v is None or v != v else float(v)      # pandas writes a missing value as ''


def write_csv(columns: dict[str, list], path: Path) -> None:
    """CSV as pandas writes it: a header row, then a row per entry; a column with any float
    writes every entry as a float (5 -> 5.0)."""
    names = list(columns)
    as_float = [any(type(v) is float for v in columns[n]) for n in names]
    cols = [[_csv_float(v) for v in columns[n]] if f else columns[n] for n, f in zip(names, as_float)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(names)
        w.writerows(zip(*cols))
