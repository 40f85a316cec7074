#!/usr/bin/env bash
# Host allreduce, 2 ranks on this host, float32 sum: Loom (default transports, and
# LOOM_TRANSPORTS=socket) beside Open MPI's MPI_Allreduce (its default shared-memory path,
# and over TCP loopback for reference) and Gloo (torch.distributed), as ratios, with the
# targets of issue 3 marked met or not met. docs/RESULTS.md holds what it printed.
#
#   perf/compare_host.sh [--runs R] [--sweep "-b 8 -e 128M -f 2"] [--markdown FILE]
#                        [--out DIR] [--builddir DIR] [--pin LIST] [--wait-idle S]
#                        [--retries K] [--no-install]
#
#   --runs R        rounds (default 3); each round runs every program once, in turn, so that
#                   drift hits all of them alike; the table shows the best round per size and
#                   the spread over rounds
#   --sweep ARGS    sizes, nccl-tests style (default "-b 8 -e 128M -f 2": 8 B .. 128 MiB in
#                   steps of 2, which includes the issue's sizes 8 B, 1 MiB, 16 MiB, 128 MiB)
#   --markdown FILE also write the tables as markdown to FILE
#   --out DIR       keep each program's raw output there (default BUILDDIR/compare-host)
#   --builddir DIR  Loom's release build (default build-perf; made if missing)
#   --pin LIST      programs whose rank r runs on cpu r only: a comma list of loom, mpi,
#                   gloo, or all, or none (default: all)
#   --wait-idle S   before each program, wait up to S seconds for the other processes on the
#                   machine to use under 10% of the cpus (default 0: do not wait)
#   --retries K     run a program again, up to K more times, when other processes used over
#                   10% of the cpus while it ran (perf/foreign_load.py; default 2); the share
#                   each kept run saw is in the table
#   --no-install    do not apt-get what is missing (python3-torch, openmpi-bin, libopenmpi-dev)
set -euo pipefail

cd "$(dirname "$0")/.."
runs=3
sweep="-b 8 -e 128M -f 2"
markdown=""
out=""
builddir=build-perf
pin=all
install=1
wait_idle=0
retries=2
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --sweep) sweep="$2"; shift 2 ;;
    --markdown) markdown="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --builddir) builddir="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    --wait-idle) wait_idle="$2"; shift 2 ;;
    --retries) retries="$2"; shift 2 ;;
    --no-install) install=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "compare_host.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out="${out:-$builddir/compare-host}"
python=/usr/bin/python3   # Debian's, where python3-torch lives (not a pyenv one first in PATH)

# --- packages -------------------------------------------------------------------------------
missing=()
for pkg in python3-torch openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$install" = 0 ]; then
    echo "compare_host.sh: missing Debian packages: ${missing[*]} (drop --no-install to install them)" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "== installing ${missing[*]}"
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- builds ---------------------------------------------------------------------------------
if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" --buildtype=release -Dtests=false >/dev/null
fi
ninja -C "$builddir" tools/loomrun/loomrun >/dev/null
loom_bin="$builddir/perf/loom-host-allreduce"
if ninja -C "$builddir" -t targets all 2>/dev/null | grep -q '^perf/loom-host-allreduce:'; then
  ninja -C "$builddir" perf/loom-host-allreduce >/dev/null
else
  loom_bin=""   # loomAllReduce not built yet: Loom's columns read "pending"
  echo "== $builddir has no perf/loom-host-allreduce target: Loom's columns will be pending"
