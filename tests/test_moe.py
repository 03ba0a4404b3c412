"""Sparse MoE: routing distributions, expert residency, pre-dispatch and memory hot spots."""

import numpy as np
import pytest

from hwsim.config.load import load_scenario
from hwsim.config.scenario import UniformRouting, ZipfRouting
from hwsim.errors import ConfigError
from hwsim.model.shapes import Moe
from hwsim.pipeline import run_config
from hwsim.model.expert_sram import ExpertCache, cache_policy
from hwsim.workload.router import Router, expected_distinct

QWEN = ["model=qwen3-30b-a3b", "workload.decode_steps=3"]


def run(*sets):
    return run_config(load_scenario(None, ["workload.decode_steps=3", *sets])).summary


@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_uniform_routing_touches_the_expected_number_of_experts(batch):
    moe = Moe(experts=128, top_k=8, expert_ffn=768)
    router = Router(UniformRouting(), moe, list(range(48)), np.random.default_rng(1))
    distinct = [len(np.unique(c)) for step in range(4) for c in router.step(step, batch).values()]
    assert np.mean(distinct) == pytest.approx(expected_distinct(128, 8, batch), rel=0.05)


def test_uniform_top_k_picks_the_lowest_scores_and_survives_a_tie():
    """uniform_topk finds each token's k lowest scores without argpartition; a tie at the k-th
    (which would give a token k+1 experts) falls back to argpartition's pick."""
    from hwsim.workload.router import experts_chosen, uniform_topk
    moe = Moe(experts=16, top_k=3, expert_ffn=8)
    choice = uniform_topk(np.random.default_rng(5), 200, moe)
    scores = np.random.default_rng(5).random((200, 16))
    assert choice.shape == (200, 3)
    assert (np.sort(choice, axis=1) == np.sort(np.argsort(scores, axis=1)[:, :3], axis=1)).all()
    assert experts_chosen(choice) == len(np.unique(choice))

    class Tied:                  # every score equal: all 16 are "at most the 3rd lowest"
        def random(self, shape):
            return np.full(shape, 0.5)
    tied = uniform_topk(Tied(), 4, moe)
    assert tied.shape == (4, 3) and all(len(set(row)) == 3 for row in tied.tolist())


def test_zipf_concentrates_and_balance_flattens():
    moe = Moe(experts=128, top_k=8, expert_ffn=768)
    skewed = Router(ZipfRouting(zipf_exponent=1.2), moe, [0], np.random.default_rng(0))
    balanced = Router(ZipfRouting(zipf_exponent=1.2, balance=1.0), moe, [0], np.random.default_rng(0))
    d_skew = np.mean([len(np.unique(skewed.step(s, 16)[0])) for s in range(10)])
    d_bal = np.mean([len(np.unique(balanced.step(s, 16)[0])) for s in range(10)])
    assert d_skew < 0.7 * d_bal
    assert d_bal == pytest.approx(expected_distinct(128, 8, 16), rel=0.1)


def test_hot_experts_persist_then_drift():
    moe = Moe(experts=64, top_k=2, expert_ffn=8)
    r = Router(ZipfRouting(hot_persist_steps=3, drift=0.5), moe, [0], np.random.default_rng(0))
    rankings = []
    for step in range(7):
        r.step(step, 1)
        rankings.append(r._ranking[0].copy())
    assert all((rankings[i] == rankings[0]).all() for i in range(3))
    assert not (rankings[3] == rankings[0]).all()


def test_capacity_factor_drops_or_reroutes_overflow():
    moe = Moe(experts=8, top_k=2, expert_ffn=8)
    drop = Router(ZipfRouting(zipf_exponent=3, capacity_factor=1.0), moe, [0],
                  np.random.default_rng(0)).step(0, 64)[0]
    cap = int(np.ceil(64 * 2 / 8))
    kept = np.bincount(drop[drop >= 0], minlength=8)
    assert kept.max() <= cap and (drop < 0).any()
    rer = Router(ZipfRouting(zipf_exponent=3, capacity_factor=1.0, overflow="reroute"), moe, [0],
                 np.random.default_rng(0)).step(0, 64)[0]
    assert (rer >= 0).sum() > (drop >= 0).sum()
    assert np.bincount(rer[rer >= 0], minlength=8).max() <= cap


