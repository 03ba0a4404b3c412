"""Write a SYNTHETIC Kineto trace of one decode step, schema-correct as torch.profiler writes it
(cpu_op / cuda_runtime / kernel events linked by External id and correlation, deviceProperties,
a ProfilerStep window), with realistic kernel names. For tests and examples only: its kernel
durations are made up (bytes at 3 TB/s plus 3 us), and it is never validation.

    python -m hwsim.ktrace.synthetic out.json.gz --model mixtral-8x7b --batch 8 --context 4096
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

from hwsim.config.load import load_model

BF16 = "c10::BFloat16"
HOST_GAP_US = 60.0        # Python + ATen dispatch between launches of an eager step: HF Llama-3.1-8B
                          # on the H100 device machine spent 112 ms of CPU gaps on 1,729 launch calls
                          # (65 us each, median 21: validation/data/hf_traces_h100/call_3, batch 1)
LAUNCH_US = 6.0


class _Writer:
    def __init__(self, gpu: str, graph: bool = False):
        self.graph = graph            # compiled: every kernel replayed by one cudaGraphLaunch, no op shapes
        self.pending: list[tuple] = []
        self.events: list[dict] = []
        self.t = 1000.0               # host clock (us)
        self.dev = 1000.0             # device clock (us)
        self.ext = 100
        self.corr = 5000
        self.gpu = gpu

    def op(self, name: str, dims: list, types: list | None, kernels: list[tuple], shapes: bool = True):
        """One CPU op launching `kernels` [(name, grid, block, bytes)] in order."""
        if self.graph:
            self.pending += [(_compiled_name(k[0], len(self.pending)), *k[1:]) for k in kernels]
            return
        self.ext += 1
        start = self.t
        self.t += HOST_GAP_US
        for kname, grid, block, nbytes in kernels:
            self.corr += 1
            args = {"External id": self.ext, "correlation": self.corr, "cbid": 211}
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                                "tid": 1, "ts": self.t, "dur": LAUNCH_US, "args": args})
            dur = nbytes / 3e6 + 3.0
            self.dev = max(self.dev, self.t + LAUNCH_US + 2.0)
            self.kernel(kname, grid, block, dur, registers=128, smem=49152)
            self.dev += dur
            self.t += LAUNCH_US + 1.0
        args = {"External id": self.ext}
        if shapes:
            args.update({"Input Dims": dims, "Input type": types or [BF16] * len(dims)})
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start,
                            "dur": self.t - start, "args": args})

    def kernel(self, name: str, grid: list, block: list, dur: float, *, registers: int, smem: int):
        """A kernel event of the current op and launch, starting on the device clock."""
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": self.dev,
                            "dur": round(dur, 3),
                            "args": {"External id": self.ext, "correlation": self.corr, "device": 0,
                                     "stream": 7, "grid": grid, "block": block,
                                     "registers per thread": registers, "shared memory": smem}})

    def graph_launch(self):
        """The pending kernels as one CUDA graph replay: one launch call, one correlation."""
        self.ext += 1
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
                            "ts": self.t, "dur": 12.0, "args": {"External id": self.ext, "correlation": self.corr}})
        self.dev = max(self.dev, self.t + 14.0)
        for kname, grid, block, nbytes in self.pending:
            dur = nbytes / 3e6 + 2.0
            self.kernel(kname, grid, block, dur, registers=64, smem=0)
            self.dev += dur + 1.0
        self.pending = []
        self.t += 13.0

    def sync_copy(self):
        """.item(): a D2H copy and the stream sync behind it."""
        self.ext += 1
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
                            "ts": self.t, "dur": 4.0, "args": {"External id": self.ext, "correlation": self.corr}})
        self.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0,
                            "tid": 7, "ts": max(self.dev, self.t + 4), "dur": 2.0,
                            "args": {"correlation": self.corr, "stream": 7, "bytes": 64, "device": 0}})
        self.dev = max(self.dev, self.t + 4) + 2.0
        self.t += 5.0
        wait = max(0.0, self.dev - self.t) + 3.0
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                            "ts": self.t, "dur": wait, "args": {"correlation": self.corr + 1}})
        self.corr += 1
        self.t += wait + HOST_GAP_US


def _compiled_name(name: str, index: int) -> str:
    """Inductor's name for an element-wise kernel it fused; library kernels keep theirs."""
    if "elementwise" in name:
        return f"triton_poi_fused_add_mul_{index}"
    if "CatArray" in name:
        return f"triton_poi_fused_index_copy_{index}"
    return name


