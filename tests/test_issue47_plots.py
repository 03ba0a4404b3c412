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
