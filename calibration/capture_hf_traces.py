"""Capture torch.profiler traces of Hugging Face transformers decode steps, and measure the
same steps unprofiled: the validation of issue 30 (docs/traces.md, "Validation").

    # all of it in one device call (calibration/hf_validation_call.sh all): traces, hwsim's
    # predictions of the grid from them (validation/predict_hf_traces.py predict), then:
    python3 calibration/capture_hf_traces.py capture --out $OUT/traces --pack
    python3 calibration/capture_hf_traces.py measure --out $OUT/h200_hf_steps.jsonl
    # anywhere, no GPU: what would run; with torch installed, tiny configs on the CPU
    python3 calibration/capture_hf_traces.py capture --dry --out /tmp/traces

Models are built from their configs' shapes with random bf16 weights (no download: the device
machine reaches no network); the shapes are those of hwsim's model files. Stacks: `eager` (the
default experts backend, grouped_mm in transformers 5), `eager-loop` (set_experts_implementation
("eager"): the per-expert loop), `compiled` (torch.compile(mode="reduce-overhead") on a
StaticCache: CUDA graphs of Inductor's Triton kernels), all on DynamicCache but `compiled`.
"""

import argparse
import functools
import gc
import gzip
import inspect
import json
import os
import statistics
import sys
import time

# HF config kwargs of each model (the shapes of hwsim/data/models/*.yaml; random weights)
MODELS = {
    "llama-3.1-8b": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256)),
    "mixtral-8x7b": ("MixtralConfig", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=32000,
                     num_local_experts=8, num_experts_per_tok=2)),
    "qwen3-30b-a3b": ("Qwen3MoeConfig", dict(hidden_size=2048, moe_intermediate_size=768, intermediate_size=6144,
                      num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                      vocab_size=151936, num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1)),
    "olmoe-1b-7b": ("OlmoeConfig", dict(hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                    num_attention_heads=16, num_key_value_heads=16, vocab_size=50304, num_experts=64,
                    num_experts_per_tok=8)),
    "qwen1.5-moe-a2.7b": ("Qwen2MoeConfig", dict(hidden_size=2048, moe_intermediate_size=1408,
                          shared_expert_intermediate_size=5632, intermediate_size=5632, num_hidden_layers=24,
                          num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, num_experts=60,
                          num_experts_per_tok=4, decoder_sparse_step=1)),
    # held out (session 16): traced and measured after every fix above, predicted blind
    "qwen2-57b-a14b": ("Qwen2MoeConfig", dict(hidden_size=3584, moe_intermediate_size=2560,
                       shared_expert_intermediate_size=20480, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=151936, num_experts=64,
                       num_experts_per_tok=8, decoder_sparse_step=1)),
    "gpt-oss-20b": ("GptOssConfig", dict(hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088,
                    num_local_experts=32, num_experts_per_tok=4, sliding_window=128)),
}
TRACE_POINTS = [(8, 4096), (1, 1024), (32, 2048)]            # (batch, context) traced
GRID = [(1, 1024), (1, 8192), (4, 8192), (8, 4096), (16, 2048), (32, 2048), (64, 1024)]   # measured
STACKS = ["eager", "eager-loop", "compiled"]
REPEATS = 10
# The per-expert loop launches ~10 kernels per active expert per layer (Qwen3 at batch 32: ~100k
# kernels, seconds a step, a trace past the 16 MiB a device call returns): batch <= 8 only.
# Compiled steps recompile and re-record graphs for every new shape (a minute each): traced
# points only, which is what the compiled target (same point) needs.
LOOP_MAX_BATCH = 8
# (model, stack) in order of value: a call that runs out of time drops the tail, not the head
PLAN = ([(m, "eager") for m in MODELS] + [("llama-3.1-8b", "compiled")]
        + [(m, "eager-loop") for m in MODELS if m != "llama-3.1-8b"] + [("olmoe-1b-7b", "compiled")]
        + [(m, "compiled") for m in MODELS if m not in ("llama-3.1-8b", "olmoe-1b-7b")])


def points_of(phase, stack, only=None):
    points = TRACE_POINTS if phase == "capture" or stack == "compiled" else GRID
    points = [p for p in points if not only or p in only]
    return [(b, c) for b, c in points if stack != "eager-loop" or b <= LOOP_MAX_BATCH]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build(name, stack, device, dry):
    import torch
    import transformers
    cls_name, kw = MODELS[name]
    kw = dict(kw)
    if dry:                       # tiny shapes of the same architecture, for the CPU
        kw.update(num_hidden_layers=2, hidden_size=256, intermediate_size=512, vocab_size=1024,
                  num_attention_heads=4, num_key_value_heads=min(kw.get("num_key_value_heads", 4), 4))
        kw.update({k: 128 for k in ("moe_intermediate_size", "shared_expert_intermediate_size") if k in kw})
        kw.update(head_dim=64) if "head_dim" in kw else None
    cfg = getattr(transformers, cls_name)(**kw, torch_dtype="bfloat16")
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()
    if stack == "eager-loop" and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    return model, cfg


