#!/usr/bin/env bash
# Session 19's last device minutes (issue 45): the speculative verification grid alone on an H200
# (Mixtral-8x7B needs its memory; predictions committed before: validation/spec_grid.md).
#   run(needs_h200=true): bash calibration/device_call_s19c.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 200 python3 validation/measure_steps.py --spec --budget-s 150 --out $OUT/h200_spec_steps.csv 2>&1 \
  | tail -20 | tee -a $OUT/run.log
