"""The built-in serving loop (`workload.engine.kind: hwsim`): iteration-level continuous batching
over the simulated chip with a vLLM-like policy (FIFO, decodes first, chunked prefill, recompute or
swap preemption). It is no engine's code; a real engine's scheduler runs in hwsim/serving/engines/.

Two discrete-event levels: this loop's SimPy clock runs arrivals, the queue and iterations;
each iteration's duration comes from the hardware engine simulating that iteration's kernels
(a mixed decode + prefill-chunk pass). Iterations of the same shape (decoding sequences,
context rounded up to CONTEXT_BUCKET, prefill tokens rounded up to PREFILL_BUCKET) are
simulated once and reused: the engine is deterministic given the shape, and the routing
draw of the first simulation stands for the rest.

Each iteration: the running sequences that finished their prompt decode one token each;
waiting requests are admitted FIFO while the batch has room and their whole KV cache
(prompt + output, at the scenario's KV precision) fits beside the weights; the token budget
left after the decodes goes to prompt tokens (chunked or whole prompts). A request's first
token comes at the end of the iteration that completes its prompt.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from enum import Enum

import simpy

from hwsim.build import Built
from hwsim.config.scenario import ClosedArrivals
from hwsim.rng import RandomStreams
from hwsim.model.schedule import StepShape
from hwsim.serving.host_link import HOST_LINKS, HostCopies
from hwsim.serving.prefix_cache import BLOCK_TOKENS, PrefixCache
from hwsim.serving.requests import GapLog, Request, open_loop_requests
from hwsim.step import simulate_pass

CONTEXT_BUCKET = 512
PREFILL_BUCKET = 128


class KvAllocation(Enum):
    """`workload.kv_allocation`: the KV cache a request is given at admission."""
    WHOLE = "whole"                 # its prompt and whole reply, up front
    AS_NEEDED = "as_needed"         # what its prefill computes; each token grows it (preempting)


class Preemption(Enum):
    """`workload.preemption`: what happens to a preempted request's KV cache."""
    RECOMPUTE = "recompute"         # dropped: its prompt and reply so far are prefilled again
    SWAP = "swap"                   # copied to host memory over `workload.host_link`, and back


@dataclass(slots=True)        # a million of them in a 100,000-request trace (issue 33)
class Iteration:
    t_start: float
    decodes: int
    prefill_tokens: int
    waiting: int
    step: object                 # the simulated pass (hwsim.step.StepResult) this iteration reused

    @property
    def duration_s(self) -> float:
        return self.step.duration_s

    @property
    def breakdown_s(self) -> dict[str, float]:
        return self.step.breakdown_s


def shape_key(decodes: int, mean_context: float, prefill_tokens: int, prefill_sequences: int) -> tuple:
    """The iteration's shape as the oracle keys it: (decodes, context bucket, prefill bucket,
    prompts completing)."""
    ctx = max(CONTEXT_BUCKET, math.ceil(mean_context / CONTEXT_BUCKET) * CONTEXT_BUCKET) if decodes else 0
    pre = math.ceil(prefill_tokens / PREFILL_BUCKET) * PREFILL_BUCKET if prefill_tokens else 0
    return (decodes, ctx, pre, prefill_sequences)


def pass_shape(key: tuple) -> StepShape:
    """The pass the engine simulates for a shape key."""
    decodes, ctx, pre, prefill_sequences = key
    if decodes and pre:
        return StepShape("mixed", decodes, decodes + pre, ctx, pre, prefill_sequences)
    if decodes:
        return StepShape("decode", decodes, decodes, ctx)
    return StepShape("prefill", 1, pre, 0)


class StepOracle:
    """Iteration durations from the hardware engine, one simulation per distinct shape."""

    def __init__(self, built: Built):
        self.built = built
        self.cache: dict[tuple, object] = {}
        self.simulated = 0

    def time(self, decodes: int, mean_context: float, prefill_tokens: int, prefill_sequences: int):
        key = shape_key(decodes, mean_context, prefill_tokens, prefill_sequences)
        if key not in self.cache:
            self.cache[key] = self.simulate(key)
        return self.cache[key]

    def simulate(self, key: tuple, packed=None):
        """The pass of a shape key; `packed` (hwsim/model/paged_sdpa.py PackedShape): the engine's
        attention over the packed batch in place of the pass's per-sequence attention."""
        b = self.built
        b.env.run()
        shape = pass_shape(key) if packed is None else replace(pass_shape(key), packed=packed)
        # one GPU's schedule reads only how many tokens each expert got: drawn directly (issue
        # 33: per-token top-k over every prompt token was 56% of a long-prompt trace)
        plan = b.gpus.plan(b, shape, self.simulated, counts_only=True)      # several GPUs: None
        step = simulate_pass(b, shape, self.simulated, None, plan=plan)
        self.simulated += 1
        return step


