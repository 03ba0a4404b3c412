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
  ModelRunner._capture_graph: the eager forward run `graph_capture_forwards` times), one graph
  set per IO pair;
- async batching: the next step's scheduling and the last step's sampling overlap the
  forward, so the step lasts the longer of the two; but the forward first waits for the copy
  of the host IO's whole static buffers to the device (ContinuousBatchingIOs._transfer_inputs
  copies the full attention mask, max_batch_tokens x (num_pages + max_batch_tokens), every
  step: `h2d_bytes` at `h2d_GBps`), so that copy stays on the critical path.
`cpu_speed` (a what-if) divides every host number (not the PCIe copy): the host and the chip change
separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from hwsim.config.files import search_dirs, validate
from hwsim.config.sourced import NonNegative, Positive
from hwsim.config.strict import Strict
from hwsim.config.yaml_lines import load_yaml_file
from hwsim.errors import ConfigError


class EngineHostProfile(Strict):
    name: str
    description: str = ""
    schedule_us: NonNegative = Field(description="the engine's Python scheduling of one step")
    schedule_us_per_seq: NonNegative = Field(description="and per sequence in the batch")
    launch_us: Positive = Field(description="eager: one kernel's launch, Python and ATen dispatch included")
    kernels_per_layer: Positive = Field(description="eager: kernels the engine's forward launches per decoder layer")
    kernels_fixed: NonNegative = Field(description="eager: kernels outside the decoder layers (embedding, norm, head)")
    plan_ms: NonNegative = Field(description="eager: building one attention plan for a shape not seen before")
    mask_us_per_seq: NonNegative = Field(description="building the step's attention mask, per sequence (paged eager/sdpa)")
    h2d_GBps: Positive = Field(description="async batching: host-to-device copy rate of the host IO's static buffers")
    graph_capture_forwards: NonNegative = Field(description="CUDA graphs: eager forwards run to capture a new padded shape")
    sample_us: NonNegative = Field(description="sampling and the sync that reads the step's tokens")
    graph_launch_us: Positive = Field(description="CUDA graphs: one graph replay's host call")
    cpu_speed: Positive = Field(description="this host runs the engine's Python this many times as fast as profiled")


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

    def graph_key(self, batch) -> tuple:
        """ModelRunner.maybe_pad_inputs and ContinuousBatchingIOs._get_graph_key (varlen path): query
        tokens to the q interval, KV read to the kv interval, the longest sequence to a power of 2
        (at least 1024)."""
        q_int, kv_int, max_tokens, pages = self.padding
        q = sum(n for n, _ in batch)
        kv = sum(c for _, c in batch)
        longest = max(n + c for n, c in batch)
        return (self.pair, min(-(-q // q_int) * q_int, max_tokens), min(-(-max(kv, 1) // kv_int) * kv_int, pages),
                max(1024, 1 << (longest - 1).bit_length()))

    def graph_forward(self, batch, device_s: float, speed: float) -> tuple[float, float]:
        """(host issue, forward) of a graphed step: a replay, or the capture of a new shape."""
        p = self.p
        issue = p.graph_launch_us.value * 1e-6 / speed
        key = self.graph_key(batch)
        if self.async_batching:
            self.pair = 1 - self.pair
        if key in self.graphs:
            return issue, issue + device_s
        self.graphs.add(key)
        eager = self.kernels() * p.launch_us.value * 1e-6 / speed
        runs = p.graph_capture_forwards.value
        return issue + runs * eager, issue + runs * max(eager, device_s)

    def kernels(self) -> float:
        p = self.p
        return p.kernels_per_layer.value * self.layers + p.kernels_fixed.value

    def step(self, batch, sb, kernels: int, device_s: float) -> HostStep:
        """The host's side of a step of `batch` (StepBatch `sb`) whose kernels take `device_s`."""
        p, speed = self.p, self.p.cpu_speed.value
        per_seq = p.schedule_us_per_seq.value + p.mask_us_per_seq.value
        schedule = (p.schedule_us.value + per_seq * len(batch)) * 1e-6 / speed
        sample = p.sample_us.value * 1e-6 / speed
        shape = (sb.query_tokens, sb.kv_tokens)        # the attention's shape for a paged batch
        new = False
        if self.cuda_graph:
            issue, forward = self.graph_forward(batch, device_s, speed)
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
        forward += h2d                                  # the compute stream waits on the copy
        busy = schedule + sample + issue + plan
        wall = max(schedule + sample, forward) if self.async_batching else schedule + forward + sample
        parts = {"schedule": schedule, "launch": issue, "plan": plan, "sample": sample, "h2d": h2d,
                 "device_wait": max(0.0, wall - busy - h2d)}
        return HostStep(busy, wall, parts, new)
