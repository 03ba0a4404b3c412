"""A kernel as the simulator sees it: thread-block tiles with bytes and operations each.

Kernels are data produced by the schedule (hwsim.model.schedule) and consumed by the
engine (hwsim.engine.timer). All per-tile quantities are for one thread block. Fields whose
metadata says `timing=False` cannot change how long the kernel takes; every other field is
part of the replay cache's key (hwsim/engine/replay.py).

Besides its fields a Kernel keeps three memos of its own value, set once and never compared
(`timing`, `replay_key`, `l2_variants`): a step looks each of its ~1,000 kernels up by them,
and looking up by the kernel's value instead cost the default step 3-9% (docs/architecture.md).
What follows from the timing fields alone hangs off the TimingKey, shared by equal kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from operator import attrgetter

from hwsim.model import ir
from hwsim.metrics import Component

NOT_TIMING = {"timing": False}


class Role(Enum):
    """Where a kernel stands in its layer, for what cuts a GPU's stream where the layout
    communicates (hwsim/parallel/multi.py): the schedule says it as it builds the kernel."""
    ATTENTION_RESIDUAL = "attention residual"   # adds the attention block's output to the residual stream
    FFN_RESIDUAL = "ffn residual"               # adds the FFN's or the experts' output to it
    ROUTED = "routed"                           # runs on the routed experts' tokens (or zeroes their sum)


def code_of(name: str) -> str:
    """The code kind a schedule's kernel name stands for: L3.expert12.silu -> silu. Read once,
    where a builder makes a Kernel without saying its code (Kernel.code); nothing reads names
    after that."""
    return name[name.rfind(".") + 1:]     # rsplit(".", 1)[-1] without a list: once per kernel


@dataclass(slots=True)    # not frozen: frozen dataclasses build 2x slower, and a step builds ~1000
class Kernel:               # of them; nothing mutates a Kernel after the schedule creates it
                            # (but for the keys the engine and the L2 walk keep on it, below)
    name: str = field(metadata=NOT_TIMING)
    layer: int = field(metadata=NOT_TIMING)   # decoder layer, -1 outside the layer stack
    tiles: int                      # thread blocks in the grid
    hbm_read: float = 0.0           # bytes per tile streamed from HBM (L2 misses)
    l2_read: float = 0.0            # bytes per tile that hit in L2 (reused activations)
    hbm_write: float = 0.0          # bytes per tile written back to HBM (KV appends)
    l2_write: float = 0.0           # bytes per tile written into L2 (activations)
    l2_atomic: float = 0.0          # of l2_write, what stands for atomics' hold on the L2 slices
                                    # (index_add_): it takes L2 time, not capacity
    sram_read: float = 0.0          # of l2_read, bytes per tile of weights read from on-chip SRAM
                                    # (experts or a router resident there: hwsim/hw/units.py Sram)
    tensor_flops: float = 0.0       # tensor-core flops per tile (padded to the MMA shape)
    tensor_share: float = 0.0       # of the chip's tensor peak its MMAs sustain, where a profile
                                    # measured the kernel's own (a serving engine's SDPA backend:
                                    # hwsim/model/paged_sdpa.py); 0: the chip's tensor or mma.sync
                                    # efficiency
    vector_flops: float = 0.0       # fp32 vector-ALU ops per tile (softmax, norms, SiLU)
    int_ops: float = 0.0            # integer/logic ops per tile (unpacking sub-byte data)
    decoder_elements: float = 0.0   # elements per tile expanded by a native sub-byte decoder
    smem_bytes: int = 0             # shared memory one tile holds (limits tiles per SM)
    block_threads: int = 0          # threads a block runs (limits tiles per SM); 0: the profile's
                                    # default occupancy (cta_slots_per_sm blocks of 512 threads)
    regs_per_thread: int = 0        # registers a thread holds, as compiled: where set (with
                                    # block_threads), tiles per SM follow CUDA occupancy
                                    # (hwsim/hw/occupancy.py: warps, registers, shared memory)
    chain_ops: float = 0.0          # integer ops per tile of a latency-bound loop (issue 44): one
                                    # program alone takes chain_ops of its SM's ALU time (its lanes'
                                    # issue and its chain's stalls); the programs the SM holds at once
                                    # (occupancy) overlap the stalls, not the issue, so a tile costs
                                    # int_ops + (chain_ops - int_ops) / resident of the ALU, and no
                                    # round of resident tiles ends before one chain
    alu_chain: float = 1.0          # a block alone takes this many times its share of its SM's ALU
                                    # time: its integer work is a dependent chain whose gaps only
                                    # other resident blocks fill (PyTorch's strided element-wise)
    address: int = field(default=0, metadata=NOT_TIMING)   # start of the contiguous HBM range the
                                    # tiles stream (the replay key keeps its channel phase)
    dtype: str = "bf16"             # tensor-core input type
    mma_sync: bool = False          # built on warp-level mma.sync (FlashAttention-2), not wgmma
    balanced: bool = False          # stream-K: work spread evenly over SMs, no partial last wave
    busiest_tiles: float = 0.0      # tiles' worth of work the busiest SM runs when the grid's tiles
                                    # differ in work (causal attention: hwsim.model.ops); 0: equal tiles
    round_trips: float = 1          # dependent memory round trips a tile waits on before streaming
    start_trips: float = 0          # further round trips exposed once, at the kernel's start (setup)
    inflight_bytes: float = 0.0     # loads a tile keeps outstanding; 0: the chip's per-block default
                                    # (TMA-pipelined GEMMs keep their stage buffers in flight)
    channel_group: int = -1         # HBM stack its weights live on (per-expert placement), -1 = all
    input_trips: float = 1          # of its round trips, those that load its activation inputs
                                    # (a small-index kernel: one per index row)
    miss_trips: float = -1          # of its round trips, those that wait on HBM; -1: all when it
                                    # reads HBM (set to input_trips for evicted activations)
    reads: tuple[str, ...] = ()     # activations its l2_read consists of, equal shares (element-wise
                                    # and row kernels; hwsim.model.l2_residency moves evicted ones to HBM)
    writes: tuple[str, ...] = ()    # activations it produces
    partial: tuple[str, ...] = ()   # of its reads and writes, those it touches only some rows of
                                    # (an expert's tokens): the rest of the tensor is not made
                                    # resident by it (hwsim.model.l2_residency)
    row_overlap: float = 0.0        # chance that one of its rows of a partial tensor is also a row
                                    # of another such kernel ((k-1)/(E-1) for an expert's tokens
                                    # under top-k routing over E experts)
    data: Component = Component.ACTIVATION_IO      # charged when the tile is memory-bound
    compute: Component = Component.ACTIVATION_IO   # charged when it is compute-bound
    code: str = field(default="", metadata=NOT_TIMING)   # the kind of code it runs (silu, gather,
                                    # gate_up): kernels of one kind share their instructions in the
                                    # SM's cache (hwsim.model.l2_residency); "": code_of(name)
    role: Role | None = field(default=None, metadata=NOT_TIMING)   # where it stands in its layer
    item: ir.WorkItem | None = field(default=None, metadata=NOT_TIMING)   # the typed work item it
                                    # does (hwsim/model/ir.py: a GEMM's M, N, K, an attention's
                                    # lengths, bytes moved), as its builder was asked; None: not said
    # Its memos (see the module's doc): none is an __init__ argument, so neither a builder nor
    # dataclasses.replace() can hand a kernel another's
    replay_key: int | None = field(default=None, init=False, repr=False, compare=False,
                                   metadata=NOT_TIMING)   # set once by ReplayCache
    timing: TimingKey | None = field(default=None, init=False, repr=False, compare=False,
                                     metadata=NOT_TIMING)   # set once by timing_of()
    l2_variants: dict | None = field(default=None, init=False, repr=False, compare=False,
                                     metadata=NOT_TIMING)   # hwsim.model.l2_residency's copies
                                     # of it, kept as long as it is

    def __post_init__(self):
        assert self.tiles >= 1, self.name
        if not self.code:
            self.code = code_of(self.name)

    @property
    def hbm_bytes(self) -> float:
        return self.tiles * (self.hbm_read + self.hbm_write)


_new_kernel = object.__new__


def _copy_fields(k: Kernel) -> Kernel:
    """A new Kernel with every compared field of k, without calling __init__ (whose
    __post_init__ checks the original passed already); what is kept on the original (its keys,
    its variants) starts empty. Written out field by field: straight-line slot stores are 2.5x
    faster than a ~35-argument __init__ and 5x faster than a loop over the fields' names
    (tests/test_cache_ownership.py keeps it in step with the dataclass)."""
    new = _new_kernel(Kernel)
    new.name, new.layer, new.tiles = k.name, k.layer, k.tiles
    new.hbm_read, new.l2_read, new.hbm_write, new.l2_write = k.hbm_read, k.l2_read, k.hbm_write, k.l2_write
    new.l2_atomic, new.tensor_flops, new.vector_flops = k.l2_atomic, k.tensor_flops, k.vector_flops
    new.tensor_share = k.tensor_share
    new.sram_read = k.sram_read
    new.int_ops, new.decoder_elements, new.smem_bytes = k.int_ops, k.decoder_elements, k.smem_bytes
    new.block_threads, new.alu_chain, new.address, new.dtype = k.block_threads, k.alu_chain, k.address, k.dtype
    new.regs_per_thread, new.chain_ops = k.regs_per_thread, k.chain_ops
    new.mma_sync, new.balanced, new.busiest_tiles = k.mma_sync, k.balanced, k.busiest_tiles
    new.round_trips, new.start_trips, new.inflight_bytes = k.round_trips, k.start_trips, k.inflight_bytes
    new.channel_group, new.input_trips, new.miss_trips = k.channel_group, k.input_trips, k.miss_trips
    new.reads, new.writes, new.partial, new.row_overlap = k.reads, k.writes, k.partial, k.row_overlap
    new.data, new.compute, new.code, new.role, new.item = k.data, k.compute, k.code, k.role, k.item
    new.replay_key = new.timing = new.l2_variants = None
    return new


def copy_kernel(k: Kernel, **changes) -> Kernel:
    """dataclasses.replace(k, **changes), 8x faster (no __init__, no per-field checks): the L2
    walk makes a variant of most per-expert kernels every step. `changes` must keep the Kernel
    valid (none changes `tiles`). The copy has no timing or replay key: the caller may change
    timing fields on it after this returns."""
    new = _copy_fields(k)
    for name, value in changes.items():     # the hot callers set fields on the copy directly
        setattr(new, name, value)
    return new


def relocated(k: Kernel, name: str, layer: int, address: int) -> Kernel:
    """k renamed and moved to `address`: fields that cannot change timing, so the copy shares
    k's TimingKey (the schedule copies a template for every routed expert, every step)."""
    new = _copy_fields(k)
    new.name, new.layer, new.address = name, layer, address
    new.timing = k.timing or timing_of(k)
    return new