def test_active_parameter_fraction_matches_the_literature():
    assert run()["moe"]["active_param_fraction"] == pytest.approx(0.276, abs=0.01)     # Mixtral, batch 1
    q = run(*QWEN)["moe"]["active_param_fraction"]
    assert q == pytest.approx(0.11, abs=0.015)                                           # Qwen3-30B-A3B


def test_perfect_prefetch_with_enough_sram_removes_expert_reads_and_waits():
    base = run(*QWEN, "hardware=sram-chip")
    pre = run(*QWEN, "hardware=sram-chip", "moe.prefetch.enabled=true", "moe.prefetch.accuracy=1")
    assert pre["moe"]["prefetch"]["precision"] == 1 and pre["moe"]["prefetch"]["recall"] == 1
    assert pre["moe"]["prefetch"]["expert_load_wait_ms"] < 0.02 * pre["itl_ms"]["p50"]
    assert pre["breakdown_ms"]["expert_weight_read"] < 0.6 * base["breakdown_ms"]["expert_weight_read"]
    assert pre["itl_ms"]["p50"] < base["itl_ms"]["p50"]


def test_zero_accuracy_prefetch_matches_no_prefetch_and_wastes_bytes():
    base = run(*QWEN)
    blind = run(*QWEN, "moe.prefetch.enabled=true", "moe.prefetch.accuracy=0")
    assert blind["itl_ms"]["p50"] == pytest.approx(base["itl_ms"]["p50"], rel=0.02)
    assert blind["moe"]["prefetch"]["precision"] == 0
    assert blind["moe"]["prefetch"]["wasted_bytes_per_step"] == pytest.approx(
        blind["moe"]["prefetch"]["bytes_per_step"])


def test_bytes_are_conserved_with_prefetch():
    """What the expert GEMMs stream from HBM plus what the prefetch brought equals the weights
    the step touches, when every prefetched byte is used."""
    base = run(*QWEN)
    pre = run(*QWEN, "moe.prefetch.enabled=true", "moe.prefetch.accuracy=1")
    assert pre["bytes"]["weights"] + pre["bytes"]["expert_prefetch"] == pytest.approx(
        base["bytes"]["weights"], rel=0.01)


def test_zipf_raises_stack_imbalance_only_under_per_expert_placement():
    common = [*QWEN, "workload.batch_size=8"]
    uni_pe = run(*common, "moe.placement=per-expert")["moe"]["expert_stack_imbalance"]
    zipf_pe = run(*common, "moe.placement=per-expert", "moe.routing.kind=zipf",
                  "moe.routing.zipf_exponent=1.5")["moe"]["expert_stack_imbalance"]
    zipf_il = run(*common, "moe.routing.kind=zipf", "moe.routing.zipf_exponent=1.5")["moe"]
    assert zipf_pe > uni_pe > 1.0
    assert zipf_il["expert_stack_imbalance"] == pytest.approx(1.0)
    assert zipf_il["channel_imbalance"] < 1.01


@pytest.mark.parametrize("placement", ["interleaved", "per-expert"])
def test_a_layer_planned_at_once_is_planned_as_expert_after_expert(placement):
    """ExpertDispatch.plan_layer's shortcut (nothing on chip, nothing in flight) plans and
    counts exactly what plan() does expert by expert, and the per-stack bytes follow."""
    from hwsim.pipeline import system

    def dispatch():
        return system(load_scenario(None, [*QWEN, f"moe.placement={placement}"])).onchip.dispatch
    at_once, one_by_one = dispatch(), dispatch()
    experts = [0, 3, 17, 64, 127]
    plans, one_plans = at_once.plan_layer(5, experts), [one_by_one.plan(5, e) for e in experts]
    assert plans == one_plans
    at_once.account(5, plans)
    one_by_one.account(5, one_plans)
    assert at_once.stats.stack_bytes == one_by_one.stats.stack_bytes
    assert at_once._this_step == one_by_one._this_step
    a, b = at_once.cache, one_by_one.cache
    assert (a.lookups, a.hits, a.hits_by_layer, a.uses) == (b.lookups, b.hits, b.hits_by_layer, b.uses)
    assert {p.channel_group for p in plans} == ({-1} if placement == "interleaved" else
                                                {one_by_one.channel_group(5, e) for e in experts})


