"""Classify each device event of a trace into a typed work item (hwsim/model/ir.py).

In order: the op that launched it, from its recorded shapes (aten::mm, addmm, bmm, linear,
_grouped_mm, the SDPA ops, cat, copy_, index ops...); else its name (cuBLAS/CUTLASS tiles and
grid, FlashAttention/cuDNN attention, Inductor's Triton kernels, PyTorch's element-wise
kernels) with the model's shapes and the trace's declared point (batch, context) filling in what
a name cannot say; else it is Unclassified, and the fallback times it. How each was classified
is kept on it and reported.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from hwsim.model import ir
from hwsim.ktrace.reader import CpuOp, DeviceEvent
from hwsim.ktrace.shapes import (DTYPE_BYTES, DTYPE_NAMES, gemm_tile, is_tensor, numel, tensor_bytes,
                                 tensors, weight_shapes)
from hwsim.model.shapes import ModelShape
from hwsim.workload.router import expected_distinct

ELEMS_PER_THREAD = 4      # PyTorch's element-wise kernels: 4 elements a thread (vectorized 16 B of
                          # bf16 x 2 unrolls, or elementwise_kernel<128, 4>)
TRITON_ELEMS_PER_THREAD = 8   # Inductor's pointwise kernels: XBLOCK elements a program on XBLOCK / 256
                          # warps (torch/_inductor/runtime/triton_heuristics.py, 256 elements a warp):
                          # 8 a thread, as an H100 trace's grids show (1024 a block of 128 threads)
ACT_BYTES = 2
CONTEXT_SLACK = 64        # tokens a traced cache may hold past the declared context (Point.is_context)

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
            "aten::_scaled_mm", "aten::addbmm"}
ATTN_OPS = {  # op -> (backend, layout of q/k: BHSD or BSHD)
    "aten::_scaled_dot_product_flash_attention": ("flash", "BHSD"),
    "aten::_scaled_dot_product_cudnn_attention": ("cudnn", "BHSD"),
    "aten::_cudnn_attention_forward": ("cudnn", "BHSD"),       # what launches it in torch 2.11
    "aten::_scaled_dot_product_efficient_attention": ("efficient", "BHSD"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("flash", "BHSD"),
    "aten::scaled_dot_product_attention": ("flash", "BHSD"),
    "aten::_flash_attention_forward": ("flash", "BSHD"),
    "aten::_efficient_attention_forward": ("efficient", "BSHD"),
    "flash_attn::_flash_attn_forward": ("flash", "BSHD"),
    "flash_attn::_flash_attn_with_kvcache": ("flash", "BSHD"),
}
COPY_OPS = {"aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::to"}
CAT_OPS = {"aten::cat", "aten::stack", "aten::_cat"}
INDEX_OPS = {"aten::index", "aten::index_select", "aten::embedding", "aten::gather",
             "aten::take_along_dim", "aten::masked_select", "aten::nonzero"}
SCATTER_OPS = {"aten::index_put_", "aten::index_add_", "aten::scatter_", "aten::scatter_add_",
               "aten::index_copy_", "aten::_index_put_impl_", "aten::scatter_reduce_", "aten::index_add"}
REDUCE_KEEP = {"aten::softmax", "aten::_softmax", "aten::_log_softmax", "aten::rms_norm",
               "aten::_fused_rms_norm", "aten::layer_norm", "aten::native_layer_norm", "aten::cumsum",
               "aten::sort", "aten::topk", "aten::log_softmax", "aten::group_norm"}
REDUCE_SMALL = {"aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::argmax", "aten::min",
                "aten::argmin", "aten::var_mean", "aten::norm", "aten::any", "aten::all", "aten::prod"}
FILL_OPS = {"aten::fill_", "aten::zero_", "aten::zeros", "aten::ones", "aten::full", "aten::zeros_like"}

# PyTorch's non-vectorised TensorIterator kernel (strided or broadcast operands: offsets computed
# per element), as opposed to vectorized_/unrolled_elementwise_kernel
STRIDED = re.compile(r"(?<![a-z_])elementwise_kernel<|elementwise_kernel_with_index|CatArrayBatchedCopy<")
NAME_GROUPED = re.compile(r"(?<!_fwd_)grouped|GroupProblemShape|fused_moe|moe_gemm|MoeGemm|_moe_", re.I)
# ATen's setup kernel before a CUTLASS grouped GEMM (one thread a group writes its pointers and
# strides): launched by the same op, it is not the GEMM (the CUTLASS kernel after it is)
NAME_GEMM_SETUP = re.compile(r"prepare_grouped_gemm_data")
NAME_GEMM = re.compile(r"gemm|nvjet|xmma|s16816|s1688|wgmma|cutlass.*(?:Gemm|gemm|sm90)|Kernel2|gemv|[Mm]arlin|"
                       r"triton_tem_fused_.*mm|_mm_kernel|matmul", re.I)
# the second pass of a split attention or GEMM (its item stands for it): vLLM's paged_attention_v2
# reduce, FlashInfer's MergeStates, SGLang's Triton decode attention's stage 2
NAME_COMBINE = re.compile(r"combine|splitKreduce|splitk_reduce|reduce_kernel.*splitK|merge_attn|lean_reduction|"
                          r"merge_?states?|ReduceKernel|softmax_reduce|paged_attention_v\d_reduce|"
                          r"_fwd_kernel_stage2", re.I)
NAME_ATTN = re.compile(r"flash_fwd|fmha|flash::|sdpa|attention|BatchDecode|BatchPrefill|_attn_fwd|"
                       r"decode_attn|paged_attn|flashinfer|cudnn.*(?:attn|mha)|_fwd_(?:grouped_)?kernel_stage1",
                       re.I)                    # the last: SGLang's Triton decode attention
NAME_NCCL = re.compile(r"nccl(?:Dev)?Kernel_(\w+?)_", re.I)
# vLLM's and SGLang's custom all-reduce (peer-to-peer over NVLink, outside NCCL)
NAME_CUSTOM_ALLREDUCE = re.compile(r"cross_device_reduce|custom_?all_?reduce|one_?shot_?all_?reduce|"
                                   r"two_?shot_?all_?reduce", re.I)
NAME_TRITON = re.compile(r"triton_(poi|red|per)_fused_(.*?)(?:_\d+)?$")
NAME_COPY = re.compile(r"CatArray|copy|Copy", re.I)
# vLLM's own: reshape_and_cache(_flash) writes the new tokens' K and V into the paged cache (an
# index write); rotary_embedding is element-wise, not an embedding lookup; moe_sum adds each
# token's top-k expert outputs; moe_align_block_size sorts the tokens by expert
NAME_INDEX = re.compile(r"index|gather|scatter|(?<!rotary_)embedding|_and_cache", re.I)
NAME_REDUCE = re.compile(r"reduce_kernel|softmax|SoftMax|norm|Norm|topk|sort|Moments|cumsum|scan|moe_sum|"
                         r"align_block_size", re.I)
NAME_ELEMENTWISE = re.compile(r"elementwise|unrolled|vectorized|fill|silu|gelu|mul|add|rotary|quant", re.I)


@dataclass(frozen=True)
class Point:
    """The point the trace was recorded at, as its user declares it (workload.kernel_trace)."""
    batch: int
    context: int
    top_k: int = 1
    heads: tuple[int, ...] = ()     # the attention's query and cached heads: an eager attention's
                                    # batched GEMMs run batch x heads matrices

    def batch_dims(self) -> set[int]:
        return {self.batch, self.batch * self.top_k}

    def is_context(self, dim: int) -> bool:
        """Whether a tensor dim is the context: the declared one, or up to CONTEXT_SLACK tokens
        past it (a DynamicCache grows a token a step: the profiled step of a capture that filled
        `context` tokens and warmed up for 6 steps holds context + 6)."""
        return 0 <= dim - self.context <= CONTEXT_SLACK


def classify(ev: DeviceEvent, op: CpuOp | None, model: ModelShape, point: Point,
             prev: tuple[int, int] | None = None, kv_expanded: bool = False) -> tuple[ir.WorkItem, str]:
    """(item, how) for one device event; `prev` is the (K, N) of the GEMM before it in the
    stream, which a GEMM without op shapes may consume (its K); `kv_expanded`: a kernel since
    the last attention copied K and V out to every query head (expands_kv)."""
    if ev.kind == "memcpy":
        return ir.Memcpy(ev.nbytes, _direction(ev.name)), "copy"
    if ev.kind == "memset":
        return ir.Memset(ev.nbytes), "copy"
    if (m := NAME_NCCL.search(ev.name)) or NAME_CUSTOM_ALLREDUCE.search(ev.name):
        nbytes = sum(tensor_bytes(d, t) for d, t in tensors(op.dims, op.types)) if op else 0.0
        return ir.Collective(_collective(m.group(1)) if m else "all_reduce", nbytes), "name"
    if op is not None and op.dims:
        item = from_op(op, point)
        if isinstance(item, ir.Memory):        # the kernel's name says whether it is the strided one
            ctas = math.prod(ev.grid)
            item = replace(item, vectorized=not STRIDED.search(ev.name), ctas=ctas,
                           threads=math.prod(ev.block), passes=passes_of(ev.name, ctas, item.write_bytes))
        if item is not None:
            return item, "op-shapes"
    item = from_name(ev, model, point, prev, kv_expanded)
    if item is not None:
        return item, "name+grid+model"
    return ir.Unclassified("no op shapes and no rule for its name"), "fallback"


RADIX_SELECT = re.compile(r"gatherTopK<([\w:]+)")
KEY_BITS = {"float": 32, "double": 64, "c10::BFloat16": 16, "c10::Half": 16, "int": 32, "long": 64}
RADIX_BITS = 2            # aten/src/ATen/native/cuda/SortingRadixSelect.cuh: 2 bits a digit
# Block-wide sorts of short rows (aten/src/ATen/native/cuda/Sort.cu, sortKeyValueInplace): all
# in shared memory once loaded, so their time is a chain of barrier-separated steps, each about
# an L2 hit (the barrier's wait, the shared memory's round trip, a scan's dependent shuffles):
# counted from the algorithm, the step's cost read off calibration/data/h100_aten_kernels.jsonl
# (bitonic 32: 4.1-4.4 us; 64-bit radix of 2, 4, 32 items a thread: 6.6, 8.6, 25.2 us).
BITONIC_SORT = re.compile(r"bitonicSortKVInPlace<-?\d+, -?\d+, (\d+), \d+")
RADIX_SORT = re.compile(r"radixSortKVInPlace<-?\d+, -?\d+, \d+, (\d+), ([\w:]+)")
BITONIC_ITEMS = 2         # a bitonic block sorts 2 items a thread (sort size 32 on 16 threads)
BITONIC_STEP_TRIPS = 4 / 3   # a compare-exchange stage and its barrier
SORT_DIGIT_BITS = 4       # cub::BlockRadixSort's default RADIX_BITS
SORT_DIGIT_TRIPS = 2      # a digit's rank (counts, block scan) and its exchange: two barrier steps,
SORT_ITEMS_PER_TRIP = 4   # and each item's rank and scatter, four items a step
SORT_LOAD_STORE_TRIPS = 2


def passes_of(name: str, ctas: int, write_bytes: float) -> float:
    """Dependent passes a block of this ATen kernel makes over memory: top-k's radix select
    (sbtopk::gatherTopK) reads its row once per RADIX_BITS-bit digit of the key, then once to
    gather the k; a block sort's barrier-separated steps (above); a reduce_kernel spread over
    more blocks than it has outputs (fewer than 8 bytes of output a block) writes partials, and
    its last block reads them back (+2)."""
    if m := RADIX_SELECT.search(name):
        return KEY_BITS.get(m.group(1), 32) // RADIX_BITS + 1
    if m := BITONIC_SORT.search(name):
        log_n = math.log2(int(m.group(1)) * BITONIC_ITEMS)
        return log_n * (log_n + 1) / 2 * BITONIC_STEP_TRIPS + SORT_LOAD_STORE_TRIPS
    if m := RADIX_SORT.search(name):
        digits = KEY_BITS.get(m.group(2), 32) / SORT_DIGIT_BITS
        return digits * (SORT_DIGIT_TRIPS + int(m.group(1)) / SORT_ITEMS_PER_TRIP) + SORT_LOAD_STORE_TRIPS
    if "reduce_kernel" in name and ctas > 1 and write_bytes < 8 * ctas:
        return 3
    return 1


def _direction(name: str) -> str:
    for d in ("DtoH", "HtoD", "DtoD", "PtoP"):
        if d in name:
            return d
    return "DtoD"


def _collective(kind: str) -> str:
    k = kind.lower()
    return next((v for w, v in (("allreduce", "all_reduce"), ("allgather", "all_gather"),
                                ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
                                ("sendrecv", "send_recv")) if w in k), k)


# -- from the op's shapes ------------------------------------------------------------------------
def from_op(op: CpuOp, point: Point) -> ir.WorkItem | None:
    name, ts = op.name, tensors(op.dims, op.types)
    if name in GEMM_OPS:
        return _gemm(name, ts)
    if name == "aten::_grouped_mm" and len(ts) >= 2:
        (x, _), (w, wt) = ts[0], ts[1]
        if len(w) == 3 and len(x) == 2:
            groups = w[0]
            k, n = (w[1], w[2]) if w[1] == x[1] else (w[2], w[1])
            return ir.GroupedGemm(grouped_rows(x[0], groups, point.top_k), n, k, DTYPE_NAMES.get(wt, "bf16"))
        return None
    if name in ATTN_OPS and len(ts) >= 2:
        return _attention(name, ts, point)
    if name in CAT_OPS:               # its tensors come as one list input
        ts = [(d, op.types[0].replace("GenericList[", "").rstrip("]") if op.types else "c10::BFloat16")
              for d in (op.dims[0] if op.dims and isinstance(op.dims[0], tuple) else ()) if is_tensor(d) and d]
    item = _memory(name, op, ts)
    if item is not None and ts:
        big = max(ts, key=lambda t: numel(t[0]))[0]
        # the batch is the leading dim, the context a middle one (never the last: a feature dim,
        # which may equal the context by chance, as Mixtral's hidden 4096 at context 4096), or
        # the last one of an eager attention's scores
        cache = any(point.is_context(d) for d in big[1:-1])
        item = replace(item, per_batch=big[0] in point.batch_dims(), per_context=cache or is_scores(big, point),
                       reads_cache=cache and item.kind == "cat")   # a KV cache's append
    return item


def is_scores(dims: tuple, point: Point) -> bool:
    """An eager attention's scores, batch x heads x queries x keys (gpt-oss's softmax with sinks:
    their max, sub, softmax, the sinks' cat): the last dim is the keys, so the context."""
    return len(dims) == 4 and dims[1] in point.heads and point.is_context(dims[-1])