def _gemm_kernel(m: int, n: int) -> tuple[str, list]:
    tm, tn = (64, 128) if m <= 64 else (128, 128)
    name = (f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{tm}x{tn}x64_warpgroupsize1x1x1_"
            f"execute_segment_k_off_kernel__5x_cublas")
    return name, [math.ceil(n / tn), math.ceil(m / tm), 1]


_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
_CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)"
        "::OpaqueType<2u>, unsigned int, 4, 64, 64>(...)")
_FLASH = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
          "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, "
          "false, false, false, true, true, false, false>(flash::Flash_fwd_params)")
_COMBINE = ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
            "false, cutlass::bfloat16_t>, 4, 1, true>(flash::Flash_fwd_params)")


@dataclass
class _Step:
    """One synthetic decode step being written: the writer, the model and the step's sizes."""
    w: "_Writer"
    m: object
    batch: int
    context: int
    shapes: bool

    @property
    def act(self) -> list:
        return [self.batch, 1, self.m.hidden]

    @property
    def nbytes(self) -> int:
        return self.batch * self.m.hidden * 2

    def elementwise(self, op: str, inputs: list, nbytes: float) -> None:
        grid = [max(1, math.ceil(self.batch * self.m.hidden / 512)), 1, 1]
        self.w.op(op, inputs, None, [(_ADD, grid, [128, 1, 1], nbytes)], self.shapes)

    def mm(self, k: int, n: int, weight_bytes: float) -> None:
        name, grid = _gemm_kernel(self.batch, n)
        self.w.op("aten::mm", [[self.batch, k], [k, n]], None, [(name, grid, [384, 1, 1], weight_bytes)],
                  self.shapes)

    def all_reduce(self) -> None:
        self.w.op("c10d::allreduce_", [self.act], None,
                  [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", [16, 1, 1],
                    [512, 1, 1], self.nbytes)], self.shapes)


