#!/usr/bin/env bash
# The tuner against measurement on this host (issue 5's checks), in one run:
#   1. loom-perf --calibrate writes a tuning file for N ranks;
#   2. loom-topo --predict prints the model's time per algorithm with those constants;
#   3. rounds of loom-perf allreduce 8 B..256 MiB: the tuner's choice (no LOOM_ALGO), then
#      every algorithm forced (--algo ring,tree,rd,oneshot), each round all of them in turn;
#   4. perf/tuner_table.py sets them side by side: predicted vs measured time of the tuner's
#      choice (within 2x?), and the tuner against the best forced algorithm (within 10%?).
#
#   perf/tuner_check.sh [--ranks N] [--rounds R] [--min-time S] [--sweep "-b 8 -e 256M -f 4"]
#                       [--builddir DIR] [--out DIR] [--markdown FILE]
#
# Times are out of place, the best round per size. Exit status 0 even when a target is missed:
# the table says which sizes miss; 1 only when a step fails.
set -euo pipefail

cd "$(dirname "$0")/.."
ranks=2
rounds=3
min_time=0.2
sweep="-b 8 -e 256M -f 4"
builddir=build-perf
out=""
markdown=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --sweep) sweep="$2"; shift 2 ;;
    --builddir) builddir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --markdown) markdown="$2"; shift 2 ;;
    *) echo "tuner_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${out:-$builddir/tuner_check}"
mkdir -p "$out"

if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" --buildtype=release -Dtests=false >/dev/null
fi
ninja -C "$builddir" tools/loomrun/loomrun tools/loom-topo perf/loom-perf >/dev/null
loomrun="$builddir/tools/loomrun/loomrun"
perf="$builddir/perf/loom-perf"

tuning="$out/tuning.txt"
"$loomrun" -n "$ranks" "$perf" --calibrate "$tuning" | tee "$out/calibrate.txt"
export LOOM_TUNING_FILE="$tuning"
"$builddir/tools/loom-topo" --predict allreduce --ranks "$ranks" > "$out/predicted.txt"

flags="-n 20 -w 5 -c 1 --min-time $min_time"
for round in $(seq 1 "$rounds"); do
  # shellcheck disable=SC2086  # sweep and flags are lists of arguments
  "$loomrun" -n "$ranks" "$perf" allreduce $sweep $flags --csv "$out/tuned-$round.csv" > "$out/tuned-$round.txt"
  # shellcheck disable=SC2086
  "$loomrun" -n "$ranks" "$perf" allreduce $sweep $flags --algo ring,tree,rd,oneshot \
    --csv "$out/forced-$round.csv" > "$out/forced-$round.txt"
  echo "round $round of $rounds done" >&2
done

args=(--predicted "$out/predicted.txt" --tuning "$tuning" --ranks "$ranks")
for round in $(seq 1 "$rounds"); do args+=(--tuned "$out/tuned-$round.csv" --forced "$out/forced-$round.csv"); done
[ -n "$markdown" ] && args+=(--markdown "$markdown")
python3 perf/tuner_table.py "${args[@]}"
