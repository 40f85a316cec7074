#!/usr/bin/env bash
# Builds tests/fuzz/wire_fuzz with clang's libFuzzer (and ASan+UBSan) in its own build
# directory and runs it for a bounded time on the seed corpus: CI's fuzzing run.
#
#   tests/fuzz/run_libfuzzer.sh SOURCE_DIR BUILD_DIR [SECONDS]   (default 60)
#
# Exit 77 (meson's skip) with the reason when clang or libFuzzer is missing; non-zero when
# the fuzzer found a crash (its input is left in BUILD_DIR/crash-*).
set -euo pipefail
src=$1 build=$2 seconds=${3:-60}
if ! command -v clang++ >/dev/null; then
  echo "skipped: clang++ is not installed (setup.sh installs clang)"; exit 77
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -fsanitize=fuzzer -x c++ - -o /dev/null 2>/dev/null; then
  echo "skipped: clang++ cannot link -fsanitize=fuzzer (libFuzzer missing)"; exit 77
fi
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" "$src" --buildtype=debugoptimized -Dtests=false -Dfuzz=true \
    -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C "$build" tests/fuzz/wire_fuzz >/dev/null
corpus="$build/fuzz-corpus"
mkdir -p "$corpus"
cd "$build"
log=$(mktemp)
status=0
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ./tests/fuzz/wire_fuzz -max_total_time="$seconds" \
  -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
grep -E "^stat::number_of_executed_units|^Done|ERROR|SUMMARY" "$log" || true
if [ "$status" -ne 0 ]; then
  tail -40 "$log"
  echo "libFuzzer found a crash (exit $status); inputs in $build/crash-*"
  exit 1
fi
echo "libFuzzer: $(awk '/^stat::number_of_executed_units/ {print $2}' "$log") executions in $seconds s, no crash"
