"""Issue 45, item 1: the six Qwen3-30B-A3B verification steps (Q = 2..8 query tokens a sequence)
an H100 measured (validation/data/spec_steps_h100/), held to the issue's target: median |error|
at most 5%, maximum at most 10%, and no longer all on one side (they were +2.8..+10.9% with the
H200's graph-node gap on the H100 profile)."""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from compare_spec_h100 import rows  # noqa: E402


def test_the_h100_verification_steps_meet_the_issue_target():
    errs = [p / m - 1 for _, m, p in rows()]
    assert len(errs) == 6
    assert statistics.median(map(abs, errs)) <= 0.05
    assert max(map(abs, errs)) <= 0.10
    assert min(errs) < 0 < max(errs)
