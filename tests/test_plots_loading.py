"""Issue 33, item 5: the plotting modules imported for drawing only (hwsim/plots/loading.py)
draw the same PNG bytes as a plain import, and the run's helper is forked by the console
script only for a run that draws. Facts, not timings (benchmarks/bench_startup.py times them)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = {"breakdown_ms": {"weight_read": 4.0, "expert_read": 2.5, "kv_read": 0.75, "launch_overhead": 0.125},
           "budget_ms": 10.0, "batch_size": 1, "context_tokens": 4096, "model": "m", "hardware": "h",
           "itl_ms": {"p50": 7.4}}
DRAW = """
import sys, types
{how}
import hwsim.plots.breakdown as b
import matplotlib.lines, matplotlib.patches
b.save_breakdown_png(types.SimpleNamespace(**{summary!r}), sys.argv[1])
line = matplotlib.lines.Line2D([0, 1], [0, 1])
line.set(color="red", lw=3, label="x")          # set() still takes every property and alias
assert (line.get_color(), line.get_linewidth(), line.get_label()) == ("red", 3, "x")
try:
    matplotlib.patches.Rectangle((0, 0), 1, 1).set(no_such_property=1)
except AttributeError:
    pass
else:
    raise SystemExit("set() accepted an unknown property")
print(matplotlib.patches.Rectangle.set.__doc__ is None)
"""


def _draw(tmp_path: Path, how: str, name: str) -> tuple[bytes, str]:
    png = tmp_path / name
    done = subprocess.run([sys.executable, "-c", DRAW.format(how=how, summary=SUMMARY), str(png)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return png.read_bytes(), done.stdout.strip()


def test_drawing_imports_draw_the_same_bytes(tmp_path):
    plain, plain_doc_missing = _draw(tmp_path, "", "plain.png")
    quick, quick_doc_missing = _draw(
        tmp_path, "from hwsim.plots.loading import import_for_drawing\nimport_for_drawing()", "quick.png")
    assert plain == quick and plain.startswith(b"\x89PNG")
    assert (plain_doc_missing, quick_doc_missing) == ("False", "True")   # only the help text went


@pytest.mark.parametrize("args, modules", [
    (["run"], ("hwsim.plots.breakdown",)),
    (["run", "scenarios/voice-agent.yaml", "--json"], ("hwsim.plots.breakdown",)),
    (["run", "--plots"], None),             # every figure module: checked below
    (["run", "--no-plots"], ()),
    (["run", "--dry-run"], ()),
    (["run", "--help"], ()),
    (["validate", "x.csv"], ()),
    (["--version"], ()),
])
def test_the_console_script_forks_the_helper_only_for_a_run_that_draws(args, modules):
    from hwsim.io.plotter import _MODULES
    from hwsim.launch import _figure_modules

    expected = _MODULES if modules is None else modules or None
    assert _figure_modules(args) == expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the plotting helper is forked")
def test_an_early_helper_is_taken_only_if_it_imports_what_is_drawn(monkeypatch):
    import hwsim.io.plotter as plotter

    monkeypatch.setattr(plotter, "idle_cpus", lambda: 4.0)
    plotter.Plotter.start_early(plotter.BREAKDOWN)
    early = plotter._early
    assert early is not None
    assert plotter.take_early(plotter._MODULES) is None and early.pid == 0      # stopped, not taken
    plotter.Plotter.start_early(plotter.BREAKDOWN)
    early = plotter._early
    assert plotter.take_early(plotter.BREAKDOWN) is early and plotter._early is None
    early.close()
    plotter.discard_early()                 # none left: nothing to do
