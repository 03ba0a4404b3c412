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
        import os
        from hwsim.io.forked import map_side_by_side
        out = map_side_by_side(lambda x: (x * x, os.getpid()), list(range(7)), [float(x) for x in range(7)], workers=3)
        print([v for v, _ in out], len({pid for _, pid in out}))
    """)
    assert out == f"{[x * x for x in range(7)]} 3"          # in order; the parent and two children


def test_map_raises_a_childs_exception_here():
    out = run_fresh("""
        import os
        from hwsim.io.forked import map_side_by_side
        parent = os.getpid()
        def fn(x):
            if x == 5:
                raise OSError(28, f"No space left on device (in the parent: {os.getpid() == parent})")
            return x
        try:      # costs: the heaviest share is this process's, 5 goes to the child
            map_side_by_side(fn, list(range(6)), [10.0, 0, 0, 0, 0, 5.0], workers=2)
        except OSError as exc:
            print(type(exc).__name__, exc.errno, exc.strerror)
    """)
    assert out == "OSError 28 No space left on device (in the parent: False)"


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
