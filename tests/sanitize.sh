#!/usr/bin/env bash
# Run the GPU suite under compute-sanitizer's four tools (memcheck, racecheck, synccheck, initcheck),
# in parallel, as four processes on one GPU; each writes its own logs and one summary line.
#
#   tests/sanitize.sh                    # all four tools, each on its test selection (printed first)
#   tests/sanitize.sh memcheck initcheck # some of them
#
# Exit status: 0 only when every tool ran to its "ERROR SUMMARY: 0 errors" and its pytest run passed;
# 1 when a tool reported errors, printed no summary, or a test failed; 2 on a usage error.
#
# Environment:
#   PYTHON                 the interpreter (default: python3 on PATH)
#   COMPUTE_SANITIZER      the sanitizer binary (default: PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin)
#   SANITIZE_OUT           the log directory (default: sanitize-logs/<UTC time>)
#   SANITIZE_<TOOL>_TESTS  a tool's pytest selection, overriding the default below (e.g.
#                          SANITIZE_RACECHECK_TESTS="tests/gpu/test_launch.py")
#   SANITIZE_PYTEST_ARGS   extra pytest arguments for every tool (e.g. "-m 'not cutlass'")
#   MIRCUDA_TEST_PATIENCE  the tests' hang-guard factor (default here 30: the tools slow the process down)
#
# Why these options:
#   --report-api-errors no   mircuda, Numba and NVRTC probe the driver and expect some calls to fail (an
#                            attribute a device lacks, a capture status, a context query; the tests also
#                            provoke refusals on purpose). Those are return codes the code handles, not
#                            memory errors; the four tools still report every device-side fault.
#   (initcheck keeps its default of not tracking unused memory: pool allocations rounded up, and
#   buffers the tests poison only in part, are not uninitialised reads. compute-sanitizer 2025.3 takes
#   --track-unused-memory as a bare switch that turns tracking on, and read "no" as the program.)
#   --target-processes all   the persistent-cache test and Numba may start child processes.
#   --error-exitcode 1       a tool's findings fail its process even if pytest passed.
# Selections: memcheck, synccheck and initcheck run the whole GPU suite; racecheck (the slowest, it
# instruments every shared memory access) runs the tests that launch the library's own kernels with
# shared memory and barriers: launches, shared memory, graphs, Numba kernels, the vector and GEMV plans.
set -u -o pipefail

TOOLS_ALL=(memcheck racecheck synccheck initcheck)
declare -A DEFAULT_TESTS=(
  [memcheck]="tests/gpu"
  [racecheck]="tests/gpu/test_launch.py tests/gpu/test_shared_memory.py tests/gpu/test_graph.py tests/gpu/test_numba_kernels.py tests/gpu/test_matmul_vector_gpu.py tests/gpu/test_matmul_gemv_gpu.py"
  [synccheck]="tests/gpu"
  [initcheck]="tests/gpu"
)
declare -A TOOL_OPTIONS=(
  [memcheck]="--leak-check no"
  [racecheck]=""
  [synccheck]=""
  [initcheck]=""
)

cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}

tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=("${TOOLS_ALL[@]}")
for t in "${tools[@]}"; do
  if [ -z "${DEFAULT_TESTS[$t]+x}" ]; then
    echo "sanitize.sh: unknown tool '$t' (expected some of: ${TOOLS_ALL[*]})" >&2
    exit 2
  fi
done

find_sanitizer() {
  if [ -n "${COMPUTE_SANITIZER:-}" ]; then echo "$COMPUTE_SANITIZER"; return; fi
  if command -v compute-sanitizer >/dev/null 2>&1; then command -v compute-sanitizer; return; fi
  local d
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    if [ -n "$d" ] && [ -x "$d/bin/compute-sanitizer" ]; then echo "$d/bin/compute-sanitizer"; return; fi
  done
}
SANITIZER=$(find_sanitizer)
if [ -z "$SANITIZER" ] || [ ! -x "$SANITIZER" ]; then
  echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER, or put the CUDA toolkit's bin on PATH)" >&2
  exit 2
fi

OUT=${SANITIZE_OUT:-sanitize-logs/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" || { echo "sanitize.sh: cannot make $OUT" >&2; exit 2; }
export MIRCUDA_REQUIRE_GPU=1                    # a missing device fails, never skips the whole run
export MIRCUDA_TEST_PATIENCE=${MIRCUDA_TEST_PATIENCE:-30}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "compute-sanitizer: $SANITIZER ($("$SANITIZER" --version 2>/dev/null | grep -io 'version [0-9.]*' | head -1))"
echo "logs: $OUT"
declare -A PIDS STARTED
for t in "${tools[@]}"; do
  var="SANITIZE_${t^^}_TESTS"
  tests=${!var:-${DEFAULT_TESTS[$t]}}
  echo "$t: $tests"
  # shellcheck disable=SC2086  # the selections and options are word lists
  (
    exec "$SANITIZER" --tool "$t" ${TOOL_OPTIONS[$t]} --report-api-errors no --target-processes all \
      --error-exitcode 1 --print-limit 200 --log-file "$OUT/$t.%p.log" \
      "$PYTHON" -m pytest -p no:randomly -p no:cacheprovider -q $tests ${SANITIZE_PYTEST_ARGS:-} \
      --junitxml "$OUT/$t.junit.xml"
  ) >"$OUT/$t.pytest.log" 2>&1 &
  PIDS[$t]=$!
  STARTED[$t]=$SECONDS
done

status=0
for t in "${tools[@]}"; do
  wait "${PIDS[$t]}"
  rc=$?
  secs=$((SECONDS - ${STARTED[$t]}))
  # One summary per sanitized process (pytest and any child that used CUDA), summed: "ERROR SUMMARY: N
  # errors", or racecheck's "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)" (seen with
  # compute-sanitizer 2025.3 on the H200); none at all means the tool never finished.
  summaries=$(cat "$OUT/$t".*.log 2>/dev/null \
    | grep -oE 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ error' \
    | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')
  errors=0
  for n in $summaries; do errors=$((errors + n)); done
  outcome=$(grep -E '(passed|failed|error|no tests ran)' "$OUT/$t.pytest.log" | tail -1 | tr -s '=' ' ' | sed 's/^ *//;s/ *$//')
  verdict=ok
  if [ -z "$summaries" ]; then
    verdict="FAILED (no ERROR SUMMARY: the sanitizer did not finish)"
  elif [ "$errors" -ne 0 ]; then
    verdict="FAILED ($errors errors: see $OUT/$t.*.log)"
  elif [ "$rc" -ne 0 ]; then
    verdict="FAILED (exit status $rc: see $OUT/$t.pytest.log)"
  fi
  [ "$verdict" = ok ] || status=1
  printf '%-9s ERROR SUMMARY: %s errors | pytest: %s | %ss | %s\n' "$t" "$errors" "${outcome:-no outcome}" \
    "$secs" "$verdict" | tee -a "$OUT/summary.txt"
done
exit $status