fi
mkdir -p "$out"
rm -f "$out"/*.txt "$out"/*.err "$out"/*.cmd "$out"/foreign
# Which Loom was measured: the commit, and whether src/ or include/ had changes on top.
{
  git rev-parse --short HEAD 2>/dev/null || echo unknown
  git status --porcelain -- src include 2>/dev/null | wc -l
} > "$out/loom_version"
mpi_bin="$builddir/perf/peers/mpi_allreduce"
mkdir -p "$(dirname "$mpi_bin")"
mpicc -O2 -o "$mpi_bin" perf/peers/mpi_allreduce.c -lm

# --- runs -----------------------------------------------------------------------------------
loomrun="$builddir/tools/loomrun/loomrun"
mpirun=(mpirun --allow-run-as-root -n 2)
pinned() { [ "$pin" = all ] || [[ ",$pin," == *",$1,"* ]]; }
for p in ${pin//,/ }; do
  case "$p" in all|none|loom|mpi|gloo) ;; *) echo "compare_host.sh: --pin: unknown '$p'" >&2; exit 2 ;; esac
done
loom_pin=() gloo_pin=()
pinned loom && loom_pin=(--pin)
pinned gloo && gloo_pin=(--pin)
if pinned mpi; then mpirun+=(--bind-to core); else mpirun+=(--bind-to none); fi

# Share of the cpus busy over one second (all processes, ours are not running then).
busy_percent() {
  local a b
  read -r -a a < /proc/stat; sleep 1; read -r -a b < /proc/stat
  local total=0 idle=$(( (b[4] + b[5]) - (a[4] + a[5]) ))
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
wait_for_idle() {
  local busy waited=0
  busy=$(busy_percent)
  while [ "$busy" -ge 10 ] && [ "$waited" -lt "$wait_idle" ]; do
    sleep 4; waited=$((waited + 5)); busy=$(busy_percent)
  done
  echo "$busy"
}
# Each entry: name, then the command (run through eval so the variables above expand).
declare -A cmd
order=()
if [ -n "$loom_bin" ]; then
  cmd[loom]="$loomrun -n 2 --timeout 900 $loom_bin $sweep ${loom_pin[*]}"
  cmd[loom-socket]="env LOOM_TRANSPORTS=socket $loomrun -n 2 --timeout 900 $loom_bin $sweep ${loom_pin[*]}"
  order+=(loom loom-socket)
fi
cmd[mpi]="${mpirun[*]} $mpi_bin $sweep"
cmd[mpi-tcp]="${mpirun[*]} --mca btl tcp,self --mca btl_tcp_if_include lo $mpi_bin $sweep"
cmd[gloo]="$python perf/peers/gloo_allreduce.py -n 2 $sweep ${gloo_pin[*]}"
order+=(mpi mpi-tcp gloo)

for name in "${order[@]}"; do echo "${cmd[$name]}" > "$out/$name.cmd"; done
for ((r = 1; r <= runs; ++r)); do
  for name in "${order[@]}"; do
    for ((try = 0; try <= retries; ++try)); do
      busy=$(wait_for_idle)
      echo -n "== round $r/$runs: $name (cpus busy before it: $busy%"
      if ! eval perf/foreign_load.py "$out/foreign" "${cmd[$name]}" \
          > "$out/$name.$r.txt" 2> "$out/$name.$r.err"; then
        echo ")"
        echo "compare_host.sh: $name failed (round $r); its output is in $out/$name.$r.{txt,err}:" >&2
        tail -5 "$out/$name.$r.err" >&2
        exit 1
      fi
      foreign=$(cat "$out/foreign")
      echo ", other processes while it ran: $foreign%)"
      [ "$foreign" -le 10 ] && break
      [ "$try" -lt "$retries" ] && echo "   busy machine: running it again"
    done
    echo "$name $r $foreign" >> "$out/foreign.txt"
  done
done
echo "== memcpy baseline"
if [ -n "$loom_bin" ]; then
  taskset -c 0 "$loom_bin" --memcpy -b 1M -e 1G -f 2 > "$out/memcpy.txt"
else  # the same figure from the kernel benchmark (it counts read + write: twice the copy)
  ninja -C "$builddir" perf/kernel_bench >/dev/null
  taskset -c 0 "$builddir/perf/kernel_bench" 5 1048576 131072 16384 1024 > "$out/kernel_bench.txt"
fi

table_args=(--dir "$out" --pin "$pin")
[ -n "$markdown" ] && table_args+=(--markdown "$markdown")
$python perf/compare_host_table.py "${table_args[@]}"