TIMING_FIELDS = tuple(f.name for f in fields(Kernel) if f.metadata.get("timing", True))
_timing_values = attrgetter(*TIMING_FIELDS)     # 0.2 us a kernel slower than straight-line loads,
                                                # once per new kernel (~130 a default step)
# TimingKeys by their values: process-wide by decision (issue 32), as interning is. A TimingKey
# is a pure function of immutable values, and so is all that hangs off it (replay keys, the L2
# walk's variants' keys and what it reads, the work); kernels of any run, schedule or trace
# share it, and none of them is the owner. Bounded: past the limit only sharing is lost.
TIMING_KEYS_LIMIT = 100_000
_timing_keys: dict[tuple, TimingKey] = {}


class TimingKey:
    """A kernel's timing fields' values (TIMING_FIELDS), one object per distinct tuple: its
    hash is computed once, and what depends only on these values hangs off it, so a copy
    that keeps them (relocated) or derives them (the L2 walk's variants) reads no field."""

    __slots__ = ("values", "hash", "replay_keys", "variants", "walk")

    def __init__(self, values: tuple):
        self.values = values
        self.hash = hash(values)
        self.replay_keys: dict = {}     # HBM channel phase -> replay key (hwsim.engine.replay)
        self.variants: dict = {}        # L2 walk's change -> the variant's TimingKey
        self.walk: tuple | None = None  # what the L2 walk reads of such a kernel (hwsim.model.l2_residency)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return self.values == other.values