def test_caches_hit_when_hot_experts_repeat_and_lru_thrashes_when_they_do_not_fit():
    zipf = [*QWEN, "hardware=sram-chip", "moe.routing.kind=zipf", "moe.routing.zipf_exponent=1.5",
            "workload.decode_steps=4"]
    none = run(*zipf)
    big_lru = run(*zipf, "moe.cache.policy=lru", "moe.cache.capacity_mib=6000")
    pinned = run(*zipf, "moe.cache.policy=pinned-hot")
    small_lru = run(*zipf, "moe.cache.policy=lru")          # 48 layers x 8 experts > 660 MiB
    assert none["moe"]["cache"]["hit_rate"] == 0
    assert big_lru["moe"]["cache"]["hit_rate"] > 0.3
    assert pinned["moe"]["cache"]["hit_rate"] > 0.1
    assert small_lru["moe"]["cache"]["hit_rate"] < 0.05      # cyclic reuse distance: LRU thrashes
    assert big_lru["itl_ms"]["p50"] < none["itl_ms"]["p50"]
    assert pinned["itl_ms"]["p50"] < none["itl_ms"]["p50"]


def test_lru_and_lfu_evict_differently():
    lru, lfu = ExpertCache(cache_policy("lru"), 2.0), ExpertCache(cache_policy("lfu"), 2.0)
    for c in (lru, lfu):
        for key in [(0, 1), (0, 1), (0, 1), (0, 2), (0, 3)]:
            c.lookup(key, 1.0)
    assert lru.is_resident((0, 3)) and not lru.is_resident((0, 1))
    assert lfu.is_resident((0, 1))


def test_trace_replays_router_logs(tmp_path):
    trace = tmp_path / "router.csv"
    rows = ["step,layer,token,experts"] + [f"0,{layer},0,3 5" for layer in range(32)]
    trace.write_text("\n".join(rows) + "\n")
    s = run("moe.routing.kind=trace", f"moe.routing.trace={trace}")
    assert s["moe"]["distinct_experts_per_layer"] == 2


def test_trace_with_a_bad_expert_id_names_file_and_line(tmp_path):
    trace = tmp_path / "router.csv"
    trace.write_text("step,layer,token,experts\n0,0,0,1 2\n0,1,0,3 99\n")
    with pytest.raises(ConfigError) as e:
        from hwsim.pipeline import system
        system(load_scenario(None, ["moe.routing.kind=trace", f"moe.routing.trace={trace}"]))
    assert e.value.file == str(trace) and e.value.line == 3 and "out of range" in e.value.message


@pytest.mark.parametrize("sets, key", [
    (["moe.prefetch.accuracy=-0.1"], "moe.prefetch.accuracy"),
    (["moe.routing.kind=trace"], "moe.routing"),
    (["moe.cache.policy=fifo"], "moe.cache.policy"),
])
def test_bad_moe_input(sets, key):
    with pytest.raises(ConfigError) as e:
        load_scenario(None, sets)
    assert e.value.key == key and e.value.file == "--set"


