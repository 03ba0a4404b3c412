"""Elaboration: a validated Scenario becomes a wired Cluster of devices (several, from a
topology profile, under `parallel:`; one GPU is the cluster of one), a compute stream per
device, the Schedule that feeds them, and the GPUs that run a pass on them (`Built.gpus`: one
GPU's trivial layout, hwsim/parallel/one_gpu.py:OneGpu, or several's,
hwsim/parallel/multi.py:ParallelRun);
one GPU's memory is checked here (exit 2 when it does not fit, unless overcommit is allowed).

build() constructs only: the profile and model come resolved (hwsim/pipeline.py loads them once)
and the scenario comes checked (the pipeline's check stage); what only the construction can find
(a topology's ports, one GPU's memory) is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.config.inert import inert_keys
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.hw.chip import ChipSpec
from hwsim.engine.stream import Stream
from hwsim.engine.timer import KernelTimer
from hwsim.engine.cluster import Cluster
from hwsim.hw.device import Device
from hwsim.hw.power import clock_choice
from hwsim.hw.units import Sram
from hwsim.model import dequant_kernels, weight_format
from hwsim.model.schedule import Schedule, WeightLayout
from hwsim.model.shapes import ModelShape
from hwsim.rng import RandomStreams
from hwsim.model.expert_sram import cache_policy
from hwsim.model.moe_dispatch import ExpertDispatch
from hwsim.model.onchip import OnChipState
from hwsim.workload import kv_format
from hwsim.workload.router import Router
from hwsim.errors import ConfigError
from hwsim.parallel import layout as lay, memory
from hwsim.parallel.comm_kernels import KERNELS
from hwsim.parallel.memory import GpuMemory
from hwsim.parallel.multi import ParallelRun
from hwsim.parallel.one_gpu import OneGpu
from hwsim.parallel.topology import resolve


@dataclass
class Built:
    scenario: Scenario
    profile: HardwareProfile
    model: ModelShape
    chip: ChipSpec
    cluster: Cluster            # its devices: one, or several (a topology's)
    stream: Stream              # the compute stream of the first device
    schedule: Schedule
    onchip: OnChipState         # what is on chip between steps (L2 activations, expert SRAM)
    router: Router | None
    warnings: list[str]
    gpus: OneGpu | ParallelRun  # the layout over the devices, and how a pass runs on them
    families: dequant_kernels.Families    # the profile's dequant kernel families, made once (issue 31)
    draft: ModelShape | None = None       # a speculative draft's model, read when loaded (pipeline.py)

    @property
    def memory(self) -> GpuMemory:
        """What one GPU holds (the largest share)."""
        return self.gpus.memory

    @property
    def env(self):
        return self.cluster.env

    @property
    def device(self) -> Device:
        return self.stream.device

    def at_sm_clock(self, clock_hz: float) -> "Built":
        """This system, or (another clock) the same scenario, profile and model built again with
        the SMs at `clock_hz`: what a power governor probes (hwsim/hw/power.py)."""
        if clock_hz == self.chip.clock_hz:
            return self
        slower = build(self.scenario, self.profile, self.model, draft=self.draft, sm_clock_hz=clock_hz,
                       weights_layout=self.schedule.layout)
        book = self.stream.replay.book if self.stream.replay else None
        if book is not None and clock_hz < self.chip.clock_hz:
            for stream in slower.gpus.streams:     # kernels timed here are re-timed there (issue 33)
                stream.timer.faster = book
        return slower


def build(cfg: Scenario, profile: HardwareProfile, model: ModelShape, draft: ModelShape | None = None,
          sm_clock_hz: float | None = None, weights_layout: WeightLayout | None = None) -> Built:
    """The simulated system of a scenario; `sm_clock_hz` runs its SMs below their maximum clock
    (the clock a power limit settles them at: hwsim/hw/power.py), as a number in
    `runtime.sm_clock` (a locked clock, MHz) does. `weights_layout`: the weights' layout of
    this scenario built before (at another clock), shared rather than laid out again. The
    scenario is checked before (hwsim/pipeline.py check); `profile` has its overrides applied."""
    chip = _chip_at_clock(cfg, profile, sm_clock_hz)
    w, p = cfg.workload, cfg.parallel
    layout = lay.from_config(p, model, w.batch_size)      # one GPU: the trivial layout
    topology, chip = _topology(cfg, profile.name, chip, layout)
    several = layout.gpus > 1
    max_context = w.context_tokens + w.decode_steps + max(w.prompt_tokens, 1)
    families = dequant_kernels.from_profile(profile)     # who dequantizes, at what cost (issue 31)
    schedule = Schedule(lay.shard_model(model, layout), chip,
                        kv=kv_format.from_config(cfg.kv_cache, dequant_kernels.kv_kernel(cfg.kv_cache, families)),
                        dequant=cfg.kv_cache.dequant,
                        moe_schedule=cfg.runtime.moe_schedule, attention_kernel=cfg.runtime.attention_kernel,
                        max_batch=max(layout.tokens_per_group(w.batch_size)),
                        max_context=max_context, weights=weight_format.plan(cfg.weights, model.weights, families),
                        layout=weights_layout, appends_by_cat=generate(w))
    unmeasured = dequant_kernels.unmeasured_notes(cfg, schedule, families)
    sram_bytes, router_on_chip = _expert_sram(cfg, model, chip, schedule)
    cluster = Cluster(chip, layout.gpus, layout.gpus_per_node, sram_bytes)
    # one timer per stream, on its device's memory levels; every device is this chip: a kernel
    # timed on one is timed for all (the shared book: replay.py)
    book: dict = {}
    streams = [Stream(cluster.env, d, cluster.arbiter, KernelTimer(chip, cfg.runtime.fidelity, device=d),
                      launch=cfg.runtime.launch, reuse=cfg.runtime.reuse, book=book) for d in cluster.devices]
    if w.kernel_trace is not None:        # an imported trace is the schedule (docs/traces.md)
        from hwsim.ktrace.from_scenario import trace_schedule
        schedule = trace_schedule(cfg, schedule, streams, chip)
    rng = RandomStreams(cfg.seed)
    router = experts = None
    onchips = [schedule.cold_state() for _ in streams]
    if model.moe:
        moe_layers = [layer for layer in range(model.layers) if model.is_moe_layer(layer)]
        router = Router(cfg.moe.routing, model.moe, moe_layers, rng.get("routing"))
        if several:        # which GPU's experts each choice goes to (one GPU holds them all)
            experts = lay.ExpertMap(p.expert_placement, model.moe.experts, p.ep, p.redundant_experts,
                                    {layer: router.popularity(layer) for layer in moe_layers})
        onchips = [_onchip_with_sram(cfg, model, chip, schedule, router, rng, s.device.sram, router_on_chip,
                                     experts.holder(g // layout.expert_tp) if experts else None)
                   for g, s in enumerate(streams)]
    mem = _memory(cfg, model, schedule, chip, experts)
    warnings = _warnings(cfg, model, schedule, unmeasured, sram_bytes, chip, mem,
                         f"{p.gpus} x {profile.name}" if several else profile.name)
    gpus = _gpus(p, layout, topology, streams, onchips, experts, mem)
    return Built(cfg, profile, model, chip, cluster, streams[0], schedule, onchips[0], router, warnings, gpus,
                 families, draft)


def generate(w) -> bool:
    """Fixed-batch decode under transformers' generate() (workload.engine.kind hf-generate)."""
    return not w.serving and w.engine is not None


