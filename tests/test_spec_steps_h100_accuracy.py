"""Issue 45, item 1: the six Qwen3-30B-A3B verification steps (Q = 2..8 query tokens a sequence)
an H100 measured (validation/data/spec_steps_h100/), held to the issue's target: median |error|
at most 5%, maximum at most 10%, and an error that does not move with Q. They were +2.8..+10.9%
with the H200's graph-node gap on the H100 profile; then -0.2 -> +3.8% from Q = 2 to 8 at batch
1 while cuBLAS's narrow-N rule and FlashAttention-2 packed like one query cancelled (session 21:
docs/whatif.md); with both as the libraries run them every row is within -1..-2.3%."""

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from compare_spec_h100 import rows  # noqa: E402


def test_the_h100_verification_steps_meet_the_issue_target():
    found = [(name, p / m - 1) for name, m, p in rows()]
    errs = [e for _, e in found]
    assert len(errs) == 6
    assert statistics.median(map(abs, errs)) <= 0.05
    assert max(map(abs, errs)) <= 0.10
    for batch in ("b1", "b8"):    # from Q = 2 to Q = 8 the error moves less than 2 points
        by_q = [e for name, e in found if re.search(rf"-{batch}-q\d", name)]
        assert len(by_q) == 3 and max(by_q) - min(by_q) < 0.02, (batch, by_q)
