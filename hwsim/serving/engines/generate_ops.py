"""How many ATen ops one transformers `generate()` decode step dispatches (eager, one token a
sequence, greedy): counted by running the model's own forward on the CPU, on a copy of its layer
structure at tiny widths (hwsim/serving/engines/hf_ops.py's copy and counter), with the step's own
cache: the bf16 `DynamicCache`, or `QuantizedCache(backend="hqq")` whose every layer dequantizes
its whole quantized K and V (HQQ's unpack and affine), cats them with the bf16 residual and the new
token, and appends the token to the residual.

An eager generate() step is host-bound: each op costs its Python, ATen dispatch and launch call
(hardware_profiles/engine_hosts/: `launch_us`), so the step's host time is this count times that
cost. Per layer = a 2-layer copy's step less a 1-layer copy's; the rest (embedding, final norm, head,
argmax, the .item() that reads the token back) is fixed. The step counted is an ordinary one: the
residual not full (the flush step, every 128 tokens, re-quantizes the whole cache: not counted).
Besides the launches, a step on cuDNN SDPA with a cache that grows builds one attention plan (its
first layer; the shape is new every step): step_host_s.
"""

from __future__ import annotations

from hwsim.serving.engines.hf_ops import _counter, architecture

KV_GROUP = 64           # transformers' QuantizedCache default and the measured stacks' (library_grid)
RESIDUAL = 128
FILLED = 40             # tokens quantized before the step: HQQ groups the flattened K by 64 (8 heads x 40 x 8 = 40 groups)
IN_RESIDUAL = 4         # tokens in the residual before the step


def _cache(cfg, bits: int | None):
    import transformers
    if bits is None:
        return transformers.DynamicCache()
    return transformers.QuantizedCache(backend="hqq", config=cfg, nbits=bits, q_group_size=KV_GROUP,
                                       residual_length=RESIDUAL)


def _filled(cfg, bits: int | None, layers: int):
    """A cache holding FILLED quantized tokens and IN_RESIDUAL bf16 ones a layer (measure_quantized_cache's fill)."""
    import torch
    cache = _cache(cfg, bits)
    parts = [FILLED + IN_RESIDUAL] if bits is None else [FILLED, IN_RESIDUAL]
    for layer in range(layers):
        start = 0
        for n in parts:
            k = torch.randn(1, cfg.num_key_value_heads, n, cfg.head_dim, dtype=torch.bfloat16)
            cache.update(k, torch.randn_like(k), layer, {"cache_position": torch.arange(start, start + n)})
            start += n
    return cache


def _step_ops(arch: dict, layers: int, bits: int | None) -> int:
    """Ops of one decode step (forward a token, argmax, .item()) of a `layers`-layer copy."""
    import torch
    import transformers
    kw = dict(arch, num_hidden_layers=layers)
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    cache = _filled(cfg, bits, layers)
    ids = torch.randint(0, cfg.vocab_size, (1, 1))
    pos = torch.tensor([cache.get_seq_length()])
    counter = _counter()
    with torch.no_grad(), counter:
        out = model(input_ids=ids, use_cache=True, cache_position=pos, past_key_values=cache)
        out.logits[:, -1].argmax(-1)[0].item()
    return counter.ops


def step_ops(model, bits: int | None = None, memo: dict | None = None) -> tuple[float, float]:
    """(ops per decoder layer, ops outside the layers) of one eager generate() decode step of
    `model` with a bf16 DynamicCache (bits None) or an HQQ QuantizedCache of `bits` (3-10 s a
    count: `memo`, the caller's, keeps them for a grid of rows)."""
    key = (tuple(sorted(architecture(model).items())), bits)
    if memo is not None and key in memo:
        return memo[key]
    one, two = _step_ops(dict(key[0]), 1, bits), _step_ops(dict(key[0]), 2, bits)
    counted = (float(two - one), float(2 * one - two))
    if memo is not None:
        memo[key] = counted
    return counted


def step_launches(host, model, layers: int, bits: int | None = None, memo: dict | None = None) -> float:
    """Kernels one eager generate() decode step of `model` launches with the cache of `bits` on
    the engine host profile `host` (EngineHostProfile): the profile's measured bf16 step
    (`kernels_per_layer` of its `ops_per_layer_model`, `kernels_fixed`), its layer scaled by the
    model's counted ops over that model's, plus the cache's own ops per layer over the
    DynamicCache's (HQQ's dequant, the cats with the residual: each one kernel)."""
    from hwsim.config.load import load_model
    per, _ = step_ops(model, memo=memo)
    ref = per if host.ops_per_layer_model is None else step_ops(load_model(host.ops_per_layer_model), memo=memo)[0]
    cache = 0.0 if bits is None else step_ops(model, bits, memo)[0] - per
    return (host.kernels_per_layer.value * per / ref + cache) * layers + host.kernels_fixed.value


def step_host_s(host, model, layers: int, bits: int | None = None, new_shape: bool = True,
                memo: dict | None = None) -> float:
    """The host's time for one eager generate() decode step: its launches at the profile's
    `generate_issue_us` (one kernel's Python, ATen dispatch and launch call), plus cuDNN SDPA's plan
    (`generate_plan_ms`) when the attention's shape is `new_shape` (a growing cache's KV length is
    new every step, unless an earlier run in the process built the plan for it). A profile without
    the split: its `launch_us`, the plan spread over the kernels of the step it was measured on."""
    return host_s_of(host, step_launches(host, model, layers, bits, memo), new_shape)


def host_s_of(host, launches: float, new_shape: bool = True) -> float:
    """step_host_s for a step of `launches` kernels however counted."""
    speed = host.cpu_speed.value
    if host.generate_issue_us is None or host.generate_plan_ms is None:
        return launches * host.launch_us.value * 1e-6 / speed
    plan = host.generate_plan_ms.value * 1e-3 if new_shape else 0.0
    return (launches * host.generate_issue_us.value * 1e-6 + plan) / speed
