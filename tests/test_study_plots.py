"""The sweep heat map shows where the budget lies: a white contour where the grid crosses it,
and its colour bar says so when no point (or every point) meets it (issue 28: sweep-frontier's
map had no contour and a label promising a white one)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from hwsim.plots.study import plot_heatmap  # noqa: E402


def grid(itl: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"status": "ok", "factor.bw": [1, 2, 1, 2], "factor.batch": [1, 1, 2, 2], "itl_ms.p50": itl})


@pytest.mark.parametrize("itl, contour, label", [
    ([8.0, 9.0, 11.0, 12.0], True, "white: 10 ms budget"),
    ([11.0, 12.0, 13.0, 14.0], False, "no point within the 10 ms budget"),
    ([5.0, 6.0, 7.0, 8.0], False, "every point within the 10 ms budget"),
])
def test_the_heat_map_says_where_the_budget_is(itl, contour, label):
    fig, ax = plt.subplots()
    try:
        artists = plot_heatmap(ax, grid(itl), "bw", "batch", 10.0)
        assert (len(artists) == 2) == contour
        colorbar_axis = fig.axes[-1]
        assert colorbar_axis.get_ylabel() == f"itl_ms.p50 (ms); {label}"
    finally:
        plt.close(fig)
