"""Elaboration: a validated Scenario becomes a wired Cluster of devices, the compute stream of
its first device, and the Schedule that feeds it.

Everything that can be wrong with a scenario fails here, before simulated time is spent.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.config.load import apply_hardware_overrides, load_model, load_profile
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.hw.chip import ChipSpec
from hwsim.engine.stream import Stream
from hwsim.engine.timer import KernelTimer
from hwsim.hw.cluster import Cluster
from hwsim.hw.device import Device
from hwsim.model import weight_format
from hwsim.model.schedule import Schedule
from hwsim.model.shapes import ModelShape
from hwsim.rng import RandomStreams
from hwsim.model.moe_dispatch import ExpertDispatch
from hwsim.model.onchip import OnChipState
from hwsim.workload import kv_format
from hwsim.workload.router import Router


@dataclass
class Built:
    scenario: Scenario
    profile: HardwareProfile
    model: ModelShape
    chip: ChipSpec
    cluster: Cluster
    stream: Stream              # the compute stream of the first device
    schedule: Schedule
    onchip: OnChipState         # what is on chip between steps (L2 activations, expert SRAM)
    router: Router | None
    warnings: list[str]

    @property
    def env(self):
        return self.cluster.env

    @property
    def device(self) -> Device:
        return self.stream.device


def build(cfg: Scenario, profile: HardwareProfile | None = None, model: ModelShape | None = None) -> Built:
    profile = profile or apply_hardware_overrides(load_profile(cfg.hardware), cfg.hardware_overrides)
    model = model or load_model(cfg.model)
    chip = ChipSpec.from_profile(profile)
    cluster = Cluster(chip)
    stream = Stream(cluster.env, cluster.devices[0], cluster.arbiter,
                    KernelTimer(chip, cfg.runtime.fidelity), launch=cfg.runtime.launch,
                    reuse=cfg.runtime.reuse)
    w = cfg.workload
    max_context = w.context_tokens + w.decode_steps + max(w.prompt_tokens, 1)
    schedule = Schedule(model, chip, kv=kv_format.from_config(cfg.kv_cache), dequant=cfg.kv_cache.dequant,
                        moe_schedule=cfg.runtime.moe_schedule, attention_kernel=cfg.runtime.attention_kernel,
                        max_batch=w.batch_size,
                        max_context=max_context, weights=weight_format.plan(cfg.weights, model.weights))
    streams = RandomStreams(cfg.seed)
    router = None
    onchip = schedule.cold_state()
    if model.moe:
        moe_layers = [layer for layer in range(model.layers) if model.is_moe_layer(layer)]
        router = Router(cfg.moe.routing, model.moe, moe_layers, streams.get("routing"))
        onchip = _onchip_with_sram(cfg, model, chip, schedule, router, streams)
    warnings = []
    need = schedule.mem.allocated_bytes
    if need > chip.hbm_capacity_bytes:
        warnings.append(f"weights + KV cache need {need / 1e9:.1f} GB but {profile.name} has "
                        f"{chip.hbm_capacity_bytes / 1e9:.0f} GB of HBM; simulated as if it fit")
    return Built(cfg, profile, model, chip, cluster, stream, schedule, onchip, router, warnings)


def _onchip_with_sram(cfg: Scenario, model: ModelShape, chip: ChipSpec, schedule: Schedule,
                      router: Router, streams: RandomStreams) -> OnChipState:
    """SRAM for experts: an explicit size, or the settable-aside share of the L2; the routing
    table takes its share first when it is pinned and fits. SRAM set aside for experts and the
    router is no longer L2 for activations (up to the L2's persisting share: a larger
    capacity_mib is a what-if SRAM beside the L2)."""
    c = cfg.moe.cache
    persisting = chip.l2_bytes * c.persist_fraction
    set_aside = capacity = c.capacity_mib * 2**20 if c.capacity_mib else persisting
    router_on_chip = c.pin_router and schedule.router_bytes_total() <= capacity
    if router_on_chip:
        capacity -= schedule.router_bytes_total()
    uses_sram = c.policy != "none" or cfg.moe.prefetch.enabled or router_on_chip
    dispatch = ExpertDispatch(cfg.moe, model, schedule.expert_bytes(), capacity, chip.hbm_stacks,
                              schedule.expert_address, streams.get("prefetch"))
    if c.policy == "pinned-hot":
        dispatch.pin_hot(router.popularity)
    l2_for_activations = chip.l2_bytes - (min(set_aside, persisting) if uses_sram else 0.0)
    return OnChipState(schedule.cold_state(l2_for_activations).l2, dispatch, router_on_chip)