def grouped_rows(rows: int, groups: int, top_k: int) -> tuple[int, ...]:
    """Rows per group of a grouped GEMM over `rows` = tokens x top_k: the offsets' values are
    not recorded, so the groups routed to are the expected distinct experts of uniform routing
    (hwsim.workload.router.expected_distinct), sharing the rows evenly; the rest get none."""
    tokens = max(1, round(rows / max(top_k, 1)))
    active = max(1, min(groups, rows, round(expected_distinct(groups, min(top_k, groups), tokens))))
    return (max(1, round(rows / active)),) * active + (0,) * (groups - active)


def _gemm(name: str, ts: list) -> ir.Gemm | None:
    mats = [(d, t) for d, t in ts if len(d) >= 2]
    if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm") and len(mats) >= 3:
        mats = mats[1:]
    if len(mats) < 2:
        return None
    (a, at), (b, _) = mats[0], mats[1]
    dtype = "fp8" if name == "aten::_scaled_mm" else DTYPE_NAMES.get(at, "bf16")
    if name == "aten::linear":                        # W is [N, K]
        return ir.Gemm(numel(a[:-1]), b[0], a[-1], dtype)
    if len(b) == 2:                                   # x[..., K] @ W[K, N]
        return ir.Gemm(numel(a[:-1]), b[1], b[0], dtype)
    if len(a) == 3 and len(b) == 3:                   # bmm: both operands activations
        return ir.Gemm(a[1], b[2], a[2], dtype, batch=a[0], weight=False)
    if len(b) >= 3:                                   # matmul of stacked batches
        return ir.Gemm(a[-2], b[-1], a[-1], dtype, batch=numel(b[:-2]), weight=False)
    return None


