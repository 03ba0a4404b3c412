#!/usr/bin/env bash
# Session 22's HF call (issue 43 items 3 and 5): the library's default engine config served by the
# same machine that profiles it, so that `workload.engine.host_trace` (a burst profiled on the
# measuring host) can be held against runs of that host (sessions 18-21 found an eager engine's speed
# is the measuring machine's, 1.2-1.6x apart between calls). Per model, --phase all: the four loads
# (same seeded traces, rates and window as s18c/s19a/s21a), then a second process with the profiled
# 16-request burst and its unprofiled twin (the profiler's own cost); every trace's event counts by
# category (validation/trace_event_counts.py) beside it, so the profiler's cost can be charged per
# recorded event even if the split archive does not come back. Qwen2.5-7B stays out of every fit.
# Predictions before measuring (default host profile, current main): validation/data/hf_serving/s22/.
#   run(): bash validation/device_call_s22a.sh      (H200 wanted; any card measures the host)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | tee -a $OUT/run.log
serve() {  # model, budget_s, timeout_s
  timeout $3 python3 validation/measure_hf_serving.py --models $1 --configs defaults \
    --loads light near past burst --rates light=2,near=6,past=12 --window-s 6 --budget-s $2 \
    --out /tmp/hf_serving 2>&1 | grep -v Warning | grep -v "^ *warn" | tail -14 | tee -a $OUT/run.log
}
serve llama-3.1-8b 100 180
serve qwen2.5-7b 90 160
serve qwen3-30b-a3b 120 ${QWEN3_TIMEOUT:-190}
cp /tmp/hf_serving/summary.jsonl $OUT/summary.jsonl
python3 validation/trace_event_counts.py $(find /tmp/hf_serving -name "*.json.gz" | sort) > $OUT/trace_event_counts.jsonl
tar cf /tmp/hf_serving.tar -C /tmp hf_serving
xz -T0 -6 /tmp/hf_serving.tar && split -b 15m -d /tmp/hf_serving.tar.xz $OUT/hf_serving.tar.xz.part
ls -la $OUT | tee -a $OUT/run.log
