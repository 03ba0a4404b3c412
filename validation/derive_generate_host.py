"""The eager generate() host's two costs, derived from the H200 HF traces of issue 30
(validation/data/hf_traces_h200/call_1: Llama-3.1-8B eager decode steps on a DynamicCache, which
grows a token a step), for hardware_profiles/engine_hosts/hf-transformers-h200.yaml:

    python validation/derive_generate_host.py

- `generate_plan_ms`: cuDNN's SDPA builds an execution plan for every attention shape it has not
  seen; a DynamicCache's KV length is new every step, so each step builds one, in its first
  layer's aten::scaled_dot_product_attention (the other 31 layers' calls take ~0.1 ms: the plan
  is cached per shape). Its host time in each profiled step: the median over the traced points.
- `generate_issue_us`: the rest of the step's wall (steps.jsonl, unprofiled) over its kernels:
  one kernel's Python, ATen dispatch and launch call, generate's sampling inside it.
Nothing here is fitted to the library-stack rows of issue 44 it predicts.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
CALL = ROOT / "validation" / "data" / "hf_traces_h200" / "call_1"
MODEL = "llama-3.1-8b"


def first_sdpa_ms(trace: Path) -> float:
    """Host ms of the profiled step's slowest SDPA call (the one that built the plan)."""
    opener = gzip.open if trace.name.endswith(".gz") else open
    with opener(trace, "rt") as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return max(e["dur"] for e in events if e.get("name") == "aten::scaled_dot_product_attention") / 1e3


def derive() -> list[dict]:
    from trace_store import trace_path
    rows = []
    for line in (CALL / "steps.jsonl").read_text().splitlines():
        r = json.loads(line)
        trace = CALL / "traces" / f"hf-{MODEL}-eager-b{r['batch']}-l{r['context_tokens']}.json.gz"
        if r["model"] != MODEL or r["stack"] != "eager" or not (CALL / "traces" / "traces.tar.xz").exists():
            continue
        try:
            plan = first_sdpa_ms(trace_path(trace))
        except (FileNotFoundError, KeyError):
            continue                                  # a point measured without its trace
        rows.append({"batch": r["batch"], "context_tokens": r["context_tokens"], "wall_ms": r["wall_ms"],
                     "kernels": r["kernels"], "plan_ms": plan, "issue_us": (r["wall_ms"] - plan) / r["kernels"] * 1e3})
    return rows


def main() -> int:
    rows = derive()
    for r in rows:
        print(f"b{r['batch']} {r['context_tokens']}: wall {r['wall_ms']:.1f} ms, {r['kernels']} kernels, "
              f"plan {r['plan_ms']:.1f} ms, issue {r['issue_us']:.1f} us")
    print(f"generate_plan_ms {statistics.median(r['plan_ms'] for r in rows):.1f}, "
          f"generate_issue_us {statistics.median(r['issue_us'] for r in rows):.1f} (median of {len(rows)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
