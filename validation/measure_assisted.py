"""Transformers' assisted generation (speculative decoding) on the GPU, with acceptance as a
controlled input (issue 45, item 2): tokens per second, measured acceptance, one traced
verification step.

    # on the device (H200; torch 2.11+cu130, transformers 5.17.0; no network, no weights), ~3 min:
    mkdir -p $OUT/assisted && PYTHONUNBUFFERED=1 python3 validation/measure_assisted.py \
        --out $OUT/assisted 2>&1 | tee $OUT/assisted/measure.log
    # here, no GPU: the same control flow on tiny random configs on the CPU
    python3 validation/measure_assisted.py --dry --out /tmp/assisted

Models are built from their configs with random bf16 weights (calibration/capture_hf_traces.py's
shapes), batch 1 (transformers' assisted generation takes one sequence), greedy. With random
weights a separate draft rarely agrees with the target, so acceptance is made a controlled input:

- `early-exit` (generate(assistant_early_exit=n), transformers' own LayerSkip path) and `draft`
  (a separate assistant model whose n layers, embedding, final norm and LM head ARE the target's
  first n layers, etc., no copy): the draft is the target cut after n layers. The target's later
  layers write into the residual stream through o_proj and down_proj only; those weights are
  scaled by `residual_scale` (s): s = 0 makes the target's output the draft's (acceptance ~1),
  s = 1 is the untouched random model. Decoding is speculative sampling (temperature 1, whole
  vocabulary, seeded), whose chance to accept a draft token is sum_x min(p(x), q(x)); for each
  aimed acceptance s is set by bisection on that overlap, teacher-forced over the prompt, and
  the acceptance generate() then gets is measured and recorded. (Greedy decoding of a random
  model falls into a loop that any shallow draft predicts: acceptance 1 whatever s is.) The
  bytes and flops of a step do not depend on s.
- `lookup` (generate(prompt_lookup_num_tokens=K)): n-gram lookup in the prompt, a block of random
  tokens repeated, greedy, on the untouched model; what the target accepts is measured, not set.

Acceptance is counted from the candidate generator transformers builds (wrapped, not replaced):
proposed = draft tokens sent to verification, accepted = the target's matches (n_matches),
acceptance = accepted / proposed. Draft time is the wall time inside get_candidates (synced).

Outputs under --out: assisted.jsonl (one row per generate run: tokens/s, acceptance, K, ...),
verify_steps.jsonl (role target: its forward of Q = 1 and K + 1 tokens over a cache of the prompt's
length, median of 10, unprofiled, and of the whole prompt; role draft: the same for the draft's
Q = 1 step), one profiled step each of the target at Q = 1 and Q = 5 and of the draft at Q = 1
(hf-<model>-verify-q<Q>-b1-l512.json.gz, hf-<model>-draft<n>-q1-b1-l512.json.gz;
capture_hf_traces.py's format: hwsim's kernel-trace path reads them), the log on stdout.
Qwen3-30B-A3B needs ~80 GB (61 GB of weights, 19 GB of kept o_proj/down_proj originals): an
H200; on an H100 it fails alone (logged) after Llama's rows are written.
"""

import argparse
import functools
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calibration"))
import capture_hf_traces as chf  # noqa: E402  (build, filled_cache, profiled, device_busy_ms)

PLANS = {  # draft lengths K, acceptances aimed at (draft methods), draft layers, new tokens a run
    "full": dict(ks=[2, 4, 8], aims=[0.9, 0.7, 0.5], layers=2, new_tokens=96,
                 methods={"lookup": [2, 4, 8], "draft": [2, 4, 8], "early-exit": [4]}),
    "quick": dict(ks=[4], aims=[0.9, 0.6], layers=2, new_tokens=64,
                  methods={"lookup": [4], "draft": [4], "early-exit": [4]}),
}
PROMPT_TOKENS, PERIOD = 512, 64      # prompt: a block of PERIOD random tokens repeated
TRACE_K = 4                          # the traced verification step's draft length (Q = K + 1)
RESIDUAL_WRITERS = ("o_proj", "down_proj")   # what a layer adds to the residual stream passes these
SAMPLE_SEED = 1234
log = chf.log


