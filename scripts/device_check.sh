#!/usr/bin/env bash
# On the GPU machine: build against its own PyTorch, check the SASS, run the
# CUDA tests once per backend, compute-sanitizer's sweep, then the benchmark.
# Usage (ids from here: the device copy's .git may be stale):
#   GEMM_ACT_COMMIT=$(git rev-parse HEAD) GEMM_ACT_CSRC_TREE=$(git rev-parse HEAD:csrc) \
#     STEPS="build sass tests fuzz sanitizer bench models" bash scripts/device_check.sh [bench args]
# The tensor-core kernel objects (most of a CUDA build's time) can be compiled on
# the CPU machine instead and carried along in build/:
#   GEMM_ACT_SM80=1 python setup.py build_kernel_objects --build-temp build/temp.linux-x86_64-cpython-312 --cxx11-abi 1
# setup.py reuses each object whose inputs are unchanged.
# Where the tracked files and both families' objects pass the device's
# transfer limit, carry them compressed and unpack them first:
#   tar czf .deps/objs.tgz -C build/temp.linux-x86_64-cpython-312 sm90 sm80
#   (there) tar xzf .deps/objs.tgz -C build/temp.linux-x86_64-cpython-312
# Measurement steps (not run unless named): models (bench/models.py;
# MODELS_ARGS, e.g. "--rounds 3"), sweep (bench/kernel_sweep.py), and the
# diagnostics of bench/diag: clock, mmkernels, ncu, hotspots, launch, profile.
set -uo pipefail
cd "$(dirname "$0")/.."
# The ids the results record: whole git object ids, or none (the device copy's .git may be stale).
for id in "${GEMM_ACT_COMMIT:-}" "${GEMM_ACT_CSRC_TREE:-}"; do
  [[ -z "$id" || "$id" =~ ^[0-9a-f]{40}$ ]] || { echo "GEMM_ACT_COMMIT / GEMM_ACT_CSRC_TREE must be full 40-digit ids, got '$id'"; exit 2; }
done
OUT="${OUT:-/tmp/gemm_act_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Python's own build settings there name a g++ wrapper whose extensions carry
# a private copy of libstdc++: a C++ exception thrown from the extension then
# crashes the process. Build and link with the system's g++ instead.
if [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"
fi
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
# Every backend, the two the default build leaves out included, to test them.
export GEMM_ACT_SM80="${GEMM_ACT_SM80:-1}" GEMM_ACT_SIMT="${GEMM_ACT_SIMT:-1}"
# The whole sm90 family, never the fast CI lane's compile check.
unset GEMM_ACT_SM90_COMPILE_CHECK
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"

STEPS="${STEPS:-build sass tests fuzz sanitizer bench}"
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo; echo "=== $* ==="; }
status=0

step build
( time python3 setup.py build_ext --inplace ) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
tail -3 "$OUT/build.log"
echo "family kernel units compiled here (the rest reused): sm90 $(grep -c 'kernels/sm90_.*\.cu -o' "$OUT/build.log"), sm80 $(grep -c 'kernels/sm80_.*\.cu -o' "$OUT/build.log")"
ldd torch_gemm_act/_C*.so | grep -E "libstdc|libgcc"

if want sass; then
step sass
so=$(ls torch_gemm_act/_C*.so)
cuobjdump --dump-sass "$so" > "$OUT/sass.txt" 2>/dev/null
printf 'FFMA %s  DFMA %s  HGMMA %s  LDG.E.128 %s\n' "$(grep -c FFMA "$OUT/sass.txt")" \
  "$(grep -c DFMA "$OUT/sass.txt")" "$(grep -c HGMMA "$OUT/sass.txt")" "$(grep -c 'LDG.E.128' "$OUT/sass.txt")"
grep -E 'Function properties|spill|stack' "$OUT/build.log" | sort | uniq -c | sort -rn | head -5
rm -f "$OUT/sass.txt"
fi

# The CUDA backends this build holds, in the rule's order (the one list, C++'s).
BUILT_BACKENDS=$(python3 -c "import torch_gemm_act.testing as t; print(' '.join(t.cuda_backends()))")
echo "CUDA backends built: $BUILT_BACKENDS"

if want tests; then
# The CUDA suite once per CUDA backend: "rule" lets the dispatch rule decide;
# any other name starts the rule at that backend (TORCH_GEMM_ACT_BACKEND):
# forced, sm90 takes the small problems the rule leaves to the library.
# The CPU tests are CI's; the sanitizer sweep is its own step.
PYTEST_K="${PYTEST_K:-cuda and not memcheck and not racecheck}"
# SIMT, fuzzed below, is too slow for the whole suite.
for backend in ${TEST_BACKENDS:-rule ${BUILT_BACKENDS/simt/}}; do
  step "tests, backend $backend ($PYTEST_K)"
  if [ "$backend" = rule ]; then unset TORCH_GEMM_ACT_BACKEND; else export TORCH_GEMM_ACT_BACKEND=$backend; fi
  python3 -m pytest -q tests -p no:cacheprovider --durations=8 -k "$PYTEST_K" 2>&1 \
    | tee "$OUT/pytest_$backend.log" | tail -${PYTEST_TAIL:-22}
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
unset TORCH_GEMM_ACT_BACKEND
fi

