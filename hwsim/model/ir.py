"""The typed work items a trace kernel is classified into: plain, frozen data that says what a
kernel does (shapes, bytes), never how long it takes. hwsim/ktrace/lower.py turns each into the
engine's kernels, which the simulated device times."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gemm:
    m: int                      # rows (tokens)
    n: int
    k: int
    dtype: str = "bf16"
    batch: int = 1              # strided-batched count (bmm); 1 for a plain GEMM
    split_k: int = 1            # as traced (the lowering picks the target chip's own)
    weight: bool = True         # B is a weight streamed from HBM (not an activation: bmm)


@dataclass(frozen=True, slots=True)
class GroupedGemm:
    rows: tuple[int, ...]       # tokens of each group (expert)
    n: int
    k: int
    dtype: str = "bf16"


@dataclass(frozen=True, slots=True)
class Attention:
    phase: str                  # decode or prefill
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    q_len: int                  # query tokens per sequence
    kv_len: int                 # keys each query attends over
    backend: str = "flash"      # flash, cudnn, efficient, math, triton


@dataclass(frozen=True, slots=True)
class Memory:
    """A memory-streaming kernel: element-wise, reduction, copy, cat, index or scatter."""
    kind: str                   # elementwise, reduction, copy, cat, index, scatter
    read_bytes: float
    write_bytes: float
    vectorized: bool = True     # False: PyTorch's strided elementwise_kernel (offsets per element)
    per_batch: bool = False     # its bytes grow with the batch (a tensor dim is the batch or batch x top-k)
    per_context: bool = False   # and with the context (a dim is the context: a KV cache torch.cat)
    ctas: int = 0               # its grid's blocks and their threads, as traced (0: not known); a
    threads: int = 0            # row reduction's grid is set by its rows, not its bytes
    passes: float = 1           # dependent passes a block makes over its input (a radix select
                                # reads its row once per digit; a multi-block reduce its partials)
    reads_cache: bool = False   # reads the KV cache as the step before left it: from HBM at any size
    share_in_flight: bool = False   # a block loads its whole share at once (an Inductor program:
                                # XBLOCK elements, each thread's loads issued together)
    index_rows: int = 0         # an index_select / index_add_'s indices (0: not one of them): ATen
                                # loops over up to 16 of them in one block, a chain of loads a row


@dataclass(frozen=True, slots=True)
class Memset:
    nbytes: float


@dataclass(frozen=True, slots=True)
class Memcpy:
    nbytes: float
    direction: str              # DtoD, DtoH, HtoD


@dataclass(frozen=True, slots=True)
class Collective:
    """Bytes exchanged between GPUs: of a trace (on one GPU: as traced, or as hwsim's model times
    the call alone on workload.kernel_trace.group_size GPUs), or where a built-in
    schedule's layout communicates (hwsim/parallel/multi.py: timed on the cluster's links)."""
    kind: str                   # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv; an
                                # expert-parallel MoE layer's all-to-alls: dispatch and combine
    nbytes: float               # each GPU's buffer (dispatch, combine: their routing's byte matrix)
    group: int = 0              # ranks, where the trace says
    layer: int = -1             # the decoder layer it is part of, -1 outside the layer stack


@dataclass(frozen=True, slots=True)
class Absorbed:
    """A helper kernel of an op whose item already stands for it (a split-K reduce, a split-KV
    combine): the lowering of that item emits the target chip's own."""
    of: str


@dataclass(frozen=True, slots=True)
class Unclassified:
    """No rule applied: timed by the fallback (its traced duration, held), counted and reported."""
    reason: str


WorkItem = Gemm | GroupedGemm | Attention | Memory | Memset | Memcpy | Collective | Absorbed | Unclassified


@dataclass(frozen=True, slots=True)
class TraceKernel:
    """One device event of the trace with what it was classified as, and how."""
    name: str
    item: WorkItem
    how: str                    # op-shapes, name+grid, name+model, copy, fallback
    traced_s: float             # its duration in the trace (0 where wiped)
    stream: int
    op: str = ""                # the CPU op that launched it


@dataclass(frozen=True, slots=True)
class HostStep:
    """What the host does before issuing the next device events: CPU work, launch calls (a graph
    launch: one call for all its kernels), and whether it first waits for the device."""
    cpu_s: float
    launch_s: float
    launches: int
    sync: bool
    kernels: tuple[TraceKernel, ...]


def kind_of(item) -> str:
    """A work item's kind as reports name it: a Memory item's own kind (cat, copy, reduction...),
    else its class (Gemm, Attention...)."""
    return item.kind if isinstance(item, Memory) else type(item).__name__
