"""Rewrite docs/validation.md's five whole-step tables from the results JSONs.

    python validation/write_tables.py

The tables (`| case | measured ms | predicted ms | error |`) appear in this order: the main
grid (results_h200.json), the test grid (results_h200_extra.json), the cuDNN steps
(results_h200_cudnn.json), the fresh grid (results_h200_general_fresh.json) and the
generalisation grid (results_h200_general.json, issue 17). Their prose figures (median, max)
are left for a person to edit: `python docs/figures.py --check` names each that no longer holds.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
RESULTS = ["results_h200.json", "results_h200_extra.json", "results_h200_cudnn.json",
           "results_h200_general_fresh.json", "results_h200_general.json"]
HEADER = "| case | measured ms | predicted ms | error |"


def rows_md(path: Path) -> list[str]:
    out = []
    for r in json.loads(path.read_text())["rows"]:
        if r.get("predicted_ms") is None:
            out.append(f"| {r['name']} | {r['measured_ms']} | failed | |")
        else:
            name = f"{r['name']} ({r['split']})" if r.get("split") else r["name"]
            out.append(f"| {name} | {r['measured_ms']:.2f} | {r['predicted_ms']:.2f} | {r['error_pct']:+.1f}% |")
    return out


def main() -> None:
    lines = DOC.read_text().splitlines()
    tables = iter(RESULTS)
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i] == HEADER:
            out.append(lines[i + 1])                     # the |---| line
            out += rows_md(Path(__file__).parent / next(tables))
            i += 2
            while i < len(lines) and lines[i].startswith("| "):
                i += 1                                   # the old rows
            continue
        i += 1
    DOC.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
