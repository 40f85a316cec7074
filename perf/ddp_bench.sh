#!/usr/bin/env bash
# DDP overlap benchmark (docs/PERF.md): loom-ddp-bench on 2 and 4 ranks under loomrun, with
# the MLP's real arithmetic and with backward simulated by 20 ms of sleep (an accelerator's
# backward, leaving the CPU to the reduction); each table after the command that made it.
#
#   perf/ddp_bench.sh [--builddir DIR] [--quick] [-- EXTRA loom-ddp-bench FLAGS]
#
# --quick: a tiny model and two steps (the test suite's smoke run).
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
ninja -C "$builddir" perf/ddp_bench/loom-ddp-bench tools/loomrun/loomrun >/dev/null
echo "# $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
for ranks in 2 4; do
  for backward in real sleep; do
    command=("$builddir/tools/loomrun/loomrun" -n "$ranks" "$builddir/perf/ddp_bench/loom-ddp-bench" "${flags[@]}")
    [[ $backward == sleep ]] && command+=(--sleep-backward-ms 20)
    echo "# ${command[*]}"
    "${command[@]}"
  done
done
