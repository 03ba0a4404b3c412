"""Issue 45 item 2: a traced verification step through the kernel-trace path keeps its query
tokens a sequence, so retargeted to another chip or KV format its attention is Q > 1 attention
(validation/data/assisted_h100: transformers' assisted generation on the H100, Llama-8B)."""

from pathlib import Path

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.model import ir
from hwsim.model.kernel import Kernel

DATA = Path(__file__).resolve().parents[1] / "validation/data/assisted_h100"
Q5 = DATA / "hf-llama-3.1-8b-verify-q5-b1-l512.json.gz"
Q1 = DATA / "hf-llama-3.1-8b-verify-q1-b1-l512.json.gz"


def attention(trace, *sets, batch=1):
    cfg = load_scenario("scenarios/kernel-trace.yaml", [
        "model=llama-3.1-8b", "hardware=h100-sxm", f"workload.kernel_trace.path={trace}",
        "workload.kernel_trace.batch_size=1", "workload.kernel_trace.context_tokens=512", *sets])
    ks = [k for k in system(cfg).schedule._pass(batch, 512)[0] if isinstance(k, Kernel)]
    return [k for k in ks if isinstance(k.item, ir.Attention)], ks


def test_a_traced_verification_lowers_its_five_queries():
    """Q = 5 over the 512 cached tokens and its own 5 (517 keys, as traced); cuDNN's grid as
    traced: one program a query head (32), unsplit, no reduction kernel."""
    att, ks = attention(Q5)
    assert len(att) == 32
    assert {(k.item.q_len, k.item.kv_len, k.item.backend, k.tiles) for k in att} == {(5, 517, "cudnn", 32)}
    assert not [k for k in ks if k.name.endswith(".combine")]


def test_a_traced_one_query_step_is_unchanged():
    """The plain step (Q = 1, GQA K/V) keeps the packed split kernel and its reduction."""
    att, ks = attention(Q1)
    assert {(k.item.q_len, k.item.kv_len) for k in att} == {(1, 513)}
    assert len([k for k in ks if k.name.endswith(".combine")]) == 32


def test_a_traced_verification_retargeted_keeps_its_queries():
    """Moved to the H200 and to batch 8: still 5 queries a sequence, a program per query head
    (8 x 32), and the attention costs more than the same step lowered as one query would."""
    att, _ = attention(Q5, "hardware=h200-sxm", "workload.batch_size=8", batch=8)
    assert {(k.item.q_len, k.item.backend, k.tiles) for k in att} == {(5, "cudnn", 8 * 32)}


def test_a_traced_verification_on_a_quantized_cache_packs_its_queries():
    """A KIVI 2-bit cache is read by the fused low-bit kernel, which packs Q x group rows: its
    softmax work is 5 queries' over the keys, not one query's."""
    att5, _ = attention(Q5, "kv_cache.preset=kivi-2")
    att1, _ = attention(Q1, "kv_cache.preset=kivi-2")
    assert att5[0].item.heads == att1[0].item.heads * 5
    total = [a[0].tiles * a[0].vector_flops for a in (att5, att1)]
    assert total[0] > 4.9 * total[1]
