#!/usr/bin/env bash
# The two device calls of issue 30's validation (docs/traces.md), made back to back on one
# machine so that both phases see the same GPU:
#   bash calibration/hf_validation_call.sh capture   # traces, then hwsim's predictions of the
#                                                    # whole grid from them, written before any
#                                                    # unprofiled step is measured; traces packed
#   bash calibration/hf_validation_call.sh measure   # unprofiled wall (median of 10) + device-busy
#   bash calibration/hf_validation_call.sh all       # both in one call, after measure_aten_kernels.py
#                                                    # (eager stacks: STACKS; CALL_S bounds the call)
#   bash calibration/hf_validation_call.sh compiled  # the compiled stack (COMPILED_MODELS, POINTS)
#   bash calibration/hf_validation_call.sh harness   # this project's harness: traces, measured walls, predictions
#                                                    # (HARNESS_ARGS: capture_harness_traces.py's; an H100 takes Qwen3 only)
# ATEN=0 skips the ATen microbenchmarks. HF_ARGS replaces the models chosen by GPU (capture_hf_traces.py's --models, --stacks, --pairs-from).
# hwsim's dependencies missing on the device travel as wheels in .whl/ (run's README, Notes).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) HW=h200-sxm; MODELS="";; *H100*) HW=h100-sxm; MODELS="--models llama-3.1-8b qwen3-30b-a3b olmoe-1b-7b qwen1.5-moe-a2.7b";; *) HW=h200-sxm; MODELS="";; esac
[ -n "$HF_ARGS" ] || echo "GPU: $GPU -> profile $HW ${MODELS:+(Mixtral does not fit: $MODELS)}"
if [ "$1" = all ]; then      # one call: microbenchmarks, traces, predictions, then the measurements
    T0=$SECONDS
    [ "${ATEN:-1}" = 0 ] || python3 calibration/measure_aten_kernels.py --out "$OUT/aten_kernels.jsonl" 2>&1 | grep -v USDT | cut -c1-160 | tail -60
    EARLIER=""                 # an earlier call's traces count where this call got the same chip
    [ "$HW" = h100-sxm ] && EARLIER=validation/data/hf_traces_h100/call_3/captured.jsonl
    CAPTURE_MODELS=$([ "$HW" = h100-sxm ] && echo "--models llama-3.1-8b qwen3-30b-a3b olmoe-1b-7b" || echo "")
    if [ -n "$EARLIER" ] && [ -n "$QUICK" ]; then    # little device time left: measure what was traced
        HF_ARGS="$MODELS --pairs-from $EARLIER" DEADLINE=${MEASURE_S:-200} bash "$0" measure
        exit
    fi
    # eager stacks here; the compiled ones (a minute of compiling a point) have their own call
    STACKS=${STACKS:-eager eager-loop}
    HF_ARGS="$CAPTURE_MODELS --stacks $STACKS" DEADLINE=${CAPTURE_S:-200} PREDICT_S=${PREDICT_S:-100} bash "$0" capture
    LEFT=$(( ${CALL_S:-560} - (SECONDS - T0) ))     # what the call has left is the measure's deadline
    HF_ARGS="$MODELS --stacks $STACKS --pairs-from $EARLIER $OUT/traces/captured.jsonl" DEADLINE=${MEASURE_S:-$LEFT} bash "$0" measure
    exit
fi
if [ "$1" = compiled ]; then # torch.compile on a StaticCache: capture, predict, then measure the traced points
    T0=$SECONDS
    PTS=${POINTS:-8x4096 1x1024}
    HF_ARGS="--models ${COMPILED_MODELS:-llama-3.1-8b olmoe-1b-7b} --stacks compiled --points $PTS" \
        DEADLINE=${CAPTURE_S:-230} PREDICT_S=${PREDICT_S:-60} bash "$0" capture
    LEFT=$(( ${CALL_S:-560} - (SECONDS - T0) ))
    HF_ARGS="--models ${COMPILED_MODELS:-llama-3.1-8b olmoe-1b-7b} --stacks compiled --points $PTS --pairs-from $OUT/traces/captured.jsonl" \
        DEADLINE=${MEASURE_S:-$LEFT} bash "$0" measure
    exit
fi
if [ "$1" = harness ]; then  # this project's own harness (calibration/capture_harness_traces.py), then predictions
    python3 calibration/capture_harness_traces.py --out "$OUT/harness" ${HARNESS_ARGS:-$([ "$HW" = h100-sxm ] \
        && echo "--models qwen3-30b-a3b")} 2>&1 | grep -v USDT | cut -c1-300
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD timeout "${PREDICT_S:-120}" python3 validation/predict_hf_traces.py predict \
        --traces "$OUT/harness" --hardware "$HW" --jobs 14 > "$OUT/harness_predictions.jsonl"
    exit
fi
if [ "$1" = capture ]; then
    python3 calibration/capture_hf_traces.py capture --out "$OUT/traces" --deadline-s "${DEADLINE:-330}" ${HF_ARGS:-$MODELS} 2>&1 \
        | grep -v -e USDT -e '^\s*$' | tee "$OUT/capture.log" | cut -c1-300
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD timeout "${PREDICT_S:-170}" python3 validation/predict_hf_traces.py predict \
        --traces "$OUT/traces" --hardware "$HW" --jobs 14 > "$OUT/hf_predictions.jsonl" 2> "$OUT/predict.err"
    echo "predictions: $(wc -l < "$OUT/hf_predictions.jsonl") rows, $(grep -c '"error"' "$OUT/hf_predictions.jsonl") errors"; tail -3 "$OUT/predict.err"
    cat "$OUT/predict.err" >> "$OUT/capture.log"; rm -f "$OUT/predict.err" "$OUT"/traces/*.json   # 8 files come back
    python3 -c "import sys; sys.path.insert(0, 'calibration'); import capture_hf_traces as c; c.pack('$OUT/traces')"
else
    python3 calibration/capture_hf_traces.py measure --out "$OUT/hf_steps.jsonl" --deadline-s "${DEADLINE:-480}" ${HF_ARGS:-$MODELS} 2>&1 \
        | grep -v -e USDT -e '^\s*$' | tee "$OUT/measure.log" | cut -c1-300
    rm -f "$OUT/busy.json.gz"
fi