def test_top_k_above_experts_is_rejected(tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text("name: tiny\nsource: test shape\nlayers: 1\nhidden: 64\nvocab: 100\n"
                     "attention: {heads: 4, kv_heads: 1, head_dim: 16}\n"
                     "moe: {experts: 4, top_k: 8, expert_ffn: 32}\n")
    with pytest.raises(ConfigError, match="top_k"):
        load_scenario(None, [f"model={model}"])


def test_deepseek_group_limited_routing_stays_in_top_groups():
    moe = Moe(experts=256, top_k=8, expert_ffn=2048, groups=8, topk_groups=4)
    choice = Router(UniformRouting(), moe, [0], np.random.default_rng(0)).step(0, 64)[0]
    groups_used = [len(set((row // 32).tolist())) for row in choice]
    assert max(groups_used) <= 4
    assert len(np.unique(choice)) > 128          # different tokens still spread over the experts


def test_routed_experts_are_recorded_under_their_own_names_and_layers():
    """A routed expert's kernels are shared with every expert routed alike (ExpertBlock), but
    each record names its own: the pass's kernels, named one by one (named_kernels), are the
    records' names and layers in order, and every routed expert the routing chose is there."""
    from hwsim.pipeline import system
    from hwsim.model.kernel import ExpertBlock, Kernel, named_kernels
    from hwsim.model.schedule import StepShape
    from hwsim.step import plan_pass, simulate_pass
    from hwsim.engine.records import RecordLog

    cfg = load_scenario(None, ["model=qwen3-30b-a3b", "workload.batch_size=8"])
    b = system(cfg)
    shape = StepShape("decode", 8, 8, cfg.workload.context_tokens)
    plan = plan_pass(b, shape, 0)
    assert any(type(item) is ExpertBlock for item in plan.items)
    records = RecordLog()
    simulate_pass(b, shape, 0, records, plan=plan)
    named = [k for k in named_kernels(plan.items) if type(k) is Kernel]
    assert [(r.name, r.layer) for r in records] == [(k.name, k.layer) for k in named]
    for layer, choice in plan.routing.items():
        chosen = {f"L{layer}.expert{e}.gate_up" for e in np.unique(choice[choice >= 0])}
        assert chosen == {r.name for r in records if r.layer == layer and r.name.endswith(".gate_up")
                          and ".expert" in r.name}


def test_pinned_hot_under_expert_parallelism_pins_each_gpus_own_experts():
    """Each GPU of an EP group keeps the hottest of the experts it holds in its SRAM: pinning
    the hottest of all experts on every GPU (as before) left the GPUs that do not hold them
    an SRAM of experts they never run (qwen3-235b-ep4: only GPU 0 ever hit)."""
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario

    cfg = load_scenario("qwen3-235b-ep4", ["moe.cache.policy=pinned-hot", "moe.cache.capacity_mib=256"])
    b = system(cfg)
    experts = b.gpus.experts
    pinned = [set(onchip.dispatch.cache.pinned) for onchip in b.gpus.onchips]
    for gpu, keys in enumerate(pinned):
        assert keys, f"GPU {gpu} pins nothing"
        group = gpu // b.gpus.layout.expert_tp
        assert all(group in experts.copies[layer][e] for layer, e in keys), gpu
    assert not set.intersection(*pinned)          # contiguous placement: no expert on two GPUs

    # the summary's hit rate is every GPU's lookups together, each GPU hitting its own pins
    from hwsim.pipeline import run_config
    summary = run_config(cfg.model_copy(update={"workload": cfg.workload.model_copy(
        update={"decode_steps": 1})}), built=b).run_summary
    caches = [onchip.dispatch.cache for onchip in b.gpus.onchips]
    assert all(c.hits > 0 for c in caches)
    assert summary.moe.cache.hit_rate == pytest.approx(sum(c.hits for c in caches) / sum(c.lookups for c in caches))


def test_a_run_keeping_experts_in_the_l2s_share_says_it_is_an_upper_bound():
    """Measured on an H200 (validation/data/l2_persist_h200), the L2's persisting share did not
    hold expert weights between their uses: every run that keeps experts there says so; a run
    that keeps none, or a what-if SRAM beside the L2 (capacity_mib past the share), does not."""
    from hwsim.build import L2_SHARE_NOTE
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario

    assert L2_SHARE_NOTE in system(load_scenario("moe-prefetch", ["workload.decode_steps=1"])).warnings
    pinned = ["model=qwen3-30b-a3b", "moe.cache.policy=pinned-hot", "workload.decode_steps=1"]
    assert L2_SHARE_NOTE in system(load_scenario(None, pinned)).warnings
    assert L2_SHARE_NOTE not in system(load_scenario(None, ["workload.decode_steps=1"])).warnings
    beside = system(load_scenario(None, [*pinned, "moe.cache.capacity_mib=1024"]))
    assert L2_SHARE_NOTE not in beside.warnings
