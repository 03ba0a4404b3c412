#!/usr/bin/env bash
# Session 22's last-budget H200 call (issue 45 item 1): the speculative verification grid alone (the first
# part of calibration/device_call_s19b.sh; Mixtral-8x7B needs the H200's memory). Predictions committed
# before measuring: validation/spec_grid.md, spec_grid_s21.md, spec_grid_s22.md (cuDNN table added).
#   run(needs_h200=true): bash validation/device_call_s22b.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 240 python3 validation/measure_steps.py --spec --budget-s 180 --out $OUT/h200_spec_steps.csv 2>&1 \
  | tail -20 | tee -a $OUT/run.log
ls -la $OUT | tee -a $OUT/run.log
