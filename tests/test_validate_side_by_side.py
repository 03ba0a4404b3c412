"""validate's rows run side by side in forked processes (hwsim.io.forked.map_side_by_side):
the report is the one made row after row, and a failure in another process is raised here."""

from __future__ import annotations

import os

import pytest

from hwsim.io.forked import map_side_by_side
from hwsim.validate import load_dataset, validate_rows

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

HEADER = "name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes\n"


def test_map_keeps_order_and_runs_in_other_processes():
    items = list(range(7))
    out = map_side_by_side(lambda x: (x * x, os.getpid()), items, [float(x) for x in items], workers=3)
    assert [v for v, _ in out] == [x * x for x in items]
    assert len({pid for _, pid in out}) == 3          # the parent and two children each did a share


def test_map_raises_a_childs_exception_here():
    parent = os.getpid()

    def fn(x):
        if x == 5:
            assert os.getpid() != parent            # the deal put it in the child
            raise OSError(28, "No space left on device")
        return x
    with pytest.raises(OSError, match="No space left"):      # the heaviest share is this process's
        map_side_by_side(fn, list(range(6)), [10.0, 0, 0, 0, 0, 5.0], workers=2)


def test_rows_side_by_side_give_the_report_of_rows_in_turn(tmp_path):
    ds = tmp_path / "ds.csv"
    ds.write_text(HEADER
                  + "a,h200-sxm,mixtral-8x7b,decode,2,512,0,16,graph,9.5,\n"
                  + "b,h200-sxm,qwen3-30b-a3b,decode,4,1024,0,16,graph,20,\n"
                  + "bad,h200-sxm,gpt-9,decode,1,512,0,16,graph,8.8,\n"
                  + "c,h200-sxm,mixtral-8x7b,prefill,1,0,128,16,graph,20,\n")
    rows = load_dataset(ds)
    alone, side_by_side = validate_rows(rows, workers=1), validate_rows(rows, workers=2)
    assert alone == side_by_side
    assert alone["failed"] == 1 and alone["rows"][1]["predicted_ms"] > 0