def _chip_at_clock(cfg: Scenario, profile: HardwareProfile, sm_clock_hz: float | None) -> ChipSpec:
    """The profile's chip, its SMs at `sm_clock_hz` or else at the scenario's locked clock (MHz)."""
    chip = ChipSpec.from_profile(profile)
    locked = clock_choice(cfg.runtime.sm_clock).locked_mhz
    if sm_clock_hz is None and locked is not None:
        sm_clock_hz = locked * 1e6
    return chip.at_sm_clock(sm_clock_hz) if sm_clock_hz else chip


def _warnings(cfg: Scenario, model: ModelShape, schedule, unmeasured: list[str], sram_bytes: float,
              chip: ChipSpec, mem, where: str) -> list[str]:
    warnings = inert_keys(cfg, model)       # keys set where they cannot act: said, not ignored
    warnings += getattr(schedule, "warnings", [])           # an imported trace's
    warnings += unmeasured
    if sram_bytes and sram_bytes <= _persisting_bytes(cfg, chip):
        warnings.append(L2_SHARE_NOTE)
    overcommit = cfg.parallel.allow_overcommit
    if note := memory.check(mem, where, overcommit):
        warnings.append(note)
    return warnings


def _gpus(p, layout: lay.Layout, topology: str | None, streams: list[Stream], onchips: list[OnChipState],
          experts: lay.ExpertMap | None, mem: GpuMemory) -> OneGpu | ParallelRun:
    """How a pass runs on the devices: one GPU's kernels on its stream, or several GPUs' cut at
    their collectives (hwsim/parallel/multi.py)."""
    if layout.gpus == 1:
        return OneGpu(layout, streams, onchips, mem)
    for s in streams:      # one micro-batch: nothing runs beside a GPU's segment (multi.py)
        s.private = p.micro_batches == 1
    return ParallelRun(layout, topology, streams, onchips, experts, mem, p.micro_batches,
                       KERNELS[p.dispatch_kernel])


