#!/usr/bin/env bash
# DDP overlap benchmark (docs/PERF.md): loom-ddp-bench on 2 and 4 ranks under loomrun, with
# the MLP's real arithmetic and with backward simulated by 20 ms of sleep (an accelerator's
# backward, leaving the CPU to the reduction); each table after the command that made it.
#
#   perf/ddp_bench.sh [--builddir DIR] [--quick] [-- EXTRA loom-ddp-bench FLAGS]
#
# --quick: a tiny model and two steps (the test suite's smoke run, a few seconds).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
builddir=build
flags=()
while (($#)); do
  case "$1" in
    --builddir) builddir=$2; shift ;;
    --quick) flags+=(--dim 16 --hidden 32 --layers 2 --batch 8 --warmup 1 --steps 2 --bucket-caps-mb 1,2) ;;
    --) shift; flags+=("$@"); break ;;
    *) echo "usage: perf/ddp_bench.sh [--builddir DIR] [--quick] [-- FLAGS]" >&2; exit 2 ;;
  esac
  shift
done

# Quiet when up to date; the compiler's messages when the build fails.
if ! log=$(ninja -C "$builddir" perf/ddp_bench/loom-ddp-bench tools/loomrun/loomrun 2>&1); then
  echo "$log" >&2
  echo "perf/ddp_bench.sh: building loom-ddp-bench in $builddir failed" >&2
  exit 1
fi

cores=$(nproc)
echo "# $cores cores: $(lscpu | sed -n 's/^Model name: *//p')"
for ranks in 2 4; do
  if ((ranks > cores)); then
    echo "# $ranks ranks on $cores cores: oversubscribed, the ranks and their progress threads share cores"
  fi
  for backward in real sleep; do
    command=("$builddir/tools/loomrun/loomrun" -n "$ranks" "$builddir/perf/ddp_bench/loom-ddp-bench" "${flags[@]}")
    [[ $backward == sleep ]] && command+=(--sleep-backward-ms 20)
    echo "# ${command[*]}"
    "${command[@]}"
  done
done
