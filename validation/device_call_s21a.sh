#!/usr/bin/env bash
# Session 21's H200 serving call (issues 43 and 45), for a second call after calibration/device_call_s19b.sh:
# Qwen3-30B-A3B served by transformers 5.17 continuous batching (library defaults; CUDA graphs + async
# batching) at the loads and seeded traces validation/data/hf_serving/s20/ predicted before this call,
# now with the measuring host's thread samples (validation/host_threads.py: the "two speeds"); then one
# profiled burst of the graphs config (the Qwen3 graph-key staircase, +57 ms per 16,384 padded keys on
# the H100) and cuDNN's Q>1 verification attention alone (calibration/measure_cudnn_verify.py).
#   run(): bash validation/device_call_s21a.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 300 python3 validation/measure_hf_serving.py --models qwen3-30b-a3b --configs defaults graphs \
  --loads light near past burst --rates light=2,near=6,past=12 --window-s 6 --phase runs --budget-s 220 \
  --out /tmp/hf_serving 2>&1 | grep -v Warning | tail -30 | tee -a $OUT/run.log
cp /tmp/hf_serving/summary.jsonl $OUT/summary.jsonl
tar cJf $OUT/hf_serving.tar.xz -C /tmp hf_serving
timeout 80 python3 calibration/measure_cudnn_verify.py --out $OUT/h200_cudnn_verify.jsonl 2>&1 | tail -8 | tee -a $OUT/run.log
timeout 110 python3 validation/measure_hf_serving.py --models qwen3-30b-a3b --configs graphs --phase profile \
  --out /tmp/hf_profile 2>&1 | grep -v Warning | tail -8 | tee -a $OUT/run.log
cp /tmp/hf_profile/summary.jsonl $OUT/profile_summary.jsonl 2>/dev/null
tar cJf /tmp/hf_profile.tar.xz -C /tmp hf_profile && split -b 15m -d /tmp/hf_profile.tar.xz $OUT/hf_profile.tar.xz.part
ls -la $OUT | tee -a $OUT/run.log
