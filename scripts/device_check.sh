#!/usr/bin/env bash
# On the GPU machine: build against its own PyTorch, run the CUDA tests, a
# compute-sanitizer sweep, check the SASS, then run the benchmark.
# Usage (ids from here: the device copy's .git may be stale):
#   GEMM_ACT_COMMIT=$(git rev-parse HEAD) GEMM_ACT_CSRC_TREE=$(git rev-parse HEAD:csrc) \
#     STEPS="build sass tests sanitize bench" bash scripts/device_check.sh [bench args]
# The sm90 objects (5-6 minutes of a 16-core build) can be compiled on the
# CPU machine instead and carried (build/temp.linux-x86_64-cpython-312/sm90):
#   python setup.py build_sm90_objects --build-temp build/temp.linux-x86_64-cpython-312 --cxx11-abi 1
# (with GEMM_ACT_SM90_SWEEP=1 for a sweep build); the build then takes ~45 s.
# Do not delete build/ in the device command then.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gemm_act_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Python's own build settings there name a g++ wrapper whose extensions carry
# a private copy of libstdc++: a C++ exception thrown from the extension then
# crashes the process. Build and link with the system's g++ instead.
if [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"
fi
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"

STEPS="${STEPS:-build sass tests sanitize bench}"
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo; echo "=== $* ==="; }
status=0

step build
# sm90 objects compiled elsewhere (python setup.py build_sm90_objects
# --build-temp build/temp.linux-x86_64-cpython-312 --cxx11-abi 1, then carried)
# are reused when their stamp names this csrc tree and sweep flag; touched so
# setup.py finds them newer than the copied sources. Any other stamp: removed.
for stamp in build/temp.*/sm90/SOURCE; do
  [ -f "$stamp" ] || continue
  if [ "$(cat "$stamp")" = "csrc ${GEMM_ACT_CSRC_TREE:-?} sweep=${GEMM_ACT_SM90_SWEEP:-0}" ]; then
    echo "reusing the sm90 objects of $(cat "$stamp")"; find "$(dirname "$stamp")" -name '*.o' -exec touch {} +
  else
    echo "sm90 objects of '$(cat "$stamp")' do not match: rebuilding them"; rm -rf "$(dirname "$stamp")"
  fi
done
( time python3 setup.py build_ext --inplace ) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
tail -3 "$OUT/build.log"
ldd torch_gemm_act/_C*.so | grep -E "libstdc|libgcc"
python3 scripts/diag/raise_error.py || status=1

if want sass; then
step sass
so=$(ls torch_gemm_act/_C*.so)
cuobjdump --dump-sass "$so" > "$OUT/sass.txt" 2>/dev/null
printf 'FFMA %s  DFMA %s  HGMMA %s  LDG.E.128 %s\n' "$(grep -c FFMA "$OUT/sass.txt")" \
  "$(grep -c DFMA "$OUT/sass.txt")" "$(grep -c HGMMA "$OUT/sass.txt")" "$(grep -c 'LDG.E.128' "$OUT/sass.txt")"
grep -E 'Function properties|spill|stack' "$OUT/build.log" | sort | uniq -c | sort -rn | head -5
rm -f "$OUT/sass.txt"
fi

if want tests; then
step tests
python3 -m pytest -q -x tests -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if want sanitize; then
step compute-sanitizer
compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_sweep.py > "$OUT/sanitizer.log" 2>&1
rc=$?; tail -4 "$OUT/sanitizer.log"; echo "memcheck exit code: $rc"; [ $rc -eq 0 ] || status=1
fi

if want configs; then
step "bf16 weight.t() tensor-core tests and memcheck on each forced configuration: FORCED_CONFIGS='${FORCED_CONFIGS:-}'"
for cfg in ${FORCED_CONFIGS:-}; do
  TORCH_GEMM_ACT_SM90_CONFIG=$cfg timeout 600 python3 -m pytest -q -x tests/test_gemm_act.py \
    -p no:cacheprovider -k "test_tensor_core_shapes and cuda and bf16 and weight_t" > "$OUT/pytest_config_$cfg.log" 2>&1
  rc=$?; echo "config $cfg tests: $(tail -1 "$OUT/pytest_config_$cfg.log") (exit $rc)"; [ $rc -eq 0 ] || status=1
  TORCH_GEMM_ACT_SM90_CONFIG=$cfg timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 scripts/sanitize_sweep.py --bf16-weight-t > "$OUT/sanitizer_config_$cfg.log" 2>&1
  rc=$?; echo "config $cfg memcheck: $(tail -2 "$OUT/sanitizer_config_$cfg.log" | tr '\n' ' ') (exit $rc)"
  [ $rc -eq 0 ] || status=1
done
fi

if want sweep; then
step "sm90 configurations: SWEEP_CONFIGS (candidates beyond 0, 1, 4, 13, 22 need a GEMM_ACT_SM90_SWEEP=1 build)"
python3 bench/sm90_sweep.py --configs "${SWEEP_CONFIGS:-auto,0,1,4,13,22}" ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} \
  --out "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" | tail -22
fi

if want clock; then
step "SM clock and board power per contender: CLOCK_ARGS='${CLOCK_ARGS:-}'"
python3 scripts/diag/clock_probe.py ${CLOCK_ARGS:-} 2>&1 | tee "$OUT/clock_probe.log" | tail -30
fi

if want mmkernels; then
step "the kernels torch.mm (cuBLAS) runs per benchmark shape"
python3 scripts/diag/mm_kernels.py 2>&1 | tee "$OUT/mm_kernels.log" | tail -60
fi

# ncu_case SPEC NCU_OPTIONS...: profiles the third sm90 launch of one problem,
# SPEC = 'M,K,N,act,z[,config]' (config: a forced KernelConfig number).
ncu_case() {
  local spec=$1 m k n act z cfg; shift
  IFS=, read -r m k n act z cfg <<< "$spec"
  TORCH_GEMM_ACT_SM90_CONFIG="${cfg:-}" ncu "$@" -k regex:device_kernel --launch-skip 2 \
    --launch-count 1 python3 bench/sm90_sweep.py --profile "$m,$k,$n,$act,$z"
}

if want ncu; then
step "ncu of the sm90 kernel: NCU_CASES='M,K,N,act,z[,config] ...'"
for spec in ${NCU_CASES:-16384,1024,4096,gelu,1}; do
  ncu_case "$spec" --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section InstructionStats --print-details all \
    > "$OUT/ncu_${spec//,/_}.txt" 2>&1
  echo "$spec:"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued" "$OUT/ncu_${spec//,/_}.txt" | head -12
done
fi

if want hotspots; then
step "ncu source counters: where the warps stall (HOTSPOT_CASE='M,K,N,act,z[,config]')"
ncu_case "${HOTSPOT_CASE:-16384,1024,4096,gelu,1}" --section SourceCounters \
  --section WarpStateStats -f -o "$OUT/hotspots" > "$OUT/hotspots.log" 2>&1
ncu --import "$OUT/hotspots.ncu-rep" --page source --csv --print-source sass > "$OUT/hotspots_sass.csv" 2>&1
python3 scripts/diag/ncu_hotspots.py "$OUT/hotspots_sass.csv" --top 45 | tee "$OUT/hotspots.txt" | head -60
rm -f "$OUT/hotspots.ncu-rep"
fi

if want bench; then
step bench
python3 bench/bench.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
fi
exit $status
