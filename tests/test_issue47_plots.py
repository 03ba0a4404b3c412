"""Issue 47, what a newcomer stumbled on: figures that read. The gantt legend stays off its title,
a sweep's breakdown is in its factors' order with whole labels, channels.png of interleaved
addresses shows where the bytes went, a kernel trace's breakdown has its kv_read."""

from __future__ import annotations

from hwsim.metrics import Component
from hwsim.plots.figure import save_png
from hwsim.plots.gantt_view import Item


def _extents(fig, *artists):
    renderer = fig.canvas.get_renderer()
    return [a.get_window_extent(renderer) for a in artists]


def test_the_gantt_legend_is_not_drawn_over_its_title(tmp_path):
    from hwsim.plots.gantt import draw_gantt

    lanes = {f"SMs {i * 16}-{i * 16 + 15}": [(0.0, 1e-3, "gemm", 1.0)] for i in range(8)}
    title = "unit occupancy during one token (step 7) of a model with a rather long name on h200-sxm"
    fig = draw_gantt(lanes, [Item("gemm", Component.GEMM_COMPUTE, 0.0, 1e-3)], title)
    save_png(fig, tmp_path / "gantt.png")
    (ax,), (legend,) = fig.axes, fig.legends
    title_box, legend_box, ax_box = _extents(fig, ax.title, legend, ax)
    assert not title_box.overlaps(legend_box)
    assert not legend_box.overlaps(ax_box)


def _sweep_table(n_batch=6, n_ctx=6):
    import numpy as np
    import pandas as pd

    rows = [{"factor.workload.batch_size": b, "factor.workload.context_tokens": c,
             "factor.hardware": "h200-sxm", "status": "ok",
             "breakdown_ms.weight_read": 1.0 + b / 64, "breakdown_ms.kv_read": b * c / 1e5,
             "itl_ms.p50": 1.0 + b / 64 + b * c / 1e5, "batch_size": b}
            for b in (1, 2, 4, 8, 16, 32)[:n_batch] for c in (512, 1024, 2048, 4096, 8192, 16384)[:n_ctx]]
    order = np.random.default_rng(1).permutation(len(rows))     # completion order
    return pd.DataFrame([rows[i] for i in order])


def test_a_sweeps_breakdown_is_in_its_factors_order_with_whole_readable_labels(tmp_path):
    from hwsim.plots.study import save_study_pngs

    table = _sweep_table()
    save_study_pngs(table, 10.0, tmp_path)
    assert (tmp_path / "breakdown.png").read_bytes()[:4] == b"\x89PNG"
    import matplotlib.pyplot as plt

    from hwsim.plots.study import plot_breakdown_per_point
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(table) + 1.5), layout="constrained")
    plot_breakdown_per_point(ax, table, 10.0)
    fig.savefig(tmp_path / "b.png")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    want = [f"batch_size={b}, context_tokens={c}" for b in (1, 2, 4, 8, 16, 32)
            for c in (512, 1024, 2048, 4096, 8192, 16384)]
    assert labels == want                      # sorted, the constant hardware left out, names whole
    renderer, page = fig.canvas.get_renderer(), fig.bbox
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels()]
    assert all(page.x0 <= b.x0 and b.x1 <= page.x1 for b in boxes)          # none cut at the edge
    assert all(a.y0 >= b.y1 - 0.5 or b.y0 >= a.y1 - 0.5 for a, b in zip(boxes, boxes[1:]))   # none overlap
    assert min(t.get_fontsize() for t in ax.get_yticklabels()) >= 7
    plt.close(fig)


def test_channels_of_interleaved_addresses_read_as_even_and_a_hot_spot_stands_out(tmp_path):
    import numpy as np

    from hwsim.plots.channels import save_channel_png
    from hwsim.plots.figure import new_axes

    even = 3e9 * (1 + 1e-3 * np.random.default_rng(0).standard_normal(6 * 16))   # interleaved: within 0.3%
    hot = even.copy()
    hot[17] *= 3
    for name, data in (("even", even), ("hot", hot)):
        save_channel_png(data, 16, name, tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    from hwsim.plots.channels import plot_channel_bytes
    fig, ax = new_axes((8, 3))
    (image,) = plot_channel_bytes(ax, even, 16)
    grid = image.get_array()
    assert grid.shape == (6, 16)                                   # a row a stack, a column a channel
    assert image.get_clim() == (-1.0, 1.0)                         # 0.3% of noise is not a full colour range
    assert "mean 3 GB" in ax.get_xlabel() and "spread -0." in ax.get_xlabel()
    fig, ax = new_axes((8, 3))
    (image,) = plot_channel_bytes(ax, hot, 16)
    grid = image.get_array()
    assert np.unravel_index(np.argmax(grid), grid.shape) == (1, 1)  # channel 17: stack 1, channel 1
    assert grid[1, 1] > 150 and image.get_clim()[1] == grid[1, 1]


def test_a_kernel_traces_breakdown_has_its_kv_read_and_the_same_total(tmp_path):
    import json

    import pytest
    from typer.testing import CliRunner

    from hwsim.cli import app
    from hwsim.config.load import load_scenario
    from hwsim.hw.chip import ChipSpec
    from hwsim.config.files import load_profile

    res = CliRunner().invoke(app, ["run", "scenarios/kernel-trace.yaml", "--no-plots", "--json",
                                   "--out", str(tmp_path / "kt")])
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    b = s["breakdown_ms"]
    assert s["bytes"]["kv"] > 8e9                        # the cache a step: 64 x 1,025 tokens x 131 kB
    rate = ChipSpec.from_profile(load_profile(load_scenario("scenarios/kernel-trace.yaml").hardware)).hbm_read_bytes_s
    assert b["kv_read"] == pytest.approx(s["bytes"]["kv"] / rate * 1e3, rel=0.01)   # its bytes at the HBM rate
    assert b["attention_compute"] > 0                    # what the padded MMAs take beyond it
    assert sum(b.values()) == pytest.approx(s["itl_ms"]["mean"], rel=1e-9)    # the total kept


def test_kv_attributed_moves_no_more_than_attention_compute_holds():
    from hwsim.engine.kv_share import kv_attributed

    b = {"attention_compute": 1.0, "kv_read": 0.0, "weight_read": 2.0}
    assert kv_attributed(b, 3e9, 1e9) == {"attention_compute": 0.0, "kv_read": 1.0, "weight_read": 2.0}
    assert kv_attributed(b, 5e8, 1e9) == {"attention_compute": 0.5, "kv_read": 0.5, "weight_read": 2.0}
    assert kv_attributed(b, 0.0, 1e9) == b
