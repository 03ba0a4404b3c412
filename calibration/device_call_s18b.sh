#!/usr/bin/env bash
# Session 18's second device call, in one command (issues 44 and 45): the speculative verification
# steps (validation/spec_grid.md's predictions), the two library stacks (validation/
# library_stacks_predictions.md's predictions) and transformers' assisted generation (quick).
#   run(kind=nvidia-h200, carry=[".whl"]): bash calibration/device_call_s18b.sh
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/run.log
python3 -c "import torch, transformers, hqq; print(torch.__version__, transformers.__version__, hqq.__file__)" 2>&1 | tee -a $OUT/run.log
timeout 270 python3 validation/measure_steps.py --spec --budget-s 200 --out $OUT/h200_spec_steps.csv 2>&1 | tail -20 | tee -a $OUT/run.log
timeout 150 python3 calibration/measure_gemlite.py --out $OUT/h200_gemlite.jsonl --budget-s 80 2>&1 | tail -15 | tee -a $OUT/run.log
timeout 170 python3 calibration/measure_quantized_cache.py --out $OUT/qcache --budget-s 100 --pack 2>&1 | tail -15 | tee -a $OUT/run.log
mkdir -p $OUT/assisted
timeout 90 python3 validation/measure_assisted.py --quick --out $OUT/assisted 2>&1 | tail -15 | tee -a $OUT/run.log
ls -la $OUT $OUT/* | tee -a $OUT/run.log
