#!/usr/bin/env bash
# The machine calibration against the built-in constants on this host (issue 30), in one run:
# rounds of loom-perf allreduce over shared memory in which each size runs once with the
# calibration (the default) and once with LOOM_MACHINE_CALIBRATION=0, in an order that
# alternates each round, then perf/calibration_table.py prints per size the best round of
# each, in place and out of place, and their ratio. The calibration file in use is printed
# first (measured now if this machine has none).
#
#   perf/calibration_check.sh [--ranks N] [--rounds R] [--min-time S] [--sizes "1048576 ..."]
#                             [--builddir DIR] [--out DIR] [--markdown FILE] [--tuning FILE]
#                             [--collective NAME]
#
# --tuning FILE: the "calibrated" runs take LOOM_TUNING_FILE=FILE (written by loom-perf
# --calibrate, e.g. holding only its data-path sizes, or built-in values of keys the machine
# calibration measures) and the "built-in" runs none; the machine calibration serves both.
# --collective: loom-perf's collective (default allreduce).
#
# A shared virtual machine runs several times slower for a minute at a time: both variants of
# a size are measured within seconds of each other, and each figure is the best of the rounds.
set -euo pipefail

cd "$(dirname "$0")/.."
ranks=2
rounds=5
min_time=0.2
sizes="1048576 4194304 8388608 16777216 33554432 67108864 134217728"
builddir=build-perf
# shellcheck source=perf/check_args.sh
. perf/check_args.sh
tuning=""
collective=allreduce
common=()
while [ $# -gt 0 ]; do
  if [ "$1" = --tuning ]; then
    tuning="$2"
    shift 2
  elif [ "$1" = --collective ]; then
    collective="$2"
    shift 2
  else
    common+=("$1")
    shift
  fi
done
[ -z "$tuning" ] || [ -r "$tuning" ] || { echo "calibration_check.sh: cannot read $tuning" >&2; exit 2; }
checkArgs calibration_check "${common[@]}"

# shellcheck source=perf/measured_build.sh
. perf/measured_build.sh
measuredBuild "$builddir"
ninja -C "$builddir" tools/loomrun/loomrun perf/loom-perf >/dev/null
loomrun="$builddir/tools/loomrun/loomrun"
perf="$builddir/perf/loom-perf"
# Over shared memory unless the caller says otherwise.
export LOOM_TRANSPORTS="${LOOM_TRANSPORTS:-shm}"

# The calibration the default runs take (and its cost, when this is the first use).
LOOM_DEBUG=INFO "$loomrun" -n "$ranks" "$perf" allreduce -b 8 -e 8 -n 1 -w 0 2>&1 |
  grep -E "machine calibration|tuner constants: " | sed 's/^.*LOOM INFO /# /' | tee "$out/constants.txt"

flags="-n 20 -w 5 -c 1 --min-time $min_time --pin"
rm -f "$out"/*.csv
csvs=()
for round in $(seq 1 "$rounds"); do
  for size in $sizes; do
    variants=(calibrated builtin)
    ((round % 2 == 0)) && variants=(builtin calibrated)
    for variant in "${variants[@]}"; do
      calibration=1
      file=""
      if [ -n "$tuning" ]; then
        [ "$variant" = calibrated ] && file="$tuning"
      elif [ "$variant" = builtin ]; then
        calibration=0
      fi
      csv="$out/$variant-round$round-$size.csv"
      # shellcheck disable=SC2086  # flags is a list of arguments
      LOOM_MACHINE_CALIBRATION=$calibration LOOM_TUNING_FILE="$file" "$loomrun" -n "$ranks" "$perf" "$collective" \
        -b "$size" -e "$size" $flags --csv "$csv" > /dev/null
      csvs+=("$csv")
    done
  done
  echo "round $round of $rounds done" >&2
done

args=(--ranks "$ranks" --collective "$collective" --transports "$LOOM_TRANSPORTS" --csv "${csvs[@]}")
[ -n "$markdown" ] && args+=(--markdown "$markdown")
python3 perf/calibration_table.py "${args[@]}"
