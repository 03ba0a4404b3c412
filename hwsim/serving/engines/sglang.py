"""SGLang's real Scheduler on CPU, on a virtual clock, with hwsim's step clock as its predictor.

SGLang 0.5.4's own `Scheduler` (its `__init__`, `get_next_batch_to_run`, `run_batch`,
`process_batch_result`: schedule policy, radix/prefix cache, chunked prefill, the token budget,
max running requests, retraction when the KV pool runs out) is built and driven as its
`event_loop_normal` drives it. SGLang 0.5.4 has no simulator hook (no `InferTimePredictor` in the
wheel), so the predictor sits where the model does: the tensor-parallel worker is replaced by
`ClockWorker`, whose `forward_batch_generation` hands the batch's (extend tokens, cached prefix
tokens) per sequence to hwsim's step clock, advances the virtual clock by the step's wall, and
returns a token per sequence. Its KV pools are SGLang's own `ReqToTokenPool` and token allocator
(the `page_size` one when page_size > 1), sized as SGLang's ModelRunner sizes them on the device
(`profile_max_num_token`: memory left beside the weights less `1 - mem_fraction_static` of the
chip, over the bytes a token's KV takes) but holding no KV tensors.

Not run: the sockets (requests are handed to `handle_generate_request`, outputs dropped), the
distributed groups (one GPU), the model, the tokenizer (`skip_tokenizer_init`), the overlap
scheduler (`disable_overlap_schedule`: the step clock times each step whole), and sgl_kernel
(its CUDA kernels are imported at module load; a stub module stands in, nothing calls it).
The names hooked are HOOKS; tests/test_engine_sglang.py fails loudly when one is gone.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from hwsim.config.engine_install import SGLANG_PINNED, EngineError, check_sglang, server_args_fields  # noqa: F401
from hwsim.serving.engines.results import EngineRun
from hwsim.config.sglang_stubs import STUBBED, install_stubs  # noqa: F401

SM = "sglang.srt.managers"
# (module, attribute) the adapter reaches into; each must exist in the pinned version
HOOKS = (
    (f"{SM}.scheduler", "Scheduler.__init__"),
    (f"{SM}.scheduler", "Scheduler.init_sockets"),
    (f"{SM}.scheduler", "Scheduler.handle_generate_request"),
    (f"{SM}.scheduler", "Scheduler.get_next_batch_to_run"),
    (f"{SM}.scheduler", "Scheduler.run_batch"),
    (f"{SM}.scheduler", "Scheduler.process_batch_result"),
    (f"{SM}.scheduler", "get_pp_group"),
    (f"{SM}.scheduler", "get_world_group"),
    (f"{SM}.scheduler", "ModelConfig.from_server_args"),
    (f"{SM}.tp_worker", "TpModelWorker"),
    (f"{SM}.tp_worker", "TpModelWorker.get_worker_info"),
    (f"{SM}.tp_worker", "TpModelWorker.forward_batch_generation"),
    (f"{SM}.io_struct", "TokenizedGenerateReqInput"),
    (f"{SM}.utils", "GenerationBatchResult"),
    ("sglang.srt.layers.logits_processor", "LogitsProcessorOutput"),
    ("sglang.srt.mem_cache.memory_pool", "ReqToTokenPool"),
    ("sglang.srt.mem_cache.allocator", "TokenToKVPoolAllocator"),
    ("sglang.srt.mem_cache.allocator", "PagedTokenToKVPoolAllocator"),
    ("sglang.srt.sampling.sampling_params", "SamplingParams"),
    ("sglang.srt.server_args", "ServerArgs"),
    ("sglang.srt.server_args", "PortArgs"),
    ("sglang.srt.server_args", "get_device_memory_capacity"),
    ("sglang.srt.server_args", "set_global_server_args_for_scheduler"),
)
def hf_config_dir(model) -> str:
    """A model folder holding only config.json of hwsim's model shape (what ModelConfig reads)."""
    a = model.attention
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": model.hidden,
           "num_hidden_layers": model.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads or a.heads, "head_dim": a.head_dim, "vocab_size": model.vocab,
           "intermediate_size": getattr(model, "ffn", None) or 4 * model.hidden,
           "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    d = Path(tempfile.mkdtemp(prefix="hwsim-sglang-"))
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def kv_tokens(model, args, hbm_bytes: float, available_bytes: float) -> int:
    """SGLang's ModelRunner.profile_max_num_token on the device: the memory left beside the
    weights less (1 - mem_fraction_static) of the chip, over a token's KV bytes (bf16)."""
    a = model.attention
    cell = (a.kv_heads or a.heads) * a.head_dim * model.layers * 2 * 2
    tokens = int((available_bytes - hbm_bytes * (1 - args.mem_fraction_static)) // cell)
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    return tokens // args.page_size * args.page_size


class ClockWorker:
    """Stands for TpModelWorker: SGLang's own KV pools, and a forward timed by the step clock."""

    def __init__(self, args, model_config, tokens: int, clock, vclock, on_step):
        import torch
        from sglang.srt.mem_cache import allocator as al
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        self.clock, self.vclock, self.on_step = clock, vclock, on_step
        context = model_config.context_len
        max_reqs = min(max(int(tokens / context * 512), 2048), 4096)   # ModelRunner.init_memory_pool's rule
        self.req_to_token_pool = ReqToTokenPool(size=max_reqs, max_context_len=context + 4, device="cpu",
                                                enable_memory_saver=False)
        if args.page_size == 1:
            self.allocator = al.TokenToKVPoolAllocator(tokens, dtype=torch.bfloat16, device="cpu",
                                                       kvcache=None, need_sort=False)
        else:
            self.allocator = al.PagedTokenToKVPoolAllocator(tokens, page_size=args.page_size, dtype=torch.bfloat16,
                                                            device="cpu", kvcache=None, need_sort=False)
        running = tokens // 2 if args.max_running_requests is None else args.max_running_requests
        self.info = (tokens, args.max_prefill_tokens, min(running, max_reqs), args.max_queued_requests,
                     min(context - 1, tokens - 1), min(context - 1, tokens - 1) - 5, args.random_seed, "cpu",
                     max_reqs, context + 4, tokens)
        group = SimpleNamespace(cpu_group=None, world_size=1, rank=0)
        self.model_runner = SimpleNamespace(
            req_to_token_pool=self.req_to_token_pool, token_to_kv_pool_allocator=self.allocator,
            tp_group=group, attention_tp_group=group, is_hybrid=None, hybrid_gdn_config=None,
            model=SimpleNamespace(), sliding_window_size=None, mambaish_config=None)
        self.is_hybrid = False

    def get_worker_info(self):
        return self.info

    def get_memory_pool(self):
        return self.req_to_token_pool, self.allocator

    def get_tp_group(self):
        return self.model_runner.tp_group

    def get_attention_tp_group(self):
        return self.model_runner.attention_tp_group

    def get_attention_tp_cpu_group(self):
        return None

    def get_pad_input_ids_func(self):
        return None

    def forward_batch_generation(self, mwb, *args, **kwargs):
        """The forward: the step clock's time for the batch, one token (id 1) per sequence."""
        import torch
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult
        seq_lens = mwb.seq_lens_cpu.tolist()
        if mwb.forward_mode.is_decode():
            batch = [(1, n - 1) for n in seq_lens]
        else:
            batch = list(zip(mwb.extend_seq_lens, mwb.extend_prefix_lens))
        t = self.clock.time(batch)
        self.on_step(self.vclock.now, t, batch)
        self.vclock.now += t.total_s
        return GenerationBatchResult(logits_output=LogitsProcessorOutput(next_token_logits=None),
                                     next_token_ids=torch.ones(len(seq_lens), dtype=torch.int64),
                                     extend_input_len_per_req=None, extend_logprob_start_len_per_req=None)


@dataclass
class SglRun(EngineRun):
    """The run (results.EngineRun; started: its first prefill chunk was scheduled; preemptions:
    requests retracted) and the KV pool and batch limit SGLang resolved."""
    max_total_tokens: int = 0
    max_running_requests: int = 0


class VirtualClock:
    def __init__(self):
        self.now = 0.0


def server_args(model, fields: dict, hbm_bytes: float):
    """SGLang's ServerArgs of the scenario: its own field names, hwsim's model shape, no tokenizer.
    Its defaults that follow the GPU's memory (chunked_prefill_size, cuda_graph_max_bs,
    mem_fraction_static) are resolved for the chip's memory, as nvidia-smi would report it (MiB)."""
    from sglang.srt import server_args as sa
    try:
        with mock.patch.object(sa, "get_device_memory_capacity", lambda device=None: hbm_bytes / 2**20):
            return sa.ServerArgs(model_path=hf_config_dir(model), device="cpu", skip_tokenizer_init=True,
                                 disable_overlap_schedule=True, **fields)
    except (TypeError, ValueError, AssertionError) as exc:
        raise EngineError(f"workload.engine.config: SGLang's ServerArgs refused it: {exc}".splitlines()[0]) from exc


def _no_sockets(scheduler, server_args, port_args) -> None:
    """Scheduler.init_sockets: nothing is received (requests are handed in), outputs dropped."""
    sink = SimpleNamespace(send_output=lambda *a, **k: None, send_pyobj=lambda *a, **k: None)
    scheduler.recv_from_tokenizer = scheduler.recv_from_rpc = None
    scheduler.send_to_tokenizer = scheduler.send_to_detokenizer = sink
    scheduler.send_metrics_from_scheduler = scheduler.idle_sleeper = None


class SglEngine:
    """SGLang's Scheduler on `clock` (a StepClock); `hbm_bytes`, `available_bytes`: the chip's
    memory and what is left beside the weights (what SGLang's memory profile would see)."""

    def __init__(self, model, clock, fields: dict, hbm_bytes: float, available_bytes: float):
        check_sglang()
        import torch
        from sglang.srt.managers import scheduler as sm
        from sglang.srt import server_args as sa
        self.clock, self.vclock = clock, VirtualClock()
        self.run = SglRun()
        args = self.args = server_args(model, fields, hbm_bytes)
        tokens = kv_tokens(model, args, hbm_bytes, available_bytes)
        if tokens <= 0:
            raise EngineError("workload.engine.config: no memory left for SGLang's KV cache on this chip "
                              f"(mem_fraction_static {args.mem_fraction_static})")
        torch.set_num_threads(1)
        sa.set_global_server_args_for_scheduler(args)     # what the ModelRunner sets in a real worker
        one = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0,
                              cpu_group=None, device_group=None)
        on_step = lambda t0, st, batch: self.run.steps.append((t0, st, batch))  # noqa: E731
        worker = lambda **kw: ClockWorker(args, sm.ModelConfig.from_server_args(args), tokens,  # noqa: E731
                                          clock, self.vclock, on_step)
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(sm.Scheduler, "init_sockets", _no_sockets))
            stack.enter_context(mock.patch("sglang.srt.managers.tp_worker.TpModelWorker", worker))
            stack.enter_context(mock.patch.object(sm, "get_pp_group", lambda: one))
            stack.enter_context(mock.patch.object(sm, "get_world_group", lambda: one))
            self.scheduler = sm.Scheduler(args, sa.PortArgs.init_new(args), gpu_id=0, tp_rank=0,
                                          moe_ep_rank=0, pp_rank=0, dp_rank=None)
        self.run.max_total_tokens = self.scheduler.max_total_num_tokens
        self.run.max_running_requests = self.scheduler.max_running_requests

    def _request(self, r, prompt: list):
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams
        sp = SamplingParams(max_new_tokens=r.output_tokens, ignore_eos=True, temperature=0.0)
        sp.normalize(None)
        return TokenizedGenerateReqInput(rid=str(r.rid), input_text="", input_ids=prompt, mm_inputs=None,
                                         sampling_params=sp, return_logprob=False, logprob_start_len=-1,
                                         top_logprobs_num=0, token_ids_logprob=None, stream=False)

    def _stamp(self, batch) -> None:
        """Each sequence's new tokens take the end of the step that made them."""
        run = self.run
        for req in batch.reqs:
            rid = int(req.rid)
            run.started.setdefault(rid, run.steps[-1][0])
            times = run.token_times.setdefault(rid, [])
            times.extend([self.vclock.now] * (len(req.output_ids) - len(times)))

    def serve(self, requests) -> SglRun:
        """Run `requests` (hwsim.serving.requests.Request) as event_loop_normal runs them, new
        requests handed in at their arrival on the virtual clock."""
        s, run = self.scheduler, self.run
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
        ids, i, idle = 2, 0, 0
        while True:
            while i < len(pending) and pending[i].arrival_s <= self.vclock.now:
                r = pending[i]
                i += 1
                prompt = [(ids + k) % 100_000 + 2 for k in range(r.prompt_tokens)]     # no shared prefixes
                ids += r.prompt_tokens
                s.handle_generate_request(self._request(r, prompt))
                run.arrivals[r.rid], run.prompts[r.rid], run.outputs[r.rid] = r.arrival_s, r.prompt_tokens, r.output_tokens
            s.num_retracted_reqs = 0       # set (never reset) by update_running_batch when it retracts
            batch = s.get_next_batch_to_run()
            run.preemptions += s.num_retracted_reqs
            s.cur_batch = batch
            if batch:
                result = s.run_batch(batch)
                s.process_batch_result(batch, result)
                self._stamp(batch)
            s.last_batch = batch
            if batch is not None:
                idle = 0
                continue
            s.self_check_during_idle()         # what event_loop_normal does on an empty step
            idle += 1
            if s.waiting_queue or s.chunked_req or not s.running_batch.is_empty():
                if idle > 3:                   # the loop would spin on: requests that never fit
                    raise EngineError(f"workload.engine.config: SGLang's scheduler cannot schedule "
                                      f"{len(s.waiting_queue)} waiting requests (KV pool {run.max_total_tokens} tokens)")
                continue                       # a None step (e.g. a full batch just emptied): ask again
            if i == len(pending):
                break
            self.vclock.now = max(self.vclock.now, pending[i].arrival_s)   # idle until the next arrival
        unserved = [rid for rid in run.arrivals if not run.token_times.get(rid)]
        if unserved:                       # SGLang aborts a prompt over its max_req_input_len
            raise EngineError(f"workload.prompt: SGLang served no token of {len(unserved)} requests (first: "
                              f"{run.prompts[unserved[0]]} prompt tokens; its max_req_input_len is "
                              f"{s.max_req_input_len})")
        return run