def _topology(cfg: Scenario, chip_name: str, chip: ChipSpec, layout: lay.Layout) -> tuple[str | None, ChipSpec]:
    """The system the GPUs are built into: its ports replace the chip profile's (one GPU: none,
    the chip's own). What several GPUs are not simulated for is refused here."""
    p, w = cfg.parallel, cfg.workload
    if layout.gpus == 1:
        return None, chip
    topo = resolve(p.topology, chip_name, f"parallel.gpus = {p.gpus}")
    name = p.topology or topo.name           # as named (a path stays a path)
    per_node = p.gpus // p.nodes
    if per_node > topo.gpus_per_node.value:
        raise ConfigError(f"{per_node} GPUs per node (gpus / nodes) but a {name} node has "
                          f"{topo.gpus_per_node.value}; set parallel.nodes", key="parallel.nodes")
    if p.nodes > 1 and topo.interconnect.scaleout_bandwidth_gbps is None:
        raise ConfigError(f"{p.nodes} nodes, but topology {name} has no NIC between them "
                          f"(interconnect.scaleout_bandwidth_gbps)", key="parallel.topology")
    if w.serving or w.prompt_tokens and layout.all_to_all:
        raise ConfigError("several GPUs are simulated for fixed-batch decode (and prefill under tensor "
                          "parallelism) only; not with workload.arrivals, nor prompt_tokens under "
                          "data-parallel attention", key="parallel.gpus")
    if w.speculative is not None:
        raise ConfigError("workload.speculative is simulated on one GPU", key="workload.speculative")
    if w.kernel_trace is not None:
        raise ConfigError("an imported kernel trace runs on one GPU (workload.kernel_trace.group_size "
                          "re-times its collectives on its group)", key="workload.kernel_trace")
    return name, topo.apply(chip)


def _memory(cfg: Scenario, model: ModelShape, schedule: Schedule, chip: ChipSpec,
            experts: lay.ExpertMap | None) -> GpuMemory:
    """One GPU's memory from its schedule's own regions (its shard's weights, its sequences'
    KV cache at the run's longest context; the allocator's alignment padding not counted),
    less the experts it does not hold, plus its activations (hwsim/parallel/memory.py)."""
    weights = schedule.weight_bytes_total()
    kv = schedule.kv_bytes_total()
    if experts is not None:
        moe_layers = sum(model.is_moe_layer(layer) for layer in range(model.layers))
        weights -= (model.moe.experts - experts.slots) * schedule.expert_bytes() * moe_layers
    p, w = cfg.parallel, cfg.workload
    act = memory.per_gpu(model, gpus=p.gpus, tp=p.tp, ep=p.ep, dp_attention=p.dp_attention,
                         batch=w.batch_size, context=1, capacity_bytes=0).activations
    return GpuMemory(weights, kv, act, chip.hbm_capacity_bytes)


# said by every run that keeps experts (or the router) in the L2's set-aside share
L2_SHARE_NOTE = ("experts kept in the L2's set-aside share are read at the L2's bandwidth for as long as "
                 "the policy keeps them: an upper bound on a GPU whose L2 is a cache. Measured on an H200, "
                 "a persisting access-policy window did not hold 25 MB of expert weights past 32 MB or more "
                 "of other traffic (validation/data/l2_persist_h200)")


def _persisting_bytes(cfg: Scenario, chip: ChipSpec) -> float:
    """The share of the L2 an application can set aside for persisting lines (CUDA's limit)."""
    return chip.l2_bytes * cfg.moe.cache.persist_fraction


def _expert_sram(cfg: Scenario, model: ModelShape, chip: ChipSpec, schedule: Schedule) -> tuple[float, bool]:
    """(The on-chip SRAM set aside for experts and the router, in bytes, each device's `sram`
    unit: 0 where the scenario keeps nothing there; whether the router's weights are pinned
    in it.) An explicit size, or the settable-aside share of the L2; the routing table takes
    its share first when it is pinned and fits."""
    if not model.moe:
        return 0.0, False
    c = cfg.moe.cache
    set_aside = c.capacity_mib * 2**20 if c.capacity_mib else _persisting_bytes(cfg, chip)
    router_on_chip = c.pin_router and schedule.router_bytes_total() <= set_aside
    uses_sram = cache_policy(c.policy).keeps or cfg.moe.prefetch.enabled or router_on_chip
    return (set_aside if uses_sram else 0.0), router_on_chip


def _onchip_with_sram(cfg: Scenario, model: ModelShape, chip: ChipSpec, schedule: Schedule,
                      router: Router, streams: RandomStreams, sram: Sram | None,
                      router_on_chip: bool, holds=None) -> OnChipState:
    """What is on chip of one device: its expert SRAM (`sram`, the device's unit; none: the
    scenario keeps none), less the router's weights where they are pinned there, holds the
    experts. SRAM set aside for experts and the router is no longer L2 for activations (up to
    the L2's persisting share: a larger capacity_mib is a what-if SRAM beside the L2). Under
    expert parallelism it pins the experts its GPU holds (`holds`, ExpertMap.holder)."""
    capacity = sram.capacity if sram else 0.0
    if router_on_chip:
        capacity -= schedule.router_bytes_total()
    dispatch = ExpertDispatch(cfg.moe, model, schedule.expert_bytes(), capacity, chip.hbm_stacks,
                              schedule.expert_address, streams.get("prefetch"))
    if dispatch.cache.policy.pins_hot:
        dispatch.pin_hot(router.popularity, holds)
    persisting = _persisting_bytes(cfg, chip)
    l2_for_activations = chip.l2_bytes - (min(sram.capacity, persisting) if sram else 0.0)
    return OnChipState(schedule.cold_state(l2_for_activations).l2, dispatch, router_on_chip)