def _attention(name: str, ts: list, point: Point) -> ir.Attention | None:
    backend, layout = ATTN_OPS[name]
    (q, _), (k, _) = ts[0], ts[1]
    if len(q) != 4 or len(k) != 4:
        return None
    if layout == "BHSD":
        b, h, sq, d = q
        hkv, sk = k[1], k[2]
    else:
        b, sq, h, d = q
        sk, hkv = k[1], k[2]
    filled = point.context + (sq if sq <= 8 else 1)     # the cache and this step's tokens (a verification: Q)
    if sk >= filled:                                      # a preallocated (static) cache attends
        sk = max(1, min(sk, filled))                      # over its filled part (mask)
    phase = "decode" if sq <= 8 and sk > sq else "prefill"
    return ir.Attention(phase, b, h, hkv, d, sq, sk, backend)


def _memory(name: str, op: CpuOp, ts: list) -> ir.WorkItem | None:
    if not ts:
        return None
    sizes = [tensor_bytes(d, t) for d, t in ts]
    first = sizes[0]
    if name in FILL_OPS:
        return ir.Memory("elementwise", 0.0, first)
    if name in COPY_OPS:
        src = sizes[1] if name == "aten::copy_" and len(sizes) > 1 else first
        dst = first if name == "aten::copy_" else src
        return ir.Memory("copy", src, dst, vectorized=False)
    if name in CAT_OPS:
        total = sum(sizes)
        return ir.Memory("cat", total, total)
    if name in INDEX_OPS:
        if len(ts) < 2:        # aten::index's indices are a TensorList the profiler records as []:
            return ir.Memory("index", first, first)     # a gather of about its input's size
        idx = ts[-1][0]
        row = numel(ts[0][0][1:]) * DTYPE_BYTES.get(ts[0][1], 2) if len(ts[0][0]) > 1 else ACT_BYTES
        out = numel(idx) * row if name in ("aten::embedding", "aten::index_select", "aten::index") \
            else numel(idx) * DTYPE_BYTES.get(ts[0][1], 2)
        return ir.Memory("index", out + sizes[-1], out,
                         index_rows=numel(idx) if name == "aten::index_select" else 0)
    if name in SCATTER_OPS:
        values = sizes[-1]
        rows = numel(ts[1][0]) if name == "aten::index_add_" and len(ts) == 3 else 0
        return ir.Memory("scatter", values + sum(sizes[1:-1]), values, index_rows=rows)
    if name in REDUCE_KEEP:
        return ir.Memory("reduction", first, first)
    if name in REDUCE_SMALL:
        rows = first / max(1, ts[0][0][-1]) if ts[0][0] else first
        return ir.Memory("reduction", first, rows)
    if name.startswith("aten::"):
        out = first if name.endswith("_") else max(sizes)
        return ir.Memory("elementwise", sum(sizes), out)
    return None


