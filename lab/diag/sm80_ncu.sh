#!/usr/bin/env bash
# ncu of the sm80 family (forced) on given problems: speed of light, memory
# (L2, shared), warp stalls, pipes, scheduler. Usage, on the GPU machine:
#   OUT=dir bash lab/diag/sm80_ncu.sh 8192,8192,8192,none,0 32768,768,3072,gelu,0[,config] ...
# Each spec is M,K,N,activation,store_z[,configuration]; the third launch is
# profiled, at the GPU's own clocks (--clock-control none).
set -uo pipefail
OUT="${OUT:-/tmp/sm80_ncu}"; mkdir -p "$OUT"
for spec in "$@"; do
  ncu --clock-control none -k regex:sm80_gemm --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section InstructionStats --print-details all \
    python3 bench/kernel_sweep.py --family sm80 --profile "$spec" > "$OUT/ncu_sm80_${spec//,/_}.txt" 2>&1
  echo "== $spec"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Issue Slots Busy|No Eligible|Registers Per|Shared Memory Configuration Size|Stall|Warp Cycles Per Issued|Executed Ipc|Bank Conflicts|Achieved Occupancy" \
    "$OUT/ncu_sm80_${spec//,/_}.txt" | head -30
done
