#!/usr/bin/env bash
# Session 18's first device call (issue 44): the fast low-bit kernels (predictions committed
# before: calibration/data/h200_fast_kernels_predicted.jsonl, h100_... for an H100) and the two
# library stacks (validation/library_stacks_predictions.md), budgets cut to fit one call.
#   run(kind=nvidia-h200, carry=[".whl"]): bash calibration/device_call_s18a.sh
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
timeout 330 python3 calibration/measure_fast_kernels.py --parts ceiling,check,kv,gemm --budget-s 230 \
  --out $OUT/fast_kernels.jsonl > /tmp/fast_kernels.log 2>&1; grep -v "^  " /tmp/fast_kernels.log | tail -30 | tee -a $OUT/run.log
timeout 110 python3 calibration/measure_gemlite.py --out $OUT/gemlite.jsonl --budget-s 50 2>&1 | tail -8 | tee -a $OUT/run.log
timeout 140 python3 calibration/measure_quantized_cache.py --out $OUT/qcache --budget-s 75 --pack 2>&1 | tail -8 | tee -a $OUT/run.log
ls -la $OUT $OUT/* | tee -a $OUT/run.log