# -- from the kernel's name, grid and the model ----------------------------------------------------
def expands_kv(name: str) -> bool:
    """An Inductor kernel that feeds an attention an expanded K or V: Hugging Face's repeat_kv
    (expand + clone) copies the KV heads out to every query head where SDPA is not given GQA
    (a compiled StaticCache step), and the attention then reads them all."""
    m = NAME_TRITON.search(name)
    return bool(m) and "expand" in m.group(2) and "attention" in m.group(2)


def from_name(ev: DeviceEvent, model: ModelShape, point: Point,
              prev: tuple[int, int] | None = None, kv_expanded: bool = False) -> ir.WorkItem | None:
    name = ev.name
    if NAME_COMBINE.search(name):
        return ir.Absorbed("split-K reduce or split-KV combine")
    blocks = math.prod(ev.grid)
    threads = blocks * math.prod(ev.block)
    if NAME_GEMM_SETUP.search(name):      # a grouped GEMM's argument setup: a few bytes a group
        return ir.Memory("index", threads * ACT_BYTES, threads * ACT_BYTES)
    if m := NAME_TRITON.search(name):     # before the grouped and attention rules: Inductor's names
        kind, fused = m.group(1), m.group(2)   # list the ops they fused (_grouped_mm, _scaled_dot_product_*)
        if kind == "poi":
            elems = threads * TRITON_ELEMS_PER_THREAD
        else:                 # one row of the model's width per program (XBLOCK = 1)
            elems = blocks * model.hidden
        kind = "elementwise" if kind == "poi" else "reduction"
        if any(w in fused for w in ("index", "gather", "scatter", "embedding")):
            kind = "index"
        a = model.attention
        reads = 2 * elems * ACT_BYTES
        expanded = expands_kv(name)
        if expanded:          # K or V of every query head over the cache at most, by the model
            # (a 2-D tiled kernel's grid overstates its elements); each KV head's values read once
            elems = min(elems, point.batch * a.heads * (point.context + 1) * a.head_dim)
            reads = elems * ACT_BYTES * getattr(a, "kv_heads", a.heads) / a.heads
        # a decode step's activations are rows of its tokens (a norm: one program a row), and
        # an expanded cache is batch x heads x cache length x head dim: they rescale with those
        per_batch = kind != "reduction" or blocks in point.batch_dims()
        return ir.Memory(kind, reads, elems * ACT_BYTES, per_batch=per_batch, per_context=expanded,
                         reads_cache=expanded, ctas=blocks, threads=math.prod(ev.block),
                         share_in_flight=m.group(1) == "poi")
    if model.moe and NAME_GROUPED.search(name):
        return _grouped_from_model(model, point, prev)
    if NAME_ATTN.search(name) and not NAME_GEMM.search(name.replace("attention", "")):
        a = model.attention
        heads, kv_heads = a.heads, getattr(a, "kv_heads", a.heads)
        backend = "cudnn" if "cudnn" in name.lower() or "sdpa" in name.lower() else "flash"
        return ir.Attention("decode", point.batch, heads, heads if kv_expanded else kv_heads, a.head_dim, 1,
                            point.context + 1, backend)
    if NAME_GEMM.search(name):
        return _gemm_from_grid(ev, model, point, prev)
    if threads <= 0:
        return None
    elems = threads * ELEMS_PER_THREAD
    if NAME_COPY.search(name):
        return ir.Memory("copy", elems * ACT_BYTES, elems * ACT_BYTES, vectorized="vectorized" in name)
    if NAME_INDEX.search(name):
        return ir.Memory("index", 2 * elems * ACT_BYTES, elems * ACT_BYTES)
    if NAME_REDUCE.search(name):
        return ir.Memory("reduction", elems * ACT_BYTES, elems * ACT_BYTES / 64)
    if NAME_ELEMENTWISE.search(name):
        vec = "vectorized" in name or "unrolled" in name
        return ir.Memory("elementwise", 2 * elems * ACT_BYTES, elems * ACT_BYTES, vectorized=vec)
    return None