def timing_of(k: Kernel) -> TimingKey:
    """k's TimingKey, read off its fields the first time and kept on it."""
    if k.timing is None:
        values = _timing_values(k)
        timing = _timing_keys.get(values)
        if timing is None:
            if len(_timing_keys) >= TIMING_KEYS_LIMIT:
                _timing_keys.clear()
            timing = _timing_keys[values] = TimingKey(values)
        k.timing = timing
    return k.timing


@dataclass(frozen=True, slots=True)
class PrefetchLoad:
    """Start copying experts' weights from HBM into on-chip SRAM, concurrently with the stream."""

    name: str
    layer: int
    loads: tuple[tuple[tuple[int, int], int, float, int], ...]   # (key, address, bytes, channel group)


@dataclass(frozen=True, slots=True)
class AwaitLoad:
    """The stream stops here until the prefetch of `key` has landed in SRAM."""

    key: tuple[int, int]


@dataclass(slots=True)     # not frozen: a frozen __init__ sets each field by a call
class ExpertBlock:
    """A routed expert's kernels in a pass, as the stream runs them. The Kernel objects are
    shared by every expert routed the same rows whose L2 walk came out the same: experts
    differ only in name, layer and weights' address, and timing sees the address only as its
    phase in the HBM channel interleave (a weight-reading kernel here has the phase of this
    expert's weights). Its kernels are named by the block: `prefix` + the kernel's name past
    its first `cut` characters (no prefix: the kernel's own name, the template expert's)."""

    kernels: tuple[Kernel, ...]
    layer: int
    cut: int
    prefix: str

    def name_of(self, k: Kernel) -> str:
        return self.prefix + k.name[self.cut:] if self.prefix else k.name


StreamItem = Kernel | PrefetchLoad | AwaitLoad | ExpertBlock


def named_kernels(items: list[StreamItem]) -> list[StreamItem]:
    """The items with each ExpertBlock's kernels as Kernels of their own, with the names and
    layer the stream records them by (for tools and tests that read a pass's kernels by name)."""
    out: list[StreamItem] = []
    for item in items:
        if type(item) is ExpertBlock:
            out += [relocated(k, item.name_of(k), item.layer, k.address) for k in item.kernels]
        else:
            out.append(item)
    return out
