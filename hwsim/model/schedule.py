"""The software schedule: the kernels one decode step (or one prefill) issues, in order.

The default, `per-expert`, is the PyTorch schedule measured on the H200 (see
shared/calibration/README.md): per layer RMSNorm, fused QKV GEMM, two KV-cache copies,
SDPA, output projection and residual add, RMSNorm, router GEMM and softmax, then for each
expert that at least one token chose, in expert order: gather, gate+up GEMM, SiLU, multiply,
down GEMM, scale by the router weight, scatter-add; then the residual add. After the last
layer, RMSNorm and the LM head. `grouped` replaces the per-expert loop with one grouped GEMM
per projection (a fused MoE kernel) plus a top-k kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from hwsim.config import dequant as dequant_type
from hwsim.hw.chip import ChipSizes, ChipSpec
from hwsim.metrics import Component
from hwsim.model import ir
from hwsim.model import fast_kv_grid, fast_kv_occupancy, hqq_dequant, moe_kernels, ops, paged_sdpa
from hwsim.model.blocks import DENSE_FFN, attention_kernel as attention_block, moe_schedule as moe_block
from hwsim.model.fast_gemm import fast_weight_only_gemm
from hwsim.model.kernel import ExpertBlock, Kernel, Role, StreamItem, copy_kernel, relocated, timing_of
from hwsim.model.l2_residency import L2Residency
from hwsim.model.onchip import OnChipState
from hwsim.model.paged_sdpa import PackedShape
from hwsim.model.memory_map import MemoryMap, aligned
from hwsim.model.moe_dispatch import FROM_HBM
from hwsim.model.multi_query_attention import multi_query_attention
from hwsim.model.shapes import MlaAttention, ModelShape
from hwsim.model.weight_format import BF16, WeightPlan
from hwsim.workload.kv_format import BF16_KV, KvFormat
from hwsim.workload.router import tokens_per_expert

NORM_OPS_PER_ELEM = 4.0      # square, accumulate, rsqrt-scale, weight multiply
SOFTMAX_OPS_PER_ELEM = 5.0   # max, subtract, exp, sum, divide
SILU_OPS_PER_BYTE = 2.0      # exp, add, divide, multiply per bf16 element (2 bytes)
ADD_OPS_PER_BYTE = 0.5
FP32_BYTES = 4
TOPK_OPS_PER_ELEM = 8.0         # a warp-level bitonic top-k: about log2(E) compare-swaps per score
# ATen's small-index kernels (up to 16 indices) loop over the index rows, each a chain of
# dependent loads: 0.38 us a row for index_select and 0.49 us for index_add_ (which reads the
# destination too) on the H200 (calibration/data/h200_small_kernels.jsonl), in L2 round trips:
INDEX_SELECT_TRIPS_PER_ROW = 2.6
INDEX_ADD_TRIPS_PER_ROW = 3.3
SMALL_INDEX_ROWS = 16
ACTIVATION_REGION_BYTES = 64 * 2**20
CODE_BYTES = {"fp8": 1, "fp4": 0.5}   # activation bytes per element fed to an FP8 / FP4 MMA
QUANT_OPS_PER_BYTE = 1.0        # activation cast: scale, convert, pack per bf16 element (2 bytes)
ROUTED = Role.ROUTED
KERNEL_MEMO_LIMIT = 100_000
MOVED_LIMIT = 100_000           # routed experts' weight-reading kernels kept per channel phase
# The production MoE schedules' small kernels (CUPTI device times on the H200,
# calibration/data/h200_moe_kernels.jsonl.xz), as dependent L2 round trips (147 ns each):
TOPK_TRIPS = 20          # gatherTopK: 4.6-8.2 us (a radix select over each token's scores)
TOPK_SORT_TRIPS = 20     # bitonicSortKVInPlace of the k picks: 4.0-4.5 us
SORT_TRIPS = ((32, 38), (128, 52), (4096, 185))   # see sort_trips()
SCAN_TRIPS = 3           # cub DeviceScanKernel over the expert counts: 1.4-1.5 us
PREPARE_TRIPS = 3        # prepare_grouped_gemm_data: one thread per group writes its pointers, 1.5-1.7 us
ALIGN_TRIPS_WARP, ALIGN_TRIPS_BLOCK, ALIGN_TRIPS_PER_128 = 0.64, 1.84, 0.195   # see align_trips()     # built kernels kept at once (growing contexts add new ones each step)


def _memo(build):
    """Cache a kernel builder's result by its arguments. Every layer and every step issues the
    same kernels on the same shapes, and a Kernel is never changed once built, so a step after
    the first mostly looks its kernels up instead of recomputing their tiling."""
    @functools.wraps(build)
    def cached(self, *args, **kw):
        key = (build.__name__, args, tuple(kw.items()))
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= KERNEL_MEMO_LIMIT:
                self._memo.clear()
            hit = build(self, *args, **kw)
            self._memo[key] = hit = tuple(hit) if isinstance(hit, list) else hit
        return hit
    return cached


@dataclass(slots=True, eq=False)    # not frozen: one is made per routed expert and pass
class RoutedExpert:
    """A routed expert's place in the stream until the L2 walk (Schedule._walked): the template
    expert's kernels and how they become this expert's (the length of the template's name
    prefix, this expert's prefix, template weight address -> this expert's; no prefix: the
    template is this expert)."""

    template: tuple[Kernel, ...]
    layer: int
    name_cut: int
    prefix: str
    address: dict[int, int]


@dataclass(frozen=True)
class StepShape:
    """One forward pass: `tokens` new tokens; decode has one per sequence, prefill a prompt.

    A `mixed` pass (continuous batching) decodes one token for each of `batch` sequences and
    prefills `prefill_tokens` prompt tokens of `prefill_sequences` others in the same kernels.
    """

    phase: str                 # "decode", "prefill" or "mixed"
    batch: int                 # sequences decoding (prefill: 1)
    tokens: int                # new tokens in this pass
    context: int               # cached tokens each decoding sequence attends over (mean)
    prefill_tokens: int = 0    # mixed: prompt tokens in this pass
    prefill_sequences: int = 0  # mixed: prompts whose last chunk is in this pass (LM head rows)
    queries: int = 1           # query tokens per decoding sequence: a speculative step verifies its
                               # drafted tokens and its own next one (hwsim/speculative.py)
    packed: PackedShape | None = None   # a serving engine's one attention over the packed batch in
                               # place of the per-sequence one (hwsim/model/paged_sdpa.py)

    @property
    def decodes(self) -> int:
        return self.batch if self.phase in ("decode", "mixed") else 0

    @property
    def prompt_tokens(self) -> int:
        return self.tokens if self.phase == "prefill" else self.prefill_tokens

    @property
    def lm_rows(self) -> int:
        if self.phase == "prefill":
            return 1                                   # the last token only
        return self.decodes * self.queries + self.prefill_sequences


@dataclass(slots=True, eq=False)
class WeightLayout:
    """Every weight tensor's region, from address 0, and what follows from it alone: a
    Schedule's own, handed on to its copies over another KV format (Schedule.with_kv) and to
    the system rebuilt at another SM clock (hwsim.build.Built.at_sm_clock)."""

    mem: MemoryMap             # the weights' regions only (a schedule adds its activations and KV)
    weight_bytes: float        # their bytes
    relocations: dict = field(default_factory=dict)   # (layer, expert) -> Schedule._expert_relocation


class Schedule:
    def __init__(self, model: ModelShape, chip: ChipSizes | ChipSpec, *, kv: KvFormat | None = None,
                 dequant: str = "software", moe_schedule: str = "per-expert",
                 attention_kernel: str = "flash", max_batch: int = 1,
                 max_context: int = 1, weights: WeightPlan | None = None,
                 layout: WeightLayout | None = None, appends_by_cat: bool = False):
        """`layout`: the weights' layout of a schedule of the same model and weight formats
        (with_kv, a rebuild at another clock); none: laid out here. Of the chip it keeps
        the sizes only (hwsim/hw/chip.py ChipSizes): its plans are made from nothing else.
        `appends_by_cat`: a bf16 cache grows by a cat of the whole cache each step (transformers'
        DynamicCache under generate(): _cache_cat)."""
        self.model = model
        self.chip: ChipSizes = chip.sizes
        self.moe_schedule = moe_schedule
        self.ffn = moe_block(moe_schedule)            # hwsim/model/blocks.py: the registered blocks
        self.attention = attention_block(attention_kernel)
        self.kv = kv or BF16_KV
        self.dequant = "none" if self.kv.is_unquantized else dequant
        self.kv_dequant = dequant_type.of(self.dequant)     # what the choice does (hwsim/config/dequant.py)
        self._sizes = {"dequant": dequant, "max_batch": max_batch, "max_context": max_context,
                       "appends_by_cat": appends_by_cat}
        self.attention.check(model, self.kv)
        self.mem = MemoryMap()
        self._memo: dict = {}
        self._moved: dict = {}    # (walked kernel's value, channel phase) -> its copy there
        self._templates: dict = {}     # (rows, on-chip share, channel group) -> the template expert
        self.wb = model.weight_bytes
        # stored bytes per weight of each tensor class (hwsim.model.weight_format); bf16 keeps
        # the model's own width so the measured schedule is untouched
        self.wplan = weights or WeightPlan()
        self.wb_cls = {c: self.wb if self.wplan.of(c).is_bf16 else self.wplan.of(c).bytes_per_weight
                       for c in ("experts", "attention", "embeddings")}
        self.layout = layout or self._layout_weights()
        self.mem = self.layout.mem.copy()
        # evicted activations are re-read from HBM (any address: only the channel mapping needs one)
        self.activation_address = self.mem.place("activations", ACTIVATION_REGION_BYTES)
        self.kv_bytes_per_token_layer = self.kv_token_bytes(max_context)
        # one cache tensor a layer, sized for the run's longest context (as serving engines
        # preallocate it), each its own 2 MiB-aligned allocation
        for layer in range(model.layers):
            held = min(max_context, model.attention.window_at(layer) or max_context)   # a window keeps its tail only
            self.mem.place(f"L{layer}.kv_cache", max_batch * held * self.kv_bytes_per_token_layer)

    @property
    def attention_kernel(self) -> str:
        return self.attention.name

    def with_kv(self, kv: KvFormat, dequant: str | None = None) -> "Schedule":
        """The same schedule over another KV cache format (laid out for it), or dequantized
        another way."""
        sizes = {**self._sizes, **({"dequant": dequant} if dequant else {})}
        return Schedule(self.model, self.chip, kv=kv, moe_schedule=self.moe_schedule,
                        attention_kernel=self.attention_kernel, weights=self.wplan,
                        layout=self.layout, **sizes)

    def kv_token_bytes(self, context: int) -> float:
        """Stored bytes of one token's K and V in one layer at this context length."""
        a = self.model.attention
        return self.kv.bytes_per_token(a.kv_elements_per_token(), a.cached_heads, context)

    # -- weights ---------------------------------------------------------------------------
    def _layout_weights(self) -> WeightLayout:
        """Every weight tensor's region, from address 0. It depends on the model and the stored
        bytes per weight only, so the schedule's copies over other KV formats share it (a MoE
        model has tens of thousands of expert tensors: DeepSeek-V3 EP8 lays out in 18 ms)."""
        self._place_weights()
        return WeightLayout(self.mem.copy(), sum(n for _, n in self.mem.regions.values()))

    def _place_weights(self):
        m, d = self.model, self.model.hidden
        of_kind: dict[bool, list] = {}     # a layer's tensors follow from whether it is MoE alone
        for layer in range(m.layers):
            moe = m.is_moe_layer(layer)
            weights = of_kind.get(moe)
            if weights is None:
                weights = of_kind[moe] = [(name, nbytes, aligned(nbytes))
                                          for name, nbytes in self._layer_weights(layer).items()]
            self.mem.place_all(f"L{layer}.", weights)
        self.mem.place("final_norm", d * self.wb)
        self.mem.place("lm_head", m.vocab * d * self.wb_cls["embeddings"])

    def _layer_weights(self, layer: int) -> dict[str, float]:
        m, d, wb = self.model, self.model.hidden, self.wb
        aw, ew = self.wb_cls["attention"], self.wb_cls["experts"]
        w = {"attn_norm": d * wb, **{k: v * aw for k, v in self._attn_weight_elems().items()},
             "ffn_norm": d * wb}
        if m.is_moe_layer(layer):
            moe = m.moe
            w["router"] = d * moe.experts * wb
            for e in range(moe.experts):
                w[f"expert{e}.gate_up"] = 2 * moe.expert_ffn * d * ew
                w[f"expert{e}.down"] = moe.expert_ffn * d * ew
            if moe.shared_experts:      # one MLP of shared_experts x shared_ffn (as the models' code builds it)
                w["shared.gate_up"] = 2 * moe.shared_width * d * ew
                w["shared.down"] = moe.shared_width * d * ew
                if moe.shared_expert_gate:
                    w["shared.gate"] = d * wb
        else:      # a dense FFN is stored as the experts' class (DeepSeek-V3's dense layers: FP8 too)
            w["dense.gate_up"] = 2 * m.ffn * d * ew
            w["dense.down"] = m.ffn * d * ew
        return w

    def _attn_weight_elems(self) -> dict[str, int]:
        return self.model.attention.weight_elements(self.model.hidden)

    def weight_bytes_total(self) -> float:
        """Bytes of every region but the KV caches: the weights, then the activations (summed
        in the order they were placed, as a sum over the regions would)."""
        return self.layout.weight_bytes + self.mem.regions["activations"][1]

    def kv_bytes_total(self) -> float:
        return sum(self.mem.regions[f"L{layer}.kv_cache"][1] for layer in range(self.model.layers))

    def expert_bytes(self) -> float:
        moe = self.model.moe
        return 3 * moe.expert_ffn * self.model.hidden * self.wb_cls["experts"] if moe else 0.0

    def stored_weight_bytes(self) -> float:
        """Bytes of the model's weights alone (scales and zero points included)."""
        return sum(n for name, (_, n) in self.mem.regions.items()
                   if not name.endswith("kv_cache") and name != "activations")

    def weight_elements_total(self) -> float:
        """Weight elements of the whole model (bytes over each region's bytes per element)."""
        attn = set(self._attn_weight_elems())
        total = 0.0
        for name, (_, nbytes) in self.mem.regions.items():
            if name.endswith("kv_cache") or name == "activations":
                continue
            leaf = name.split(".", 1)[-1]
            per = (self.wb_cls["embeddings"] if name == "lm_head" else self.wb_cls["attention"]
                   if leaf in attn else self.wb_cls["experts"]
                   if leaf.endswith(("gate_up", "down")) else self.wb)
            total += nbytes / per
        return total

    def router_bytes_total(self) -> float:
        m = self.model
        return sum(m.hidden * m.moe.experts * self.wb for layer in range(m.layers) if m.is_moe_layer(layer))

    def expert_address(self, layer: int, expert: int) -> int:
        return self.mem.regions[f"L{layer}.expert{expert}.gate_up"][0]

    def active_weight_bytes(self, chosen: list[int]) -> float:
        """Weight bytes one forward pass touches: everything but the experts nobody chose
        (`chosen`: each MoE layer's count of distinct experts chosen, in layer order)."""
        total = self.weight_bytes_total()
        for n in chosen:
            total -= (self.model.moe.experts - n) * self.expert_bytes()
        return total

    # -- kernels ---------------------------------------------------------------------------
    def _w(self, layer: int, name: str) -> int:
        return self.mem.regions[f"L{layer}.{name}" if layer >= 0 else name][0]

    # Activations are named by their role ("x" the residual stream, "h" a norm's output, ...):
    # element-wise and row kernels list what they read, every kernel what it writes, and
    # L2Residency decides from that which reads still hit in L2.
    @_memo
    def _gemm(self, name, layer, m, k, n, wname, data, compute=Component.GEMM_COMPUTE,
              on_chip=0.0, channel_group=-1, out=(), cls=None):
        fmt = self.wplan.of(cls) if cls else BF16
        full = f"L{layer}.{name}" if layer >= 0 else name
        if fmt.is_bf16:
            return ops.gemm(full, layer, m, k, n, self.chip,
                            weight_addr=self._w(layer, wname), weight_bytes=self.wb, data=data,
                            compute=compute, weights_on_chip=on_chip, channel_group=channel_group,
                            writes=out)
        return self._quant_gemm(fmt, full, layer, m, k, n, self._w(layer, wname), data, compute,
                                on_chip, channel_group, out)

    def quant_gemm_kernels(self, fmt, name, layer, m, k, n, addr, data) -> list[Kernel]:
        """One GEMM over weights stored in `fmt`, alone (hwsim.speedups.weights)."""
        return self._quant_gemm(fmt, name, layer, m, k, n, addr, data, Component.GEMM_COMPUTE, 0.0, -1, ())

    def _quant_gemm(self, fmt, name, layer, m, k, n, addr, data, compute, on_chip, group, out):
        """A GEMM on weights stored in `fmt`: software dequant runs a weight-only kernel
        (tinygemm's); native FP8/FP4 casts the activations first (one element-wise kernel, as
        the measured torch._scaled_mm path) and multiplies at that tensor rate; a decoder
        expands the codes on the way in and the MMA runs in bf16."""
        wb = fmt.bytes_per_weight
        if fmt.in_software and dequant_type.family(fmt.kernel_family).counted:   # fast: counts fitted on an H100
            return fast_weight_only_gemm(name, layer, m, k, n, self.chip, weight_addr=addr, weight_bytes=wb,
                                         data=data, ops_per_weight=fmt.kernel.ops(m), writes=out)
        if fmt.in_software:
            return [moe_kernels.weight_only_gemm(name, layer, m, k, n, self.chip, weight_addr=addr,
                                                 weight_bytes=wb, data=data, writes=out, kernel=fmt.kernel)]
        dtype = fmt.tensor_dtype(self.chip.tensor_dtypes)
        ks = []
        if dtype != "bf16":
            ks.append(ops.elementwise(f"{name}.act_quant", layer, m * k * ops.ACT_BYTES,
                                      m * k * CODE_BYTES[dtype], QUANT_OPS_PER_BYTE, self.chip))
        ks += ops.gemm(name, layer, m, k, n, self.chip, weight_addr=addr, weight_bytes=wb, data=data,
                       compute=compute, weights_on_chip=on_chip, channel_group=group, writes=out,
                       dtype=dtype, decoder_per_weight=1.0 if fmt.by_decoder else 0.0)
        return ks

    @_memo
    def _norm(self, name, layer, rows, reads=("x",), writes=("h",)):
        d = self.model.hidden
        wname = f"L{layer}.{name}" if layer >= 0 else name
        return ops.rows_kernel(wname, layer, rows, d, ops.ACT_BYTES, NORM_OPS_PER_ELEM, self.chip,
                               weight_bytes=d * self.wb, weight_addr=self.mem.regions[wname][0],
                               reads=reads, writes=writes)

    @_memo
    def _ew(self, name, layer, read, write, ops_per_byte=ADD_OPS_PER_BYTE,
            component=Component.ACTIVATION_IO, round_trips=1, vectorized=True, input_trips=1,
            reads=(), writes=(), atomic_bytes=0.0, partial=(), row_overlap=0.0, role=None):
        return ops.elementwise(f"L{layer}.{name}" if layer >= 0 else name, layer, read, write,
                               ops_per_byte, self.chip, component=component, round_trips=round_trips,
                               vectorized=vectorized, input_trips=input_trips, reads=reads, writes=writes,
                               atomic_bytes=atomic_bytes, partial=partial, row_overlap=row_overlap, role=role)

    def cold_state(self, l2_bytes: float | None = None) -> OnChipState:
        """An empty L2 (of `l2_bytes` for activations; the chip's whole L2 by default), no SRAM."""
        return OnChipState(L2Residency(self.chip.l2_bytes if l2_bytes is None else l2_bytes,
                                       self.activation_address, self.chip.eviction_latency_ratio))

    def step(self, shape: StepShape, routing: dict[int, np.ndarray],
             state: OnChipState | None = None) -> list[StreamItem]:
        """Kernels of one forward pass, in stream order, with the expert prefetches that start
        during attention. routing[layer] is [tokens, top_k] expert ids (MoE layers; -1 = dropped).
        `state` (what is on chip: hwsim/model/onchip.py) is read and updated; a cold one by default."""
        state = state or self.cold_state()
        dispatch = state.dispatch
        kernels: list[StreamItem] = []
        if dispatch:
            dispatch.begin_step()
        for layer in range(self.model.layers):
            if dispatch and (pf := dispatch.prefetch_for(layer, routing)):
                kernels.append(pf)
            kernels += self._attention_block(layer, shape)
            kernels += self._ffn_block(layer, shape, routing.get(layer), state)
        lm_rows = max(shape.lm_rows, 1)
        kernels.append(self._norm("final_norm", -1, lm_rows))
        kernels += self._gemm("lm_head", -1, lm_rows, self.model.hidden, self.model.vocab,
                              "lm_head", Component.WEIGHT_READ, out=("logits",), cls="embeddings")
        return self._walked(kernels, state.l2)

    def _walked(self, items: list, l2: L2Residency) -> list[StreamItem]:
        """The stream after the L2 walk (hwsim.model.l2_residency), each routed expert an
        ExpertBlock. The walk reads a kernel's timing fields and what it reads and writes,
        never its name or its weights' address, so it walks the template expert's kernels
        (whose variants are kept on them, step after step); a weight-reading result is then
        moved to the expert's weights' channel phase (one copy per kernel and phase, kept)."""
        walk_all, moved = l2.walk_all, self._moved
        period = self._channel_period
        out: list[StreamItem] = []
        run: list[Kernel] = []           # plain kernels in a row, walked in one call
        for item in items:
            kind = type(item)
            if kind is Kernel:
                run.append(item)
                continue
            if run:
                out += walk_all(run)
                run = []
            if kind is RoutedExpert:
                address = item.address
                kernels = walk_all(item.template)
                for i, k in enumerate(kernels):
                    to = address.get(k.address)
                    if to is not None:                          # its weights: at this expert's
                        # the copy's value: k's timing fields and the others it keeps
                        key = (k.timing or timing_of(k), k.name, k.layer, k.code, k.role, k.item,
                               to % period)
                        hit = moved.get(key)
                        if hit is None:
                            if len(moved) >= MOVED_LIMIT:
                                moved.clear()
                            hit = moved[key] = relocated(k, k.name, k.layer, to)
                        kernels[i] = hit
                out.append(ExpertBlock(tuple(kernels), item.layer, item.name_cut, item.prefix))
            else:
                out.append(item)
        if run:
            out += walk_all(run)
        return out

    @functools.cached_property
    def _channel_period(self) -> int:
        """Bytes after which the HBM channel interleave repeats: addresses this far apart time alike."""
        c = self.chip
        return c.hbm_interleave_bytes * c.hbm_stacks * c.hbm_channels_per_stack

    @_memo
    def _attention_block(self, layer: int, s: StepShape) -> list[Kernel]:
        """The layer's attention block for this shape, memoised whole (its kernels are each
        memoised already): one look-up a layer instead of one a kernel, for every GPU's pass
        (issue 33: the look-ups' keys were a twentieth of a 64-GPU run)."""
        a, d = self.model.attention, self.model.hidden
        t = s.tokens
        if isinstance(a, MlaAttention):
            return self._mla_block(layer, s)
        ks = [self._norm("attn_norm", layer, t)]
        # the block's type (hwsim/model/shapes.py: GqaAttention, MlaAttention) says its projections,
        # what it caches and the dims of its matmuls
        for name, k_in, n_out, out in a.projections(d):
            ks += self._gemm(name, layer, t, k_in, n_out, name, Component.WEIGHT_READ, out=out,
                             cls="attention")
        for which, heads in a.head_norms:
            # q and k are strided views of the QKV output (for more than one token): RMSNorm
            # copies each to contiguous first (validation/data/h200_general_kernels.csv.xz)
            if t > 1:
                n = t * heads * a.head_dim * ops.ACT_BYTES
                ks.append(self._ew(f"{which}_copy", layer, n, n, vectorized=False, reads=("qkv",),
                                   writes=(which,)))
            ks.append(self._head_norm(which, layer, t * heads))
        (qk_dim, v_dim), kv_heads = a.dims, a.cached_heads
        if s.packed is not None:
            ks += paged_sdpa.layer_kernels(self, layer, s.packed)
        elif s.decodes:
            ks += self.kv_path(layer, s)
        if s.prompt_tokens and s.packed is None:
            ks.append(ops.prefill_attention(f"L{layer}.prefill_attention" if s.decodes else
                                            f"L{layer}.attention", layer, s.prompt_tokens, a.heads,
                                            kv_heads, qk_dim, v_dim, self.chip))
        ks += self._gemm("o_proj", layer, t, a.o_proj_in, d, "o_proj", Component.WEIGHT_READ, out=("o",),
                         cls="attention")
        ks.append(self._ew("residual_add", layer, 2 * t * d * ops.ACT_BYTES, t * d * ops.ACT_BYTES,
                           reads=("o", "x"), writes=("x",), role=Role.ATTENTION_RESIDUAL))
        return ks

    def _mla_block(self, layer: int, s: StepShape) -> list[Kernel]:
        """Multi-head latent attention (DeepSeek). Projections, then the latent's RMSNorm
        (kv_a_layernorm), then per phase:
        - decode with runtime.attention_kernel flash: kv_b absorbed into the query and the output
          (one GEMM's weights) around one fused kernel over the latent cache (FlashMLA);
          eager: DeepSeek's reference 'absorb' code in plain PyTorch, each matmul a cuBLAS batched
          GEMM and each layout change a copy (_mla_eager_decode);
        - prefill ('naive', as the reference and vLLM run it): kv_b decompresses K-nope and V for
          every prompt token, K gets the rope key appended (a cat), V is padded to the query-key
          dim (flash takes one head dim), causal flash attention over all heads, V's part copied out."""
        a, d, t, ab = self.model.attention, self.model.hidden, s.tokens, ops.ACT_BYTES
        heads, latent, rope = a.heads, a.kv_lora_rank, a.qk_rope_dim
        qk, attn = a.qk_nope_dim + rope, dict(cls="attention")
        ks = [self._norm("attn_norm", layer, t)]
        q_in = d
        if a.q_lora_rank:
            ks += self._gemm("q_a", layer, t, d, a.q_lora_rank, "q_a", Component.WEIGHT_READ, out=("q_a",), **attn)
            ks.append(self._latent_norm("q_a_norm", layer, t, a.q_lora_rank, "q_a"))
            q_in = a.q_lora_rank
        ks += self._gemm("q_b", layer, t, q_in, heads * qk, "q_b", Component.WEIGHT_READ, out=("q",), **attn)
        ks += self._gemm("kv_a", layer, t, d, latent + rope, "kv_a", Component.WEIGHT_READ, out=("kv_a",), **attn)
        # the latent is a strided view of kv_a's output (for more than one token): RMSNorm
        # copies it to contiguous first
        if t > 1:
            ks.append(self._ew("kv_a_copy", layer, t * latent * ab, t * latent * ab, vectorized=False,
                               reads=("kv_a",), writes=("latent",)))
        ks.append(self._latent_norm("kv_a_norm", layer, t, latent, "latent"))
        if s.decodes:
            ks += self._kv_appends(layer, s)
            if self.attention.mla_reference:
                ks += self._mla_eager_decode(layer, s.decodes, s.context)
            else:
                ks += self._gemm("kv_b", layer, s.decodes * s.queries, latent, heads * (a.qk_nope_dim + a.v_head_dim), "kv_b",
                                 Component.WEIGHT_READ, out=("q_latent",), **attn)
                ks += self._decode_attention(layer, s, 1, *a.dims)
        if p := s.prompt_tokens:
            head_elems = p * heads
            ks += self._gemm("kv_b", layer, p, latent, heads * (a.qk_nope_dim + a.v_head_dim), "kv_b",
                             Component.WEIGHT_READ, out=("kv",), **attn)
            ks.append(self._ew("k_cat", layer, head_elems * a.qk_nope_dim * ab + p * rope * ab,
                               head_elems * qk * ab, vectorized=False, reads=("kv", "kv_a"), writes=("k",)))
            ks.append(self._ew("v_pad", layer, head_elems * a.v_head_dim * ab, head_elems * qk * ab,
                               vectorized=False, reads=("kv",), writes=("v",)))
            ks.append(ops.prefill_attention(f"L{layer}.attention", layer, p, heads, heads, qk, qk, self.chip))
            ks.append(self._ew("attn_out_copy", layer, head_elems * a.v_head_dim * ab,
                               head_elems * a.v_head_dim * ab, vectorized=False, writes=("attn",)))
        ks += self._gemm("o_proj", layer, t, a.o_proj_in, d, "o_proj", Component.WEIGHT_READ, out=("o",), **attn)
        ks.append(self._ew("residual_add", layer, 2 * t * d * ab, t * d * ab, reads=("o", "x"), writes=("x",),
                           role=Role.ATTENTION_RESIDUAL))
        return ks

    def kv_path(self, layer: int, s: StepShape) -> list[Kernel]:
        """The kernels of a decode pass that write and read `layer`'s KV cache: its appends, then
        (unfused) the expansion and the attention; an MLA model's latent attention without the
        kv_b weights it is absorbed into (kv.attention_speedup times these)."""
        a = self.model.attention
        if isinstance(a, MlaAttention):
            attend = (self._mla_eager_decode(layer, s.decodes, s.context) if self.attention.mla_reference
                      else self._decode_attention(layer, s, 1, *a.dims))
            return self._kv_appends(layer, s) + list(attend)
        window = a.window_at(layer)
        attend = replace(s, context=min(s.context, window - 1)) if window else s
        return self._kv_appends(layer, s) + list(self._decode_attention(layer, attend, a.cached_heads, *a.dims))

    def _kv_appends(self, layer: int, s: StepShape) -> list[Kernel]:
        a = self.model.attention
        appends = a.appends
        if isinstance(a, MlaAttention) and self.attention.mla_reference:
            appends = [("kv_write", a.kv_lora_rank), ("pe_write", a.qk_rope_dim)]
        if self._sizes["appends_by_cat"] and self.kv.is_unquantized:
            return [self._cache_cat(name, layer, s, elems) for name, elems in appends]
        per_el = self.kv.append_bits() / 8
        return [self._kv_append(name, layer, s, elems, per_el) for name, elems in appends]

    @_memo
    def _cache_cat(self, name: str, layer: int, s: StepShape, elems: int) -> Kernel:
        """DynamicCache.update's torch.cat([cache, new], dim=-2): the whole cache read from HBM and
        written again with this step's tokens (a vectorised cat: the H100 traces' 41-48 us for
        Llama-3.1-8B's 64 MiB K or V at 32k)."""
        nbytes = s.batch * (s.context + s.queries) * elems * ops.ACT_BYTES
        return ops.streamed_copy(f"L{layer}.{name}_cat", layer, nbytes, nbytes, ops.EW_OPS_PER_BYTE, self.chip,
                                 from_cache=True, addr=self._kv_addr(layer), component=Component.KV_WRITE)

    @_memo
    def _latent_norm(self, name: str, layer: int, rows: int, width: int, source: str) -> Kernel:
        return ops.rows_kernel(f"L{layer}.{name}", layer, rows, width, ops.ACT_BYTES, NORM_OPS_PER_ELEM,
                               self.chip, reads=(source,), writes=(source,))

    @_memo
    def _mla_eager_decode(self, layer: int, batch: int, context: int) -> list[Kernel]:
        """DeepSeek's reference MLA decode ('absorb') in plain PyTorch: q-nope moved into the
        latent space by a batched matmul with kv_b's key half (one GEMM per head), scores against
        the latent and the rope-key caches (one GEMM per sequence each, the cache read as the
        'weights'), their sum scaled, an fp32 softmax cast back, probabilities times the latent
        cache, the result through kv_b's value half (per head). Layout changes between the
        batched matmuls are PyTorch's strided copies."""
        a, ab = self.model.attention, ops.ACT_BYTES
        heads, latent, rope, nope, vd = a.heads, a.kv_lora_rank, a.qk_rope_dim, a.qk_nope_dim, a.v_head_dim
        keys = context + 1
        cache, kv_b = self._kv_addr(layer), self._w(layer, "kv_b")
        hb = heads * batch
        score_bytes = hb * keys * ab

        def bmm(name, m, k, n, addr, weight_bytes, data, out):
            return ops.gemm(f"L{layer}.{name}", layer, m, k, n, self.chip, weight_addr=addr,
                            weight_bytes=weight_bytes, data=data, compute=Component.ATTENTION_COMPUTE,
                            writes=out)

        def cache_bmm(name, k, n, out, reduce_over_k=False):
            """A product with the cache, per sequence: cuBLAS's fallback kernels when several
            sequences' keys (a leading dimension) are not a multiple of 8, else its tensor-core
            GEMM (for one sequence cuBLAS runs tensor-op align1 kernels with split-K, near it: CUPTI)."""
            if keys % ops.UNALIGNED_ELEMS and batch > 1:
                return [ops.unaligned_batched_gemm(f"L{layer}.{name}", layer, batch, heads, k, n, self.chip,
                                                   b_addr=cache, data=Component.KV_READ, writes=out,
                                                   reduce_over_k=reduce_over_k)]
            return bmm(name, heads, k, batch * n, cache, ab, Component.KV_READ, out)

        def copy(name, elems, out):
            return self._ew(name, layer, elems * ab, elems * ab, vectorized=False, writes=(out,))

        return [
            copy("q_nope_copy", hb * nope, "q_nope"),
            *bmm("q_absorb", batch, nope, heads * latent, kv_b, ab, Component.WEIGHT_READ, ("q_lat_t",)),
            copy("q_pe_copy", hb * rope, "q_pe"),
            copy("q_latent_copy", hb * latent, "q_lat"),
            *cache_bmm("scores_latent", latent, keys, ("scores",)),
            *cache_bmm("scores_rope", rope, keys, ("scores_pe",)),
            self._ew("scores_add", layer, 2 * score_bytes, score_bytes, reads=("scores", "scores_pe"),
                     writes=("scores",)),
            self._ew("scores_scale", layer, score_bytes, score_bytes, reads=("scores",), writes=("scores",)),
            # softmax(dtype=float32) casts its input first, then normalises in fp32
            self._ew("scores_cast", layer, score_bytes, 2 * score_bytes, reads=("scores",), writes=("scores32",)),
            self._ew("softmax", layer, 2 * score_bytes, 2 * score_bytes, SOFTMAX_OPS_PER_ELEM / FP32_BYTES,
                     round_trips=3, reads=("scores32",), writes=("probs32",)),
            self._ew("probs_cast", layer, 2 * score_bytes, score_bytes, reads=("probs32",), writes=("probs",)),
            *cache_bmm("probs_latent", keys, latent, ("o_lat",), reduce_over_k=True),
            copy("o_latent_copy", hb * latent, "o_lat_t"),
            *bmm("v_absorb", batch, latent, heads * vd, kv_b, ab, Component.WEIGHT_READ, ("o_heads",)),
            copy("o_copy", hb * vd, "attn"),
        ]

    @_memo
    def _head_norm(self, which: str, layer: int, rows: int) -> Kernel:
        a = self.model.attention
        return ops.rows_kernel(f"L{layer}.{which}", layer, rows, a.head_dim, ops.ACT_BYTES,
                               NORM_OPS_PER_ELEM, self.chip, reads=(which,), writes=(which,))

    @_memo
    def _kv_append(self, name: str, layer: int, s: StepShape, elems: int, bytes_per_el: float) -> Kernel:
        return ops.kv_append(f"L{layer}.{name}", layer, s.batch * s.queries, elems, bytes_per_el,
                             self._kv_addr(layer), self.chip)

    @_memo
    def _decode_attention(self, layer: int, s: StepShape, kv_heads: int, qk_dim: int,
                          v_dim: int) -> list[Kernel]:
        a = self.model.attention
        context = s.context + 1
        elems = a.cached_elements_per_head                      # cached elements per token and head
        per_token_head = self.kv_token_bytes(context) / a.cached_heads   # a head of the cache; a trace
        # may attend over more heads than are cached (K and V expanded to every query head first)
        addr = self._kv_addr(layer)
        kw = {}
        ks: list[Kernel] = []
        # A compressed cache is read by a fused low-bit kernel (KIVI, QServe, the Triton kernel of
        # shared/calibration) that packs the GQA group into one 16-row MMA; a bf16 cache by
        # runtime.attention_kernel: FlashAttention-2 (the measured schedule) or cuDNN.
        d = self.kv_dequant
        if d.on_sm and d.fused:     # software: unpacked in registers inside the attention kernel
            kw["dequant_ops_per_token_head"] = elems * self.kv.dequant_ops_per_element(context)
            kw["block_m"] = ops.MMA_M
            program = fast_kv_occupancy.of_format(self.kv)      # the fast family's, as compiled
            if program is not None:
                kw["program"] = program
                kw["lane_ops_per_token_head"] = elems * fast_kv_occupancy.lane_ops_per_element(self.kv, context)
                # its launcher's own split plan, a segment a storage width (not FlashAttention-2's)
                kw["segments"] = fast_kv_grid.segments(self.kv, context, s.batch * kv_heads, program.block,
                                                       self.chip.sms)
                kw["splits"] = sum(n for _, n in kw["segments"])
        elif d.by_decoder:
            kw["decoder_elements_per_token_head"] = elems * self.kv.quantized_fraction(context)
            kw["block_m"] = ops.MMA_M
        elif d.on_sm:               # unfused: an expansion pass to bf16 in HBM first
            ks += self._unfused_expansion(layer, s.batch * kv_heads, context, per_token_head, elems, addr)
            per_token_head = elems * ops.ACT_BYTES
        if "block_m" not in kw:      # a bf16 cache (or one expanded to bf16 first)
            kw["library"] = self.attention.library
            if s.queries > 1 and kw["library"] in ("flash", "cudnn") and not isinstance(a, MlaAttention):
                # FA2 packs the GQA group for one query only, cuDNN splits only its one-query kernel
                # (an MLA latent is packed: FlashMLA)
                return ks + multi_query_attention(f"L{layer}.attention", layer, s.batch, a.heads, kv_heads,
                                                  s.queries, qk_dim, v_dim, context, per_token_head, addr,
                                                  self.chip, kw["library"])
        # several query tokens of a sequence are packed as rows beside its query heads (the fused
        # low-bit kernels)
        ks += ops.decode_attention(f"L{layer}.attention", layer, s.batch, a.heads * s.queries, kv_heads, qk_dim,
                                   v_dim, context, per_token_head, addr, self.chip, **kw)
        return ks

    def _unfused_expansion(self, layer: int, rows: int, context: int, per_token_head: float, elems: int,
                           addr: int) -> list[Kernel]:
        """The kernels that write a bf16 copy of `layer`'s cache (`rows` sequence-KV-head pairs of
        `context` tokens) before the attention: one expansion pass, or HQQ's chain of PyTorch ops
        and the cat with the bf16 residual (kv_cache.expansion hqq: hwsim/model/hqq_dequant.py)."""
        name, kv = f"L{layer}.kv_dequant", self.kv
        if kv.expansion == "hqq":
            recent = min(kv.recent, context)
            half = elems // 2                       # K's (V's) elements a token and head
            return hqq_dequant.expansion(name, layer, int(kv.routine.key_bits), kv.group_size,
                                         rows * (context - recent) * half,
                                         rows * recent * half, addr, self.chip)
        n = rows * context
        return [ops.unfused_dequant(name, layer, n * per_token_head, n * elems, kv.dequant_ops_per_element(context),
                                    addr, self.chip)]

    def _kv_addr(self, layer: int) -> int:
        return self._w(layer, "kv_cache")

    def _ffn_block(self, layer: int, s: StepShape, choice: np.ndarray | None,
                   state: OnChipState) -> list[Kernel]:
        m, t = self.model, s.tokens
        dispatch = state.dispatch
        if not m.is_moe_layer(layer):
            return self._dense_block(layer, t)
        ks = list(self._moe_head(layer, t, state.router_on_chip))
        counts = tokens_per_expert(choice, m.moe.experts)
        experts = np.flatnonzero(counts).tolist()
        plans = dispatch.plan_layer(layer, experts) if dispatch else [FROM_HBM] * len(experts)
        ks += self.ffn.routed(self, layer, t, counts, experts, plans)
        if dispatch:
            dispatch.account(layer, plans)
        ks.append(self._ffn_residual(layer, t))
        return ks

    @_memo
    def _dense_block(self, layer: int, t: int) -> list[Kernel]:
        """A dense layer's FFN block (norm, MLP, residual add), memoised whole as the attention
        block is: one look-up a layer for a pass of t tokens, not one a kernel."""
        return [self._norm("ffn_norm", layer, t), *DENSE_FFN.kernels(self, layer, t), self._ffn_residual(layer, t)]

    def _ffn_residual(self, layer: int, t: int) -> Kernel:
        """The FFN block's output added back into the residual stream (dense and MoE layers)."""
        d = self.model.hidden
        return self._ew("ffn_residual_add", layer, 2 * t * d * ops.ACT_BYTES, t * d * ops.ACT_BYTES,
                        reads=("acc", "x"), writes=("x",), role=Role.FFN_RESIDUAL)

    @_memo
    def _moe_head(self, layer: int, t: int, router_on_chip: bool) -> list[Kernel]:
        """A MoE layer's kernels before its routed experts, which do not depend on the routing:
        the norm, the router and its softmax, the shared experts. Memoised whole: one look-up a
        layer for every GPU's pass, not one a kernel."""
        moe, d = self.model.moe, self.model.hidden
        ks = [self._norm("ffn_norm", layer, t)]
        ks += self._gemm("router", layer, t, d, moe.experts, "router", Component.ROUTER,
                         compute=Component.ROUTER, on_chip=float(router_on_chip), out=("scores",))
        # softmax(dtype=float32): a cast kernel, then a one-warp-per-row softmax
        ks.append(self._ew("router_cast", layer, t * moe.experts * ops.ACT_BYTES,
                           t * moe.experts * FP32_BYTES, component=Component.ROUTER,
                           reads=("scores",), writes=("scores32",)))
        ks.append(self._ew("router_softmax", layer, t * moe.experts * FP32_BYTES,
                           t * moe.experts * FP32_BYTES, SOFTMAX_OPS_PER_ELEM / FP32_BYTES,
                           component=Component.ROUTER, reads=("scores32",), writes=("probs",)))
        if moe.shared_experts:
            ks += self._shared_experts(layer, t)
        return ks

    def _per_expert_moe(self, layer: int, t: int, counts: np.ndarray, experts: list[int],
                        plans: list) -> list[StreamItem]:
        """runtime.moe_schedule per-expert: each active expert's kernels in turn (after the wait
        for its prefetch, if any), into a combine buffer that starts zeroed."""
        ks: list[StreamItem] = [self._ew("moe_zero", layer, 0, t * self.model.hidden * ops.ACT_BYTES,
                                         writes=("acc",), role=ROUTED)]
        rows = counts.tolist()                   # Python ints: no numpy scalar per expert
        for e, plan in zip(experts, plans):
            if plan.wait:
                ks.append(plan.wait)
            ks.append(self._routed_expert(layer, e, rows[e], plan.on_chip, plan.channel_group))
        return ks

    def _dense_ffn(self, layer: int, t: int) -> list[Kernel]:
        return self._expert(layer, "dense", t, self.model.ffn, Component.WEIGHT_READ, gather=False)

    @_memo
    def _shared_experts(self, layer: int, t: int) -> list[Kernel]:
        """The shared experts: one MLP over every token, run before the routed experts (so
        their order does not depend on routing), optionally scaled by a sigmoid gate (Qwen1.5-
        and Qwen2-MoE: a [d -> 1] GEMM, sigmoid, multiply), then added to the residual stream."""
        moe, d, ab = self.model.moe, self.model.hidden, ops.ACT_BYTES
        ks = [*self._expert(layer, "shared", t, moe.shared_width, Component.EXPERT_READ, gather=False,
                           out=("shared",))]
        if moe.shared_expert_gate:
            ks += self._gemm("shared.gate", layer, t, d, 1, "shared.gate", Component.ROUTER,
                             compute=Component.ROUTER, out=("shared_gate",))
            ks.append(self._ew("shared.sigmoid", layer, t * ab, t * ab, SILU_OPS_PER_BYTE,
                               component=Component.ROUTER, reads=("shared_gate",), writes=("shared_gate",)))
            ks.append(self._ew("shared.scale", layer, t * d * ab + t * ab, t * d * ab, vectorized=False,
                               reads=("shared", "shared_gate"), writes=("shared",)))
        ks.append(self._ew("shared.add", layer, 2 * t * d * ab, t * d * ab, reads=("shared", "x"),
                           writes=("x",)))
        return ks

    def _routed_expert(self, layer: int, e: int, rows: int, on_chip: float, group: int) -> RoutedExpert:
        """A routed expert's kernels: the first MoE layer's expert 0's at these rows (the
        kernels depend on the shapes only), and how they become this expert's once the L2 walk
        has placed them (Schedule._walked). A batch-64 pass runs thousands of experts."""
        # plain dicts, not the memo: this runs for every routed expert of every pass
        template = self._templates.get((rows, on_chip, group))
        if template is None:
            if len(self._templates) >= MOVED_LIMIT:
                self._templates.clear()
            template = self._templates[rows, on_chip, group] = self._expert(
                self._first_moe_layer, "expert0", rows, self.model.moe.expert_ffn, Component.EXPERT_READ,
                gather=True, on_chip=on_chip, channel_group=group)
        relocation = self.layout.relocations.get((layer, e))
        if relocation is None:
            relocation = self.layout.relocations[layer, e] = self._expert_relocation(layer, e)
        return RoutedExpert(template, layer, *relocation)

    def _expert_relocation(self, layer: int, e: int) -> tuple[int, str, dict[int, int]]:
        """How the template expert's kernels become expert e's of `layer`: (the length of the
        template's name prefix, e's prefix, template weight address -> e's), worked out once
        per expert rather than once per expert and token count; none for the template itself."""
        first = self._first_moe_layer
        if (layer, e) == (first, 0):
            return 0, "", {}
        old, new, regions = f"L{first}.expert0.", f"L{layer}.expert{e}.", self.mem.regions
        # straight-line lookups: a schedule relocates each expert it routes (Qwen3-30B-A3B: 6,144)
        address = {regions[old + "gate_up"][0]: regions[new + "gate_up"][0],
                   regions[old + "down"][0]: regions[new + "down"][0]}
        return len(old), new, address

    @functools.cached_property
    def _first_moe_layer(self) -> int:
        return next(layer for layer in range(self.model.layers) if self.model.is_moe_layer(layer))

    @_memo
    def _expert(self, layer: int, prefix: str, rows: int, ffn: int, data: Component,
                gather: bool, on_chip: float = 0.0, channel_group: int = -1,
                out: tuple[str, ...] = ("acc",)) -> list[Kernel]:
        d, ab = self.model.hidden, ops.ACT_BYTES
        group = channel_group
        ks = []
        # PyTorch's index_select / index_add_ kernels for at most 16 indices (indexSelectSmallIndex,
        # indexFuncSmallIndex) spread the columns over threads and loop over the index rows.
        # More indices go to the large-index kernels, parallel over every element: one index
        # load, then the data; index_add_ then adds each element with an L2 atomic.
        small = rows <= SMALL_INDEX_ROWS
        # the gather and index_add_ touch only this expert's tokens' rows of h and acc; a token's
        # row is touched again by its other top-k experts, each another expert with this chance
        moe = self.model.moe
        overlap = (moe.top_k - 1) / (moe.experts - 1) if moe and moe.experts > 1 else 0.0
        if gather:
            ks.append(self._ew(f"{prefix}.gather", layer, rows * d * ab, rows * d * ab,
                               round_trips=1 + INDEX_SELECT_TRIPS_PER_ROW * rows if small else 2,
                               input_trips=rows if small else 1, reads=("h",), writes=("xe",),
                               partial=("h",), row_overlap=overlap))
        ks += self._gemm(f"{prefix}.gate_up", layer, rows, d, 2 * ffn, f"{prefix}.gate_up", data,
                         on_chip=on_chip, channel_group=group, out=("gate", "up"), cls="experts")
        # SiLU of the gate half and the product with the up half read strided views of the
        # gate+up output (contiguous only for one row): PyTorch's non-vectorised kernel
        ks.append(self._ew(f"{prefix}.silu", layer, rows * ffn * ab, rows * ffn * ab, SILU_OPS_PER_BYTE,
                           vectorized=rows == 1, reads=("gate",), writes=("gate_act",)))
        ks.append(self._ew(f"{prefix}.mul", layer, 2 * rows * ffn * ab, rows * ffn * ab,
                           vectorized=rows == 1, reads=("gate_act", "up"), writes=("ffn_act",)))
        ks += self._gemm(f"{prefix}.down", layer, rows, ffn, d, f"{prefix}.down", data,
                         on_chip=on_chip, channel_group=group, out=("down",) if gather else out,
                         cls="experts")
        if gather:   # scale by the router weight (a broadcast multiply), then index_add_
            ks.append(self._ew(f"{prefix}.scale", layer, rows * d * ab, rows * d * ab, vectorized=False,
                               reads=("down",), writes=("scaled",)))
            atomics = 0 if small else rows * d * ops.L2_ATOMIC_BYTES
            ks.append(self._ew(f"{prefix}.scatter_add", layer, 2 * rows * d * ab, rows * d * ab,
                               round_trips=1 + INDEX_ADD_TRIPS_PER_ROW * rows if small else 2,
                               input_trips=rows if small else 1, reads=("scaled", "acc"), writes=("acc",),
                               atomic_bytes=atomics, partial=("acc",), row_overlap=overlap))
        return ks

    # -- the production MoE schedules (docs/moe.md; kernels as CUPTI lists them on the H200,
    # calibration/data/h200_moe_kernels.jsonl.xz) -------------------------------------------------
    def _topk(self, layer: int, t: int) -> list[Kernel]:
        """torch.topk over each token's expert scores: gatherTopK, then a bitonic sort of the k."""
        moe = self.model.moe
        scores = t * moe.experts * FP32_BYTES
        picks = t * moe.top_k * (FP32_BYTES + 8)
        return [self._ew("router_topk", layer, scores, picks, TOPK_OPS_PER_ELEM / FP32_BYTES,
                         component=Component.ROUTER, round_trips=TOPK_TRIPS),
                self._ew("router_topk_sort", layer, picks, picks, component=Component.ROUTER,
                         round_trips=TOPK_SORT_TRIPS)]

    def _small(self, name, layer, read, write, trips=1, vectorized=True, component=Component.ROUTER, role=None):
        return self._ew(name, layer, read, write, component=component, round_trips=trips,
                        vectorized=vectorized, role=role)

    def _expert_dequant(self) -> str:
        """How the grouped and fused kernels expand the experts' codes: none for bf16 and
        native FP8/FP4, else as the format says (software or decoder)."""
        f = self.wplan.experts
        return "native" if f.is_bf16 or f.tensor_dtype(self.chip.tensor_dtypes) != "bf16" else f.dequant

    def _one_kernel_moe(self, layer: int, t: int, counts: tuple[int, ...], plans: list, build) -> list[StreamItem]:
        """The grouped or fused MoE over the active experts (`counts`, their plans in the same
        order). The expert SRAM is the L2's persisting share, which serves any kernel's loads of
        the addresses it holds: each expert's resident share of its weights is read from there.
        The stream waits for every copy still in flight before the first kernel that reads
        expert weights (one kernel reads them all); the routing bookkeeping runs meanwhile."""
        on_chip = tuple(p.on_chip for p in plans) if any(p.on_chip for p in plans) else None
        ks: list[StreamItem] = list(build(layer, t, counts, on_chip))
        waits = [p.wait for p in plans if p.wait]
        if waits:
            first = next(i for i, k in enumerate(ks) if k.data == Component.EXPERT_READ)
            ks[first:first] = waits
        return ks

    @_memo
    def _grouped_moe(self, layer: int, t: int, counts: tuple[int, ...],
                     on_chip: tuple[float, ...] | None = None) -> list[Kernel]:
        """torchtitan's MoE on torch._grouped_mm: the routing bookkeeping all on the GPU
        (top-k, a stable argsort of the expert ids, counts by scatter-add, int32 offsets by
        cumsum, token ids by division), one gather, two grouped GEMMs with a SiLU and a
        multiply between them, the router-weight scale and one index_add_. Only the grouped
        GEMMs and their prepare kernels depend on the routing: the rest is memoised by tokens
        (a pass's routing is new in every layer)."""
        moe, d = self.model.moe, self.model.hidden
        ff = moe.expert_ffn
        ks = list(self._grouped_routing(layer, t))
        fmt_b = self.wb_cls["experts"]
        dtype = self.wplan.experts.tensor_dtype(self.chip.tensor_dtypes)
        for proj, (k, nn), out in (("gate_up", (d, 2 * ff), ("gate", "up")), ("down", (ff, d), ("down",))):
            ks.append(self._small(f"experts.{proj}.prepare", layer, len(counts) * 4, len(counts) * 64,
                                  trips=PREPARE_TRIPS, component=Component.EXPERT_READ, role=ROUTED))
            ks.append(routed(moe_kernels.grouped_gemm(f"L{layer}.experts.{proj}", layer, list(counts), k, nn,
                                               self.chip, weight_addr=self._w(layer, f"expert0.{proj}"),
                                               weight_bytes=fmt_b, data=Component.EXPERT_READ,
                                               writes=out, dtype=dtype, dequant=self._expert_dequant(),
                                               kernel=self.wplan.experts.kernel, on_chip=on_chip),
                              ir.GroupedGemm(counts, nn, k, dtype)))
            if proj == "gate_up":     # SiLU of the strided gate half, times the strided up half
                ks += self._grouped_activation(layer, t)
        ks += self._grouped_combine(layer, t)
        return ks

    @_memo
    def _grouped_routing(self, layer: int, t: int) -> list[Kernel]:
        """_grouped_moe's kernels before its first grouped GEMM: top-k, the sort, the counts
        and offsets, the token ids and the gather."""
        moe, d, ab = self.model.moe, self.model.hidden, ops.ACT_BYTES
        n = t * moe.top_k
        i64 = 8
        ks = self._topk(layer, t)
        ks.append(self._small("argsort_iota", layer, 0, n * i64))
        ks.append(self._small("argsort", layer, n * i64, 2 * n * i64, trips=sort_trips(n)))
        ks.append(self._small("counts_zero", layer, 0, moe.experts * i64))
        ks.append(self._small("counts_ones", layer, 0, n * i64))
        ks.append(self._small("counts_scatter_add", layer, 2 * n * i64, moe.experts * i64, trips=2))
        ks.append(self._small("offsets_cast", layer, moe.experts * i64, moe.experts * 4))
        ks.append(self._small("offsets_scan_init", layer, 0, 64))
        ks.append(self._small("offsets_scan", layer, moe.experts * 4, moe.experts * 4, trips=SCAN_TRIPS))
        ks.append(self._small("token_ids", layer, n * i64, n * i64, vectorized=False))
        small = n <= SMALL_INDEX_ROWS
        ks.append(self._ew("experts.gather", layer, n * d * ab, n * d * ab,
                           round_trips=1 + INDEX_SELECT_TRIPS_PER_ROW * n if small else 2,
                           input_trips=n if small else 1, reads=("h",), writes=("xe",), role=ROUTED))
        return ks

    @_memo
    def _grouped_activation(self, layer: int, t: int) -> list[Kernel]:
        """_grouped_moe's SiLU of the strided gate half, times the strided up half."""
        ff, ab = self.model.moe.expert_ffn, ops.ACT_BYTES
        n = t * self.model.moe.top_k
        return [self._ew("experts.silu", layer, n * ff * ab, n * ff * ab, SILU_OPS_PER_BYTE,
                         vectorized=False, reads=("gate",), writes=("gate_act",), role=ROUTED),
                self._ew("experts.mul", layer, 2 * n * ff * ab, n * ff * ab, vectorized=False,
                         reads=("gate_act", "up"), writes=("ffn_act",), role=ROUTED)]

    @_memo
    def _grouped_combine(self, layer: int, t: int) -> list[Kernel]:
        """_grouped_moe's kernels after its down GEMM: the router weights, the scale, the
        zeroed sum and the index_add_ into it."""
        moe, d, ab = self.model.moe, self.model.hidden, ops.ACT_BYTES
        n = t * moe.top_k
        i64 = 8
        small = n <= SMALL_INDEX_ROWS
        ks = [self._small("experts.route_weights", layer, n * (i64 + ab), n * ab, trips=2, vectorized=False,
                          role=ROUTED),
              self._ew("experts.scale", layer, n * d * ab, n * d * ab, vectorized=False,
                       reads=("down",), writes=("scaled",), role=ROUTED),
              self._ew("moe_zero", layer, 0, t * d * ab, writes=("acc",), role=ROUTED)]
        atomics = 0 if small else n * d * ops.L2_ATOMIC_BYTES
        ks.append(self._ew("experts.scatter_add", layer, 2 * n * d * ab, n * d * ab,
                           round_trips=1 + INDEX_ADD_TRIPS_PER_ROW * n if small else 2,
                           input_trips=n if small else 1, reads=("scaled", "acc"), writes=("acc",),
                           atomic_bytes=atomics, role=ROUTED))
        return ks

    @_memo
    def _fused_moe(self, layer: int, t: int, counts: tuple[int, ...],
                   on_chip: tuple[float, ...] | None = None) -> list[Kernel]:
        """The Triton fused MoE (vLLM's design, calibration/moe_impls.py): top-k, the int32
        expert ids, a sentinel fill and moe_align_block_size (one program), then per projection
        one kernel that gathers its own rows (the down one scales by the router weight), a fused
        SiLU x up between them, and a sum over each token's k rows."""
        moe, d, ab = self.model.moe, self.model.hidden, ops.ACT_BYTES
        ff, n, E = moe.expert_ffn, t * moe.top_k, moe.experts
        bm = moe_kernels.fused_config(t, E)[0]
        padded = n + E * (bm - 1)
        ks = self._topk(layer, t)
        ks.append(self._small("topk_ids_int32", layer, n * 8, n * 4))
        ks.append(self._small("sorted_ids_fill", layer, 0, padded * 4))
        ks.append(self._small("moe_align", layer, n * 4, padded * 4, trips=align_trips(E, n)))
        ks.append(self._small("topk_weights_fp32", layer, n * ab, n * FP32_BYTES))
        wb = self.wb_cls["experts"]
        for proj, (k, nn), out in (("gate_up", (d, 2 * ff), ("gate", "up")), ("down", (ff, d), ("down",))):
            ks.append(routed(moe_kernels.fused_moe_gemm(f"L{layer}.experts.{proj}", layer, list(counts), t, E, k,
                                                 nn, self.chip, weight_addr=self._w(layer, f"expert0.{proj}"),
                                                 weight_bytes=wb, data=Component.EXPERT_READ, writes=out,
                                                 dequant=self._expert_dequant(), kernel=self.wplan.experts.kernel,
                                                 on_chip=on_chip),
                              ir.GroupedGemm(counts, nn, k, self.wplan.experts.tensor_dtype(self.chip.tensor_dtypes))))
            if proj == "gate_up":
                ks.append(self._ew("experts.silu_mul", layer, 2 * n * ff * ab, n * ff * ab, SILU_OPS_PER_BYTE,
                                   reads=("gate", "up"), writes=("ffn_act",), role=ROUTED))
        ks.append(self._ew("experts.sum", layer, n * d * ab, t * d * ab, reads=("down",), writes=("acc",),
                           role=ROUTED))
        return ks


