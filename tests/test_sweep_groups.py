"""Issue 33: a sweep's points that share their plans are run as one group, the plans made once
and replayed; every point's row is the one its solo run gives."""

from pathlib import Path

from hwsim.sweep.groups import GroupPlans, group_points, run_group
from hwsim.sweep.point import run_point
from hwsim.sweep.spec import load_sweep

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def sweep(tmp_path, factors: str) -> list[dict]:
    p = tmp_path / "sweep.yaml"
    p.write_text(f"name: g\nbase:\n  hardware: h200-sxm\n  model: {TINY}\n"
                 f"  workload: {{decode_steps: 2, context_tokens: 512}}\nfactors:\n{factors}")
    return load_sweep(p)[1]


def timeless(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("wall_s", "sim.wall_s")}


def test_grouped_points_give_their_solo_rows(tmp_path):
    points = sweep(tmp_path, "  - key: workload.batch_size\n    values: [1, 3]\n"
                             "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [3000, 4800, 9600]\n"
                             "  - key: hardware_overrides.sm.count\n    values: [132, 100]\n")
    groups = group_points(points)
    assert sorted(len(g) for g in groups) == [6, 6]        # by batch: the hardware varies within
    for group in groups:
        plans = GroupPlans()
        rows = [run_point(p, plans) for p in group]
        # the SM count feeds the plans, the bandwidth does not: two sets of plans per group
        assert len(plans.bases) == 2
        assert all(r["status"] == "ok" for r in rows)
        assert [timeless(r) for r in rows] == [timeless(run_point(p)) for p in group]
    # the bandwidth is timed: replayed plans still see it
    rows = run_group(groups[0])
    itl = {r["factor.hardware_overrides.hbm.peak_bandwidth_gbps"]: r["itl_ms.p50"] for r in rows
           if r["factor.hardware_overrides.sm.count"] == 132}
    assert itl[3000] > itl[4800] > itl[9600]


def test_a_failing_point_does_not_stop_its_group(tmp_path):
    points = sweep(tmp_path, "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [4800, 9600]\n"
                             "  - key: hardware_overrides.hbm.capacity_gb\n    values: [0.2]\n")   # fits no weights, above its L2
    points.append(sweep(tmp_path, "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [7000]\n")[0])
    groups = group_points(points)
    assert len(groups) == 1
    rows = run_group(groups[0])
    assert [r["status"] for r in rows] == ["failed", "failed", "ok"]
    assert timeless(rows[2]) == timeless(run_point(points[2]))


def test_large_groups_are_split_for_the_workers():
    points = [{"hash": str(i), "scenario": {"hardware": "x", "hardware_overrides": {"a": i}, "model": "m"}}
              for i in range(200)]
    tasks = group_points(points, workers=2)
    assert sum(len(t) for t in tasks) == 200 and max(len(t) for t in tasks) <= 64 and len(tasks) >= 4
    assert [p["hash"] for t in tasks for p in t] == [str(i) for i in range(200)]


def test_a_sweep_on_a_separate_cluster_gives_every_point_its_solo_row(tmp_path, dask_scheduler):
    """The groups shipped to a cluster started apart (a stand-in for a remote one), streamed back
    part by part and gathered: results.parquet holds each point's solo row."""
    import math

    import pandas as pd

    from hwsim.sweep.runner import run_sweep
    points = sweep(tmp_path, "  - key: workload.batch_size\n    values: [1, 2]\n"
                             "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [3000, 6000, 9000]\n")
    summary = run_sweep(points, tmp_path / "out", scheduler=dask_scheduler)
    assert (summary["computed"], summary["failed"]) == (6, 0)
    table = pd.read_parquet(summary["results"]).set_index("point")
    assert len(list((tmp_path / "out" / "results").glob("part-*.parquet"))) == 6
    for p in points:
        solo, got = timeless(run_point(p)), table.loc[p["hash"]].to_dict()
        for key, value in solo.items():
            if key == "point":
                continue
            same = (value == got[key] or (value is None and (got[key] is None or
                    (isinstance(got[key], float) and math.isnan(got[key])))))
            assert same, (key, value, got[key])


def test_a_power_throttled_point_still_shares_its_plans(tmp_path):
    """The power governor rebuilds the chip at each clock it tries; that copy reads every field
    but is no plan reading them: HBM bandwidth still replays the plans of a throttled point."""
    p = tmp_path / "sweep.yaml"
    p.write_text("name: t\nbase:\n  hardware: h200-sxm\n  model: mixtral-8x7b\n"
                 "  workload: {batch_size: 8, context_tokens: 1024, decode_steps: 1}\n"
                 "  runtime: {launch: graph, moe_schedule: grouped}\nfactors:\n"
                 "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [16000, 12000]\n")
    points = load_sweep(p)[1]
    plans = GroupPlans()
    rows = [run_point(pt, plans) for pt in points]
    assert rows[0]["power.throttled"] and "hbm_peak_bytes_s" not in plans.bases[0].fields
    assert len(plans.bases) == 1                       # the second point replayed the first's plans
    assert timeless(rows[1]) == timeless(run_point(points[1]))
