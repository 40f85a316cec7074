#!/usr/bin/env bash
# Builds Loom with a sanitizer in its own build directory and runs the test suites there
# (all but `fuzz`, whose libFuzzer run already has its own ASan+UBSan build).
#
#   tests/sanitize.sh address [--no-summary]    ASan + UBSan   (build-asan)
#   tests/sanitize.sh thread  [--no-summary]    TSan           (build-tsan)
#
# tests/run.sh --sanitizers (what CI runs) calls this for both, with --no-summary, and
# counts every build's results in its one closing line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kind=${1:-}
summary=1
[[ "${2:-}" == "--no-summary" ]] && summary=0
case "$kind" in
  address) dir=build-asan; sanitize=address,undefined ;;
  thread) dir=build-tsan; sanitize=thread ;;
  *) echo "usage: tests/sanitize.sh address|thread [--no-summary]" >&2; exit 2 ;;
esac
# -O1, as the sanitizers' own documentation suggests: ASan+UBSan code at the project's -O2
# took 20-27 minutes to compile on 2 cores, longer than its tests run. -g1 (functions and line
# tables, which is all a sanitizer's report prints) instead of -g: a heavy test file compiled
# in 25 s instead of 41 under ASan+UBSan on the Intel Xeon VM, where that build took 15 minutes.
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Db_sanitize="$sanitize" -Dcuda=disabled -Doptimization=1 -Ddebug=false -Dc_args=-g1 \
    -Dcpp_args=-g1
fi
# An earlier run's results must not be counted as this one's, even if the build fails.
rm -f "$dir/meson-logs/testlog.json" "$dir/meson-logs/testlog.junit.xml"
ninja -C "$dir"
python3 tests/summarize.py --clean "$dir"
# Children forked by the multi-rank harness inherit these; halt_on_error makes any report fail its rank.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1
# UCX's memory hooks patch mmap and munmap in the process, which crashed (SIGSEGV) under TSan's
# own interceptors in the UCX tests; without them UCX registers memory per use instead of from
# its cache, which changes nothing the tests check.
[[ $kind == thread ]] && export UCX_MEM_EVENTS=no
# Under a sanitizer every call costs 5-20 times more: the matrices run their quick slice
# (tests/common/matrix_scale.h), which still reaches every collective, algorithm, wire and
# rank count; LOOM_TEST_FULL=1 still asks for everything.
export LOOM_TEST_QUICK=1
status=0
# Sanitizers make everything several times slower than the timeouts in meson.build assume.
skip=(--no-suite fuzz)
if [[ $kind == thread ]]; then
  # TSan finds races between threads: the one-thread suite gives it nothing to see. The fault
  # suite's bound (every survivor reports within 10 s of a kill, 8 process ranks on 2 cores)
  # does not hold at TSan's speed, and the multihost suite's ranks are processes running the
  # code the multirank suite runs as threads; ASan runs all three.
  skip+=(--no-suite one-thread --no-suite fault --no-suite multihost)
  echo "tests/sanitize.sh: suites one-thread, fault and multihost skipped under TSan (ASan runs them)"
fi
meson test -C "$dir" "${skip[@]}" --num-processes 1 --timeout-multiplier 4 --print-errorlogs || status=$?
if ((summary)); then
  python3 tests/summarize.py "$dir" || status=$?
fi
exit $status
