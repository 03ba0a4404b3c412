"""Speculative decoding and multi-token prediction (workload.speculative, docs/whatif.md).

A step drafts K tokens per sequence, then the model verifies them and the sequence's own next
token in one pass of K+1 query tokens per sequence (StepShape.queries): every GEMM and every
routed expert sees B (K+1) token rows, routing drawn per token (so the union of experts a
layer touches grows), the KV cache gets K+1 rows per sequence, and the attention reads each
sequence's cache for its K+1 queries as its library does (FlashAttention-2 and cuDNN: a program
per query head, hwsim/model/multi_query_attention.py; fused low-bit kernels, MLA: packed beside
the query heads). The draft work runs first, on the same chip:
- mtp: the model's multi-token-prediction module, once per drafted token, batch B: two RMSNorms
  (of the hidden state and of the embedded token), the projection of their concatenation
  (2d -> d), one transformer layer of the model's own shape (a MoE layer where the model's
  last layer is), the final norm and the (shared) LM head (DeepSeek-V3, shared/reference/
  literature.md: "+1 MTP layer"); K > 1 runs the one module K times, as SGLang and vLLM do;
- draft: the draft model's decode step, once per drafted token, batch B.
The drafted tokens' weights are not counted in the memory check.

Tokens a step yields, with a_j the chance draft token j is accepted given every earlier one was
(verification keeps the longest accepted prefix, then adds the model's own token):
    E = 1 + sum_{j=1..K} prod_{i<=j} a_i        (one rate a: (1 - a^(K+1)) / (1 - a)).
Sequences grow by E tokens a step (their context at step i is context_tokens + round(i E)).
In serving runs (workload.arrivals) each iteration composes these passes for its own decodes and
prefill chunk, and draws each sequence's accepted tokens: hwsim/serving/speculation.py.
"""

from __future__ import annotations

import numpy as np

from hwsim.build import Built
from hwsim.config.scenario import DraftSpeculation, MtpSpeculation, Scenario, Weights
from hwsim.errors import ConfigError
from hwsim.metrics import Component
from hwsim.model import ops, weight_format
from hwsim.model.blocks import attention_kernel
from hwsim.model.schedule import NORM_OPS_PER_ELEM, Schedule, StepShape
from hwsim.rng import RandomStreams
from hwsim.step import PassPlan, StepResult, plan_pass, simulate_pass
from hwsim.summary import SpeculativeSummary
from hwsim.workload.router import Router, experts_chosen


def expected_tokens(rates: list[float]) -> float:
    """Tokens a step yields per sequence (module docstring)."""
    total, alive = 1.0, 1.0
    for a in rates:
        alive *= a
        total += alive
    return total