def sort_trips(n: int) -> float:
    """Dependent round trips of PyTorch's single-block sort of n int64 keys (sortKeyValueInplace):
    radixSortKVInPlace<..., 16, 2> up to 32 keys, <..., 32, 4> up to 128, <..., 32 or 64, 32> up to
    4096; measured 6.6, 8.6-8.7 and 26.8-29.6 us (h200_moe_kernels.jsonl), in L2 round trips."""
    for limit, trips in SORT_TRIPS:
        if n <= limit:
            return trips
    return SORT_TRIPS[-1][1] * n / SORT_TRIPS[-1][0]


def align_trips(experts: int, n: int) -> float:
    """calibration/moe_impls.py's moe_align_block_size: one program loops over the experts,
    each iteration a block-wide count and scan of the n (padded to a power of two) expert ids:
    0.094 us an expert at n <= 32 (one warp), 0.27 at 128 and 0.70 at 2048 (Qwen3 and OLMoE
    shapes, h200_moe_kernels.jsonl): in L2 round trips per expert."""
    np2 = 1 << max(0, (n - 1).bit_length())
    per = ALIGN_TRIPS_WARP if np2 <= 32 else ALIGN_TRIPS_BLOCK + ALIGN_TRIPS_PER_128 * (np2 / 128 - 1)
    return 1 + experts * per


def routed(k: Kernel, item: ir.WorkItem) -> Kernel:
    """A library kernel (hwsim.model.moe_kernels) as one of the routed experts' (Role.ROUTED)
    doing `item`."""
    return copy_kernel(k, role=ROUTED, item=item)


