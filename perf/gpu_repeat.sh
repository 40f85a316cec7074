#!/usr/bin/env bash
# Runs one GPU test program again and again, to catch a stall that comes now and then: a short
# timeout (every wait in Loom then ends and names what it waited for), TRACE logs (each call's
# algorithm, and every connection's FIFO counters when a communicator ends), the log of the
# first run and of every failed run kept under OUT, the others dropped.
#
#   perf/gpu_repeat.sh [--prebuilt DIR] [--times N] [--out DIR] [--tar FILE] NAME PROGRAM [ARGS...]
#
#   --prebuilt DIR   programs from perf/gpu_suite.sh --bundle DIR (default: the build-gpu build)
#   --times N        runs (default 10)
#   --out DIR        where NAME-<run>.log.gz go (default gpu-results)
#   --tar FILE       also pack OUT into FILE (.tgz) after every run (a device machine brings
#                    back only a few files)
#   LOOM_TIMEOUT_MS (default 3000) and LOOM_DEBUG (default TRACE) pass through.
#
# Prints "NAME: N runs, K failed (runs ...)" and exits 1 when any failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=build-gpu times=10 out=gpu-results tarfile=""
while (($#)); do
  case "$1" in
    --prebuilt) bin=$2; export LD_LIBRARY_PATH="$2${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; shift 2 ;;
    --times) times=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tar) tarfile=$2; shift 2 ;;
    -*) echo "gpu_repeat.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($# >= 2)) || { echo "usage: gpu_repeat.sh [--prebuilt DIR] [--times N] [--out DIR] [--tar FILE] NAME PROGRAM [ARGS...]" >&2; exit 2; }
name=$1 program=$2
shift 2

export CUDA_MODULE_LOADING=EAGER
export LOOM_TIMEOUT_MS=${LOOM_TIMEOUT_MS:-3000}
export LOOM_DEBUG=${LOOM_DEBUG:-TRACE}
mkdir -p "$out"
failed=()
for ((run = 1; run <= times; ++run)); do
  log=$out/$name-$run.log
  if timeout -k 5 120 "$bin/$program" "$@" > "$log" 2>&1; then
    ((run == 1)) || rm -f "$log"
  else
    failed+=("$run")
  fi
  [[ -f $log ]] && gzip -f "$log"
  [[ -z $tarfile ]] || tar czf "$tarfile" -C "$(dirname "$out")" "$(basename "$out")"
done
echo "$name: $times runs, ${#failed[@]} failed${failed[*]:+ (runs ${failed[*]})}"
((${#failed[@]} == 0))
