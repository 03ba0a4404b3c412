"""The layouts validation/measure_ep_steps.py measures (issue 20), without torch: the models'
shapes, the setups and grids, and what each rank holds of a layout. validation/predict_ep_grid.py
and tests/test_multi_gpu_measure.py read them on machines without torch."""

import numpy as np

MODELS = {
    "qwen3-235b-a22b": dict(L=94, d=4096, H=64, KVH=4, hd=128, vocab=151936, E=128, k=8, ff=1536,
                            qk_norm=True, eps=1e-6),
    "mixtral-8x22b": dict(L=56, d=6144, H=48, KVH=8, hd=128, vocab=32768, E=8, k=2, ff=16384,
                          qk_norm=False, eps=1e-5),
    "mixtral-8x7b": dict(L=32, d=4096, H=32, KVH=8, hd=128, vocab=32000, E=8, k=2, ff=14336,
                         qk_norm=False, eps=1e-5),
    # what fits on two GPUs of expert parallelism: 30 GB of bf16 a GPU
    "qwen3-30b-a3b": dict(L=48, d=2048, H=32, KVH=4, hd=128, vocab=151936, E=128, k=8, ff=768,
                          qk_norm=True, eps=1e-6),
}
DRY_MODELS = {
    "qwen3-235b-a22b": dict(L=2, d=256, H=8, KVH=2, hd=32, vocab=512, E=16, k=4, ff=64, qk_norm=True, eps=1e-6),
    "mixtral-8x22b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=512, E=4, k=2, ff=128, qk_norm=False, eps=1e-5),
    "qwen3-30b-a3b": dict(L=2, d=128, H=8, KVH=2, hd=16, vocab=512, E=16, k=4, ff=32, qk_norm=True, eps=1e-6),
    "mixtral-8x7b": dict(L=2, d=128, H=4, KVH=2, hd=32, vocab=512, E=4, k=2, ff=64, qk_norm=False, eps=1e-5),
}
# (model, layout, gpus, weights): hwsim's layouts (docs/multi_gpu.md)
SETUPS = [("qwen3-235b-a22b", "tp-ep", 4, "bf16"), ("qwen3-235b-a22b", "tp-ep", 8, "bf16"),
          ("qwen3-235b-a22b", "dp-ep", 8, "bf16"), ("mixtral-8x22b", "tp", 2, "fp8"),
          ("qwen3-30b-a3b", "tp-ep", 2, "bf16"), ("qwen3-30b-a3b", "dp-ep", 2, "bf16")]
DRY_SETUPS = [("qwen3-235b-a22b", "tp-ep", 2, "bf16"), ("qwen3-235b-a22b", "dp-ep", 2, "bf16"),
              ("mixtral-8x22b", "tp", 2, "fp8")]
# (batch, context, split), fixed before anything is measured: the contexts shrink with the
# batch so that Qwen3-235B's KV cache fits beside its 117 GB of weights a GPU on EP4
CASES = [(1, 4096, "cal"), (8, 4096, "held"), (32, 4096, "cal"), (64, 2048, "held"), (128, 2048, "cal"),
         (256, 1024, "held")]
DRY_CASES = [(2, 16, "cal"), (4, 32, "held")]
# --cases fresh: a test grid written down (validation/multi_gpu_grid.md, with hwsim's predictions)
# after the collectives were re-calibrated on the first 2-GPU measurements and before these ran
FRESH_CASES = [(2, 8192, "fresh"), (16, 2048, "fresh"), (48, 4096, "fresh"), (96, 1024, "fresh"),
               (192, 512, "fresh")]
FRESH_SETUPS = [("mixtral-8x22b", "tp", 2, "fp8"), ("mixtral-8x7b", "tp", 2, "bf16"),
                ("qwen3-30b-a3b", "tp-ep", 2, "bf16"), ("qwen3-30b-a3b", "dp-ep", 2, "bf16")]
# --cases prefill: one prompt of that many tokens (context 0) under tensor parallelism, the
# collectives' large-message regime inside a step; written down with its predictions first
PREFILL_CASES = [(512, 0, "fresh"), (2048, 0, "fresh"), (8192, 0, "fresh")]
PREFILL_SETUPS = FRESH_SETUPS[:3]
DRY_PREFILL_CASES = [(16, 0, "fresh")]


class Shard:
    """What one rank holds and runs of a layout."""

    def __init__(self, cfg, layout, world, rank):
        self.cfg, self.layout, self.world, self.rank = cfg, layout, world, rank
        self.tp = 1 if layout == "dp-ep" else world
        self.ep = 1 if layout == "tp" else world
        self.heads = cfg["H"] // self.tp
        self.kv_heads = max(cfg["KVH"] // self.tp, 1)            # replicated past the KV heads
        per = cfg["E"] // self.ep
        self.experts = list(range(rank * per, (rank + 1) * per)) if self.ep > 1 else list(range(cfg["E"]))
        self.ff = cfg["ff"] // (world // self.ep)                 # each expert's FFN split gpus/ep ways
        self.vocab = cfg["vocab"] // self.tp

    def owner(self, batch):
        """Attention group (rank) of each sequence: contiguous shares, as hwsim's layout."""
        if self.tp > 1:
            return np.zeros(batch, dtype=int)
        sizes = [batch // self.world + (i < batch % self.world) for i in range(self.world)]
        return np.repeat(np.arange(self.world), sizes)

    def rank_of_expert(self, e):
        return e // (self.cfg["E"] // self.ep) if self.ep > 1 else self.rank
