"""Figures without pyplot: a run bundle draws a handful of PNGs and needs none of pyplot's
global figure manager or backend machinery (importing it cost ~0.2-0.4 s of every run)."""

from __future__ import annotations

from matplotlib.figure import Figure


def new_axes(figsize: tuple[float, float]):
    """A figure with one Axes, laid out as plt.subplots(layout="constrained") lays it out."""
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def save_png(fig: Figure, path, dpi: int = 110) -> None:
    """savefig, with the constrained layout computed once beforehand: savefig would otherwise
    draw the whole figure twice (once, not rendered, only to run the layout engine)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.set_dpi(dpi)                       # lay out at the dpi the PNG is drawn at
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        fig.set_layout_engine("none")
    fig.savefig(path, format="png", dpi=dpi)
