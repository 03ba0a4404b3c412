"""Every CSV in validation/data goes through `hwsim validate` as validation/check_accuracy.py
and docs/validation.md's tables see it (issue 28): a row's `moe_schedule`, `weights` and
`overrides` columns reach its scenario, and a column hwsim does not read is an error, never
silently dropped."""

import csv
import json
import subprocess
import sys
import lzma
from pathlib import Path

import pytest

from hwsim.errors import ConfigError
from hwsim.validate import load_dataset, row_overrides, validate_rows

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data"
# the results JSONs docs/validation.md's tables are written from (validation/write_tables.py)
RESULTS = {"h200_steps": "results_h200.json", "h200_steps_extra": "results_h200_extra.json",
           "h200_steps_cudnn": "results_h200_cudnn.json", "h200_general": "results_h200_general.json",
           "h200_general_a": "results_h200_general.json", "h200_general_b": "results_h200_general.json",
           "h200_general_fresh": "results_h200_general_fresh.json",
           "h200_moe_steps": "results_h200_moe.json", "h200_moe_steps_extra": "results_h200_moe.json"}
KERNEL_TRACES = {"h200_kernels", "h200_kernels_extra", "h200_general_kernels", "h200_moe_step_kernels"}
STEP_FILES = sorted(p.stem for p in DATA.glob("*.csv") if p.stem not in KERNEL_TRACES)


def cli_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwsim.cli", "validate", str(path), "--json"],
                          capture_output=True, text=True, timeout=300)


def one_row_per_setup(path: Path, out: Path) -> list[str]:
    """A small copy of the dataset: its first row of each distinct set of row overrides and
    launch mode (the columns under test), with the header unchanged."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        header, seen, keep = reader.fieldnames, set(), []
        for row in reader:
            setup = (row["launch"], row["model"], tuple(row_overrides(row)))
            if setup not in seen:
                seen.add(setup)
                keep.append(row)
    keep = keep[:3]
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, header)
        writer.writeheader()
        writer.writerows(keep)
    return [r["name"] for r in keep]


def test_every_csv_is_a_dataset_or_a_known_kernel_trace(tmp_path):
    """A kernel trace (validation/compare_kernels.py's input) is refused as a dataset, naming
    the file and its header line (exit 2 from the CLI: tests/test_validate.py)."""
    assert len(STEP_FILES) >= 13
    for stem in KERNEL_TRACES:
        path = DATA / f"{stem}.csv"
        if not path.exists():                     # stored xz-compressed (validation/trace_store.py's README)
            path = tmp_path / f"{stem}.csv"
            path.write_bytes(lzma.decompress((DATA / f"{stem}.csv.xz").read_bytes()))
        with pytest.raises(ConfigError, match=f"{stem}.csv:1: missing column.*a kernel trace"):
            load_dataset(path)


@pytest.mark.parametrize("stem", STEP_FILES)
def test_the_cli_predicts_each_dataset_as_check_accuracy_and_the_docs_tables_do(tmp_path, stem):
    subset = tmp_path / f"{stem}.csv"
    names = one_row_per_setup(DATA / f"{stem}.csv", subset)
    res = cli_validate(subset)
    assert res.returncode == 0, res.stderr
    cli = {r["name"]: r["predicted_ms"] for r in json.loads(res.stdout)["rows"]}
    assert list(cli) == names
    # check_accuracy.py's path: the rows as load_dataset reads them, no further overrides
    in_process = {r["name"]: r["predicted_ms"] for r in validate_rows(load_dataset(subset))["rows"]}
    assert cli == pytest.approx(in_process, rel=1e-9)
    if stem in RESULTS:
        quoted = {r["name"]: r["predicted_ms"]
                  for r in json.loads((ROOT / "validation" / RESULTS[stem]).read_text())["rows"]}
        assert cli == pytest.approx({n: quoted[n] for n in names}, rel=1e-6)


def test_the_moe_columns_change_the_prediction(tmp_path):
    """Before issue 28 the CLI dropped `moe_schedule` and `weights`: every MoE row ran as
    per-expert bf16 (median error 36%, max 630%)."""
    subset = tmp_path / "moe.csv"
    one_row_per_setup(DATA / "h200_moe_steps.csv", subset)
    rows = load_dataset(subset)
    assert {(r["moe_schedule"], r["weights"]) for r in rows} >= {("grouped", "bf16"), ("per-expert", "fp8")}
    honoured = validate_rows(rows)["rows"]
    plain = validate_rows([{**r, "moe_schedule": "per-expert", "weights": "bf16"} for r in rows])["rows"]
    for h, p in zip(honoured, plain):
        assert h["predicted_ms"] != pytest.approx(p["predicted_ms"], rel=1e-3), h["name"]


def test_an_unknown_column_exits_2_naming_file_and_column(tmp_path):
    ds = tmp_path / "ds.csv"
    ds.write_text("name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,"
                  "moe_shedule\nr,h200-sxm,mixtral-8x7b,decode,1,512,0,16,graph,8.8,grouped\n")
    res = cli_validate(ds)
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert f"{ds}:1" in res.stderr and "'moe_shedule'" in res.stderr and "unknown column" in res.stderr
