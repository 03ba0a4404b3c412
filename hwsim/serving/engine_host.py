"""The serving engine's host as a resource: its per-step work and how much of it the device waits on.

An engine step on the host is: Python scheduling (build the batch, the paged cache's tables),
the forward's launches (eager: one launch call per kernel, with its Python and ATen dispatch;
a CUDA graph: one replay), plan building for a new shape (cuDNN's SDPA builds an execution plan
for every attention shape it has not seen: a paged batch's shape is nearly always new), and
sampling with the sync that reads the tokens back. Profiles: hardware_profiles/engine_hosts/,
every number sourced.

How it meets the device (the engine decides, as HF's ContinuousBatchingManager does):
- eager: the host issues kernels ahead of the device, so the forward lasts the longer of the
  host's issuing (launches and plans) and the device's kernels; scheduling and sampling are
  serial with it (the engine syncs on the sampled tokens);
- CUDA graphs: the forward is one replay (plans were built at capture), the device's time
  plus the replay call; a padded shape with no graph yet is captured first (the library's
  ModelRunner._capture_graph: the eager forward issued `graph_capture_forwards` times, run on
  the device once, the rest recorded), one graph set per IO pair; a capture synchronizes, so
  nothing overlaps it, and with async batching the last step's tokens wait for it (async_stamps);
- async batching: the next step's scheduling and the last step's sampling overlap the
  forward, and so does the copy of the next step's host IO, whole static buffers, to the device
  (ContinuousBatchingIOs._transfer_inputs copies the full attention mask, max_batch_tokens x
  (num_pages + max_batch_tokens), every step: `h2d_bytes` at `h2d_GBps`, on its own stream), so
  the step lasts the longest of the three; a capture overlaps nothing.
`cpu_speed` (a what-if) divides every host number (not the PCIe copy): the host and the chip change
separately. The device side the engine adds: paged|sdpa attends the whole packed (graphs: padded)
batch in one SDPA, whose kernels replace the pass's per-sequence attention (hwsim/model/paged_sdpa.py,
on the step clock: hwsim/serving/packed_attention.py); `packed_sdpa_efficiency`, `_graphs`: the
SDPA backend's share of the tensor peak, the SDPA kernel's own (sdpa_share).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from hwsim.config.files import search_dirs, validate
from hwsim.config.sourced import Fraction, NonNegative, Positive
from hwsim.config.strict import Strict
from hwsim.config.yaml_lines import load_yaml_file
from hwsim.errors import ConfigError
from hwsim.serving.packed_attention import pad_to_interval


class EngineHostProfile(Strict):
    name: str
    description: str = ""
    schedule_us: NonNegative = Field(description="the engine's Python scheduling of one step")
    schedule_us_per_seq: NonNegative = Field(description="and per sequence in the batch")
    launch_us: Positive = Field(description="eager: one kernel's launch, Python and ATen dispatch included")
    kernels_per_layer: Positive = Field(description="eager: kernels the engine's forward launches per decoder layer")
    kernels_fixed: NonNegative = Field(description="eager: kernels outside the decoder layers (embedding, norm, head)")
    ops_per_layer_reference: Positive | None = Field(None, description="ATen ops the engine dispatches per decoder "
                                                     "layer of the model kernels_per_layer was measured on "
                                                     "(hwsim/serving/engines/hf_ops.py): another model's layer "
                                                     "scales kernels_per_layer by its own count over this")
    ops_per_layer_model: str | None = Field(None, description="the model (models/) whose layer "
                                            "ops_per_layer_reference counts: a served model of the same layer "
                                            "structure takes that count without running the engine to count it")
    plan_ms: NonNegative = Field(description="eager: building one attention plan for a shape not seen before")
    mask_us_per_seq: NonNegative = Field(description="building the step's attention mask, per sequence (paged eager/sdpa)")
    h2d_GBps: Positive = Field(description="async batching: host-to-device copy rate of the host IO's static buffers")
    graph_capture_forwards: NonNegative = Field(description="CUDA graphs: eager forwards run to capture a new padded shape")
    sample_us: NonNegative = Field(description="sampling and the sync that reads the step's tokens")
    graph_launch_us: Positive = Field(description="CUDA graphs: one graph replay's host call")
    cpu_speed: Positive = Field(description="this host runs the engine's Python this many times as fast as profiled")
    generate_issue_us: Positive | None = Field(None, description="eager generate(): one kernel's Python, ATen "
                                               "dispatch and launch call, the step's plan left out "
                                               "(hwsim/serving/engines/generate_ops.py)")
    generate_plan_ms: NonNegative | None = Field(None, description="eager generate(): cuDNN SDPA's plan for an "
                                                 "attention shape not seen before (a growing cache: every step)")
    packed_sdpa_efficiency: Fraction | None = Field(None, description="eager (cuDNN SDPA): the packed batch's "
                                                    "masked SDPA, share of the chip's bf16 tensor peak")
    packed_sdpa_efficiency_graphs: Fraction | None = Field(None, description="CUDA graphs (SDPA without cuDNN): "
                                                           "the same, for PyTorch's memory-efficient kernel")
    packed_sdpa_lone_graphs: Positive | None = Field(None, description="CUDA graphs: a block of PyTorch's "
                                                     "memory-efficient SDPA alone on its SM takes this many times "
                                                     "its MMAs' time (its loads wait between them); None: the "
                                                     "graphs SDPA costed as cuDNN's (hwsim/model/paged_sdpa.py)")


def load_engine_host(name: str, key: str = "workload.engine.host") -> EngineHostProfile:
    for d in search_dirs("hardware_profiles"):
        path = d / "engine_hosts" / f"{name}.yaml"
        if path.is_file():
            return validate(EngineHostProfile, load_yaml_file(path))
    raise ConfigError(f"unknown engine host profile '{name}' (hardware_profiles/engine_hosts/)", key=key)


@dataclass(frozen=True, slots=True)
class HostStep:
    busy_s: float                   # the host's work for the step
    wall_s: float                   # the step's wall time, device included
    parts_s: dict = field(default_factory=dict)
    plan_built: bool = False


class EngineHost:
    """One engine's host: its profile, the model's layers, the engine's launch mode, and the
    attention shapes it has planned (a run's own plan cache)."""

    def __init__(self, profile: EngineHostProfile, layers: int, cuda_graph: bool = False,
                 async_batching: bool = False):
        self.p = profile
        self.layers = layers
        self.cuda_graph = cuda_graph
        self.async_batching = async_batching
        self.planned: set = set()
        self.plans_built = 0
        self.h2d_bytes = 0.0            # async batching: bytes copied to the device per step (the engine's)
        self.padding = (64, 16384, 1 << 62, 1 << 62)   # q, kv intervals; max batch tokens, pages (the engine's)
        self.graphs: set = set()        # captured graph keys, per IO pair
        self.pair = 0                   # async batching alternates two IO pairs
        self.layer_scale = 1.0          # the served model's ops per layer over the profile's model's (run.py)

    def graph_key(self, batch) -> tuple:
        """ModelRunner.maybe_pad_inputs and ContinuousBatchingIOs._get_graph_key (varlen path): query
        tokens to the q interval, KV read to the kv interval, the longest sequence to a power of 2
        (at least 1024)."""
        q_int, kv_int, max_tokens, pages = self.padding
        q = sum(n for n, _ in batch)
        kv = sum(c for _, c in batch)
        longest = max(n + c for n, c in batch)
        return (self.pair, pad_to_interval(q, q_int, max_tokens), pad_to_interval(kv, kv_int, pages),
                max(1024, 1 << (longest - 1).bit_length()))

    def graph_forward(self, batch, device_s: float, speed: float) -> tuple[float, float, bool]:
        """(host issue, forward, captured) of a graphed step: a replay, or the capture of a new shape.
        A capture (ModelRunner._capture_graph) runs the forward eagerly once, on the device, then
        issues it again under torch.cuda.graph, which records without running and synchronizes
        the device first: `graph_capture_forwards` eager issues, one device pass."""
        p = self.p
        issue = p.graph_launch_us.value * 1e-6 / speed
        key = self.graph_key(batch)
        if self.async_batching:
            self.pair = 1 - self.pair
        if key in self.graphs:
            return issue, issue + device_s, False
        self.graphs.add(key)
        eager = self.kernels() * p.launch_us.value * 1e-6 / speed
        runs = p.graph_capture_forwards.value
        return runs * eager, max(eager, device_s) + max(0.0, runs - 1) * eager, True

    def sdpa_share(self) -> float | None:
        """The packed SDPA's share of the tensor peak in the engine's launch mode (None: not profiled)."""
        eff = self.p.packed_sdpa_efficiency_graphs if self.cuda_graph else self.p.packed_sdpa_efficiency
        return None if eff is None else eff.value

    def sdpa_lone(self) -> float:
        """The packed SDPA's lone-block factor: > 0 runs PyTorch's memory-efficient kernel (CUDA
        graphs, where the profile says it), 0 cuDNN's."""
        lone = self.p.packed_sdpa_lone_graphs if self.cuda_graph else None
        return 0.0 if lone is None else lone.value

    def kernels(self) -> float:
        p = self.p
        return p.kernels_per_layer.value * self.layer_scale * self.layers + p.kernels_fixed.value

    def step(self, batch, sb, kernels: int, device_s: float) -> HostStep:
        """The host's side of a step of `batch` (StepBatch `sb`) whose kernels take `device_s`."""
        p, speed = self.p, self.p.cpu_speed.value
        per_seq = p.schedule_us_per_seq.value + p.mask_us_per_seq.value
        schedule = (p.schedule_us.value + per_seq * len(batch)) * 1e-6 / speed
        sample = p.sample_us.value * 1e-6 / speed
        shape = (sb.query_tokens, sb.kv_tokens)        # the attention's shape for a paged batch
        new = captured = False
        if self.cuda_graph:
            issue, forward, captured = self.graph_forward(batch, device_s, speed)
            plan = 0.0
        else:
            issue = self.kernels() * p.launch_us.value * 1e-6 / speed
            new = shape not in self.planned
            if new:
                self.planned.add(shape)
                self.plans_built += 1
            plan = p.plan_ms.value * 1e-3 / speed if new else 0.0
            forward = max(issue + plan, device_s)
        h2d = self.h2d_bytes / (p.h2d_GBps.value * 1e9) if self.async_batching else 0.0
        busy = schedule + sample + issue + plan
        # a capture synchronizes the device (torch.cuda.graph's entry): nothing overlaps it
        overlap = self.async_batching and not captured
        # the next step's copy runs on the H2D stream while this step's forward runs on the compute
        # stream: a step lasts the longer of the two (H100, s22: Llama's graphs steps sit at the copy,
        # 111 ms, until the forward outgrows it at 49,152 padded keys, 117.8; Qwen3's light steps are
        # its replay's 82.5 ms of kernels, 81 ms, not those plus its 34 ms copy)
        wall = max(schedule + sample, forward, h2d) if overlap else schedule + forward + h2d + sample
        capture = issue if captured else 0.0
        parts = {"schedule": schedule, "launch": issue, "plan": plan, "sample": sample, "h2d": h2d,
                 "capture": capture, "device_wait": max(0.0, wall - busy - h2d)}
        return HostStep(busy, wall, parts, new)


def async_stamps(steps) -> dict[float, float]:
    """Async batching stamps a step's tokens late when the next step captures a graph: the loop
    (continuous_api._generation_loop_body) prepares and issues step N+1 before it updates step N,
    and a capture is synchronous (torch.cuda.graph's entry waits on the device, then the forward
    is recorded), so step N's tokens are stamped when step N+1's capture returns. `steps`: the
    run's (start, StepTime, batch); returns {stamp at step N's end: stamp at step N+1's end} for
    the steps followed back to back by a capture."""
    moved = {}
    for (start, t, _), (nxt, t2, _) in zip(steps, steps[1:]):
        end = start + t.total_s
        if t2.breakdown_s.get("host_capture", 0.0) > 0.0 and nxt == end:
            moved[end] = nxt + t2.total_s
    return moved
