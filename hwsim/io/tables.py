"""The bundle's tables built column by column and written with pyarrow / csv, not pandas.

A bundle of 8,000 kernel records spent 0.6 s building one dict a row for pandas, and pandas'
import alone cost as much again; the columns here carry the same values and types, so a
reader (pandas.read_parquet, pyarrow) sees the same table.
"""

from __future__ import annotations

import csv
import itertools
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hwsim.engine.records import RecordLog
from hwsim.metrics import Component

class Coded(NamedTuple):
    """A text column as a list of values and each entry's index among them: a million
    kernel records name a few hundred thousand kernels and a dozen components, and each
    name is encoded once, not once a row."""
    values: list
    index: np.ndarray

    def tolist(self) -> list:
        return list(map(self.values.__getitem__, self.index.tolist()))


class Joined(NamedTuple):
    """A text column whose entries are two coded columns' entries joined (a routed expert's
    kernel: its expert's prefix, the kernel's suffix)."""
    first: Coded
    second: Coded

    def tolist(self) -> list:
        return [a + b for a, b in zip(self.first.tolist(), self.second.tolist())]


def records_columns(records: RecordLog) -> dict:
    """One array per events.parquet column, one entry per kernel record (attribution in us).

    Vectorised: a DeepSeek-V3 batch-64 run keeps a million records, and a Python loop over
    them cost tens of seconds. The records' tuples are turned into columns in one go; kernels
    and their parts dicts are shared by every replay of a shape, so their columns are computed
    once per distinct object and gathered. The floating point operations are those of
    KernelRecord.attribution and its properties, element by element, so the values are the
    same to the bit."""
    rows = records.rows
    n = len(rows)
    (step, index, kernels, t_ready, t_start, t_end, waves, parts_list, launch_s, wait_s,
     _shared, owners) = zip(*rows) if n else ((),) * 12
    k_index, uniq_k = _index_by_identity(kernels)
    p_index, uniq_p = _index_by_identity(parts_list)
    names, layers = _names(k_index, uniq_k, owners)
    # each distinct kernel's fields, as columns over the distinct kernels
    tiles, hbm_read, hbm_write, l2_read, l2_write, data = (
        zip(*map(_record_fields, uniq_k)) if n else ((),) * 6)
    tiles = np.array(tiles, dtype=np.int64)
    data_index, data = _index_by_identity(data)
    # tiles * bytes as the record's properties compute them (int * float, to the bit in
    # float64), typed as pandas types the values: int64 where every one is an int
    per_kernel = {"hbm_read_bytes": tiles * _typed(hbm_read), "hbm_write_bytes": tiles * _typed(hbm_write),
                  "l2_bytes": tiles * (_typed(l2_read) + _typed(l2_write))}
    cols: dict = {
        "step": np.array(step, dtype=np.int64),
        "index": np.array(index, dtype=np.int64),
        "kernel": names,
        "layer": layers,
        "t_ready_us": np.array(t_ready, dtype=np.float64) * 1e6,
        "t_start_us": np.array(t_start, dtype=np.float64) * 1e6,
        "t_end_us": np.array(t_end, dtype=np.float64) * 1e6,
        "tiles": tiles[k_index],
        "waves": np.array(waves, dtype=np.int64),
        **{name: values[k_index] for name, values in per_kernel.items()},
        "data": Coded([c.value for c in data], data_index[k_index]),
    }
    launch_s = np.array(launch_s, dtype=np.float64)
    wait_s = np.array(wait_s, dtype=np.float64)
    for c in Component:
        v = (np.array([p.get(c, 0.0) for p in uniq_p], dtype=np.float64)[p_index] if n
             else np.array([], np.float64))
        if c is Component.LAUNCH_OVERHEAD:
            v = v + launch_s
        elif c is Component.EXPERT_LOAD_WAIT:
            v = np.where(wait_s != 0, v + wait_s, v)
        cols[f"{c.value}_us"] = v * 1e6
    return cols


def _typed(values: tuple) -> np.ndarray:
    """int64 if every value is an int, float64 otherwise."""
    return np.array(values, dtype=np.int64 if all(type(v) is int for v in values) else np.float64)


_record_fields = attrgetter("tiles", "hbm_read", "hbm_write", "l2_read", "l2_write", "data")


def _names(k_index: np.ndarray, kernels: list, owners: tuple) -> tuple["Joined", np.ndarray]:
    """(each record's kernel name, each record's layer). A routed expert's kernel is shared by
    many experts and named by the one it ran for (ExpertBlock.name_of: its prefix, then the
    kernel's name past the template's prefix), so the names are joined column-wise from the
    owners' prefixes and the kernels' suffixes, not made one by one."""
    o_index, uniq_o = _index_by_identity(owners)
    named = [o is not None and bool(o.prefix) for o in uniq_o]
    cut = np.array([o.cut if is_named else 0 for o, is_named in zip(uniq_o, named)], dtype=np.int64)
    # a kernel's suffix depends on the cut its owner makes (0: its whole name)
    cuts = cut[o_index]
    pairs = k_index * (int(cut.max(initial=0)) + 1) + cuts
    _, first, s_index = np.unique(pairs, return_index=True, return_inverse=True)
    suffixes = [kernels[k].name[c:] for k, c in zip(k_index[first].tolist(), cuts[first].tolist())]
    prefixes = [o.prefix if is_named else "" for o, is_named in zip(uniq_o, named)]
    kernel_layer = np.array([k.layer for k in kernels], dtype=np.int64)
    owner_layer = np.array([o.layer if o is not None else -1 for o in uniq_o], dtype=np.int64)
    has_owner = np.array([o is not None for o in uniq_o], dtype=bool)[o_index]
    layers = np.where(has_owner, owner_layer[o_index], kernel_layer[k_index])
    return Joined(Coded(prefixes, o_index), Coded(suffixes, s_index.astype(np.int64, copy=False).reshape(-1))), layers


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

    if isinstance(values, (Coded, Joined)):
        coded = (values.first, values.second) if isinstance(values, Joined) else (values,)
        if len(coded[0].index) and all(type(v) is str for c in coded for v in c.values):
            return _text_column(coded)
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


def _text_column(coded: tuple[Coded, ...]):
    """A large_string column whose entries are the coded columns' entries joined, laid out in
    one pass (not with pyarrow.compute, whose first call in a process costs 0.4 s)."""
    import pyarrow as pa

    parts = [([v.encode("utf-8") for v in c.values], c.index) for c in coded]
    lengths = sum(np.fromiter(map(len, encoded), np.int64, len(encoded))[index] for encoded, index in parts)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pieces = [map(encoded.__getitem__, index.tolist()) for encoded, index in parts]
    data = b"".join(pieces[0] if len(pieces) == 1 else itertools.chain.from_iterable(zip(*pieces)))
    return pa.Array.from_buffers(pa.large_string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def write_parquet(columns: dict[str, list], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays([_arrow_column(v) for v in columns.values()], names=list(columns))
    # dictionary pages for text only: numeric columns of a million rows (times, bytes) have few
    # repeats, and trying them cost a third of the write; readers see the same table
    text = [f.name for f in table.schema if pa.types.is_large_string(f.type) or pa.types.is_string(f.type)]
    pq.write_table(table, path, use_dictionary=text)


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
