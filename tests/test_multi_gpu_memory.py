"""The parallel: scenario block and the per-GPU memory check (hwsim/parallel/memory.py)."""

import pytest

from hwsim.config.load import load_model, load_scenario
from hwsim.errors import ConfigError
from hwsim.parallel import memory as mm


def test_parallel_block_is_public_and_checked():
    cfg = load_scenario(None, ["parallel.gpus=8", "parallel.ep=8", "parallel.dp_attention=true"])
    p = cfg.parallel
    assert (p.gpus, p.tp, p.ep, p.dp_attention, p.nodes) == (8, 1, 8, True, 1)
    assert load_scenario(None, []).parallel.gpus == 1          # one GPU unless told
    with pytest.raises(ConfigError, match="does not divide"):
        load_scenario(None, ["parallel.gpus=8", "parallel.tp=3"])


def test_single_gpu_deepseek_v3_does_not_fit_and_the_error_names_the_numbers():
    model = load_model("deepseek-v3")
    one = mm.per_gpu(model, gpus=1, tp=1, ep=1, dp_attention=False, batch=64, context=4096,
                     capacity_bytes=141e9)
    assert one.weights == pytest.approx(1342e9, rel=0.01)      # 671B parameters in bf16
    with pytest.raises(ConfigError, match=r"needs 13\d\d\.\d GB .* has 141 GB"):
        mm.check(one, "h200-sxm", allow_overcommit=False)
    assert "as if it fit" in mm.check(one, "h200-sxm", allow_overcommit=True)


def test_ep8_with_fp8_experts_and_dp_attention_fits_eight_h200():
    model = load_model("deepseek-v3")
    kw = dict(gpus=8, tp=1, ep=8, dp_attention=True, batch=64, context=4096, capacity_bytes=141e9)
    fp8 = mm.per_gpu(model, expert_bytes_per_weight=1.0, **kw)
    bf16 = mm.per_gpu(model, **kw)
    assert fp8.fits and not bf16.fits
    assert mm.check(fp8, "hgx-h200-8", allow_overcommit=False) is None
    one = mm.per_gpu(model, gpus=1, tp=1, ep=1, dp_attention=False, batch=64, context=4096,
                     capacity_bytes=141e9)
    assert fp8.kv_cache == pytest.approx(one.kv_cache / 8)      # each GPU its eighth of the sequences


def test_tensor_parallel_splits_attention_and_kv_heads():
    model = load_model("mixtral-8x7b")          # 8 KV heads
    kw = dict(ep=1, dp_attention=False, batch=8, context=4096, capacity_bytes=141e9)
    tp1, tp2 = mm.per_gpu(model, gpus=1, tp=1, **kw), mm.per_gpu(model, gpus=2, tp=2, **kw)
    assert tp2.kv_cache == pytest.approx(tp1.kv_cache / 2)
    # experts split over the two GPUs by their FFN (ep = 1); only the router is on both
    assert tp1.weights / 2 < tp2.weights < tp1.weights / 2 * 1.001
