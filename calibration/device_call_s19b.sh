#!/usr/bin/env bash
# Session 19's H200 kernel call (issues 45 and 44): the speculative verification grid (Mixtral-8x7B
# needs the H200's memory; predictions committed before: validation/spec_grid.md) and the fast
# low-bit kernels (predictions: calibration/data/h200_fast_kernels_predicted.jsonl; the lean kernels
# without empty 16-bit slots: *_fast_kernels_lean_predicted.jsonl, with each kernel's smem/registers).
# Session 21: the spec grid re-predicted (FA2 Q>1 per query head, before measuring): validation/spec_grid_s21.md.
# Session 20: the same fast kv rows predicted under the device's programs and the refit under occupancy:
# calibration/data/h200_fast_kernels_fitted_predicted_s20.jsonl (compare_fast_kernels.py against it too).
# Session 21: again under the kernel as its launcher runs it (one-shot combine, whole-block splits, a
# wave's stalls overlapped by the programs present) and the 16-bit refit: ..._predicted_s21.jsonl;
# the W4A16 rows as a chain overlapped by resident programs: ..._predicted_s21b.jsonl (KV rows = s21's).
#   run(needs_h200=true): bash calibration/device_call_s19b.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 240 python3 validation/measure_steps.py --spec --budget-s 180 --out $OUT/h200_spec_steps.csv 2>&1 \
  | tail -20 | tee -a $OUT/run.log
timeout 140 python3 calibration/measure_fast_kernels.py --out $OUT/fast_kernels_lean.jsonl --parts check,kv \
  --impls fast2,fast2_asm,fast2_lean,fast2_lean_asm,fast4_lean_asm,fast_adaptive2_asm,sdpa_flash,sdpa_cudnn \
  > /tmp/fast_lean.log 2>&1; grep -v "^  " /tmp/fast_lean.log | tail -12 | tee -a $OUT/run.log
timeout 185 python3 calibration/measure_fast_kernels.py --parts ceiling,check,kv,gemm --budget-s 120 \
  --out $OUT/fast_kernels.jsonl > /tmp/fast_kernels.log 2>&1; grep -v "^  " /tmp/fast_kernels.log | tail -30 | tee -a $OUT/run.log
ls -la $OUT | tee -a $OUT/run.log