if want fuzz; then
# The differential fuzz (tests/fuzz.py): every CUDA backend on gemm_act and
# every route under the rule, side by side with a fresh seed; the routes that
# build and fuse modules per case run as two processes (seed and seed + 1),
# half the cases each. One log, a summary line per backend and route.
step "differential fuzz: ${FUZZ_CASES:-10000} cases per backend and route${FUZZ_TIME:+, at most $FUZZ_TIME s each}"
seed="${FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
cases="${FUZZ_CASES:-10000}"
mkdir -p "$OUT/fuzz"
fuzz() {  # fuzz ROUTE BACKEND CASES SEED LOG
  python3 tests/fuzz.py --route "$1" --backend "$2" --cases "$3" --seed "$4" \
    ${FUZZ_TIME:+--time-limit "$FUZZ_TIME"} > "$OUT/fuzz/$5.log" 2>&1 &
}
for backend in ${FUZZ_BACKENDS:-rule tuned $BUILT_BACKENDS}; do fuzz gemm_act "$backend" "$cases" "$seed" "gemm_act_$backend"; done
for route in ${FUZZ_ROUTES:-linear_act linear_module conv1d gemm_glu gated_linear_act compile linear_cross_entropy fuse_lm_loss compile_lm_loss linear_dropout_add}; do
  fuzz "$route" rule "$cases" "$seed" "$route"
done
for route in ${FUZZ_SLOW_ROUTES:-fuse_mlp gated_module packed_glu}; do
  fuzz "$route" rule $(( (cases + 1) / 2 )) "$seed" "${route}_a"
  fuzz "$route" rule $(( cases / 2 )) $(( seed + 1 )) "${route}_b"
done
wait
{ echo "commit ${GEMM_ACT_COMMIT:-?}, csrc tree ${GEMM_ACT_CSRC_TREE:-?}, seed $seed (and $(( seed + 1 )) for the routes run as two processes)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  grep -h '^fuzz .*cases' "$OUT"/fuzz/*.log | python3 -c '
import re, sys, collections
total = collections.defaultdict(lambda: [0, 0, 0])
for line in sys.stdin:
    name, *counts = re.match(r"fuzz (\S+): (\d+) cases, (\d+) failed, (\d+) unconfirmed", line).groups()
    total[name] = [t + int(c) for t, c in zip(total[name], counts)]
for name, (n, f, u) in sorted(total.items()):
    print(f"fuzz {name}: {n} cases, {f} failed ({u} unconfirmed)")'
  echo; cat "$OUT"/fuzz/*.log; } > "$OUT/fuzz.log"
rm -r "$OUT/fuzz"
grep -E '^fuzz [^s]|^commit' "$OUT/fuzz.log" | grep -v ' s)$'
grep -qE '^fuzz .*, [1-9][0-9]* failed \(' "$OUT/fuzz.log" && status=1
echo "FAIL lines: $(grep -c '^FAIL' "$OUT/fuzz.log"), UNCONFIRMED lines: $(grep -c '^UNCONFIRMED' "$OUT/fuzz.log"), PRECISION lines: $(grep -c '^PRECISION' "$OUT/fuzz.log")"
grep '^PRECISION' "$OUT/fuzz.log" | head -20
fi

if want sanitizer; then
step "compute-sanitizer: memcheck and racecheck under each backend, memcheck per configuration"
python3 -m pytest -q tests/test_sanitizer.py -p no:cacheprovider --durations=20 2>&1 \
  | tee "$OUT/sanitizer.log" | tail -${PYTEST_TAIL:-22}
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if want sweep; then
step "${SWEEP_FAMILY:-sm90} configurations against each other: SWEEP_CONFIGS='${SWEEP_CONFIGS:-every compiled one}'"
python3 bench/kernel_sweep.py --family "${SWEEP_FAMILY:-sm90}" ${SWEEP_CONFIGS:+--configs "$SWEEP_CONFIGS"} \
  ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} ${SWEEP_ROUNDS:+--rounds "$SWEEP_ROUNDS"} \
  --out "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" | tail -22
fi

if want clock; then
step "SM clock and board power per contender: CLOCK_ARGS='${CLOCK_ARGS:-}'"
python3 bench/diag/clock_probe.py ${CLOCK_ARGS:-} 2>&1 | tee "$OUT/clock_probe.log" | tail -30
fi

if want mmkernels; then
step "the kernels torch.mm (cuBLAS) runs per benchmark shape"
python3 bench/diag/mm_kernels.py 2>&1 | tee "$OUT/mm_kernels.log" | tail -60
fi

# ncu_case SPEC NCU_OPTIONS...: profiles the third sm90 launch of one problem,
# SPEC = 'M,K,N,act,z[,configuration name]'.
ncu_case() {
  local spec=$1 m k n act z cfg; shift
  IFS=, read -r m k n act z cfg <<< "$spec"
  ncu "$@" -k regex:device_kernel --launch-skip 2 --launch-count 1 \
    python3 bench/kernel_sweep.py --profile "$m,$k,$n,$act,$z${cfg:+,$cfg}"
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
python3 bench/diag/ncu_hotspots.py "$OUT/hotspots_sass.csv" --top 45 | tee "$OUT/hotspots.txt" | head -60
rm -f "$OUT/hotspots.ncu-rep"
fi

if want bench; then
step bench
python3 bench/bench.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
fi

if want models; then
step "model-level benchmark"
python3 bench/models.py --out "$OUT" ${MODELS_ARGS:-} 2>&1 | tee "$OUT/models.log" | tail -25
fi

if want profile; then
step "a whole model's step under torch.profiler, eager against fused: PROFILE_ARGS='${PROFILE_ARGS:---case whole_gpt2 --compiled}'"
python3 bench/diag/step_profile.py ${PROFILE_ARGS:---case whole_gpt2 --compiled} 2>&1 \
  | grep -v "_warn_once\|Warning" | tee "$OUT/step_profile.log" | tail -40
fi

if want launch; then
step "host us per kernel launch by API, parameter size and cluster"
python3 bench/diag/launch_cost.py 2>&1 | tee "$OUT/launch_cost.log" | tail -8
fi

exit $status