def filled_cache(model, cfg, batch, context, stack, device):
    """A cache holding `context` random tokens of K and V in every layer."""
    import torch
    import transformers
    heads = cfg.num_key_value_heads
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if stack == "compiled":
        cache = transformers.StaticCache(config=cfg, max_batch_size=batch, max_cache_len=context + 64,
                                         device=device, dtype=torch.bfloat16)
    else:
        cache = transformers.DynamicCache()
    pos = torch.arange(context, device=device)
    for layer in range(cfg.num_hidden_layers):
        k = torch.randn(batch, heads, context, dim, device=device, dtype=torch.bfloat16)
        cache.update(k, torch.randn_like(k), layer, {"cache_position": pos})
    return cache


def decode_step(model, cache, batch, context, device):
    """One decode step as generate() runs it: forward one token per sequence, pick the next
    token, and read it back (.item(): the sync a serving loop does). A DynamicCache grows by one
    token a step, as in generate(): the 3 warm-up and 3 profiler steps before the profiled one
    add 6 tokens to `context` (0.6% at 1k); measured steps see context + 3 to + 16. Cropping it
    back instead would leave a strided view that the next step's cat copies with PyTorch's slow
    non-vectorised kernel (4x the vectorised one's time on the H100), which generate() never
    runs. A StaticCache is sized context + 64: transformers 5 still counts the tokens it was
    given, and a measured point runs 17 steps."""
    import torch
    dynamic = type(cache).__name__ == "DynamicCache"
    ids = torch.randint(0, model.config.vocab_size, (batch, 1), device=device)
    pos = torch.tensor([cache.get_seq_length() if dynamic else context], device=device)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():     # as generate() runs: with autograd on, every step's graph hangs on the
        out = model(input_ids=ids, use_cache=True, cache_position=pos, **{kw: cache})  # cache (a leak)
        nxt = out.logits[:, -1].argmax(-1)
    nxt[0].item()


def profiled(step, path, cuda, warmup=2, active=1):
    """`active` profiled steps (after 1 skipped and `warmup` warm-up steps) written as a gzip
    Kineto trace; the trace."""
    from torch.profiler import ProfilerActivity, profile, schedule
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    raw = path[:-3] if path.endswith(".gz") else path
    with profile(activities=acts, record_shapes=True, schedule=schedule(wait=1, warmup=warmup, active=active),
                 on_trace_ready=lambda p: p.export_chrome_trace(raw)) as prof:
        for _ in range(1 + warmup + active):
            step()
            prof.step()
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        dst.write(src.read())
    os.remove(raw)
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def last_profiler_step(trace):
    """The trace's last ProfilerStep# event (the profiled step on the host), or None."""
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    return steps[-1] if steps else None


def device_busy_ms(trace):
    """Union of the kernels' (and copies') intervals from the trace's last ProfilerStep on."""
    evs, step = trace["traceEvents"], last_profiler_step(trace)
    lo, hi = (step["ts"], float("inf")) if step else (float("-inf"), float("inf"))
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in evs
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["ts"] >= lo and e["ts"] <= hi)
    busy, reach = 0.0, float("-inf")
    for a, b in spans:
        if b > reach:
            busy += b - max(a, reach)
            reach = b
    return busy / 1e3, len(spans)


def run(args):
    try:
        import torch
        import transformers
        log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    except ImportError:
        torch = None
    cuda = torch is not None and torch.cuda.is_available()
    plan = [(m, s) for m, s in PLAN if m in args.models and s in args.stacks]
    if args.pairs_from:                         # only the (model, stack) pairs these captures hold
        held = {(r["model"], r["stack"]) for f in args.pairs_from if os.path.exists(f)   # none captured: none
                for r in map(json.loads, open(f))}
        plan = [pair for pair in plan if pair in held]
    if torch is None or (not cuda and not args.dry):
        for name, stack in plan:
            for b, c in points_of(args.phase, stack, args.points):
                log(f"would {args.phase} {name} {stack} batch {b} context {c}")
        log("no torch and transformers (or no GPU without --dry): nothing run")
        return 0
    device = "cuda" if cuda else "cpu"
    deadline = time.monotonic() + args.deadline_s
    os.makedirs(args.out if args.phase == "capture" else os.path.dirname(args.out) or ".", exist_ok=True)
    out = os.path.join(args.out, "captured.jsonl") if args.phase == "capture" else args.out
    for name, stack in plan:
        if stack == "compiled" and not cuda:
            continue
        if time.monotonic() > deadline:
            log(f"deadline: {name} {stack} not run")
            continue
        model = fwd = None
        try:                                    # one stack failing costs its rows, not the call's
            model, cfg = build(name, stack, device, args.dry)
            fwd = torch.compile(model, mode="reduce-overhead") if stack == "compiled" else model
            for batch, context in [(2, 64)] if args.dry else points_of(args.phase, stack, args.points):
                if time.monotonic() > deadline:
                    log(f"deadline: {name} {stack} batch {batch} context {context} not run")
                    continue
                try:                            # one point failing (out of memory) costs that point
                    row = measure_point(args, torch, fwd, model, cfg, name, stack, batch, context, device, cuda)
                except torch.cuda.OutOfMemoryError as exc:
                    log(f"FAILED {name} {stack} batch {batch} context {context}: {str(exc)[:200]}")
                    gc.collect()
                    torch.cuda.empty_cache()
                    continue
                with open(out, "a") as fh:      # row by row: a call cut short keeps what it has
                    fh.write(json.dumps(row) + "\n")
        except Exception as exc:                # noqa: BLE001 (logged, and the next stack runs)
            log(f"FAILED {name} {stack}: {type(exc).__name__}: {str(exc)[:500]}")
        del model, fwd
        gc.collect()                            # the model's cycles, before the next one is built
        if cuda:
            torch.cuda.empty_cache()
    return 0


