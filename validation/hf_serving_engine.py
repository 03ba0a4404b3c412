"""One Hugging Face continuous-batching engine (transformers 5.17.0) serving traces in real time
(measure_hf_serving.py's engine side; its docstring says what is measured).

The public API serves the runs: init_continuous_batching, warmup, start, add_request,
get_result, cancel_request, stop, destroy. Two private names are used, for the bursts only:
`_run_generation_loop` runs the engine loop on the calling thread (torch.profiler records CPU
ops of the thread that started it, not of the engine's background thread) and
`background_thread_status` (to flush and stop that loop, and to clear it afterwards).
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import ContinuousBatchingConfig, GenerationConfig

from hf_serving_trace import TraceRow, make_trace
from host_threads import ThreadSampler

ENGINE_KEYS = ("block_size", "num_blocks", "max_batch_tokens", "max_requests_per_batch",
               "max_blocks_per_request", "use_cuda_graph", "use_async_batching", "scheduler_type",
               "q_padding_interval_size", "kv_padding_interval_size", "max_memory_percent",
               "allow_block_sharing", "cpu_offload_space", "default_compile_level")


def describe_env(device: str) -> dict:
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0) if cuda else None, "device": device}


def build_model(config_json: Path, device: str):
    """The model of a config.json with random bf16 weights made on the device (seeded)."""
    kw = json.loads(Path(config_json).read_text())
    kw = {k: v for k, v in kw.items() if not k.startswith("_")}
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return model.eval()


def prompts_of(rows: list[TraceRow], vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(10, vocab, size=r.prompt_tokens).tolist() for r in rows]


class Engine:
    """A ContinuousBatchingManager for one (model, engine config), kept for all its runs."""

    def __init__(self, model, config: str, device: str):
        self.model, self.config, self.device = model, config, device
        self.cuda = device.startswith("cuda") and torch.cuda.is_available()
        self.mgr = None

    def _make_manager(self):
        # off the GPU the library sizes the cache from the host's RAM (90% of it): a small one instead
        small = {} if self.cuda else {"num_blocks": 64, "max_batch_tokens": 1024}
        cb = ContinuousBatchingConfig(**small)
        if self.config == "graphs":
            cb = ContinuousBatchingConfig(use_cuda_graph=True, use_async_batching=self.cuda, **small)
            self.model.set_attn_implementation("paged|sdpa")
        else:
            self.model.set_attn_implementation("sdpa")   # the manager picks the paged variant itself
        if self.cuda:
            torch.backends.cuda.enable_cudnn_sdp(self.config != "graphs")
        gen = GenerationConfig(do_sample=False, max_new_tokens=16, eos_token_id=-1)
        return self.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)

    def start(self, warmup_requests: int, profile_path: Path | None, profile_requests: int,
              profile_tokens: int, quick: bool) -> dict:
        """Make and warm the engine, profile a burst, start its thread; what was resolved."""
        meta = {}
        t = time.perf_counter()
        self.mgr = self._make_manager()
        self.mgr.warmup()
        meta["warmup_s"] = round(time.perf_counter() - t, 3)
        shape = "tiny" if quick else "chat"
        if warmup_requests:
            rows = make_trace(shape, None, warmup_requests, seed=1)
            meta["warm_burst"] = self.burst([dataclasses.replace(r, output_tokens=16) for r in rows], 1)
        if profile_path is not None:
            rows = make_trace(shape, None, profile_requests, seed=2)
            rows = [dataclasses.replace(r, output_tokens=profile_tokens) for r in rows]
            meta["profile_burst"] = self.profiled_burst(rows, profile_path)
            # the same burst again, unprofiled (its plans now cached): the profiler's own cost
            meta["unprofiled_twin"] = self.burst(rows, seed=2, tag="twin")
        self.mgr.start()
        meta["attn_implementation"] = self.model.config._attn_implementation
        meta["cudnn_sdp_enabled"] = torch.backends.cuda.cudnn_sdp_enabled() if self.cuda else None
        meta["engine_config"] = self.resolved()
        return meta

    def resolved(self) -> dict:
        cb = self.mgr.continuous_batching_config
        return {k: getattr(cb, k, None) for k in ENGINE_KEYS}

    def burst(self, rows: list[TraceRow], seed: int, tag: str = "burst") -> dict:
        """Serve `rows` all at once with the engine loop on this thread; wall time and steps."""
        status = self.mgr.background_thread_status
        status.clear()
        for i, (ids, r) in enumerate(zip(prompts_of(rows, self.model.config.vocab_size, seed), rows)):
            self.mgr.add_request(ids, request_id=f"{tag}{seed}_{i}", max_new_tokens=r.output_tokens,
                                 eos_token_id=-1)
        status.request_stop(status.FLUSH_AND_STOP, 0)
        t = time.perf_counter()
        self.mgr._run_generation_loop()
        if self.cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t
        done = 0
        while not self.mgr.output_router.output_queue.empty():
            out = self.mgr.output_router.output_queue.get_nowait()
            done += out.is_finished() and out.error is None
        if status.fatal_error is not None:
            raise RuntimeError(f"burst failed: {status.fatal_error!r}")
        return {"requests": len(rows), "finished": done, "wall_s": round(wall, 3),
                "steps": getattr(self.mgr, "current_batch", None)}

    def profiled_burst(self, rows: list[TraceRow], path: Path) -> dict:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with profile(activities=acts, record_shapes=True) as prof:
            info = self.burst(rows, seed=2)
        raw = str(path)[:-3]
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
        return {**info, "trace": str(path), "bytes": path.stat().st_size}

    def serve(self, rows: list[TraceRow], seed: int, timeout_s: float,
              threads: ThreadSampler | None = None) -> tuple[list[dict], dict]:
        """Submit each request at its arrival time; collect every request's token times; `threads`:
        sampled at each turn of this loop (at most 50 ms apart)."""
        mgr, n = self.mgr, len(rows)
        if not mgr.is_running():
            mgr.start()
        prompts = prompts_of(rows, self.model.config.vocab_size, seed)
        ids = [f"s{seed}_{i}" for i in range(n)]
        wanted = set(ids)
        steps0, submit, outs = getattr(mgr, "current_batch", 0), [None] * n, {}
        t0 = time.perf_counter()
        deadline = t0 + rows[-1].arrival_s + timeout_s
        i = 0
        while len(outs) < n and time.perf_counter() < deadline:
            now = time.perf_counter() - t0
            if threads is not None:
                threads.sample(now)
            while i < n and rows[i].arrival_s <= now:
                mgr.add_request(prompts[i], request_id=ids[i], max_new_tokens=rows[i].output_tokens,
                                record_timestamps=True, eos_token_id=-1)
                submit[i] = time.perf_counter() - t0
                i += 1
            wait = rows[i].arrival_s - now if i < n else 0.05
            out = mgr.get_result(timeout=max(1e-4, min(wait, 0.05)))
            if out is not None and out.is_finished() and out.request_id in wanted:   # not a cancelled one's
                outs[out.request_id] = out
            elif out is None and not mgr.is_running():
                break
        wall = time.perf_counter() - t0
        self._cancel_rest(ids, outs)
        records = [self._record(k, rows[k], ids[k], submit[k], outs.get(ids[k]), t0) for k in range(n)]
        lag = [s - r.arrival_s for s, r in zip(submit, rows) if s is not None]
        return records, {"wall_s": round(wall, 3), "steps": getattr(mgr, "current_batch", 0) - steps0,
                         "submit_lag_ms_max": round(max(lag) * 1e3, 3) if lag else None}

    def _cancel_rest(self, ids: list[str], outs: dict) -> None:
        """Cancel what a timed-out run left and let the engine drain before the next run."""
        left = [k for k in ids if k not in outs]
        for k in left:
            self.mgr.cancel_request(k)
        t = time.perf_counter()
        bp = self.mgr.batch_processor
        while left and bp is not None and bp.has_pending_requests() and time.perf_counter() - t < 30:
            time.sleep(0.05)
        while self.mgr.get_result(timeout=0.01) is not None:
            pass

    @staticmethod
    def _record(k: int, row: TraceRow, rid: str, submit, out, t0: float) -> dict:
        rec = {"index": k, "request_id": rid, "arrival_s": row.arrival_s, "prompt_tokens": row.prompt_tokens,
               "output_tokens": row.output_tokens, "submit_s": None if submit is None else round(submit, 6)}
        if out is None:
            return {**rec, "token_s": [], "error": "not finished (run timeout or engine stopped)"}
        stamps = out.timestamps or []
        return {**rec, "created_s": round(out.created_time - t0, 6),
                "start_s": round(out.lifespan[0] - t0, 6), "finish_s": round(out.lifespan[1] - t0, 6),
                "generated": len(out.generated_tokens), "token_s": [round(s - t0, 6) for s in stamps],
                "error": out.error}

    def close(self) -> None:
        if self.mgr is not None:
            self.mgr.stop(block=True, timeout=60)
            self.mgr.destroy()
        self.mgr = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
