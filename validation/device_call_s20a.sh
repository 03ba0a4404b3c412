#!/usr/bin/env bash
# Session 20's HF profiled-burst call (issue 43 items 3-5): torch.profiler traces of a 16-request
# burst (chat prompts, 32-token replies) of transformers 5.17 continuous batching, each followed by
# the same burst unprofiled (the profiler's own cost), for the models whose serving runs were
# measured on the H100 in sessions 18-19 (Llama-3.1-8B defaults+graphs, Qwen3-30B-A3B defaults+graphs,
# Qwen2.5-7B defaults): hwsim's `workload.engine.host_trace` input, then held against those runs.
#   run(): bash validation/device_call_s20a.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
prof() {  # model, configs, timeout_s
  timeout $3 python3 validation/measure_hf_serving.py --models $1 --configs $2 --phase profile \
    --out /tmp/hf_profile 2>&1 | grep -v Warning | grep -v "^ *warn" | tail -12 | tee -a $OUT/run.log
}
prof qwen3-30b-a3b "defaults graphs" 230
prof llama-3.1-8b "defaults graphs" 150
prof qwen2.5-7b defaults 90
cp /tmp/hf_profile/summary.jsonl $OUT/summary.jsonl
tar cf /tmp/hf_profile.tar -C /tmp hf_profile
split -b 15m -d /tmp/hf_profile.tar $OUT/hf_profile.tar.part
ls -la $OUT | tee -a $OUT/run.log