def measure_point(args, torch, fwd, model, cfg, name, stack, batch, context, device, cuda):
    cache = filled_cache(model, cfg, batch, context, stack, device)
    step = functools.partial(decode_step, fwd, cache, batch, context, device)
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    row = {"model": name, "stack": stack, "batch": batch, "context_tokens": context,
           "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "warmup_s": round(time.perf_counter() - t0, 3)}
    if args.phase == "capture":
        path = os.path.join(args.out, f"hf-{name}-{stack}-b{batch}-l{context}.json.gz")
        trace = profiled(step, path, cuda)
        busy, kernels = device_busy_ms(trace)
        row.update(trace=os.path.basename(path), device_busy_ms=busy, kernels=kernels,
                   profiled_step_ms=profiled_step_ms(trace))
    else:
        times = []
        for _ in range(REPEATS):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()               # ends in .item(): the device is done
            times.append((time.perf_counter() - t0) * 1e3)
        trace = profiled(step, os.path.join(os.path.dirname(args.out) or ".", "busy.json.gz"), cuda)
        busy, kernels = device_busy_ms(trace)
        row.update(wall_ms=statistics.median(times), wall_ms_all=times, device_busy_ms=busy,
                   kernels=kernels, profiled_step_ms=profiled_step_ms(trace))
    log(json.dumps({k: v for k, v in row.items() if k != "wall_ms_all"}))
    del cache
    return row


def profiled_step_ms(trace):
    """The last ProfilerStep's span on the host: the profiled step's wall time."""
    step = last_profiler_step(trace)
    return step.get("dur", 0) / 1e3 if step else None


def pack(folder, limit_mb=15.0, bundles=4):
    """The traces of `folder` into at most `bundles` tar files of at most `limit_mb` each (a
    device call returns 8 files of 16 MiB): smallest first; what does not fit is listed."""
    import tarfile
    names = sorted((os.path.getsize(os.path.join(folder, n)), n) for n in os.listdir(folder)
                   if n.endswith(".json.gz"))
    cap, packs, left = limit_mb * 2 ** 20, [], []
    for size, n in names:
        for pack in packs:
            if pack[0] + size <= cap:
                pack[0] += size
                pack[1].append(n)
                break
        else:
            if len(packs) < bundles and size <= cap:
                packs.append([size, [n]])
            else:
                left.append(n)
    for i, (_, members) in enumerate(packs):
        with tarfile.open(os.path.join(folder, f"traces-{i}.tar"), "w") as tar:
            for n in members:
                tar.add(os.path.join(folder, n), arcname=n)
        for n in members:
            os.remove(os.path.join(folder, n))
    log(f"packed {sum(len(p[1]) for p in packs)} traces into {len(packs)} tar files; not packed: {left}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("phase", choices=["capture", "measure"])
    p.add_argument("--out", required=True, help="capture: a folder; measure: a JSONL file")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--stacks", nargs="+", default=STACKS, choices=STACKS)
    p.add_argument("--dry", action="store_true", help="tiny configs, one point, CPU if no GPU")
    p.add_argument("--deadline-s", type=float, default=1e9,
                   help="start no new point after this many seconds (a device call has 10 minutes)")
    p.add_argument("--pairs-from", nargs="+", default=[], metavar="CAPTURED_JSONL",
                   help="run only the (model, stack) pairs that these captured.jsonl files hold")
    p.add_argument("--points", nargs="+", default=None, metavar="BATCHxCONTEXT",
                   type=lambda s: tuple(int(v) for v in s.split("x")),
                   help="only these of the phase's points (a compiled stack recompiles per point: a minute each)")
    p.add_argument("--pack", action="store_true", help="capture: tar the traces for the trip back")
    args = p.parse_args()
    rc = run(args)
    if args.pack and args.phase == "capture" and os.path.isdir(args.out):
        pack(args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