def _attention(st: _Step) -> None:
    """QKV projection, DynamicCache's torch.cat of K and V, flash split-KV (+ combine), O projection."""
    a, h, B, L = st.m.attention, st.m.hidden, st.batch, st.context
    d = a.head_dim
    qkv = (a.heads + 2 * a.kv_heads) * d
    st.mm(h, qkv, qkv * h * 2)
    for _ in range(2):        # K and V: DynamicCache.update's torch.cat copies the whole cache
        cache = [B, a.kv_heads, L, d]
        st.w.op("aten::cat", [[cache, [B, a.kv_heads, 1, d]], []], ["GenericList[c10::BFloat16]", "long int"],
                [(_CAT, [4 * 132, 1, 1], [512, 1, 1], 2 * B * a.kv_heads * (L + 1) * d * 2)], st.shapes)
    splits = max(1, min(128, 264 // (B * a.kv_heads)))
    st.w.op("aten::_scaled_dot_product_flash_attention",
            [[B, a.heads, 1, d], [B, a.kv_heads, L + 1, d], [B, a.kv_heads, L + 1, d], [], [], []], None,
            [(_FLASH, [1, B * a.kv_heads, splits], [128, 1, 1], 2 * B * a.kv_heads * L * d * 2)]
            + ([(_COMBINE, [B * a.heads, 1, 1], [128, 1, 1], B * a.heads * splits * d * 4)] if splits > 1 else []),
            st.shapes)
    name, grid = _gemm_kernel(B, h)
    st.w.op("aten::mm", [[B, a.heads * d], [a.heads * d, h]], None, [(name, grid, [384, 1, 1], h * h * 2)],
            st.shapes)


def _dense_mlp(st: _Step) -> None:
    """gate+up, SiLU x up, down."""
    h, f, B = st.m.hidden, st.m.ffn, st.batch
    st.mm(h, 2 * f, 2 * f * h * 2)
    st.elementwise("aten::mul", [[B, 1, f], [B, 1, f]], 3 * B * f * 2)
    st.mm(f, h, f * h * 2)


def _moe(st: _Step) -> None:
    """Router GEMM, top-k, grouped_mm gate+up and down, index_add_ of the experts' rows."""
    h, B = st.m.hidden, st.batch
    e, k, f = st.m.moe.experts, st.m.moe.top_k, st.m.moe.expert_ffn
    st.mm(h, e, h * e * 2)
    st.w.op("aten::topk", [[B, e], [], [], [], []], None,
            [("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(...)", [B, 1, 1],
              [128, 1, 1], B * e * 4)], st.shapes)
    rows = B * k
    for kname, kk, nn in (("gate_up", h, 2 * f), ("down", f, h)):
        st.w.op("aten::_grouped_mm", [[rows, kk], [e, kk, nn], [e]], [BF16, BF16, "int"],
                [(f"void cutlass::device_kernel<at::cuda::detail::GroupedGemmKernel_{kname}_sm90_128x128x64>"
                  f"(...)", [132, 1, 1], [384, 1, 1], min(e, rows) * kk * nn * 2)], st.shapes)
    st.w.op("aten::index_add_", [[B, h], [], [rows], [rows, h], []], [BF16, "", "long int", BF16, ""],
            [("void at::native::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
              [132 * 4, 1, 1], [128, 1, 1], rows * h * 2)], st.shapes)


def _lm_head(st: _Step) -> None:
    B, vocab = st.batch, st.m.vocab
    st.mm(st.m.hidden, vocab, st.m.hidden * vocab * 2)
    st.w.op("aten::argmax", [[B, vocab], [], []], None,
            [("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
              "at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >(...)", [B, 1, 1], [512, 1, 1],
              B * vocab * 2)], st.shapes)


def decode_step(model_name: str, batch: int, context: int, *, layers: int | None = None,
                shapes: bool = True, unknown: int = 0, gpu: str = "NVIDIA H200", compiled: bool = False,
                all_reduces: bool = False) -> dict:
    """The trace of one HF-transformers-like eager decode step (DynamicCache: torch.cat of the
    cache every step; SDPA flash split-KV; grouped_mm experts); `compiled`: the same kernels
    replayed from one CUDA graph, element-wise ones named as Inductor's Triton kernels, and no
    op shapes (as torch.compile(mode="reduce-overhead") records); `all_reduces`: a tensor-parallel
    rank's NCCL all-reduce of the hidden state after the attention and after the FFN of each
    layer (the shapes stay the whole model's: a synthetic trace tests the mechanism)."""
    m = load_model(model_name)
    st = _Step(_Writer(gpu, graph=compiled), m, batch, context, shapes)
    w = st.w
    start = w.t
    for layer in range(layers or m.layers):
        st.elementwise("aten::mul", [st.act, st.act], 2 * st.nbytes)
        _attention(st)
        if all_reduces:
            st.all_reduce()
        st.elementwise("aten::add", [st.act, st.act, []], 3 * st.nbytes)
        (_moe if m.moe else _dense_mlp)(st)
        if all_reduces:
            st.all_reduce()
        for i in range(unknown if layer == 0 else 0):
            w.op("my_extension::custom_op", [], None, [(f"my_custom_kernel_{i}", [64, 1, 1], [256, 1, 1], 1e6)],
                 False)
    _lm_head(st)
    if compiled:
        w.graph_launch()
    w.sync_copy()
    w.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,
                     "ts": start - 1.0, "dur": w.t - start + 2.0, "args": {}})
    return {"schemaVersion": 1, "hwsim_synthetic": "SYNTHETIC trace written by hwsim.ktrace.synthetic: "
            "made-up durations, for tests only",
            "deviceProperties": [{"id": 0, "name": gpu, "totalGlobalMem": 150000000000,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "traceEvents": w.events}


def write(path: Path, trace: dict) -> None:
    data = json.dumps(trace, separators=(",", ":")).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    Path(path).write_bytes(data)



def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--model", default="mixtral-8x7b")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--no-shapes", action="store_true")
    p.add_argument("--gpu", default="NVIDIA H200")
    p.add_argument("--compiled", action="store_true", help="one CUDA graph of Triton and library kernels")
    a = p.parse_args()
    write(a.out, decode_step(a.model, a.batch, a.context, layers=a.layers, shapes=not a.no_shapes, gpu=a.gpu,
                             compiled=a.compiled))


if __name__ == "__main__":
    main()
