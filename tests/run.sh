#!/usr/bin/env bash
# Build Loom and run every test suite; the last line printed is
# `N passed, N failed, N skipped`.
#
#   tests/run.sh [SETUP.SH ARGS...] [-- MESON TEST ARGS...]
#
#   tests/run.sh                      install what is missing, build, run all
#   tests/run.sh --no-deps            same without the package step
#   tests/run.sh -- --suite unit      run one suite (args after -- go to meson test)
#   tests/run.sh --builddir b -Dcuda=disabled -- --list
#   tests/run.sh --sanitizers         also build and run the suites under ASan+UBSan and
#                                     under TSan (tests/sanitize.sh, their quick slices);
#                                     CI (.ci/run) runs this
#
# Environment:
#   LOOM_TEST_FULL=1                  also run the long suites (read by the tests
#                                     themselves; this script leaves it as it is)
#   LOOM_TEST_TIMEOUT_MULTIPLIER=N    multiply every meson test timeout (default 1)
#
# Exit status: non-zero when the build failed, a test failed or no test ran.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

setup_args=()
test_args=()
builddir=build
sanitizers=0
while (($#)); do
  case "$1" in
    --) shift; test_args=("$@"); break ;;
    --sanitizers) sanitizers=1 ;;
    --builddir)
      setup_args+=("$1")
      if (($# >= 2)); then builddir=$2; setup_args+=("$2"); shift; fi ;;
    --builddir=*) builddir=${1#--builddir=}; setup_args+=("$1") ;;
    *) setup_args+=("$1") ;;
  esac
  shift
done

# Multi-rank tests may start Open MPI jobs; CI runs as root on 2 cores.
if ((EUID == 0)); then
  export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
fi
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"

multiplier="${LOOM_TEST_TIMEOUT_MULTIPLIER:-1}"

# The results of an earlier run must not be summarized as this one's.
rm -f "$builddir/meson-logs/testlog.json" "$builddir/meson-logs/testlog.junit.xml"

rc=0
bash ./setup.sh "${setup_args[@]}" || rc=$?
if ((rc != 0)); then
  echo "tests/run.sh: setup/build failed (exit $rc); no tests were run"
  python3 tests/summarize.py "$builddir" || true
  exit "$rc"
fi

# Also drop the GoogleTest XML files (<test name>.xml) an earlier run left:
# meson merges whatever file it finds, even one a crashed binary did not write.
python3 tests/summarize.py --clean "$builddir"

echo "tests/run.sh: meson test -C $builddir --print-errorlogs --timeout-multiplier $multiplier ${test_args[*]}"
meson test -C "$builddir" --print-errorlogs --timeout-multiplier "$multiplier" \
  "${test_args[@]}" || rc=$?

# The sanitizer builds run after the default one, so a plain failure shows first; every
# build's cases are counted in the one closing line.
summary_dirs=("$builddir")
if ((sanitizers)); then
  for kind in address thread; do
    bash tests/sanitize.sh "$kind" --no-summary || rc=$?
  done
  summary_dirs+=(build-asan build-tsan)
fi

summary_rc=0
python3 tests/summarize.py "${summary_dirs[@]}" || summary_rc=$?

if ((rc != 0)); then
  exit "$rc"
fi
exit "$summary_rc"
