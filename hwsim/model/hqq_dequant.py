"""HQQ's dequant of a KV cache as transformers' QuantizedCache(backend="hqq") runs it every decode
step (`kv_cache.expansion: hqq`): plain PyTorch ops, each its own element-wise kernel, writing a
bf16 copy of the whole quantized K and V to HBM before the attention reads it.

From the code (hqq 0.2.8 hqq/core/quantize.py Quantizer.dequantize, hqq/core/bitpack.py; transformers
5.17 cache_utils.QuantizedLayer.update), per K and per V of a layer:
- unpack (BitPack.unpack_<b>bit_u8): the codes are packed 8/b to a byte along the group axis; for
  each of the 8/b slices `(W_q & mask) >> shift` (an and, a shift but for the last slice) into a
  uint8 temporary, then its copy into the slice of a bf16 tensor (a cast); 8 bits: the cast alone;
- the affine `(W_r - zero) * scale`: a sub and a mul, the zero and scale broadcast over the group
  (PyTorch's non-vectorised TensorIterator kernel);
then `torch.cat([dequant, residual, new token])` along the sequence (vectorised), one for K and one
for V. The residual's own append (a cat of 1 token onto <= residual_length) is the schedule's
KV append. The H100 traces (validation/data/library_stacks_h100/traces) show exactly these kernels
in this order: 30 a layer at 2 bits, 18 at 4 (unpack 11 / 5, sub, mul per K and V; 2 cats; 2 appends).

Each kernel is costed as the kernel-trace path costs a traced element-wise kernel of its bytes
(ops.streamed_copy): from HBM where its input is the cache or larger than half the L2, to HBM where
its output is larger than that.
"""

from __future__ import annotations

from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.kernel import Kernel


def unpack_slices(bits: int) -> int:
    """Slices BitPack.unpack_<bits>bit_u8 writes (one a code in each byte)."""
    return 8 // bits


def chain_kernels(bits: int) -> int:
    """Kernels of one K (or V) tensor's dequant: per slice an and, a shift (none on the last) and
    a cast (8 bits: the cast alone), then sub and mul."""
    slices = unpack_slices(bits)
    return (1 if bits == 8 else 3 * slices - 1) + 2


def expansion(name: str, layer: int, bits: int, group: int, quantized_elements: float,
              residual_elements: float, cache_addr: int, chip) -> list[Kernel]:
    """The kernels of one layer's HQQ dequant and cat: K's chain, V's chain, K's cat, V's cat.
    `quantized_elements`, `residual_elements`: of one of K or V over the batch and KV heads
    (the residual with this step's token); `group`: elements sharing a zero and a scale (bf16,
    HQQ's meta in the compute dtype)."""
    ab = ops.ACT_BYTES
    packed = quantized_elements * bits / 8
    slices = unpack_slices(bits)
    per_slice = packed if bits < 8 else quantized_elements      # bytes of codes a slice reads

    def ew(label, read, write, *, cache=False, vectorized=True):
        return ops.streamed_copy(f"{name}.{label}", layer, read, write, ops.EW_OPS_PER_BYTE, chip,
                                 from_cache=cache, addr=cache_addr, component=Component.DEQUANT,
                                 vectorized=vectorized)

    def chain(t: str) -> list[Kernel]:
        ks: list[Kernel] = []
        for i in range(slices):
            if bits < 8:
                ks.append(ew(f"{t}_and{i}", per_slice, per_slice, cache=True))
                if i < slices - 1:
                    ks.append(ew(f"{t}_shift{i}", per_slice, per_slice))
            # a cast copy (uint8 to bf16): ATen's unrolled kernel, 512 elements a block of 128
            # threads, each element loaded and cast through a dtype switch one by one (the
            # traces' grids: 16,330 blocks for 8.4 M codes): costed as the strided kernel
            ks.append(ew(f"{t}_cast{i}", per_slice, per_slice * ab, cache=bits == 8, vectorized=False))
        whole = quantized_elements * ab
        # the zero and scale broadcast over the group: PyTorch's strided kernel
        meta = quantized_elements / group * ab                # the zeros (the scales)
        ks.append(ew(f"{t}_sub_zero", whole + meta, whole, vectorized=False))
        ks.append(ew(f"{t}_mul_scale", whole + meta, whole, vectorized=False))
        return ks

    cat_read = (quantized_elements + residual_elements) * ab
    return [*chain("k"), *chain("v"), ew("k_cat", cat_read, cat_read), ew("v_cat", cat_read, cat_read)]
