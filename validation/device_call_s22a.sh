#!/usr/bin/env bash
# Session 22's profiled-burst call (issue 43 item 3): session 20's device_call_s20a.sh (torch.profiler
# bursts of transformers 5.17 continuous batching, each followed by its unprofiled twin) with every
# trace's event counts (validation/trace_event_counts.py) written beside it, so the profiler's own cost
# can be charged per recorded event even if the split trace archive does not come back.
#   run(): bash validation/device_call_s22a.sh      (any card: the host is what is measured)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | tee -a $OUT/run.log
prof() {  # model, configs, timeout_s
  timeout $3 python3 validation/measure_hf_serving.py --models $1 --configs $2 --phase profile \
    --out /tmp/hf_profile 2>&1 | grep -v Warning | grep -v "^ *warn" | tail -8 | tee -a $OUT/run.log
}
prof llama-3.1-8b "defaults graphs" 170
prof qwen3-30b-a3b "defaults graphs" 230
prof qwen2.5-7b defaults 100
cp /tmp/hf_profile/summary.jsonl $OUT/summary.jsonl
python3 validation/trace_event_counts.py $(find /tmp/hf_profile -name "*.json.gz" | sort) > $OUT/trace_event_counts.jsonl
tar cf /tmp/hf_profile.tar -C /tmp hf_profile
split -b 15m -d /tmp/hf_profile.tar $OUT/hf_profile.tar.part
ls -la $OUT | tee -a $OUT/run.log
