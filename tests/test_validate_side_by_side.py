"""validate's rows run side by side in forked processes (hwsim.io.forked.map_side_by_side):
the report is the one made row after row, and a failure in another process is raised here.
Each case runs in a fresh interpreter: map_side_by_side forks no threaded process, and an
earlier test in this one may have left a thread running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

ROOT = Path(__file__).resolve().parents[1]
HEADER = "name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes\n"


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_map_keeps_order_and_runs_in_other_processes():
    out = run_fresh("""
        import os, time
        from hwsim.io.forked import map_side_by_side
        parent = os.getpid()
        def fn(x):
            time.sleep(0.5 if os.getpid() == parent else 0.05)   # the children take items meanwhile
            return x * x, os.getpid()
        out = map_side_by_side(fn, list(range(7)), [float(x) for x in range(7)], workers=3)
        pids = {pid for _, pid in out}
        print([v for v, _ in out], parent in pids, 2 <= len(pids) <= 3)
    """)
    assert out == f"{[x * x for x in range(7)]} True True"      # in order; the parent and its children


def test_map_raises_a_childs_exception_here():
    out = run_fresh("""
        import os
        from hwsim.io.forked import map_side_by_side
        import time
        parent = os.getpid()
        def fn(x):
            if os.getpid() != parent:
                raise OSError(28, f"No space left on device (in the parent: {os.getpid() == parent})")
            time.sleep(0.5)          # the child takes an item meanwhile
            return x
        try:
            map_side_by_side(fn, list(range(6)), [10.0, 0, 0, 0, 0, 5.0], workers=2)
        except OSError as exc:
            print(type(exc).__name__, exc.errno, exc.strerror)
    """)
    assert out == "OSError 28 No space left on device (in the parent: False)"


def test_a_process_takes_the_next_item_when_it_is_free(tmp_path):
    """Items wait in a queue, costliest first: while one process is held by the first item
    (estimated the costliest, here waiting for all the others), another takes every other
    item; dealt out beforehand by cost, the first item's process would hold some of them."""
    out = run_fresh(f"""
        import os, time
        from pathlib import Path
        from hwsim.io.forked import map_side_by_side
        done = Path({str(tmp_path)!r})
        def fn(x):
            if x == 0:
                deadline = time.monotonic() + 120
                while len(list(done.iterdir())) < 5 and time.monotonic() < deadline:
                    time.sleep(0.01)
            else:
                (done / str(x)).write_text("")
            return os.getpid()
        pids = map_side_by_side(fn, list(range(6)), [10.0, 1, 1, 1, 1, 1], workers=2)
        print(len(set(pids[1:])), pids[0] != pids[1], len(list(done.iterdir())))
    """)
    assert out == "1 True 5"


def test_queue_gives_each_index_once_in_order():
    from hwsim.io.forked import _queue, _taken

    q = _queue([3, 0, 2, 1])
    try:
        assert list(_taken(q)) == [3, 0, 2, 1] and list(_taken(q)) == []
    finally:
        os.close(q)


def test_rows_side_by_side_give_the_report_of_rows_in_turn(tmp_path):
    ds = tmp_path / "ds.csv"
    ds.write_text(HEADER
                  + "a,h200-sxm,mixtral-8x7b,decode,2,512,0,16,graph,9.5,\n"
                  + "b,h200-sxm,qwen3-30b-a3b,decode,4,1024,0,16,graph,20,\n"
                  + "bad,h200-sxm,gpt-9,decode,1,512,0,16,graph,8.8,\n"
                  + "c,h200-sxm,mixtral-8x7b,prefill,1,0,128,16,graph,20,\n")
    out = run_fresh(f"""
        from hwsim.validate import load_dataset, validate_rows
        rows = load_dataset({str(ds)!r})
        alone, side_by_side = validate_rows(rows, workers=1), validate_rows(rows, workers=2)
        print(alone == side_by_side, alone["failed"], alone["rows"][1]["predicted_ms"] > 0)
    """)
    assert out == "True 1 True"
