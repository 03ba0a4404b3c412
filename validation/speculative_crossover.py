"""Where speculative decoding stops paying as the batch fills (issue 45, item 3; docs/whatif.md).

    python validation/speculative_crossover.py            # both tables, markdown (~1 min)

1. The serving loop's step (hwsim/serving/speculation.py, SpeculativeOracle) at D
   decoding sequences of 512 tokens of context, MTP with K drafted tokens at acceptance 0.8:
   its ms per accepted token over the plain step's, hwsim's and a closed-form count's
   (closed_form below; tests/test_speculative_serving.py holds hwsim to it).
2. Serving runs under Poisson load, light and saturating: TTFT and ITL per accepted token.
Llama-3.1-8B on the H200 profile, the maximum SM clock (the power limit's settling aside).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hwsim.pipeline import system  # noqa: E402
from hwsim.config.load import load_scenario  # noqa: E402
from hwsim.pipeline import run_config  # noqa: E402
from hwsim.serving.loop import StepOracle  # noqa: E402
from hwsim.speculative import expected_tokens  # noqa: E402
from hwsim.serving.speculation import ServingSpeculation  # noqa: E402

MODEL = ["model=llama-3.1-8b", "workload.arrivals.kind=poisson", "runtime.sm_clock=max",
         "workload.max_batch_size=512", "workload.token_budget=8192"]
ACCEPTANCE, CONTEXT = 0.8, 512
BATCHES, KS = (1, 16, 64, 128, 256, 512), (1, 3, 7)


def mtp(k: int, a: float = ACCEPTANCE) -> list[str]:
    return ["workload.speculative.method=mtp", f"workload.speculative.tokens={k}",
            f"workload.speculative.acceptance={a}"]


def closed_form(b, decodes: int, context: int, k: int) -> tuple[float, float, float]:
    """A step's (seconds, bytes, flops) from a closed-form count: each pass's GEMMs at the
    profile's peak HBM bandwidth or bf16 tensor rate, whichever binds (weights read once, 2
    flops a weight a token row), plus its KV cache read once at peak bandwidth (all K+1 queries
    of a sequence together); the verification of K+1 tokens a sequence, then K MTP passes
    (the 2d x d projection, one layer of the model's shape, the LM head). k = 0: plain decode."""
    m, s, chip = b.model, b.schedule, b.chip
    bw, peak = chip.hbm_peak_bytes_s, chip.tensor_flops["bf16"]
    gemm_params = s.weight_elements_total()                     # every GEMM's weights (no embedding)
    layer_params = (gemm_params - m.vocab * m.hidden) / m.layers
    kv_layer = decodes * context * s.kv_token_bytes(context)    # one layer's cache

    def gemm_pass(params, rows, layers):
        t = max(params * m.weight_bytes / bw, 2 * params * rows / peak) + layers * kv_layer / bw
        return t, params * m.weight_bytes + layers * kv_layer, 2 * params * rows

    passes = [gemm_pass(gemm_params, decodes * (k + 1), m.layers)]
    passes += [gemm_pass(2 * m.hidden * m.hidden + layer_params + m.vocab * m.hidden, decodes, 1)] * k
    return tuple(sum(p[i] for p in passes) for i in range(3))


def step_ratios(attention: str, k: int) -> list[tuple[int, float, float]]:
    """(batch, hwsim's ratio, the closed form's) of ms per accepted token, speculative / plain."""
    sets = [*MODEL, f"runtime.attention_kernel={attention}"]
    spec_b, plain_b = system(load_scenario(None, [*sets, *mtp(k)])), system(load_scenario(None, sets))
    spec, plain, e = ServingSpeculation(spec_b).oracle(spec_b), StepOracle(plain_b), expected_tokens([ACCEPTANCE] * k)
    rows = []
    for d in BATCHES:
        hw = spec.time(d, CONTEXT, 0, 0).duration_s / e / plain.time(d, CONTEXT, 0, 0).duration_s
        cf = closed_form(spec_b, d, CONTEXT, k)[0] / e / closed_form(plain_b, d, CONTEXT, 0)[0]
        rows.append((d, hw, cf))
    return rows


def step_table() -> None:
    print(f"| attention | K | E | {' | '.join(f'batch {d}' for d in BATCHES)} |")
    print("|---|---:|---:|" + "---:|" * len(BATCHES))
    for attention in ("cudnn", "flash"):
        for k in KS:
            cells = [f"{hw:.2f} ({cf:.2f})" for _, hw, cf in step_ratios(attention, k)]
            print(f"| {attention} | {k} | {expected_tokens([ACCEPTANCE] * k):.2f} | {' | '.join(cells)} |", flush=True)


def serving_table() -> None:
    print("| load | speculation | mean batch | iterations | TTFT p50 ms | ITL mean ms | ITL p50 ms | ITL p99 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    loads = {"light (2 req/s)": ["workload.arrivals.rate_per_s=2", "workload.arrivals.requests=40"],
             "saturating (2000 req/s)": ["workload.arrivals.rate_per_s=2000", "workload.arrivals.requests=1500"]}
    for load, sets in loads.items():
        for k in (0, *KS):
            cfg = load_scenario(None, [*MODEL, "runtime.attention_kernel=cudnn", "workload.prompt.tokens=256",
                                       "workload.output.tokens=128", *sets, *(mtp(k) if k else [])])
            res = run_config(cfg, system(cfg), intervals=False)
            s, its = res.summary, res.iterations
            batch = np.mean([it.decodes for it in its if it.decodes])
            print(f"| {load} | {f'MTP K={k}' if k else 'none'} | {batch:.0f} | {len(its)} | {s['ttft_ms']['p50']:.1f} | "
                  f"{s['itl_ms']['mean']:.2f} | {s['itl_ms']['p50']:.2f} | {s['itl_ms']['p99']:.2f} |", flush=True)


if __name__ == "__main__":
    step_table()
    print()
    serving_table()
