#!/usr/bin/env bash
# Probes of real-driver behaviour the simulator copies (one GPU).
b=${1:-/tmp/cucore-gpu-build}
u=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
for c in "0,$u" "$u,0" "0,$u,0" "${u:0:8}" "${u:4}" "0, 0" " 0" "0,abc,0"; do
  printf 'CVD=%-50s -> ' "\"$c\""
  CUDA_VISIBLE_DEVICES="$c" $b/tools/cucore devices 2>&1 | tail -1
done
