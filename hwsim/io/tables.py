"""The bundle's tables built column by column and written with pyarrow / csv, not pandas.

A bundle of 8,000 kernel records spent 0.6 s building one dict a row for pandas, and pandas'
import alone cost as much again; the columns here carry the same values and types, so a
reader (pandas.read_parquet, pyarrow) sees the same table.
"""

from __future__ import annotations

import csv
import operator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hwsim.metrics import Component

# events.parquet column order (README, "The run bundle")
EVENT_COLUMNS = ("step", "index", "kernel", "layer", "t_ready_us", "t_start_us", "t_end_us", "tiles",
                 "waves", "hbm_read_bytes", "hbm_write_bytes", "l2_bytes", "data",
                 *(f"{c.value}_us" for c in Component))


class Coded(NamedTuple):
    """A text column as its distinct values and each entry's index among them: a million
    kernel records name a few hundred thousand kernels and a dozen components, and each
    name is encoded once, not once a row."""
    values: list
    index: np.ndarray

    def tolist(self) -> list:
        return list(map(self.values.__getitem__, self.index.tolist()))


def records_columns(records) -> dict:
    """One array per events.parquet column, one entry per kernel record (attribution in us).

    Vectorised: a DeepSeek-V3 batch-64 run keeps a million records, and a Python loop over
    them cost tens of seconds. Kernels and their parts dicts are shared by every replay of a
    shape, so their columns are computed once per distinct object and gathered; the floating
    point operations are those of KernelRecord.attribution and its properties, element by
    element, so the values are the same to the bit."""
    n = len(records)
    get = operator.attrgetter
    kernels = list(map(get("kernel"), records))
    k_index, uniq_k = _index_by_identity(kernels)
    parts_list = list(map(get("parts"), records))
    p_index, uniq_p = _index_by_identity(parts_list)

    def per_kernel(fn):
        """fn of each distinct kernel, gathered per record; typed as pandas would type the
        values (int64 if all ints, float64 if any float; a missing value makes it float)."""
        values = list(map(fn, uniq_k))
        if None in values:
            values = [np.nan if v is None else v for v in values]
        dtype = np.int64 if set(map(type, values)) <= {int} else np.float64
        return np.array(values, dtype=dtype)[k_index] if n else np.array([], np.int64)

    tiles = per_kernel(get("tiles"))
    data_index, data = _index_by_identity(list(map(get("data"), uniq_k)))
    cols: dict = {
        "step": np.fromiter(map(get("step"), records), np.int64, n),
        "index": np.fromiter(map(get("index"), records), np.int64, n),
        "kernel": Coded(list(map(get("name"), uniq_k)), k_index),
        "layer": per_kernel(get("layer")),
        "t_ready_us": np.fromiter(map(get("t_ready"), records), np.float64, n) * 1e6,
        "t_start_us": np.fromiter(map(get("t_start"), records), np.float64, n) * 1e6,
        "t_end_us": np.fromiter(map(get("t_end"), records), np.float64, n) * 1e6,
        "tiles": tiles,
        "waves": np.fromiter(map(get("waves"), records), np.int64, n),
        # tiles * bytes as the record's properties compute them (int * float per kernel)
        "hbm_read_bytes": per_kernel(lambda k: k.tiles * k.hbm_read),
        "hbm_write_bytes": per_kernel(lambda k: k.tiles * k.hbm_write),
        "l2_bytes": per_kernel(lambda k: k.tiles * (k.l2_read + k.l2_write)),
        "data": Coded([c.value for c in data], data_index[k_index]),
    }
    launch_s = np.fromiter(map(get("launch_s"), records), np.float64, n)
    wait_s = np.fromiter(map(get("wait_s"), records), np.float64, n)
    for c in Component:
        v = (np.array([p.get(c, 0.0) for p in uniq_p], dtype=np.float64)[p_index] if n
             else np.array([], np.float64))
        if c is Component.LAUNCH_OVERHEAD:
            v = v + launch_s
        elif c is Component.EXPERT_LOAD_WAIT:
            v = np.where(wait_s != 0, v + wait_s, v)
        cols[f"{c.value}_us"] = v * 1e6
    return cols


def _index_by_identity(objects: list) -> tuple[np.ndarray, list]:
    """(index of each object among the distinct ones, the distinct objects), by identity
    (the objects are alive, so their ids are distinct): numpy's unique over the ids, not a
    dict lookup per record (2 s for a million records)."""
    ids = np.fromiter(map(id, objects), np.int64, len(objects))
    _, first, index = np.unique(ids, return_index=True, return_inverse=True)
    return index.astype(np.int64, copy=False).reshape(-1), [objects[i] for i in first]


def _arrow_column(values: list):
    """A column typed as pandas types it: int64 (float64 if any float or None), large_string,
    bool or float64. Built from buffers: pyarrow.array() imports pandas (a second of a run)
    only to ask whether the values are a pandas Series."""
    import pyarrow as pa

    if isinstance(values, Coded) and len(values.index) and all(type(v) is str for v in values.values):
        encoded = [v.encode("utf-8") for v in values.values]
        offsets = np.zeros(len(values.index) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded))[values.index], out=offsets[1:])
        return pa.Array.from_buffers(pa.large_string(), len(values.index), [
            None, pa.py_buffer(offsets), pa.py_buffer(b"".join(map(encoded.__getitem__, values.index.tolist())))])
    if isinstance(values, Coded):
        values = values.tolist()
    if isinstance(values, np.ndarray):                   # typed already: wrap its buffer
        data = np.ascontiguousarray(values)
        typ = pa.int64() if data.dtype.kind in "iu" else pa.float64()
        data = data.astype(np.int64 if data.dtype.kind in "iu" else np.float64, copy=False)
        if data.dtype.kind == "f" and np.isnan(data).any():
            return pa.array(data, mask=np.isnan(data))
        return pa.Array.from_buffers(typ, len(data), [None, pa.py_buffer(data)])
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
