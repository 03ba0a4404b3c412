"""Speculative decoding and MTP inside continuous batching (workload.speculative with arrivals).

Each iteration of the serving loop (hwsim/serving/loop.py) composes, for D decoding sequences
and a prefill chunk of P prompt tokens:
- the draft work (hwsim/speculative.py, Speculation.draft_pass), charged to the
  iteration, before the verification: the draft model's (or MTP module's) first pass runs over
  the D sequences' last tokens and the chunk's P prompt tokens (a draft keeps its own KV of the
  prompt, as vLLM's and SGLang's drafts and MTP modules prefill it), then K - 1 more passes
  over the D sequences;
- the verification, one pass of D (K + 1) query tokens beside the P prompt tokens: the query
  tokens share the iteration's token budget with the prefill (the loop leaves
  token_budget - D (K + 1) to prompts).
A sequence then gets 1 + n tokens, n its accepted drafts: the longest accepted prefix, each
drafted token j accepted with workload.speculative.acceptance's a_j, drawn from the sequence's
own seeded stream (the same seed gives the same tokens, however the iterations are batched).
The iteration's gap is shared evenly by the tokens it gives a sequence: ITL per accepted token.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from hwsim.build import Built
from hwsim.config.scenario import DraftSpeculation
from hwsim.model.schedule import StepShape
from hwsim.serving.loop import StepOracle, pass_shape
from hwsim.step import simulate_pass
from hwsim.summary import ServingSpeculativeSummary
from hwsim.speculative import Speculation, merged_passes

DRAW_BLOCK = 64              # steps of acceptance drawn at once per sequence (one numpy call)
STREAM = zlib.crc32(b"speculative.acceptance")


class SpeculativeOracle(StepOracle):
    """Iteration durations of a speculative serving run: the draft passes and the verification
    of each distinct shape, simulated once (as StepOracle, whose shape keys it keeps)."""

    def __init__(self, built: Built, spec: Speculation):
        super().__init__(built)
        self.spec = spec

    def simulate(self, key: tuple):
        b = self.built
        b.env.run()
        decodes, ctx, pre, _ = key
        drafts = self._draft_passes(key)
        shape = pass_shape(key)
        if decodes:                       # K + 1 query tokens a decoding sequence
            q = self.spec.queries
            shape = dataclasses.replace(shape, tokens=shape.tokens + decodes * (q - 1), queries=q)
        plan = b.gpus.plan(b, shape, self.simulated, counts_only=True)
        verify = simulate_pass(b, shape, self.simulated, None, plan=plan)
        self.simulated += 1
        return merged_passes(drafts, verify)

    def _draft_passes(self, key: tuple) -> list:
        """The first draft pass over the decodes' last tokens and the prefill chunk, then K - 1
        over the decodes (none without decodes: nothing to draft for)."""
        decodes, ctx = key[0], key[1]
        first = self.spec.draft_pass(self.built, self.simulated, pass_shape(key))
        return [first] + [self.spec.draft_pass(self.built, self.simulated,
                                               StepShape("decode", decodes, decodes, ctx + j))
                          for j in range(1, self.spec.spec.tokens if decodes else 0)]


class Acceptance:
    """Tokens a decoding sequence gets from one verification, 1 + its accepted drafts, drawn
    from the sequence's own stream (seed, request id), DRAW_BLOCK steps at a time; `drawn[n]`
    counts the verifications that accepted n drafts."""

    def __init__(self, seed: int, rates: list[float]):
        self.seed = seed
        self.rates = np.asarray(rates, dtype=float)
        self._open: dict[int, list] = {}           # request id -> [generator, block, next index]
        self.drawn = [0] * (len(rates) + 1)

    def tokens(self, rid: int) -> int:
        state = self._open.get(rid)
        if state is None:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, STREAM, rid]))
            state = self._open[rid] = [rng, None, DRAW_BLOCK]
        if state[2] == DRAW_BLOCK:
            u = state[0].random((DRAW_BLOCK, len(self.rates)))
            # drafted token j counts while every one up to it was accepted
            state[1] = 1 + np.cumprod(u < self.rates, axis=1).sum(axis=1)
            state[2] = 0
        n = int(state[1][state[2]])
        state[2] += 1
        self.drawn[n - 1] += 1
        return n

    def close(self, rid: int) -> None:
        """The request finished: its stream is dropped."""
        self._open.pop(rid, None)


class ServingSpeculation:
    """workload.speculative in a serving run: the oracle and the per-sequence acceptance."""

    def __init__(self, built: Built):
        cfg = built.scenario
        self.core = Speculation(cfg, built)
        self.queries = self.core.queries
        self.acceptance = Acceptance(cfg.seed, self.core.rates)
        self.emitted = 0                   # tokens the verifications gave out (replies' ends cut)

    def oracle(self, built: Built) -> SpeculativeOracle:
        return SpeculativeOracle(built, self.core)

    def take(self, rid: int, room: int) -> int:
        """The tokens request `rid` gets from this iteration's verification, at most `room` (its
        reply's end); its stream is dropped when they fill it."""
        n = min(self.acceptance.tokens(rid), room)
        self.emitted += n
        if n == room:
            self.acceptance.close(rid)
        return n

    def summary(self, iterations: list) -> ServingSpeculativeSummary:
        """The run's speculation: measured acceptance beside the configured, and the drafts'
        share of the iterations' time (each iteration's pass: StepResult.draft_s)."""
        core, drawn = self.core, self.acceptance.drawn
        k, runs = core.spec.tokens, sum(drawn)
        accepted = sum(n * c for n, c in enumerate(drawn))
        total_s = sum(it.duration_s for it in iterations)
        draft_s = sum(it.step.draft_s for it in iterations)
        verifying = sum(1 for it in iterations if it.decodes)
        steps = max(len(iterations), 1)
        return ServingSpeculativeSummary(
            method=core.spec.method, tokens=k, acceptance=core.rates,
            draft_model=core.spec.draft if isinstance(core.spec, DraftSpeculation) else None,
            query_tokens_per_sequence=core.queries, expected_tokens_per_step=core.expected,
            verifications=runs, acceptance_measured=measured_rates(drawn),
            draft_acceptance_rate=accepted / (k * runs) if runs else None,
            accepted_tokens_per_verification=accepted / runs if runs else None,
            tokens_per_verification=1 + accepted / runs if runs else None,
            tokens_per_step=self.emitted / verifying if verifying else None,
            ms_per_step=1e3 * total_s / steps, draft_ms_per_step=1e3 * draft_s / steps,
            verify_ms_per_step=1e3 * (total_s - draft_s) / steps,
            draft_share=draft_s / total_s if total_s else 0.0)


def measured_rates(drawn: list[int]) -> list:
    """Per drafted position j, the share of the verifications that reached it (accepted every
    earlier draft) which accepted it too; None where none reached it. `drawn[n]`: the
    verifications that accepted n drafts."""
    out = []
    for j in range(1, len(drawn)):
        reached, accepted = sum(drawn[j - 1:]), sum(drawn[j:])
        out.append(accepted / reached if reached else None)
    return out
