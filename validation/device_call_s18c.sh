#!/usr/bin/env bash
# Session 18's HF serving call (issue 43 item 5): Llama-3.1-8B served by transformers 5.17
# continuous batching, library defaults and CUDA graphs + async batching, four loads at fixed
# rates (validation/predict_hf_serving.py predicted these same traces before the call:
# validation/data/hf_serving/predicted.jsonl).   run(): bash validation/device_call_s18c.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 470 python3 validation/measure_hf_serving.py --models llama-3.1-8b --configs defaults graphs \
  --loads light near past burst --rates light=2,near=6,past=12 --window-s 6 --phase runs --budget-s 280 \
  --out /tmp/hf_serving 2>&1 | grep -v Warning | tail -60 | tee -a $OUT/run.log
cp /tmp/hf_serving/summary.jsonl $OUT/summary.jsonl
tar cJf $OUT/hf_serving.tar.xz -C /tmp hf_serving
ls -la $OUT
