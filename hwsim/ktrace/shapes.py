"""What a trace's op shapes and kernel names say: tensor bytes from "Input Dims" and "Input
type", GEMM tiles from cuBLAS/CUTLASS names, and the model's weight shapes (K, N) that a
compiled kernel without op shapes must be one of."""

from __future__ import annotations

import math
import re

from hwsim.model.shapes import ModelShape

DTYPE_BYTES = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "long": 8,
               "int": 4, "short": 2, "bool": 1, "unsigned char": 1, "signed char": 1,
               "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
               "c10::Float8_e8m0fnu": 1, "c10::complex<float>": 8}
DTYPE_NAMES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32",
               "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}
# cuBLAS sm90 names: ..._tilesize128x128x64_...; nvjet: nvjet_tst_128x64_64x4_...; CUTLASS and
# sm80 kernels: ..._128x64_32x4_... / s16816gemm_bf16_128x128_...
TILE = re.compile(r"(?:tilesize|_)(\d{2,3})x(\d{2,3})(?:x\d+)?_")


def is_tensor(dims) -> bool:
    return isinstance(dims, tuple) and all(isinstance(d, int) for d in dims)


def numel(dims: tuple) -> int:
    return math.prod(dims) if dims else 1


def tensor_bytes(dims, dtype: str) -> float:
    """Bytes of one input: a tensor, or a tensor list (Input Dims nests them); 0 for a scalar."""
    if not isinstance(dims, tuple) or not dims:
        return 0.0
    if is_tensor(dims):
        return float(numel(dims) * DTYPE_BYTES.get(dtype, 2))
    if all(isinstance(d, tuple) for d in dims):
        per = DTYPE_BYTES.get(dtype.replace("GenericList[", "").rstrip("]"), 2)
        return float(sum(numel(d) * per for d in dims if is_tensor(d) and d))
    return 0.0


def tensors(dims: tuple, types: tuple) -> list[tuple[tuple, str]]:
    """(dims, dtype) of each tensor input, in order (scalars and lists left out)."""
    out = []
    for i, d in enumerate(dims):
        if is_tensor(d) and d:
            out.append((d, types[i] if i < len(types) else "c10::BFloat16"))
    return out


def gemm_tile(name: str) -> tuple[int, int] | None:
    m = TILE.search(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def weight_shapes(model: ModelShape) -> list[tuple[int, int, str]]:
    """(K, N, tensor class) of every weight matrix of a layer and the LM head, fused gate+up
    and separate gate/up both listed (engines do either)."""
    h, a = model.hidden, model.attention
    out = [(k, n, "attention") for _, k, n, _ in a.projections(h)]
    if getattr(a, "kind", "gqa") == "gqa":      # unfused q, k, v
        out += [(h, a.heads * a.head_dim, "attention"), (h, a.kv_heads * a.head_dim, "attention")]
    out.append((a.o_proj_in, h, "attention"))
    for ffn in (model.ffn, model.moe.expert_ffn if model.moe else 0,
                model.moe.shared_width if model.moe else 0):
        if ffn:
            cls = "experts" if model.moe and ffn == model.moe.expert_ffn else "attention"
            out += [(h, 2 * ffn, cls), (h, ffn, cls), (ffn, h, cls)]
    if model.moe:
        out.append((h, model.moe.experts, "attention"))
    out.append((h, model.vocab, "embeddings"))
    return list(dict.fromkeys(out))


def weight_class(model: ModelShape, k: int, n: int) -> str:
    """The tensor class (hwsim.model.weight_format) of a weight of K x N, by the model's shapes."""
    for wk, wn, cls in weight_shapes(model):
        if (wk, wn) in ((k, n), (n, k)):
            return cls
    return "attention"
