"""Hugging Face transformers continuous batching, its real scheduler on a virtual clock.

transformers 5.17.0's own ContinuousBatchingManager builds the batch processor (its FIFO or
prefill-first scheduler, paged cache with block sharing, chunked prefill under the token
budget, offloading and soft-reset preemption when blocks run out: the library's code, none of
it rewritten). Only the forward pass is replaced: ContinuousBatchProcessor._generation_step
becomes a step that asks hwsim's step clock (hwsim/serving/step_clock.py) for the batch's time,
advances a virtual clock by it and writes a token per sequence where sampling writes them. The
`time` module that continuous_batching/requests.py stamps lifespans and token timestamps with is
replaced by that clock, so the engine's own records are the simulated times.

No weights: the model is a config built from hwsim's model shape (attention dims, layers,
vocabulary) and an empty module. The KV cache is sized as the library sizes it on the GPU: its
PagedAttentionMemoryHandler solves for blocks and batch tokens from the memory torch would see
free once the weights are loaded (hwsim/serving/engines/hf_memory.py; the one call answered from
hwsim instead of torch.cuda). CUDA graphs and
async batching are decided by the library's own rules as on a CUDA device (they change the
engine's host timing, hwsim/serving/engine_host.py); on CPU the loop runs synchronously.

The step's input tensors (token ids, positions, the paged cache's read and write indices: 3-5 ms
a step of Python and torch on CPU, and nothing reads them but the forward the clock replaces)
are not built: `lean_inputs` keeps only what ContinuousBatchingIOs.prepare_batch_tensors does
to the requests (positions advanced, the placeholder token, the batch's list), so the scheduler
decides as it does with the library's own (tests/test_engine_hf.py proves every request's token
steps identical on a seeded trace). `lean_inputs=False` runs the library's own.

The private names hooked are listed in HOOKS; tests/test_engine_hf.py fails loudly if any is
missing or the version is not PINNED.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

from hwsim.config.engine_install import (PINNED, EngineError, cb_config, check_version,  # noqa: F401
                                          config_fields, transformers_version)
from hwsim.serving.engines.results import EngineRun

CB = "transformers.generation.continuous_batching"
# (module, attribute) the adapter reaches into; each must exist in the pinned version
HOOKS = (
    (f"{CB}.continuous_api", "ContinuousBatchingManager._create_batch_processor"),
    (f"{CB}.continuous_api", "ContinuousBatchProcessor._generation_step"),
    (f"{CB}.continuous_api", "ContinuousBatchProcessor.prepare_next_batch"),
    (f"{CB}.continuous_api", "ContinuousBatchProcessor.update_batch"),
    (f"{CB}.scheduler", "Scheduler.add_waiting_request"),
    (f"{CB}.requests", "RequestState.create_equivalent_initial_request"),
    (f"{CB}.requests", "time"),
    (f"{CB}.requests", "RequestState._timestamps"),
    (f"{CB}.cache", "PagedAttentionMemoryHandler.get_available_memory"),
    (f"{CB}.cache", "PagedAttentionMemoryHandler.infer_max_batch_tokens_and_num_blocks"),
    (f"{CB}.cache", "group_layers_by_attn_type"),
    (f"{CB}.initialization", "ensure_decode_fast_path_is_available"),
    (f"{CB}.input_outputs", "attn_mask_is_needed"),
    (f"{CB}.input_outputs", "ContinuousBatchingIOs.requests_in_batch"),
    (f"{CB}.input_outputs", "ContinuousBatchingIOs.output_ids"),
    (f"{CB}.input_outputs", "ContinuousBatchingIOs.prepare_batch_tensors"),
    (f"{CB}.requests", "TMP_TOKEN_ID"),
    (f"{CB}.initialization", "resolve_continuous_batching_config"),
    (f"{CB}.model_runner", "ModelRunner.maybe_pad_inputs"),
)


class VirtualClock:
    """Stands for the `time` module in the engine's requests module: perf_counter is the clock."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    time = perf_counter


def model_config(model, kv_heads: int | None = None, head_dim: int | None = None):
    """A transformers config of hwsim's model shape: what the paged cache and the scheduler read.
    `kv_heads`, `head_dim`: a stand-in's, for a cache whose tensors are never read."""
    # the base config with the fields the library reads: LlamaConfig's import pulls in
    # torch._dynamo and the auto classes (2 s), for the same cache and scheduler
    from transformers.configuration_utils import PreTrainedConfig
    a = model.attention
    cfg = PreTrainedConfig(hidden_size=model.hidden, num_hidden_layers=model.layers, vocab_size=model.vocab,
                           num_attention_heads=a.heads, num_key_value_heads=kv_heads or a.kv_heads or a.heads,
                           head_dim=head_dim or a.head_dim, intermediate_size=getattr(model, "ffn", None) or 4 * model.hidden)
    cfg._attn_implementation = "paged|sdpa"      # HF's default attention (SDPA, cuDNN on the H200), paged
    return cfg