class Counter:
    """Proposed and accepted draft tokens and the draft's wall time, from the candidate
    generator of one generate() call."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda
        self.steps = self.proposed = self.accepted = 0
        self.draft_s = 0.0

    def wrap(self, gen):
        get, update = gen.get_candidates, gen.update_candidate_strategy

        def get_candidates(input_ids, *a, **kw):
            self._sync()
            t0 = time.perf_counter()
            ids, logits = get(input_ids, *a, **kw)
            self._sync()
            self.draft_s += time.perf_counter() - t0
            self.steps += 1
            self.proposed += ids.shape[1] - input_ids.shape[1]
            return ids, logits

        def update_candidate_strategy(input_ids, scores, num_matches):
            self.accepted += int(num_matches)
            return update(input_ids, scores, num_matches)

        gen.get_candidates, gen.update_candidate_strategy = get_candidates, update_candidate_strategy
        return gen

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


def counted_generate(torch, model, prompt, new_tokens, cuda, sample=False, **kw):
    """One generate() with its candidate generator counted; (row fields, output ids). Greedy, or
    (sample) plain sampling at temperature 1 over the whole vocabulary, seeded."""
    counter = Counter(torch, cuda)
    if sample:
        torch.manual_seed(SAMPLE_SEED)
        kw.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    else:
        kw.update(do_sample=False)
    original = model._get_candidate_generator
    model._get_candidate_generator = lambda *a, **k: counter.wrap(original(*a, **k))
    try:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=new_tokens, **kw)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        del model._get_candidate_generator          # the class's method again
    made = out.shape[1] - prompt.shape[1]
    row = dict(sampling=sample, new_tokens=made, wall_s=round(wall, 4), tokens_per_s=round(made / wall, 3),
               verify_steps=counter.steps, proposed=counter.proposed, accepted=counter.accepted,
               acceptance=round(counter.accepted / counter.proposed, 4) if counter.proposed else None,
               tokens_per_step=round(made / counter.steps, 3) if counter.steps else None,
               draft_s=round(counter.draft_s, 4))
    return row, out


def configure_assistant(gen_config, k):
    """K draft tokens every step: a constant schedule, no confidence-based early stop (with random
    weights the draft's confidence is tiny: transformers' default 0.4 would stop it at 1)."""
    gen_config.num_assistant_tokens = k
    gen_config.num_assistant_tokens_schedule = "constant"
    gen_config.assistant_confidence_threshold = 0.0


def shared_draft(torch, transformers, target, cfg, layers):
    """A separate assistant model whose modules are the target's own first `layers` layers,
    embedding, final norm, rotary embedding and LM head (no copy: no extra memory)."""
    dcfg = type(cfg)(**{**cfg.to_dict(), "num_hidden_layers": layers})
    with torch.device("meta"):
        draft = transformers.AutoModelForCausalLM.from_config(dcfg, dtype=torch.bfloat16).eval()
    body, tbody = draft.get_decoder(), target.get_decoder()
    body.embed_tokens, body.norm, body.rotary_emb = tbody.embed_tokens, tbody.norm, tbody.rotary_emb
    body.layers = torch.nn.ModuleList(tbody.layers[:layers])
    draft.lm_head = target.lm_head
    left = [n for n, p in list(draft.named_parameters()) + list(draft.named_buffers()) if p.is_meta]
    if left:
        raise RuntimeError(f"draft tensors not shared with the target: {left[:5]}")
    draft.generation_config.eos_token_id = None
    return draft


class ResidualScale:
    """Scales the o_proj and down_proj weights of the target's layers past the draft's by s,
    from a kept copy of the originals (exact at every s; ~4.5 GB for Llama-3.1-8B)."""

    def __init__(self, model, first_layer):
        self.params = [p for layer in model.get_decoder().layers[first_layer:]
                       for name, p in layer.named_parameters() if any(w in name for w in RESIDUAL_WRITERS)]
        self.originals = [p.detach().clone() for p in self.params]
        self.value = 1.0

    def set(self, s):
        for p, orig in zip(self.params, self.originals):
            p.data.copy_(orig)
            p.data.mul_(s)
        self.value = s


def overlap(torch, model, draft, prompt):
    """Mean over the prompt's positions of sum_x min(p(x), q(x)), target p and draft q at
    temperature 1: the chance speculative sampling accepts a draft token there (Leviathan et
    al. 2023), teacher-forced."""
    with torch.no_grad():
        p = model(input_ids=prompt, use_cache=False).logits.float().softmax(-1)
        q = draft(input_ids=prompt, use_cache=False).logits.float().softmax(-1)
        return torch.minimum(p, q).sum(-1).mean().item()


def calibrate(torch, model, draft, prompt, scale, aim, steps=8):
    """The residual scale s whose teacher-forced overlap is closest to `aim`, by bisection in
    log s over [1e-4, 1] (the overlap falls as s grows); leaves the model at that s."""
    lo, hi, best = -4.0, 0.0, (2.0, 1.0, None)
    for _ in range(steps):
        mid = (lo + hi) / 2
        scale.set(10 ** mid)
        got = overlap(torch, model, draft, prompt)
        best = min(best, (abs(got - aim), 10 ** mid, got))
        lo, hi = (mid, hi) if got > aim else (lo, mid)
    scale.set(best[1])
    return best[1], best[2]


def repeated_prompt(torch, vocab, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    block = torch.randint(3, vocab, (PERIOD,), generator=g)
    return block.repeat(PROMPT_TOKENS // PERIOD)[None, :].to(device)


def run_model(args, torch, transformers, name, device, cuda, plan, deadline, emit):
    model, cfg = chf.build(name, "eager", device, args.dry)
    model.generation_config.eos_token_id = None       # random weights: never stop early on "EOS"
    model.generation_config.pad_token_id = 0
    prompt = repeated_prompt(torch, cfg.vocab_size, device)
    base = dict(model=name, batch=1, prompt_tokens=prompt.shape[1], prompt_period=PERIOD,
                device=torch.cuda.get_device_name() if cuda else "cpu", torch=torch.__version__,
                transformers=transformers.__version__)
    counted_generate(torch, model, prompt, 8, cuda)                     # warm-up
    draft = shared_draft(torch, transformers, model, cfg, plan["layers"])
    measure_verify_steps(args, torch, model, name, "target", sorted({1, TRACE_K + 1, *(k + 1 for k in plan["ks"])}),
                         device, cuda, base)
    measure_verify_steps(args, torch, draft, name, "draft", [1], device, cuda, base)
    # lookup: greedy on the untouched model (its acceptance is found, not set); the drafts:
    # speculative sampling, whose acceptance the residual scale sets (greedy decoding of a random
    # model falls into a loop a shallow draft predicts whatever s is: acceptance 1 on the CPU)
    greedy, _ = counted_generate(torch, model, prompt, plan["new_tokens"], cuda)
    emit(dict(base, method="none", k=0, residual_scale=1.0, **greedy))
    for k in plan["methods"]["lookup"]:
        run_one(torch, model, None, prompt, plan, "lookup", k, cuda, deadline, emit,
                dict(base, residual_scale=1.0, tokens_per_s_plain=greedy["tokens_per_s"]))
    sampled, _ = counted_generate(torch, model, prompt, plan["new_tokens"], cuda, sample=True)
    emit(dict(base, method="none", k=0, residual_scale=1.0, **sampled))
    scale = ResidualScale(model, plan["layers"])
    for aim in plan["aims"]:
        if time.monotonic() > deadline:
            log(f"deadline: {name} acceptance {aim} not run")
            continue
        s, got = calibrate(torch, model, draft, prompt, scale, aim)
        log(f"{name}: residual scale {s:.4g} gives teacher-forced overlap {got:.3f} (aimed {aim})")
        fields = dict(base, residual_scale=round(s, 6), aimed_acceptance=aim, prompt_overlap=round(got, 4),
                      tokens_per_s_plain=sampled["tokens_per_s"])
        for method in ("draft", "early-exit"):
            for k in plan["methods"][method]:
                run_one(torch, model, draft, prompt, plan, method, k, cuda, deadline, emit, fields)
    del draft, model, scale


def run_one(torch, model, draft, prompt, plan, method, k, cuda, deadline, emit, fields):
    if time.monotonic() > deadline:
        log(f"deadline: {fields['model']} {method} K={k} not run")
        return
    emit(dict(fields, method=method, k=k, **one_assisted(torch, model, draft, prompt, plan, method, k, cuda)))


def one_assisted(torch, model, draft, prompt, plan, method, k, cuda):
    if method == "lookup":
        kw = dict(prompt_lookup_num_tokens=k)
        fields = {}
    elif method == "early-exit":
        configure_assistant(model.generation_config, k)
        kw = dict(assistant_early_exit=plan["layers"])
        fields = dict(draft_layers=plan["layers"])
    else:
        configure_assistant(draft.generation_config, k)
        kw = dict(assistant_model=draft)
        fields = dict(draft_layers=plan["layers"])
    row, _ = counted_generate(torch, model, prompt, plan["new_tokens"], cuda, sample=method != "lookup", **kw)
    return {**fields, **row}


def measure_verify_steps(args, torch, model, name, role, queries, device, cuda, base):
    """`model`'s forward of Q tokens over a cache of the prompt's length, as the assisted loop
    runs it (then the cache is cropped back: rejected drafts), median of 10, and its forward
    over the whole prompt (the prefill, median of 3); Q = 1 and TRACE_K + 1 also profiled once.
    role: target (hf-<model>-verify-q<Q>-...) or draft (hf-<model>-draft<n>-q1-...)."""
    context, cfg = base["prompt_tokens"], model.config
    cache = chf.filled_cache(model, cfg, 1, context, "eager", device)
    stem = "verify" if role == "target" else f"draft{cfg.num_hidden_layers}"
    prompt = torch.randint(3, cfg.vocab_size, (1, context), device=device)
    prefill = functools.partial(forward_prompt, torch, model, prompt)
    steps = [(q, functools.partial(verify_step, torch, model, cache, q, context, device)) for q in queries]
    for q, step in [(context, prefill)] + steps:
        times = timed(step, 3 if step is prefill else 10)
        row = dict(base, role=role, layers=cfg.num_hidden_layers, queries=q,
                   context_tokens=0 if step is prefill else context,
                   wall_ms=round(statistics.median(times), 4), wall_ms_all=[round(t, 3) for t in times])
        if step is not prefill and q in (1, TRACE_K + 1):
            path = os.path.join(args.out, f"hf-{name}-{stem}-q{q}-b1-l{context}.json.gz")
            busy, kernels = chf.device_busy_ms(chf.profiled(step, path, cuda))
            row.update(trace=os.path.basename(path), device_busy_ms=round(busy, 4), kernels=kernels)
        with open(os.path.join(args.out, "verify_steps.jsonl"), "a") as fh:
            fh.write(json.dumps(row) + "\n")
        log(json.dumps({k: v for k, v in row.items() if k != "wall_ms_all"}))
    del cache


def timed(step, n):
    """Wall ms of n calls after 2 warm-ups (each call ends in .item(): the device is done)."""
    for _ in range(2):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def forward_prompt(torch, model, prompt):
    with torch.no_grad():
        model(input_ids=prompt, use_cache=False, logits_to_keep=1).logits.argmax(-1)[0, 0].item()


def verify_step(torch, model, cache, q, context, device):
    ids = torch.randint(3, model.config.vocab_size, (1, q), device=device)
    pos = torch.arange(context, context + q, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=pos)
        out.logits[:, -q:].argmax(-1)[0, 0].item()
    cache.crop(-q)                                # back to `context`, as a rejected draft is


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder")
    p.add_argument("--models", nargs="+", default=["llama-3.1-8b", "qwen3-30b-a3b"], choices=list(chf.MODELS))
    p.add_argument("--quick", action="store_true", help="K = 4 only, two acceptances, Llama-3.1-8B only")
    p.add_argument("--dry", action="store_true", help="tiny configs of the same architectures (CPU if no GPU)")
    p.add_argument("--deadline-s", type=float, default=150.0,
                   help="start no new generate run after this many seconds")
    args = p.parse_args()
    import torch
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.dry:
        log("no GPU: pass --dry to run tiny configs on the CPU")
        return 2
    device = "cuda" if cuda else "cpu"
    plan = PLANS["quick" if args.quick else "full"]
    if args.dry:                                  # build() makes 2 layers: a draft of 1
        plan = dict(plan, new_tokens=24, layers=1)
    if args.quick:
        args.models = args.models[:1]
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s

    def emit(row):
        with open(os.path.join(args.out, "assisted.jsonl"), "a") as fh:   # row by row: a cut call keeps them
            fh.write(json.dumps(row) + "\n")
        log(json.dumps(row))

    for name in args.models:
        if time.monotonic() > deadline:
            log(f"deadline: {name} not built")
            continue
        try:                                      # one model failing costs its rows, not the call's
            run_model(args, torch, transformers, name, device, cuda, plan, deadline, emit)
        except Exception as exc:                  # noqa: BLE001 (logged; the next model runs)
            log(f"FAILED {name}: {type(exc).__name__}: {str(exc)[:500]}")
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
