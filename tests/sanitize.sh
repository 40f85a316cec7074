#!/usr/bin/env bash
# Builds Loom with a sanitizer in its own build directory and runs the test suites there.
# Longer than the default run (a sanitizer build takes minutes on 2 cores), so CI does not
# run it; run it before landing changes to threads, sockets or memory handling.
#
#   tests/sanitize.sh address     ASan + UBSan   (build-asan)
#   tests/sanitize.sh thread      TSan           (build-tsan)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kind=${1:-}
case "$kind" in
  address) dir=build-asan; sanitize=address,undefined ;;
  thread) dir=build-tsan; sanitize=thread ;;
  *) echo "usage: tests/sanitize.sh address|thread" >&2; exit 2 ;;
esac
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Db_sanitize="$sanitize" -Dcuda=disabled
fi
ninja -C "$dir"
# Children forked by the multi-rank harness inherit these; halt_on_error makes any report fail its rank.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1
status=0
# Sanitizers make everything several times slower than the timeouts in meson.build assume.
meson test -C "$dir" --num-processes 1 --timeout-multiplier 4 --print-errorlogs || status=$?
python3 tests/summarize.py "$dir" || status=$?
exit $status
