"""Prefill/decode disaggregation (`workload.disaggregation`): the run's coordinator.

Requests arrive as in a colocated run (the arrival processes of hwsim/serving/loop.py) and
go to the prefill GPU with the fewest prompt tokens outstanding. When a prompt completes, its
first token is out (TTFT counts queueing + prefill, as DistServe and Splitwise count it: the
prefill instance emits the first token) and the request waits, first come first served, for a
decode GPU with a batch slot and room for its whole KV cache: the one with the most free KV
takes it. Its prompt's KV cache is then sent over the links (hwsim/serving/kv_transfer.py),
the prefill GPU frees it, and the request decodes on the decode GPU: the transfer and the wait
for a decode GPU delay its second token.

The coordinator is a ServingLoop for what the two share (arrival processes, the summary's
interface); the instances are in hwsim/serving/tiers.py.
"""

from __future__ import annotations

import simpy

from hwsim.build import Built
from hwsim.serving.kv_transfer import KvFabric
from hwsim.serving.loop import ServingLoop, StepOracle
from hwsim.serving.requests import Request
from hwsim.serving.speculation import ServingSpeculation
from hwsim.serving.tiers import DecodeInstance, PrefillInstance


class DisaggregatedLoop(ServingLoop):
    def __init__(self, built: Built, progress=None, oracle=None):
        d = built.scenario.workload.disaggregation
        self.fabric = KvFabric(built.chip, built.profile.name, d, built.scenario.parallel.topology)
        super().__init__(built, progress, oracle or StepOracle(built), env=self.fabric.env)
        self.prefill = [PrefillInstance(built, self.env, self.oracle, i, self._prefilled)
                        for i in range(d.prefill_gpus)]
        self.decode = [DecodeInstance(built, self.env, self.oracle, j, self._decoded)
                       for j in range(d.decode_gpus)]
        self.handoffs: list[tuple[Request, PrefillInstance]] = []   # prefilled, waiting for a decode GPU
        self._done: dict[int, simpy.Event] = {}

    # -- the KV a request needs on each tier --------------------------------------------------
    def _decode_kv_bytes(self, req: Request) -> float:
        """Its whole cache, prompt + reply, reserved on the decode GPU."""
        return (req.prompt_tokens + req.output_tokens) * self._kv_token_bytes(req)

    def _sent_bytes(self, req: Request) -> float:
        """The prompt's KV cache as the prefill wrote it: every layer, the scenario's KV format."""
        return req.prompt_tokens * self.built.model.layers * self.built.schedule.kv_token_bytes(req.prompt_tokens)

    # -- the request's path ---------------------------------------------------------------
    def _arrive(self, req: Request):
        if self._decode_kv_bytes(req) > self.decode[0].kv_capacity:
            self.rejected.append(req)        # could never fit a decode GPU: reject it
            self._target -= 1
            return
        inst = min(self.prefill, key=lambda p: (p.outstanding_tokens(), p.gpu))
        req.prefill_gpu = inst.gpu
        inst._arrive(req)

    def _prefilled(self, req: Request, src: PrefillInstance) -> None:
        if req.done:                          # a one-token reply: nothing to decode
            src.release(req)
            self._finish(req)
            return
        req.handoff_s = self.env.now
        self.handoffs.append((req, src))
        self._dispatch()

    def _dispatch(self) -> None:
        """Prefilled requests, in order, to the decode GPU with room and the most free KV."""
        while self.handoffs:
            req, src = self.handoffs[0]
            need = self._decode_kv_bytes(req)
            fits = [d for d in self.decode if d.has_room(need)]
            if not fits:
                return                        # the head waits for a decode GPU to free room
            dst = max(fits, key=lambda d: (d.free_bytes, -d.gpu))
            self.handoffs.pop(0)
            dst.reserve(req, need)
            req.decode_gpu = dst.gpu
            self.env.process(self._send(req, src, dst))

    def _send(self, req: Request, src: PrefillInstance, dst: DecodeInstance):
        t = yield from self.fabric.send(req.rid, src.gpu, dst.gpu, self._sent_bytes(req))
        req.kv_transfer_s, req.kv_transfer_bytes = t.seconds, t.bytes
        req.decode_admitted_s = t.start_s
        src.release(req)
        dst.receive(req)

    def _decoded(self, req: Request, dst: DecodeInstance) -> None:
        self._finish(req)
        self._dispatch()

    def _finish(self, req: Request) -> None:
        self.finished.append(req)
        self.gaps.add(req)
        if req.rid in self._done:
            self._done[req.rid].succeed()
        if self.progress:
            self.progress(len(self.finished), self._target)

    # -- the run -------------------------------------------------------------------------
    def run(self) -> list[Request]:
        self._start_arrivals(self._done)
        for inst in [*self.prefill, *self.decode]:
            self.env.process(inst.serve())
        self.env.run()
        self.iterations = sorted((it for inst in [*self.prefill, *self.decode] for it in inst.iterations),
                                 key=lambda it: it.t_start)
        self.rejected += [r for p in self.prefill for r in p.rejected]
        self.kv_blocked_s = sum(p.kv_blocked_s for p in self.prefill)
        return sorted(self.finished, key=lambda r: r.rid)

    @property
    def prefix_hit_rate(self) -> float:
        hits = sum(p.prefix.hit_tokens for p in self.prefill)
        prompts = sum(p.prefix.prompt_tokens for p in self.prefill)
        return hits / prompts if prompts else 0.0


def serving_loop(built: Built, progress=None, oracle=None) -> ServingLoop:
    """The run's loop: one colocated instance, or the disaggregated tiers. Under
    workload.speculative it drafts and verifies in every iteration (serving/speculation.py)."""
    if built.scenario.workload.disaggregation:
        return DisaggregatedLoop(built, progress, oracle)
    if built.scenario.workload.speculative is not None:
        spec = ServingSpeculation(built)
        return ServingLoop(built, progress, oracle or spec.oracle(built), spec=spec)
    return ServingLoop(built, progress, oracle)
