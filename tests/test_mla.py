"""MLA (DeepSeek-V2-Lite) as DeepSeek's reference code runs it, against the H200's CUPTI lists
(validation/data/h200_general_kernels.csv.xz, cal rows): cuBLAS's fallback kernels for an unaligned
key count, and the naive prefill over all heads."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwsim import operators as mb
from hwsim.config.load import load_model
from hwsim.errors import ConfigError
from hwsim.model.kernel import named_kernels
from hwsim.model.schedule import Schedule, StepShape

KERNELS = Path(__file__).resolve().parents[1] / "validation" / "data" / "h200_general_kernels.csv.xz"


LAYERS = 4      # profile_general.py's cases run 4 layers


def measured_us(case: str, pattern: str) -> float:
    """CUPTI microseconds per layer of the kernels whose name contains `pattern`."""
    d = pd.read_csv(KERNELS)
    return float(d[(d.case == case) & d.kernel.str.contains(pattern)].dur_us.sum()) / LAYERS


def eager_layer(h200, batch, context):
    s = Schedule(load_model("deepseek-v2-lite"), h200, attention_kernel="eager")
    return {k.name.split(".", 1)[1]: k for k in s._mla_eager_decode(1, batch, context)}


@pytest.mark.parametrize("case, batch, context, kernels, pattern", [
    ("deepseek-v2-lite-decode-b4-l32768-graph", 4, 32768, ["probs_latent"], "gemmSN"),
    ("deepseek-v2-lite-decode-b32-l4096-graph", 32, 4096, ["probs_latent"], "gemmSN"),
    ("deepseek-v2-lite-decode-b32-l4096-graph", 32, 4096, ["scores_latent", "scores_rope"], "magma"),
])
def test_unaligned_cache_products_take_the_fallback_kernels_time(h200, case, batch, context, kernels, pattern):
    """context + 1 keys is odd: cuBLAS's gemv-style and CUDA-core kernels, 4-15x slower than a
    tensor-core GEMM over the same bytes; simulated within 15% of CUPTI's time per layer."""
    ks = eager_layer(h200, batch, context)
    sim = sum(mb.device_time_s(h200, [ks[k]]) for k in kernels) * 1e6
    assert sim == pytest.approx(measured_us(case, pattern), rel=0.15)


def test_aligned_keys_use_tensor_core_gemms(h200):
    """With a multiple of 8 keys the same products are ordinary GEMMs, far faster."""
    odd = eager_layer(h200, 32, 4096)["probs_latent"]
    even = eager_layer(h200, 32, 4095)["probs_latent"]
    assert odd.vector_flops > 0 and even.tensor_flops > 0
    assert mb.device_time_s(h200, [even]) < mb.device_time_s(h200, [odd]) / 3


def test_mla_prefill_attends_over_every_head_at_the_query_key_dim(h200):
    """Prefill decompresses K and V (kv_b over every prompt token) and runs flash attention over
    all 16 heads at qk_nope + qk_rope = 192 (V padded to it), not over the 576-wide latent."""
    s = Schedule(load_model("deepseek-v2-lite"), h200)
    ks = {k.name.split(".", 1)[1]: k for k in named_kernels(s.step(StepShape("prefill", 1, 512, 0),
                                                     {ly: np.zeros((512, 6), int) for ly in range(1, 27)}))
          if k.name.startswith("L3.")}
    assert {"kv_b", "k_cat", "v_pad", "attention", "attn_out_copy"} <= set(ks)
    assert ks["attention"].tiles == 4 * 16                       # 512 / 128 query blocks x 16 heads


def test_eager_attention_is_refused_where_it_is_not_modelled(h200):
    with pytest.raises(ConfigError, match="MLA"):
        Schedule(load_model("mixtral-8x7b"), h200, attention_kernel="eager")
