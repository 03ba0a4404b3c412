#!/usr/bin/env bash
# Session 22: whichever card comes. An H200 runs the kernel call that needs one (spec grid with
# Mixtral's memory, fast low-bit kernels: calibration/device_call_s19b.sh, predictions committed);
# an H100 runs the HF defaults serving + profiled bursts on one host (validation/device_call_s22a.sh).
#   run(): bash validation/device_call_s22.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash calibration/device_call_s19b.sh
else
  bash validation/device_call_s22a.sh
fi