def cache_size(config, cfg, available_bytes: float) -> tuple[int, int]:
    """(max_batch_tokens, num_blocks) as the library solves them on the device (its
    PagedAttentionMemoryHandler, the model's real dims), given the memory it would see free."""
    import torch
    from transformers.generation.continuous_batching import cache as cb_cache
    groups, types = cb_cache.group_layers_by_attn_type(config)
    with mock.patch.object(cb_cache.PagedAttentionMemoryHandler, "get_available_memory",
                           lambda h: int(available_bytes * h.cb_config.max_memory_percent)):
        handler = cb_cache.PagedAttentionMemoryHandler(config, cfg, torch.bfloat16, types, len(groups[0]))
        return handler.infer_max_batch_tokens_and_num_blocks()


def fake_model(config):
    """The module the manager is handed: a config, a device and a dtype, no weights."""
    import torch
    from transformers.generation.logits_process import LogitsProcessorList

    class NoWeights(torch.nn.Module):
        _supports_flash_attn = False

        def __init__(self):
            super().__init__()
            self.config = config
            self.device = torch.device("cpu")
            self.dtype = torch.bfloat16

        def set_attn_implementation(self, name: str) -> None:
            self.config._attn_implementation = name

        def _get_logits_processor(self, generation_config):
            return LogitsProcessorList()

    return NoWeights()


def on_device(config, cfg):
    """The config resolved as the library resolves it on a CUDA device: CUDA graphs and async
    batching by its own rules, memory percent, batch limits."""
    from transformers.generation.continuous_batching import initialization
    with mock.patch("torch.cuda.is_available", return_value=True), \
            mock.patch.object(initialization, "ensure_decode_fast_path_is_available", lambda *a, **k: None):
        return initialization.resolve_continuous_batching_config(config, cfg, None, False)