class Speculation:
    """The draft work and the verification of one scenario's steps, and what they came to."""

    def __init__(self, cfg: Scenario, b: Built):
        spec = cfg.workload.speculative
        attention = attention_kernel(cfg.runtime.attention_kernel)
        if attention.mla_reference:     # its decode attends one query token per sequence
            raise ConfigError("workload.speculative verifies with the flash or cudnn attention kernel; "
                              f"{attention.name} MLA decodes one token per sequence", key="runtime.attention_kernel")
        self.cfg, self.spec = cfg, spec
        self.rates = spec.rates()
        self.expected = expected_tokens(self.rates)
        self.queries = spec.tokens + 1
        self.draft_model = self._draft_model(cfg, b) if spec.tokens else None
        self.draft_ms: list[float] = []
        self.verify_ms: list[float] = []
        self.first_token_experts: list[float] = []

    def _draft_model(self, cfg: Scenario, b: Built):
        """The draft's schedule and router: the draft model's, or (mtp) one layer of the model's."""
        w = cfg.workload
        if isinstance(self.spec, DraftSpeculation):
            model = b.draft              # read when the scenario was loaded (hwsim/pipeline.py)
            if model is None:
                raise ValueError("a draft model is read when the scenario is loaded (pipeline.load, from_config)")
            weights = weight_format.plan(Weights(), model.weights)
        else:
            m = b.model
            moe = m.moe.model_copy(update={"dense_layers": 0}) if m.is_moe_layer(m.layers - 1) else None
            model = m.model_copy(update={"layers": 1, "moe": moe, "name": f"{m.name}-mtp"})
            weights = b.schedule.wplan
        schedule = Schedule(model, b.chip, kv=b.schedule.kv, dequant=cfg.kv_cache.dequant,
                            moe_schedule=cfg.runtime.moe_schedule, attention_kernel=cfg.runtime.attention_kernel,
                            max_batch=w.batch_size,
                            max_context=w.context_tokens + 2 * w.decode_steps * self.queries,
                            weights=weights)
        router = None
        if model.moe:
            layers = [layer for layer in range(model.layers) if model.is_moe_layer(layer)]
            router = Router(cfg.moe.routing, model.moe, layers, RandomStreams(cfg.seed).get("speculative-draft"))
        return schedule, router

    def _mtp_head(self, schedule: Schedule, rows: int) -> list:
        """The MTP module's own kernels before its transformer layer: RMSNorm of the hidden state
        and of the embedded token, and the projection of the two concatenated (2d -> d), for
        `rows` tokens."""
        d, wb, chip = schedule.model.hidden, schedule.wb, schedule.chip
        addr = schedule.mem.place("mtp.eh_proj", 2 * d * d * wb)
        norms = [ops.rows_kernel(f"mtp.{n}", 0, rows, d, ops.ACT_BYTES, NORM_OPS_PER_ELEM, chip,
                                 weight_bytes=d * wb, weight_addr=addr, reads=("x",), writes=(n,))
                 for n in ("hnorm", "enorm")]
        return norms + ops.gemm("mtp.eh_proj", 0, rows, 2 * d, d, chip, weight_addr=addr, weight_bytes=wb,
                                data=Component.WEIGHT_READ, writes=("x",))

    def _draft_passes(self, b: Built, step: int, context: int) -> list[StepResult]:
        batch = self.cfg.workload.batch_size
        return [self.draft_pass(b, step, StepShape("decode", batch, batch, context + j))
                for j in range(self.spec.tokens)]

    def draft_pass(self, b: Built, step: int, shape: StepShape) -> StepResult:
        """One pass of the draft model (or MTP module) over `shape`'s tokens, on b's chip."""
        schedule, router = self.draft_model
        routing = router.step(step, shape.tokens) if router else {}
        state = schedule.cold_state()
        head = self._mtp_head(schedule, shape.tokens) if isinstance(self.spec, MtpSpeculation) else []
        items = schedule._walked(head, state.l2) + schedule.step(shape, routing, state)
        return simulate_pass(b, shape, step, None, plan=PassPlan(routing, items), intervals=False)

    def simulate_step(self, b: Built, step: int, records, every_interval: bool, intervals: bool) -> StepResult:
        """One speculative step: the draft passes, then the verification of K+1 tokens a sequence."""
        w = self.cfg.workload
        context = w.context_tokens + round(step * self.expected)
        drafts = self._draft_passes(b, step, context) if self.spec.tokens else []
        shape = StepShape("decode", w.batch_size, w.batch_size * self.queries, context, queries=self.queries)
        plan = plan_pass(b, shape, step)
        verify = simulate_pass(b, shape, step, records, every_interval, plan=plan, intervals=intervals)
        first = [experts_chosen(r[:w.batch_size]) for r in plan.routing.values()]
        self.first_token_experts.append(float(np.mean(first)) if first else 0.0)
        self.draft_ms.append(sum(d.duration_s for d in drafts) * 1e3)
        self.verify_ms.append(verify.duration_s * 1e3)
        return merged_passes(drafts, verify)

    def summary(self, steps: list[StepResult]) -> SpeculativeSummary:
        step_ms = float(np.mean([s.duration_s for s in steps])) * 1e3
        experts = float(np.mean([s.active_experts_per_layer for s in steps]))
        first = float(np.mean(self.first_token_experts))
        return SpeculativeSummary(
            method=self.spec.method, tokens=self.spec.tokens, acceptance=self.rates,
            draft_model=self.spec.draft if isinstance(self.spec, DraftSpeculation) else None,
            query_tokens_per_sequence=self.queries,
            expected_tokens_per_step=self.expected,
            ms_per_step=step_ms,
            ms_per_accepted_token=step_ms / self.expected,
            tokens_per_s_per_sequence=1e3 * self.expected / step_ms,
            draft_ms_per_step=float(np.mean(self.draft_ms)),
            verify_ms_per_step=float(np.mean(self.verify_ms)),
            experts_per_layer=experts,
            experts_per_layer_first_token=first,
            extra_experts_per_layer=experts - first,
        )


def merged_passes(drafts: list[StepResult], verify: StepResult) -> StepResult:
    """The step as one: from the first draft pass's start to the verification's end, every
    pass's time, bytes, kernels and work summed; routing figures the verification's."""
    if not drafts:
        return verify
    passes = [*drafts, verify]
    breakdown = {k: sum(p.breakdown_s[k] for p in passes) for k in verify.breakdown_s}
    moved = {k: sum(p.bytes[k] for p in passes) for k in verify.bytes}
    activity = verify.activity
    for d in drafts:
        activity = activity + d.activity
    return StepResult(step=verify.step, phase=verify.phase, batch=verify.batch, context=verify.context,
                      t_start=drafts[0].t_start, t_end=verify.t_end, breakdown_s=breakdown, bytes=moved,
                      kernels=sum(p.kernels for p in passes), tokens=verify.tokens,
                      active_experts_per_layer=verify.active_experts_per_layer,
                      active_weight_fraction=verify.active_weight_fraction, activity=activity,
                      draft_s=sum(d.duration_s for d in drafts))
