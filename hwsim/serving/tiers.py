"""The two tiers of a disaggregated run: prefill GPUs and decode GPUs, each one serving
instance with its own continuous-batching loop on the run's shared clock.

- A **prefill instance** is the serving loop (hwsim/serving/loop.py) with its decodes taken
  away: it admits prompts while their KV fits beside the weights (prefix caching included),
  runs prefill-only iterations of `token_budget` prompt tokens, and when a prompt completes its
  first token is out and the request is handed to the decode tier. Its KV stays held here until
  the transfer has sent it.
- A **decode instance** runs decode-only iterations over the requests whose KV has arrived. A
  request gets a decode GPU (a batch slot and its whole KV cache, prompt + reply, reserved)
  before its transfer starts, as vLLM's connectors allocate the receiving blocks first, and
  joins the batch at the first iteration that starts after its last byte has landed.

Both tiers time their iterations with the same hardware engine (one GPU each, the same chip).
"""

from __future__ import annotations

from typing import Callable

import simpy

from hwsim.build import Built
from hwsim.serving.loop import Iteration, ServingLoop
from hwsim.serving.prefix_cache import BLOCK_TOKENS
from hwsim.serving.requests import Request


class PrefillInstance(ServingLoop):
    def __init__(self, built: Built, env: simpy.Environment, oracle, gpu: int,
                 prefilled: Callable[[Request, "PrefillInstance"], None]):
        super().__init__(built, oracle=oracle, env=env)
        self.gpu = gpu
        self.prefilled = prefilled           # the coordinator takes a request whose prompt is done
        self.busy_s = 0.0

    def _own_tokens(self, req: Request, whole: bool) -> int:
        """A prefill GPU holds only the prompt's KV, whatever the allocation (it never decodes)."""
        shared = min(len(self._blocks(req)) * BLOCK_TOKENS, req.prompt_tokens)
        return req.prefill_target - shared

    def outstanding_tokens(self) -> int:
        """Prompt tokens still to compute here: the router sends a new request to the least."""
        return sum(r.prefill_target - r.prefilled for r in [*self.waiting, *self.running])

    def release(self, req: Request) -> None:
        """Its KV has been sent (or it needs no decode): the memory is free again."""
        self._reserved -= req.held_bytes
        req.held_bytes = 0.0
        self.prefix.release(self._blocks(req))
        self._wake()

    def serve(self):
        """Process body: prefill-only iterations, for ever (the run ends when no event is left)."""
        env = self.env
        while True:
            if not self.running and not self.waiting:
                self._arrived = env.event()
                yield self._arrived
            blocked = self._admit()
            chunks = self._prefill_chunks(self.w.token_budget)
            if not chunks:                   # KV held by sends in flight: wait for one to end
                yield from self._await_arrival(blocked)
                continue
            tokens = sum(t for _, t in chunks)
            completing = sum(1 for r, t in chunks if r.prefilled + t >= r.prefill_target)
            step = self.oracle.time(0, 0, tokens, completing)
            t0 = env.now
            yield env.timeout(step.duration_s)
            self.busy_s += step.duration_s
            if blocked:
                self.kv_blocked_s += step.duration_s
            self.iterations.append(Iteration(t0, 0, tokens, len(self.waiting), step))
            self._advance_prefills(chunks)
            for r in [r for r, _ in chunks if r.prefilled >= r.prefill_target]:
                self.running.remove(r)
                self.prefilled(r, self)


class DecodeInstance:
    def __init__(self, built: Built, env: simpy.Environment, oracle, gpu: int,
                 decoded: Callable[[Request, "DecodeInstance"], None]):
        self.env = env
        self.oracle = oracle
        self.gpu = gpu
        self.decoded = decoded               # the coordinator takes a request whose reply is done
        self.max_batch = built.scenario.workload.max_batch_size
        self.kv_capacity = built.memory.kv_room     # one GPU's, resolved once by build
        self.reserved = 0.0                  # KV bytes of the running and incoming requests
        self.incoming = 0                    # requests whose KV is on its way
        self.running: list[Request] = []
        self.iterations: list[Iteration] = []
        self.busy_s = 0.0
        self._arrived = env.event()

    @property
    def free_bytes(self) -> float:
        return self.kv_capacity - self.reserved

    def has_room(self, kv_bytes: float) -> bool:
        return len(self.running) + self.incoming < self.max_batch and kv_bytes <= self.free_bytes

    def reserve(self, req: Request, kv_bytes: float) -> None:
        req.held_bytes = kv_bytes
        self.reserved += kv_bytes
        self.incoming += 1

    def receive(self, req: Request) -> None:
        """Its KV has landed: it decodes from the next iteration on."""
        self.incoming -= 1
        self.running.append(req)
        if not self._arrived.triggered:
            self._arrived.succeed()

    def serve(self):
        """Process body: decode-only iterations, for ever (the run ends when no event is left)."""
        env = self.env
        while True:
            if not self.running:
                self._arrived = env.event()
                yield self._arrived
            batch = list(self.running)
            step = self.oracle.time(len(batch), sum(r.context for r in batch) / len(batch), 0, 0)
            t0 = env.now
            yield env.timeout(step.duration_s)
            self.busy_s += step.duration_s
            self.iterations.append(Iteration(t0, len(batch), 0, self.incoming, step))
            for r in batch:
                r.token(env.now)
            for r in [r for r in batch if r.done]:
                self.running.remove(r)
                self.reserved -= r.held_bytes
                r.held_bytes = 0.0
                self.decoded(r, self)