def io_copy_bytes(max_batch_tokens: int, num_pages: int, dtype_bytes: int = 2, bulk_lines: int = 7) -> int:
    """What async batching copies to the device every step (ContinuousBatchingIOs._transfer_inputs):
    the whole static attention mask (paged|sdpa needs one: max_batch_tokens x (num_pages +
    max_batch_tokens), the model's dtype), read and write indices (int64), the bulk inputs (int32)."""
    mask = max_batch_tokens * (num_pages + max_batch_tokens) * dtype_bytes
    indices = (num_pages + max_batch_tokens) * 8 + max_batch_tokens * 8
    bulk = bulk_lines * (-(-(max_batch_tokens + 1) // 32) * 32) * 4
    return mask + indices + bulk


@dataclass
class HfRun(EngineRun):
    """The run (results.EngineRun; started: left the engine's queue, its lifespan's start;
    preemptions: offloaded or soft reset) and the paged cache the library sized."""
    num_blocks: int = 0
    max_batch_tokens: int = 0


class HfEngine:
    """The HF engine on `clock` (a StepClock). `available_bytes`: the device memory the library
    would see free once the weights are loaded (mem_get_info's total less what is allocated)."""

    def __init__(self, model, clock, fields: dict, available_bytes: float, lean_inputs: bool = True):
        check_version()
        import torch
        from transformers import GenerationConfig
        from transformers.generation.continuous_batching import input_outputs
        from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager
        self.clock = clock
        self.vclock = VirtualClock()
        cfg = cb_config(fields)
        device = self.device_cfg = on_device(model_config(model), cfg)
        graphs = device.use_cuda_graph
        self.cuda_graph = any(graphs) if isinstance(graphs, tuple) else bool(graphs)
        self.async_batching = bool(device.use_async_batching)
        if clock.host is not None:
            clock.host.cuda_graph, clock.host.async_batching = self.cuda_graph, self.async_batching
        # sized with the model's real dims on the device's memory; the cache on CPU then holds one
        # narrow head (nothing reads it: the forward is the step clock)
        cfg.max_batch_tokens, cfg.num_blocks = cache_size(model_config(model), device, available_bytes)
        if clock.host is not None:
            pages = cfg.num_blocks * cfg.block_size
            clock.host.h2d_bytes = io_copy_bytes(cfg.max_batch_tokens, pages)
            clock.host.padding = (device.q_padding_interval_size, device.kv_padding_interval_size,
                                  cfg.max_batch_tokens, pages)
        cfg.max_memory_percent = device.max_memory_percent
        cfg.use_cuda_graph, cfg.use_async_batching = False, False    # on CPU the loop runs synchronously
        gen = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0)
        torch.set_num_threads(1)
        # no attention mask: the forward that reads it is not run (the step clock times it); the
        # library checks the solved sizes against the memory it sees free: the device's, not this host's
        from transformers.generation.continuous_batching import cache as cb_cache
        with mock.patch.object(input_outputs, "attn_mask_is_needed", lambda config: False), \
                mock.patch.object(cb_cache.PagedAttentionMemoryHandler, "get_available_memory",
                                  lambda h: int(available_bytes * h.cb_config.max_memory_percent)):
            self.manager = ContinuousBatchingManager(fake_model(model_config(model, 1, 4)), gen, cfg)
            self.processor = self.manager._create_batch_processor()
        self.processor._generation_step = self._step
        self.io = self.processor.inputs_and_outputs
        if lean_inputs:
            self.io.prepare_batch_tensors = self._lean_inputs
        self.states: dict[str, list] = {}          # request id -> its states (a soft reset makes a new one)
        queue_up = self.processor.scheduler.add_waiting_request

        def add_waiting_request(state):
            held = self.states.setdefault(state.request_id, [])
            if held:                # queued again: offloaded to the CPU (the same state) or soft reset (a new one)
                self.preempted += 1
            if not held or held[-1] is not state:
                held.append(state)
            queue_up(state)
        self.processor.scheduler.add_waiting_request = add_waiting_request
        self.preempted = 0

    def _step(self, model=None) -> None:
        """The forward pass: the step clock's time for the scheduled batch, a token per sequence."""
        io = self.io
        batch = [(f.query_length, f.state.position_offset - f.query_length) for f in io.requests_in_batch]
        t = self.clock.time(batch, self._padding(io, batch))
        self.run.steps.append((self.vclock.now, t, batch))
        self.vclock.now += t.total_s
        io.output_ids[0, :io.num_request_in_batch] = 1

    def _lean_inputs(self, requests_in_batch, logits_processors, use_decode_fast_path: bool,
                     num_q_tokens: int, max_kv_read: int, use_padding: bool) -> None:
        """ContinuousBatchingIOs.prepare_batch_tensors less its tensors: what it does to the
        requests and the IO's batch records (the scheduler and update_batch read them)."""
        from transformers.generation.continuous_batching.requests import TMP_TOKEN_ID
        if not requests_in_batch:
            raise ValueError("No requests in batch")
        io = self.io
        io.use_block_table = use_decode_fast_path and io.block_table.numel() > 0
        io.num_q_tokens = num_q_tokens
        io.max_kv_read = 0 if io.use_block_table else max_kv_read
        io.num_request_in_batch = len(requests_in_batch)
        io.requests_in_batch = list(requests_in_batch)
        io.req_id_to_new_token_position = new = {}
        q_end = 0
        for future in requests_in_batch:
            state = future.state
            state.position_offset += future.query_length
            q_end += future.query_length
            if future.has_new_token:
                state.tokens_to_process = [TMP_TOKEN_ID]
                new[state.request_id] = q_end - 1
        io.total_seqlen_q = q_end

    def _padding(self, io, batch) -> list:
        """CUDA graphs: the library pads the step's query tokens (and KV read) to its intervals,
        and the padded rows run through the forward: one more sequence of them, with the padded
        KV as its cache (the library's own ModelRunner.maybe_pad_inputs on the device's config)."""
        if not self.cuda_graph:
            return []
        from transformers.generation.continuous_batching.model_runner import ModelRunner
        runner = SimpleNamespace(pad_inputs=True, cache=self.processor.cache, cb_config=self.device_cfg)
        q = sum(n for n, _ in batch)
        kv = sum(n + c for n, c in batch)
        q_pad, kv_pad = ModelRunner.maybe_pad_inputs(runner, q, kv, io.use_block_table)
        return [(q_pad - q, max(0, kv_pad - kv - (q_pad - q)))] if q_pad > q else []

    def serve(self, requests) -> HfRun:
        """Run `requests` (hwsim.serving.requests.Request: arrival, prompt and reply lengths)."""
        from transformers.generation.continuous_batching import requests as cb_requests
        self.run = run = HfRun(num_blocks=self.processor.cache.num_blocks,
                               max_batch_tokens=self.processor.cache.max_batch_tokens,
                               cuda_graph=self.cuda_graph, async_batching=self.async_batching)
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
        ids = itertools.count(2)
        with mock.patch.object(cb_requests, "time", self.vclock):
            i = 0
            while i < len(pending) or self.processor.has_pending_requests() or not self.manager.input_queue.empty():
                if not self.processor.has_pending_requests() and self.manager.input_queue.empty():
                    self.vclock.now = max(self.vclock.now, pending[i].arrival_s)   # idle until the next arrival
                while i < len(pending) and pending[i].arrival_s <= self.vclock.now:
                    r = pending[i]
                    i += 1
                    prompt = [next(ids) % 100_000 + 2 for _ in range(r.prompt_tokens)]    # no shared prefixes
                    self.manager.add_request(prompt, request_id=str(r.rid), max_new_tokens=r.output_tokens,
                                             record_timestamps=True)
                    run.arrivals[r.rid], run.prompts[r.rid], run.outputs[r.rid] = r.arrival_s, r.prompt_tokens, r.output_tokens
                if self.processor.prepare_next_batch():
                    self.processor._generation_step(None)
                    self.processor.update_batch()
        held = {int(rid): states for rid, states in self.states.items()}
        run.token_times = {rid: [t for s in held[rid] for t in s._timestamps] for rid in run.arrivals}
        if self.async_batching and self.clock.host is not None:      # a capture delays the last step's stamps
            from hwsim.serving.engine_host import async_stamps
            moved = async_stamps(run.steps)
            run.token_times = {rid: [moved.get(t, t) for t in ts] for rid, ts in run.token_times.items()}
        run.started = {rid: held[rid][0].lifespan[0] for rid in run.arrivals}
        run.preemptions = self.preempted
        return run