class ServingLoop:
    def __init__(self, built: Built, progress=None, oracle=None, env: simpy.Environment | None = None,
                 spec=None):
        self.built = built
        self.cfg = built.scenario
        self.w = self.cfg.workload
        # workload.speculative: its drafts' and verification's oracle, each sequence's accepted
        # tokens (hwsim/serving/speculation.py; serving_loop gives it)
        self.spec = spec
        self.oracle = oracle or StepOracle(built)     # a stand-in: tests, hwsim.serving.rehearse
        self.env = env or simpy.Environment()        # shared by the instances of a disaggregated run
        self.streams = RandomStreams(self.cfg.seed)
        # FIFO admission pops from the head: a deque, as a list's pop(0) made a million-request
        # trace quadratic
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: list[Request] = []
        self.gaps = GapLog()                          # the finished requests' inter-token gaps
        self.iterations: list[Iteration] = []
        self.kv_blocked_s = 0.0
        self.rejected: list[Request] = []
        self.progress = progress
        self._arrived = self.env.event()
        self._kv_capacity = built.memory.kv_room      # one GPU's, resolved once by build
        self._reserved = 0.0          # KV bytes running requests hold outside shared prefix blocks
        self.preemptions = 0
        self.prefix = PrefixCache()
        # swap preemption: KV copied to the host and back, before the iteration that needs it
        self.host = (HostCopies(self.env, HOST_LINKS[self.w.host_link])
                     if Preemption(self.w.preemption) is Preemption.SWAP else None)
        self.as_needed = KvAllocation(self.w.kv_allocation) is KvAllocation.AS_NEEDED
        self._swap_bytes = {"in": 0.0, "out": 0.0}
        self._target = self.w.arrivals.requests
        self._issued = 0
        self._opened = 0

    # -- arrivals ---------------------------------------------------------------------------
    def _arrive(self, req: Request):
        self.waiting.append(req)
        self._wake()

    def _wake(self):
        """Something the scheduler waits for happened (an arrival; KV freed)."""
        if not self._arrived.triggered:
            self._arrived.succeed()

    def _open_loop(self, requests: list[Request]):
        self._target = len(requests)
        for req in requests:
            if req.arrival_s > self.env.now:
                yield self.env.timeout(req.arrival_s - self.env.now)
            self._opened += 1
            self._arrive(req)

    def _closed_user(self, user: int, done: dict):
        a = self.w.arrivals
        lengths_p = self.streams.get(f"prompt_lengths.user{user}")
        lengths_o = self.streams.get(f"output_lengths.user{user}")
        think = self.streams.get(f"think.user{user}")
        while self._issued < self._target:
            rid = self._issued
            self._issued += 1
            req = Request(rid, self.env.now, int(self.w.prompt.draw(lengths_p, 1)[0]),
                          int(self.w.output.draw(lengths_o, 1)[0]))
            done[rid] = self.env.event()
            self._arrive(req)
            yield done[rid]
            yield self.env.timeout(think.exponential(a.think_ms * 1e-3) if a.think_ms else 0)

    # -- scheduling -------------------------------------------------------------------------
    def _kv_token_bytes(self, req: Request) -> float:
        """KV bytes per token of the request, at the scenario's KV format and the request's
        whole length (sinks, recent and outlier tokens make them depend on it)."""
        tokens = req.prompt_tokens + req.output_tokens
        return self.built.model.layers * self.built.schedule.kv_token_bytes(tokens)

    def _blocks(self, req: Request) -> tuple:
        return req.hash_ids if self.w.prefix_caching and not req.private_kv else ()

    def _own_tokens(self, req: Request, whole: bool) -> int:
        """KV tokens the request holds outside its prompt's shared blocks: its whole cache
        (prompt + reply), or (as needed) what its prefill computes and its next token."""
        shared = min(len(self._blocks(req)) * BLOCK_TOKENS, req.prompt_tokens)
        tokens = req.prompt_tokens + req.output_tokens if whole else req.prefill_target + 1
        return tokens - shared

    def _admit(self):
        as_needed = self.as_needed
        while self.waiting and len(self.running) < self.w.max_batch_size:
            req = self.waiting[0]
            blocks = self._blocks(req)
            per_token = self._kv_token_bytes(req)
            block_bytes = BLOCK_TOKENS * per_token
            whole = self._own_tokens(req, True) * per_token + self.prefix.new_bytes(blocks, block_bytes)
            need = self._own_tokens(req, False) * per_token + self.prefix.new_bytes(blocks, block_bytes) \
                if as_needed else whole
            if req.swapped_bytes:             # swapped out: what it had comes back, all its own
                whole, need = (req.prompt_tokens + req.output_tokens) * per_token, req.swapped_bytes
            if as_needed:      # and room for every running sequence's next token (no thrashing)
                need += (len(self.running) + 1) * per_token
            free = self._kv_capacity - self._reserved - self.prefix.used
            keep = set(blocks)
            if need > free + self.prefix.evictable_bytes(keep):
                alone = free + self.prefix.evictable_bytes(keep) if not self.running else self._kv_capacity
                if whole > alone:
                    self.rejected.append(self.waiting.popleft())   # could never fit: reject it
                    self._target -= 1
                    continue
                return True                   # head of line waits for KV space
            if need > free:                   # cached prefixes no request holds make room
                self.prefix.evict(need - free, keep)
            self.waiting.popleft()
            if req.swapped_bytes:             # copied back before the next iteration; its prefill stands
                req.held_bytes, req.swapped_bytes = req.swapped_bytes, 0.0
                self._reserved += req.held_bytes
                self._swap_bytes["in"] += req.held_bytes
                self.running.append(req)
                continue
            req.held_bytes = self._own_tokens(req, not as_needed) * per_token
            self._reserved += req.held_bytes
            req.cached_tokens = self.prefix.hold(blocks, block_bytes, req.prompt_tokens)
            req.prefilled = req.cached_tokens
            if req.admitted_s is None:
                req.admitted_s = self.env.now
            self.running.append(req)
        return False

    def _make_room(self, decoding: list[Request]) -> list[Request]:
        """As needed: KV for every decoding sequence's next token, freeing cached prefixes no
        request holds, then preempting the latest admitted requests (vLLM's policy): their KV
        is dropped to be prefilled again (recompute), or copied to the host (swap), and they
        return to the head of the queue."""
        while True:
            growth = sum(self._kv_token_bytes(r) for r in decoding) * self._queries
            short = growth - (self._kv_capacity - self._reserved - self.prefix.used)
            if short <= 0:
                return decoding
            if self.prefix.evict(short, set()) >= short:
                return decoding
            if len(self.running) < 2:
                return decoding               # alone, it was admitted with room for its whole KV
            victim = self.running.pop()
            blocks = self._blocks(victim)
            if self.host:      # its KV, shared prefix blocks included, goes to the host
                shared = min(len(blocks) * BLOCK_TOKENS, victim.prompt_tokens) * self._kv_token_bytes(victim)
                victim.swapped_bytes = victim.held_bytes + shared
                victim.private_kv = True
                self._swap_bytes["out"] += victim.swapped_bytes
            else:
                victim.recomputed = victim.tokens
                victim.prefilled = 0
            self._reserved -= victim.held_bytes
            victim.held_bytes = 0.0
            self.prefix.release(blocks)
            victim.preemptions += 1
            self.preemptions += 1
            self.waiting.appendleft(victim)
            decoding = [r for r in decoding if r is not victim]

    def _prefill_chunks(self, budget: int) -> list[tuple[Request, int]]:
        """Prompt tokens of this iteration, in admission order: chunks filling the budget, or
        whole prompts while they fit (the first one always)."""
        chunks: list[tuple[Request, int]] = []
        chunked = self.w.chunked_prefill
        for r in self.running:
            left = r.prompt_tokens + r.recomputed - r.prefilled        # to its prefill_target
            if left <= 0:
                continue
            take = min(left, budget) if chunked else left
            if take <= 0 or (not chunked and chunks and take > budget):
                break
            chunks.append((r, take))
            budget -= take
        return chunks

    def _advance_prefills(self, chunks: list[tuple[Request, int]]) -> None:
        """The iteration's chunks are computed: a completed prompt gives its first token now."""
        for r, take in chunks:
            r.prefilled += take
            blocks = self._blocks(r)
            if r.prefilled >= r.prefill_target:
                r.token(self.env.now)        # the first token (or, recomputed, the next)
                self.prefix.computed(blocks, len(blocks) * BLOCK_TOKENS)   # the last, partial one too
            elif blocks:
                self.prefix.computed(blocks, r.prefilled)

    def _swap_copies(self):
        """Process body: this iteration's swaps, in then out, before its pass (vLLM's worker
        issues them on the stream the pass then runs on)."""
        for direction in ("in", "out"):
            if self._swap_bytes[direction]:
                yield from self.host.copy(direction, self._swap_bytes[direction])
                self._swap_bytes[direction] = 0.0

    def _await_arrival(self, blocked: bool):
        """Wait for the next arrival (or freed KV); while admission is `blocked` on KV, the
        wait counts as time blocked."""
        self._arrived = self.env.event()
        t0 = self.env.now
        yield self._arrived
        if blocked:
            self.kv_blocked_s += self.env.now - t0

    def _scheduler(self, done: dict):
        env = self.env
        as_needed = self.as_needed
        while len(self.finished) < self._target:
            if not self.running and not self.waiting:
                if self._all_issued():
                    return
                self._arrived = env.event()
                yield self._arrived
            blocked = self._admit()
            # Request's properties (prefill_target, context, done) spelled out in this loop: it
            # runs a million iterations of a 100,000-request trace, each over every running request
            decoding = [r for r in self.running if r.prefilled >= r.prompt_tokens + r.recomputed]
            if as_needed:
                decoding = self._make_room(decoding)
            chunks = self._prefill_chunks(max(0, self.w.token_budget - self._queries * len(decoding)))
            if not decoding and not chunks:       # nothing runnable (KV full): wait for an arrival
                yield from self._await_arrival(blocked)
                continue
            if self.host:
                yield from self._swap_copies()
            prefill_tokens = sum(t for _, t in chunks)
            completing = sum(1 for r, t in chunks if r.prefilled + t >= r.prefill_target)
            mean_ctx = sum([r.prompt_tokens + r.tokens for r in decoding]) / len(decoding) if decoding else 0
            step = self.oracle.time(len(decoding), mean_ctx, prefill_tokens, completing)
            t0 = env.now
            yield env.timeout(step.duration_s)
            if blocked:
                self.kv_blocked_s += step.duration_s
            self.iterations.append(Iteration(t0, len(decoding), prefill_tokens, len(self.waiting), step))
            now = env.now
            if self.spec:
                self._speculative_tokens(decoding, now, as_needed)
            else:
                for r in decoding:            # Request.token, inlined: a decoding request has its first token
                    r.gaps.append(now - r.last_token_s)
                    r.last_token_s = now
                    r.tokens += 1
                    if as_needed:
                        grown = self._kv_token_bytes(r)
                        r.held_bytes += grown
                        self._reserved += grown
            self._advance_prefills(chunks)
            for r in [r for r in self.running if r.tokens >= r.output_tokens]:
                self.running.remove(r)
                self._reserved -= r.held_bytes
                self.prefix.release(self._blocks(r))
                self.finished.append(r)
                self.gaps.add(r)
                if r.rid in done:
                    done[r.rid].succeed()
                if self.progress:
                    self.progress(len(self.finished), self._target)

    @property
    def _queries(self) -> int:
        """Query tokens a decoding sequence puts in an iteration: 1, or K + 1 verified."""
        return self.spec.queries if self.spec else 1

    def _speculative_tokens(self, decoding: list[Request], now: float, as_needed: bool) -> None:
        """Each decoding sequence's accepted drafts and its own token, out at `now`; the
        iteration's gap is shared evenly by them (ITL per accepted token)."""
        for r in decoding:
            n = self.spec.take(r.rid, r.output_tokens - r.tokens)
            r.gaps.extend([(now - r.last_token_s) / n] * n)
            r.last_token_s = now
            r.tokens += n
            if as_needed:
                grown = n * self._kv_token_bytes(r)
                r.held_bytes += grown
                self._reserved += grown

    def _all_issued(self) -> bool:
        a = self.w.arrivals
        issued = self._issued if isinstance(a, ClosedArrivals) else self._opened
        return issued >= self._target + len(self.rejected)

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix.hit_rate

    def _start_arrivals(self, done: dict) -> None:
        a = self.w.arrivals
        if isinstance(a, ClosedArrivals):
            # users past the requests' count would never issue one (the target only falls):
            # not started, nor given their random streams
            for user in range(min(a.users, self._target)):
                self.env.process(self._closed_user(user, done))
        else:
            self.env.process(self._open_loop(open_loop_requests(self.w, self.streams)))

    def run(self) -> list[Request]:
        done: dict[int, simpy.Event] = {}
        self._start_arrivals(done)
        self.env.process(self._scheduler(done))
        self.env.run()
        return sorted(self.finished, key=lambda r: r.rid)
