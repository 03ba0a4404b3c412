"""The fast low-bit kernels of issue 31 (calibration/fast_kv_attn.py: decode attention over a
low-bit KV cache; calibration/fast_w4a16.py: the W4A16 GEMM) against their pure-torch
references, on CPU through Triton's interpreter at tiny shapes. Skipped where torch or triton
is not installed (they are optional: `pip install hwsim[kernels]`)."""

import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
INTERPRET = not torch.cuda.is_available()
if INTERPRET and "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set: run this file alone",
                allow_module_level=True)
if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"      # read as triton's own @jit helpers are decorated
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "calibration"))
import fast_kv_attn as kv  # noqa: E402
import fast_w4a16 as w4  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
B, H, KVH, L, D = 1, 4, 1, 64, 64       # one KV head, 4 query heads, D/4 = 16-wide slices


def _attend(classes, gk, gv, block=16, splits=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(B, KVH, L, D, generator=gen).to(DEV)
    v = torch.randn(B, KVH, L, D, generator=gen).to(DEV)
    q = torch.randn(B, H, D, generator=gen).half().to(DEV)
    segments = kv.pack_cache(k, v, classes, gk, gv)
    att = kv.FastKVAttention(segments, B, H, KVH, D, gk=gk, gv=gv, block=block, splits=splits)
    att.out.fill_(float("nan"))                  # poison: every element must be written
    out = att(q).float().cpu()
    ref = kv.reference(q, segments, KVH, gk, gv).cpu()
    return out, ref, segments


def test_magic_number_conversion_is_exact_for_every_code():
    """(code | 0x6400) read as fp16 is 1024 + code for every code up to 8 bits."""
    codes = torch.arange(256, dtype=torch.int16)
    half = (codes | 0x6400).view(torch.float16).float() - 1024.0
    assert torch.equal(half, codes.float())


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_packing_puts_slice_i_at_bit_offset_i(bits):
    codes = torch.randint(0, 2 ** bits, (3, 5, 64))
    packed = kv.pack_codes(codes, bits)
    assert packed.shape == (3, 5, 16) and packed.dtype == kv.CONTAINER[bits]
    assert torch.equal(kv.unpack_codes(packed, bits), codes)
    word = int(packed[0, 0, 1]) & ((1 << (8 * packed.element_size())) - 1)
    assert (word >> (3 * bits)) & (2 ** bits - 1) == int(codes[0, 0, 1 + 3 * 16])   # column j + 3*D/4


@pytest.mark.parametrize("bits,gk,gv", [(2, 32, 16), (4, 16, 32), (2, 16, 64)])   # gv = D: one V group a token
def test_uniform_cache_matches_reference(bits, gk, gv):
    out, ref, segments = _attend(kv.class_widths(L, bits), gk, gv, splits=[3])
    assert len(segments) == 1 and segments[0]["bits"] == bits
    assert not out.isnan().any()
    assert (out - ref).abs().max().item() < 5e-3


def test_mixed_class_layout_matches_reference():
    """adaptive-2's classes (sinks at 8 bits, outliers at 4, routine at 2) in one launch."""
    classes = kv.class_widths(L, 2, sinks=4, sink_bits=8, outlier_fraction=0.1, outlier_bits=4)
    out, ref, segments = _attend(classes, 32, 16, splits=[1, 1, 2])
    assert [s["bits"] for s in segments] == [8, 4, 2]
    assert [s["len"] for s in segments] == [4, 6, 54]
    assert (out - ref).abs().max().item() < 5e-3


def test_recent_window_at_16_bits_matches_reference():
    """kivi-2's layout: 2-bit routine codes and a 16-bit recent window."""
    out, ref, segments = _attend(kv.class_widths(L, 2, recent=16), 16, 64, splits=[2, 1])
    assert [s["bits"] for s in segments] == [2, 16]
    assert (out - ref).abs().max().item() < 5e-3


def test_reference_is_close_to_unquantized_attention_at_8_bits():
    """The packer's codes, scales and zeros stand for the cache: at 8 bits the dequantized
    attention is within rounding of the float one (a wrong layout would not be)."""
    gen = torch.Generator().manual_seed(1)
    k = torch.randn(B, KVH, L, D, generator=gen)
    v = torch.randn(B, KVH, L, D, generator=gen)
    q = torch.randn(B, H, D, generator=gen).half()
    exact = kv.reference(q, [kv.quantize_segment(k[0], v[0], 16, 16, 16)], KVH)
    approx = kv.reference(q, kv.pack_cache(k, v, kv.class_widths(L, 8), 16, 16), KVH, 16, 16)
    assert (exact - approx).abs().max().item() < 2e-2


def test_bad_group_shapes_are_refused():
    segments = kv.pack_cache(torch.randn(1, 1, 32, 64), torch.randn(1, 1, 32, 64),
                             kv.class_widths(32, 4), 32, 16)
    with pytest.raises(ValueError, match="must divide gk"):
        kv.FastKVAttention(segments, 1, 4, 1, 64, gk=32, gv=16, block=64)


def _rel_err(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("n,k,rows,split_k", [(128, 256, 3, None), (64, 512, 1, 1), (128, 384, 17, 2)])
def test_w4a16_matches_reference(n, k, rows, split_k):
    gen = torch.Generator().manual_seed(n + k + rows)
    w = torch.randn(n, k, generator=gen).to(DEV)
    x = torch.randn(rows, k, generator=gen).half().to(DEV)
    lin = w4.W4A16Linear(w, rows, bn=64, split_k=split_k)
    lin.out.fill_(float("nan"))
    y = lin(x)
    assert y.shape == (rows, n) and not y.isnan().any()
    assert _rel_err(y, lin.reference(x)) < 2e-3                   # fp16 output rounding
    assert _rel_err(y, x.float() @ w.float().t()) < 0.2             # and it is W, 4-bit coarse (a wrong layout: ~1.4)


def test_w4a16_tiles_are_contiguous_in_consumption_order():
    """Tile (n-block 1, k-block 0) is the second block of the packed buffer, and its first
    container holds k = 0, 32, 64, 96 of row 64 in nibbles 0-3."""
    codes = torch.randint(0, 16, (128, 256))
    packed = w4.pack(codes, bn=64)
    assert packed.shape == (2, 2, 64, 32)
    word = int(packed[1, 0, 0, 0]) & 0xFFFF
    assert [(word >> (4 * i)) & 0xF for i in range(4)] == [int(codes[64, 32 * i]) for i in range(4)]
