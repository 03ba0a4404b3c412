#!/usr/bin/env bash
# Session 19's HF serving call (issue 43 item 5): Qwen3-30B-A3B (library defaults and CUDA graphs +
# async batching) and the held-out Qwen2.5-7B (library defaults) served by transformers 5.17
# continuous batching, loads light/near/past at 2/6/12 req/s over a 6 s window and a 48-request
# burst, the same seeded traces that validation/predict_hf_serving.py predicted before the call
# (validation/data/hf_serving/s19/predicted_*.jsonl, both chips).
#   run(): bash validation/device_call_s19a.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
serve() {  # model, configs, budget_s, timeout_s
  timeout $4 python3 validation/measure_hf_serving.py --models $1 --configs $2 \
    --loads light near past burst --rates light=2,near=6,past=12 --window-s 6 --phase runs --budget-s $3 \
    --out /tmp/hf_serving 2>&1 | grep -v Warning | tail -40 | tee -a $OUT/run.log
}
serve qwen3-30b-a3b "defaults graphs" 250 330
serve qwen2.5-7b defaults 110 190
cp /tmp/hf_serving/summary.jsonl $OUT/summary.jsonl
tar cJf $OUT/hf_serving.tar.xz -C /tmp hf_serving
ls -la $OUT
