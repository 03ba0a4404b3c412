"""`hwsim run --json` stays byte for byte the same (issue 32: typed summary parts).

Every scenario in scenarios/ that is one run (a sweep spec, with `factors:`, is not) is run by
the command line, made cheap by the overrides benchmarks/identical.py uses (two decode steps; a
serving run of 8 requests), and its --json line, with the simulator's own wall clock
(sim.wall_s) masked, is compared byte for byte with tests/data/summary_json/<scenario>.json.
A few variants (<scenario>+<variant>.json) cover the summary's parts no shipped scenario has:
speculative decoding, a dense model with a prefill on a profile without a power block, and a
run the power limit throttles.

The golden files change only deliberately (a change of a number, a key or its order is a change
of the --json contract):

    python tests/test_summary_json_stable.py --regenerate
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "data" / "summary_json"
# the scenarios and their cheap settings are benchmarks/identical.py's (which compares every value)
sys.path.insert(0, str(ROOT / "benchmarks"))
from identical import CHEAP_DECODE, cheap_overrides, scenario_files  # noqa: E402

# the host's clock, not a result: the only volatile field of the summary
WALL = re.compile(r'"wall_s": [^,}]+')


# name -> (scenario, overrides): the parts of the summary no shipped scenario reaches
VARIANTS = {
    "default+speculative": ("default.yaml", [*CHEAP_DECODE, "workload.speculative.method=mtp",
                                             "workload.speculative.tokens=2", "workload.speculative.acceptance=0.8"]),
    "default+dense-prefill-h100": ("default.yaml", [*CHEAP_DECODE, "model=llama-3.1-8b", "hardware=h100-sxm",
                                                    "workload.prompt_tokens=128"]),
    "moe-prefetch+throttled": ("moe-prefetch.yaml", [*CHEAP_DECODE, "workload.batch_size=256",
                                                     "workload.context_tokens=1024"]),
}


def cases() -> dict[str, tuple[Path, list[str]]]:
    """Golden file name -> (scenario, overrides)."""
    out = {p.stem: (p, cheap_overrides(p)) for p in scenario_files()}
    return out | {name: (ROOT / "scenarios" / f, sets) for name, (f, sets) in VARIANTS.items()}


def json_line(path: Path, sets: list[str], out: Path) -> str:
    """`hwsim run SCENARIO --set ... --json --no-plots`, sim.wall_s masked."""
    sets = [a for s in sets for a in ("--set", s)]
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", str(path.relative_to(ROOT)), *sets,
                          "--json", "--no-plots", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    masked, n = WALL.subn('"wall_s": "masked"', lines[0])
    assert n == 1, "sim.wall_s, and only it, is masked"
    return masked + "\n"


def _differences(a, b, at: str = "") -> list[str]:
    """Where two parsed summaries differ (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [] if list(a) == list(b) else [f"{at or '.'}: keys {list(a)} != {list(b)}"]
        return out + [d for k in a if k in b for d in _differences(a[k], b[k], f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{at}[{i}]")]
    return [] if (a == b and type(a) is type(b)) else [f"{at}: {a!r} != {b!r}"]


@pytest.mark.parametrize("name", list(cases()))
def test_run_json_is_byte_for_byte_the_golden_one(name, tmp_path):
    path, sets = cases()[name]
    golden = GOLDEN / f"{name}.json"
    assert golden.is_file(), f"no golden file for {name}: python {Path(__file__).relative_to(ROOT)} --regenerate"
    got, want = json_line(path, sets, tmp_path / "run"), golden.read_text(encoding="utf-8")
    if got != want:
        diffs = _differences(json.loads(want), json.loads(got))
        pytest.fail(f"{name}: --json differs from {golden.relative_to(ROOT)} "
                    f"({len(diffs)} places; the first: {diffs[:10] or 'formatting only'})")


@pytest.mark.parametrize("name", list(cases()))
def test_the_typed_summary_reads_back_its_json_key_for_key(name):
    """RunSummary.from_dict (a manifest read back, hwsim report) and as_dict: the same JSON,
    in the same order, every part typed."""
    from hwsim.summary import Part, RunSummary

    want = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    typed = RunSummary.from_dict(want)
    assert json.dumps(typed.as_dict()) == json.dumps(want)
    assert isinstance(typed.kv, Part) and isinstance(typed.sim, Part) and (typed.moe is None) == (want["moe"] is None)
    if want.get("serving"):
        assert isinstance(typed.serving, Part)


def test_every_golden_file_has_its_scenario():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(cases())


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regenerate", action="store_true", help="write the golden files anew")
    if not parser.parse_args().regenerate:
        parser.error("--regenerate is the only action (the test itself runs under pytest)")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.json"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="hwsim-golden-") as tmp:
        for name, (path, sets) in cases().items():
            (GOLDEN / f"{name}.json").write_text(json_line(path, sets, Path(tmp) / name), encoding="utf-8")
            print(f"wrote {GOLDEN.relative_to(ROOT)}/{name}.json", file=sys.stderr)
