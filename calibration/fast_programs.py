"""The fast KV kernel's programs as the device compiled them: every timed kv row of
calibration/measure_fast_kernels.py (since session 19) records its program's shared memory,
registers and warps; this reads them back as hwsim/model/fast_kv_occupancy.py's MEASURED table
(`python calibration/fast_occupancy.py --measured FILE` prints it). Imports no Triton, so that a
test reading it leaves the interpreter's environment alone (fast_occupancy.py unsets it).
"""

from __future__ import annotations

from hwsim.model.fast_kv_occupancy import slot_widths


def measured_key(row: dict) -> tuple:
    """(slot widths ascending, block, inline-PTX) of a timed kv row's launch: one slot per width its
    classes with tokens store, the rest empty at 16 bits (at the first width for `_lean` rows)."""
    impl = row["impl"]
    widths = [bits for tokens, bits in row["classes"].values() if tokens]
    return slot_widths(widths, lean="_lean" in impl), row["block"], impl.endswith("_asm")


def measured_table(rows: list[dict]) -> dict[tuple, tuple[int, int, int]]:
    """{key: (shared memory bytes, registers per thread, threads)} of the timed kv rows that
    recorded their compiled program (measure_fast_kernels.py since session 19). Only `kv` rows:
    the device checks launch at L = 1000, whose lengths specialise otherwise (fast4_lean_asm 166
    registers there, 153 in every timed row). Rows of one key that disagree are an error."""
    table: dict[tuple, tuple[int, int, int]] = {}
    for r in rows:
        if r.get("part") != "kv" or "regs" not in r or "classes" not in r:
            continue
        got = (r["smem_bytes"], r["regs"], r["warps"] * 32)
        old = table.setdefault(measured_key(r), got)
        if old != got:
            raise SystemExit(f"{r['impl']} B={r['B']} L={r['L']}: program {got}, other rows {old}")
    return table
