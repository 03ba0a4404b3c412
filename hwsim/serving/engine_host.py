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
  plus the replay call;
- async batching: the next step's scheduling and the last step's sampling overlap the
  forward, so the step lasts the longer of the two.
`cpu_speed` (a what-if) divides every host number: the host and the chip change separately.
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

    def kernels(self) -> float:
        p = self.p
        return p.kernels_per_layer.value * self.layers + p.kernels_fixed.value

    def step(self, batch, sb, kernels: int, device_s: float) -> HostStep:
        """The host's side of a step of `batch` (StepBatch `sb`) whose kernels take `device_s`."""
        p, speed = self.p, self.p.cpu_speed.value
        schedule = (p.schedule_us.value + p.schedule_us_per_seq.value * len(batch)) * 1e-6 / speed
        sample = p.sample_us.value * 1e-6 / speed
        shape = (sb.query_tokens, sb.kv_tokens)        # the attention's shape for a paged batch
        new = False
        if self.cuda_graph:
            issue = p.graph_launch_us.value * 1e-6 / speed
            plan = 0.0
            forward = issue + device_s
        else:
            issue = self.kernels() * p.launch_us.value * 1e-6 / speed
            new = shape not in self.planned
            if new:
                self.planned.add(shape)
                self.plans_built += 1
            plan = p.plan_ms.value * 1e-3 / speed if new else 0.0
            forward = max(issue + plan, device_s)
        busy = schedule + sample + issue + plan
        wall = max(schedule + sample, forward) if self.async_batching else schedule + forward + sample
        parts = {"schedule": schedule, "launch": issue, "plan": plan, "sample": sample,
                 "device_wait": max(0.0, wall - busy)}
        return HostStep(busy, wall, parts, new)
