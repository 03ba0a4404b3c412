"""The trace and Gantt lanes of a run on several GPUs (issue 18: "one lane group per GPU plus the
links"): every unit of every GPU in the lanes, a few of each GPU in the chart, the collectives
on the ports and on the SMs they hold, in their breakdown colours."""

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from hwsim.config.load import load_scenario
from hwsim.plots.breakdown import COLORS
from hwsim.plots.gantt import plot_gantt
from hwsim.plots.gantt_view import step_view
from hwsim.pipeline import run_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ep8():
    cfg = load_scenario(REPO / "scenarios" / "deepseek-v3-ep8.yaml",
                        ["workload.decode_steps=1", "workload.batch_size=8"])
    return run_config(cfg)


def test_every_unit_of_every_gpu_is_a_lane(ep8):
    names = list(ep8.lanes)
    per_gpu = [[n for n in names if n.startswith(f"GPU{g} ")] for g in range(8)]
    assert all(len(p) == len(per_gpu[0]) > 15 for p in per_gpu)
    assert {n.split(" ", 1)[1] for n in per_gpu[7]} >= {"L2", "HBM stack 5", "bus", "NVLink out", "NVLink in"}
    assert names == [n for p in per_gpu for n in p]          # grouped GPU by GPU


def test_the_chart_draws_each_gpu_s_sms_hbm_and_links(ep8):
    lanes, items = step_view(ep8.lanes, ep8.records)
    drawn = [n for n, spans in lanes.items() if spans]
    for g in range(8):
        mine = [n.split(" ", 1)[1] for n in drawn if n.startswith(f"GPU{g} ")]
        assert mine == ["SMs 0-15", "HBM stack 0", "NVLink out", "NVLink in"]     # one node: no NIC traffic
    assert sum(map(len, lanes.values())) < sum(map(len, ep8.lanes.values())) / 3   # cheap to draw
    # the collectives: on every GPU's port out, and on its SMs (DeepEP's low-latency kernel holds them all)
    for g in range(8):
        assert any("dispatch" in label for _, _, label, _ in lanes[f"GPU{g} NVLink out"])
        held = [share for _, _, label, share in lanes[f"GPU{g} SMs 0-15"] if "combine" in label]
        assert held and max(held) == pytest.approx(1.0)
    (bars,) = plot_gantt(Figure().subplots(), lanes, items)
    colours = {tuple(np.round(c, 6)) for c in bars.get_facecolors()}
    assert tuple(np.round(to_rgba(COLORS["all_to_all"]), 6)) in colours


def test_recording_the_collectives_leaves_the_step_unchanged(ep8):
    """The SM and port intervals are drawn from the arbiter's items, not added to them."""
    cfg = load_scenario(REPO / "scenarios" / "deepseek-v3-ep8.yaml",
                        ["workload.decode_steps=1", "workload.batch_size=8", "runtime.kernel_records=0"])
    quiet = run_config(cfg)
    assert not any(spans for spans in quiet.lanes.values())
    assert quiet.steps[0].duration_s == ep8.steps[0].duration_s
