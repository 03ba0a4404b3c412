"""Issue 20's measurement scripts, before a multi-GPU machine is lent: their plans (who sends
what to whom, which shard each rank holds), their workers on one gloo rank in this process,
and the converter that makes `hwsim validate` predict each measured step on its layout. The
layouts, the converter and the grids are tested without torch (validation/ep_layouts.py); the
routing draws and the workers need torch (`pip install '.[test,measure]'`) and are skipped
without it."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from hwsim.validate import _row_scenario

REPO = Path(__file__).resolve().parents[1]


def _load(rel):
    path = REPO / rel
    for folder in (path.parent, REPO / "calibration", REPO / "validation"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def layouts():
    return _load("validation/ep_layouts.py")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="needs torch: pip install '.[test,measure]'")


@pytest.fixture(scope="module")
def ep(torch):
    return _load("validation/measure_ep_steps.py")


@pytest.fixture(scope="module")
def col(torch):
    return _load("calibration/measure_collectives.py")


@pytest.fixture
def one_rank(tmp_path, torch):
    """A gloo process group of one rank in this process (the scripts' workers call init())."""
    dist = pytest.importorskip("torch.distributed")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(_load("calibration/dist_env.py").free_port())
    yield tmp_path
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_shards_are_hwsim_s_layouts(layouts):
    ep = layouts
    qwen, mixtral = ep.MODELS["qwen3-235b-a22b"], ep.MODELS["mixtral-8x22b"]
    tp_ep4 = [ep.Shard(qwen, "tp-ep", 4, r) for r in range(4)]
    assert [s.heads for s in tp_ep4] == [16] * 4 and tp_ep4[0].kv_heads == 1
    assert sorted(e for s in tp_ep4 for e in s.experts) == list(range(128)) and tp_ep4[0].ff == 1536
    assert ep.Shard(qwen, "tp-ep", 8, 3).kv_heads == 1                 # 4 KV heads replicated over 8
    dp = ep.Shard(qwen, "dp-ep", 8, 5)
    assert (dp.tp, dp.heads, dp.kv_heads, dp.experts) == (1, 64, 4, list(range(80, 96)))
    assert list(dp.owner(20)).count(5) == 2 and list(dp.owner(20)).count(0) == 3
    tp = ep.Shard(mixtral, "tp", 2, 1)
    assert (tp.heads, tp.kv_heads, tp.experts, tp.ff, tp.vocab) == (24, 4, list(range(8)), 8192, 16384)
    # one GPU's expert weights fit an H200 beside its KV cache: Qwen3 bf16 on 4, Mixtral FP8 on 2
    qwen_experts = qwen["L"] * len(tp_ep4[0].experts) * 3 * qwen["d"] * qwen["ff"] * 2
    assert 100e9 < qwen_experts < 125e9
    assert 60e9 < mixtral["L"] * 8 * 3 * mixtral["d"] * tp.ff * 1 < 75e9


def test_the_dispatch_plans_of_the_ranks_agree(ep, torch):
    """What rank r sends rank j is what j expects from r; each rank sends a message per
    (token, expert) of its own sequences and runs each it receives on one of its experts."""
    cfg = dict(ep.DRY_MODELS["qwen3-235b-a22b"], L=1)
    world, batch = 4, 10
    shards = [ep.Shard(cfg, "dp-ep", world, r) for r in range(world)]
    plans = [ep.routing(s, batch, torch.device("cpu"), seed=3)[0] for s in shards]
    for r in range(world):
        for j in range(world):
            assert plans[r]["send_split"][j] == plans[j]["recv_split"][r]
        mine = int((shards[r].owner(batch) == r).sum())
        assert sum(plans[r]["send_split"]) == mine * cfg["k"] == len(plans[r]["send_tok"])
        ran = sorted(i for _, idx, _ in plans[r]["experts"] for i in idx.tolist())
        assert ran == list(range(plans[r]["n_recv"]))
        assert all(0 <= le < len(shards[r].experts) for le, _, _ in plans[r]["experts"])
    assert sum(p["n_recv"] for p in plans) == batch * cfg["k"]


def step_args(out, solo=False):
    """What measure_ep_steps.main hands a worker."""
    return type("Args", (), dict(dry=True, out=str(out), replays=1, budget_s=60.0, solo=solo, cases="grid",
                                 t_start=__import__("time").time()))()


def test_an_ep_step_runs_on_one_gloo_rank_and_counts_its_collectives(ep, one_rank, torch):
    args = step_args(one_rank / "steps.jsonl")
    ep.worker(0, 1, args, ("mixtral-8x22b", "tp", 1, "fp8"), [(2, 8, "cal")])
    (step,) = [json.loads(line) for line in open(args.out)]
    assert step["part"] == "step" and step["finite"] and step["ms"] > 0
    kinds = step["ops_by_kind"]
    sh = ep.Shard(ep.DRY_MODELS["mixtral-8x22b"], "tp", 1, 0)
    active = sum(len(layer) for layer in ep.routing(sh, 2, torch.device("cpu"), seed=1002))   # the worker's draw
    assert kinds["gemm"] == 2 * 3 + 2 * active + 1        # qkv, o, router a layer; two per active expert; LM head
    assert kinds["index_select"] == active
    assert "all_reduce" not in kinds                      # one GPU: no collective


def test_a_solo_step_runs_rank_0_s_shard_and_counts_the_collectives_left_out(ep, one_rank):
    args = step_args(one_rank / "solo.jsonl", solo=True)
    ep.worker(0, 1, args, ("mixtral-8x22b", "tp", 2, "fp8"), [(2, 8, "cal")])
    (step,) = [json.loads(line) for line in open(args.out)]
    layers = ep.DRY_MODELS["mixtral-8x22b"]["L"]
    assert step["solo"] and step["gpus"] == 2 and step["tp"] == 2 and "rank0solo" in step["name"]
    # two all-reduces a layer (attention out, expert sum); the logits' all-gather is not issued
    assert step["collectives_left_out"] == {"all_reduce": 2 * layers}
    assert "all_reduce" not in step["ops_by_kind"]


def test_the_collectives_worker_writes_busbw_and_moe_counts(col, one_rank):
    args = type("Args", (), dict(dry=True, out=str(one_rank / "col.jsonl"), ops="all_reduce,all_to_all",
                                 calls=1, reps=1, budget_s=60.0))()
    col.worker(0, 1, args)
    recs = [json.loads(line) for line in open(args.out)]
    coll = [r for r in recs if r["part"] == "collective"]
    assert {(r["op"], r["bytes"]) for r in coll} == {(o, b) for o in ("all_reduce", "all_to_all") for b in col.DRY_SIZES}
    assert all(r["busbw_gbs"] == 0 for r in coll)        # one rank: nothing crosses a link
    moe = [r for r in recs if r["part"] == "moe"]
    assert {r["shape"] for r in moe} == set(col.MOE_SHAPES)
    for r in moe:
        assert sum(map(sum, r["counts"])) == r["tokens_per_gpu"] * r["top_k"]


def test_message_counts_are_the_ranks_top_k_draws(col):
    counts = col.message_counts(tokens=64, experts=128, k=8, world=8, seed=1)
    assert all(sum(row) == 64 * 8 for row in counts)
    assert counts != [list(c) for c in zip(*counts)]     # each rank its own draw: not symmetric


def test_the_converter_gives_validate_each_row_s_layout(layouts):
    ep = layouts
    conv = _load("validation/ep_steps_to_csv.py")
    meta = {"part": "meta", "dry": False, "device": "NVIDIA H200"}
    steps = []
    for model, layout, gpus, fmt in ep.SETUPS:
        sh = ep.Shard(ep.MODELS[model], layout, gpus, 0)
        steps.append({"part": "step", "name": f"{model}-{layout}{gpus}", "model": model, "layout": layout,
                      "gpus": gpus, "tp": sh.tp, "ep": sh.ep, "weights": fmt, "moe_schedule": "per-expert",
                      "batch": 32, "context_tokens": 2048, "split": "cal", "ms": 40.0, "p10": 39.0, "p90": 41.0,
                      "replays_ms": [40.0], "ops": 100})
    rows = conv.rows([json.dumps(meta)] + [json.dumps(s) for s in steps])
    got = {}
    for row in rows:
        cfg, shape = _row_scenario({k: str(v) for k, v in row.items()})
        p = cfg.parallel
        got[row["name"]] = (p.gpus, p.tp, p.ep, p.dp_attention, cfg.weights.experts.format)   # None: bf16
        assert shape.batch == 32 and cfg.runtime.moe_schedule == "per-expert" and p.topology == "hgx-h200-8"
    assert got == {"qwen3-235b-a22b-tp-ep4": (4, 4, 4, False, None),
                   "qwen3-235b-a22b-tp-ep8": (8, 8, 8, False, None),
                   "qwen3-235b-a22b-dp-ep8": (8, 1, 8, True, None),
                   "mixtral-8x22b-tp2": (2, 2, 1, False, "fp8"),
                   "qwen3-30b-a3b-tp-ep2": (2, 2, 2, False, None),
                   "qwen3-30b-a3b-dp-ep2": (2, 1, 2, True, None)}


def test_the_grids_predicted_are_the_grids_measured(layouts):
    ep = layouts
    predict = _load("validation/predict_ep_grid.py")
    assert predict.GRIDS["fresh"] == (ep.FRESH_SETUPS, ep.FRESH_CASES, "decode")
    assert predict.GRIDS["prefill"] == (ep.PREFILL_SETUPS, ep.PREFILL_CASES, "prefill")