def _grouped_from_model(model: ModelShape, point: Point, prev: tuple[int, int] | None) -> ir.GroupedGemm:
    """An MoE grouped GEMM without op shapes: the step's tokens x top-k over the expected
    distinct experts; the down projection when it follows the gate+up (or up) projection."""
    h, f, moe = model.hidden, model.moe.expert_ffn, model.moe
    k, n = (f, h) if prev in ((h, 2 * f), (h, f)) else (h, 2 * f)
    return ir.GroupedGemm(grouped_rows(point.batch * moe.top_k, moe.experts, moe.top_k), n, k)


def _gemm_from_grid(ev: DeviceEvent, model: ModelShape, point: Point,
                    prev: tuple[int, int] | None = None) -> ir.Gemm:
    """A GEMM without op shapes: M is the step's tokens (the declared batch; decode), N and K the
    model's weight whose tile count (the name's tile, else 128 x 128) best matches the grid; the
    grid's z is its split-K. Weights of equal N (an output projection and a down projection)
    are told apart by the stream: the one whose K is the previous GEMM's N (or half of it, after
    a gated MLP's gate+up) is taken, else the one reading the hidden state (K = hidden)."""
    tm, tn = gemm_tile(ev.name) or (128, 128)
    m = point.batch
    split = ev.grid[2] if ev.grid[2] > 1 else 1
    tiles = max(1, ev.grid[0] * ev.grid[1])
    chained = {prev[1], prev[1] // 2} if prev else set()

    def mismatch(shape):
        k, n, _ = shape
        expect = min(math.ceil(m / tm) * math.ceil(n / tn), math.ceil(m / tn) * math.ceil(n / tm),
                     key=lambda e: abs(math.log(e / tiles)))
        return (round(abs(math.log(expect / tiles)), 6), k not in chained, k != model.hidden)

    k, n, _ = min(weight_shapes(model), key=mismatch)
    return ir.Gemm(m, n, k, "bf16", split_k=split)
