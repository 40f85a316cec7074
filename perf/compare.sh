#!/usr/bin/env bash
# Loom's collectives beside Open MPI's and Gloo's on this host, per transport, with each
# transport's physical limit: for shared memory the busbw the memory-traffic model allows at the
# copy bandwidth of as many threads as ranks copying at once (docs/PERF.md, "Memory traffic"),
# for TCP the loopback link's. Every program prints nccl-tests' table (Loom's loom-perf,
# perf/peers/mpi_collective.c, perf/peers/gloo_collective.py, perf/peers/memcpy_bw.c,
# perf/peers/tcp_loopback_bw.c) under the same sweep and timing flags; perf/compare_table.py
# turns them into ratio tables.
#
#   perf/compare.sh [--collectives allreduce,broadcast,...] [--ranks N] [--sweep "-b 8 -e 128M -f 2"]
#                   [--transports shm,tcp] [--runs R] [--min-time S] [--markdown FILE]
#                   [--plot FILE.svg] [--out DIR] [--builddir DIR] [--pin LIST]
#                   [--wait-idle S] [--retries K] [--loom-args ARGS] [--no-install]
#
#   --collectives L  allreduce, broadcast, reduce, allgather, reducescatter, alltoall, sendrecv (default
#                    allreduce,broadcast). Gloo runs allreduce and broadcast only; the memory
#                    limit has a model for those two only (docs/PERF.md)
#   --ranks N        ranks of every program (default 2)
#   --sweep ARGS     sizes, nccl-tests' flags (default "-b 8 -e 128M -f 2"); every program also
#                    gets "-n 20 -w 5 -c 1 --min-time S"
#   --transports L   shm (Loom LOOM_TRANSPORTS=shm, Open MPI's vader BTL), tcp (Loom
#                    LOOM_TRANSPORTS=socket, Open MPI's tcp BTL over loopback), or both (default).
#                    Gloo has TCP only: it runs once per collective and shows in both tables
#   --runs R         rounds (default 3); each round runs every program once, in turn, so that
#                    drift hits all of them alike; the tables show the best round per size and
#                    the spread over rounds. The limits, memcpy_bw (shm) and tcp_loopback_bw
#                    (tcp), run in every round too: their best round is the limit
#   --min-time S     lengthen each timed loop to S seconds (default 0.2)
#   --markdown FILE  also write the tables as markdown to FILE
#   --plot FILE.svg  in-place busbw against size, one line per program (Loom, Open MPI, Gloo),
#                    drawn by BUILDDIR/perf/loom-plot from the best rounds; with several
#                    collectives or transports, one file each: FILE-COLLECTIVE-TRANSPORT.svg
#   --out DIR        keep each program's raw output there (default BUILDDIR/compare)
#   --builddir DIR   Loom's release build with link-time optimisation (default build-perf;
#                    made if missing, set to release and LTO if not)
#   --pin LIST       programs whose rank r runs on cpu r only: a comma list of loom, mpi, gloo,
#                    or all, or none (default: all). memcpy_bw's thread i always runs on cpu i,
#                    tcp_loopback_bw's two processes on cpus 0 and 1
#   --wait-idle S    before each program, wait up to S seconds for the other processes on the
#                    machine to use under 10% of the cpus (default 0: do not wait)
#   --retries K      run a program again, up to K more times, when other processes used over
#                    10% of the cpus while it ran (perf/foreign_load.py; default 2)
#   --loom-args ARGS more loom-perf flags, e.g. "-R 2" (buffers from loomMemAlloc: the mapped
#                    allreduce between processes; docs/PERF.md)
#   --no-install     do not apt-get what is missing (python3-torch, openmpi-bin, libopenmpi-dev)
set -euo pipefail

cd "$(dirname "$0")/.."
collectives=allreduce,broadcast
ranks=2
sweep="-b 8 -e 128M -f 2"
transports=shm,tcp
runs=3
min_time=0.2
markdown=""
plot=""
out=""
builddir=build-perf
pin=all
wait_idle=0
retries=2
loom_args=""
install=1
while [ $# -gt 0 ]; do
  case "$1" in
    --collectives) collectives="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --sweep) sweep="$2"; shift 2 ;;
    --transports) transports="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --markdown) markdown="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --builddir) builddir="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    --wait-idle) wait_idle="$2"; shift 2 ;;
    --retries) retries="$2"; shift 2 ;;
    --loom-args) loom_args="$2"; shift 2 ;;
    --no-install) install=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
check_list() {  # check_list OPTION VALUE ALLOWED...
  local option="$1" value="$2" item; shift 2
  for item in ${value//,/ }; do
    [[ " $* " == *" $item "* ]] || { echo "compare.sh: $option: unknown '$item' ($*)" >&2; exit 2; }
  done
}
check_list --collectives "$collectives" allreduce broadcast reduce allgather reducescatter alltoall sendrecv
check_list --transports "$transports" shm tcp
check_list --pin "$pin" all none loom mpi gloo
out="${out:-$builddir/compare}"
python=/usr/bin/python3   # Debian's, where python3-torch lives (not a pyenv one first in PATH)

# --- packages -------------------------------------------------------------------------------
missing=()
for pkg in python3-torch openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$install" = 0 ]; then
    echo "compare.sh: missing Debian packages: ${missing[*]} (drop --no-install)" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "== installing ${missing[*]}"
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- builds ---------------------------------------------------------------------------------
# shellcheck source=perf/measured_build.sh
. perf/measured_build.sh
measuredBuild "$builddir"
ninja -C "$builddir" tools/loomrun/loomrun perf/loom-perf perf/loom-plot >/dev/null
loom_bin="$builddir/perf/loom-perf"
plot_bin="$builddir/perf/loom-plot"
peers="$builddir/perf/peers"
mkdir -p "$peers"
for peer in mpi_collective memcpy_bw tcp_loopback_bw line_exchange; do
  if [ ! -x "$peers/$peer" ] || [ "perf/peers/$peer.c" -nt "$peers/$peer" ] \
      || [ perf/peers/nccl_table.h -nt "$peers/$peer" ]; then
    mpicc -O2 -Wall -Wextra -pthread -o "$peers/$peer" "perf/peers/$peer.c" -lm
  fi
done

mkdir -p "$out"
rm -rf "$out"/*.txt "$out"/*.err "$out"/*.cmd "$out"/foreign "$out"/best
# Which Loom was measured: the commit, and whether src/ or include/ had changes on top.
{
  git rev-parse --short HEAD 2>/dev/null || echo unknown
  git status --porcelain -- src include 2>/dev/null | wc -l
} > "$out/loom_version"
{
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Socket\(s\)|L[23] cache):' \
    | sed 's/  */ /g'
  echo "Memory: $(free -g | awk '/^Mem:/ { print $2 }') GiB"
  # loom-perf's and memcpy_bw's buffers come from the heap: on huge pages only where this says
  # [always], and the limit and Loom move with it (docs/PERF.md, "Memory traffic").
  echo "Transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
  echo "Kernel: $(uname -sr); Debian $(cat /etc/debian_version 2>/dev/null || echo '?')"
  echo "Open MPI: $(mpirun --version 2>/dev/null | head -1)"
  echo "torch: $($python -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "C compiler: $(cc --version | head -1)"
} > "$out/machine"
echo "== machine"
cat "$out/machine"

# --- commands -------------------------------------------------------------------------------
pinned() { [ "$pin" = all ] || [[ ",$pin," == *",$1,"* ]]; }
loom_pin="" gloo_pin=""
pinned loom && loom_pin=--pin
pinned gloo && gloo_pin=--pin
mpirun="mpirun --allow-run-as-root -n $ranks"
if pinned mpi; then mpirun+=" --bind-to core"; else mpirun+=" --bind-to none"; fi
# pml ob1 is the one that uses the BTLs named here (UCX's would ignore them).
declare -A mpi_transport=(
  [shm]="--mca pml ob1 --mca btl self,vader"
  [tcp]="--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo"
)
declare -A loom_transport=([shm]=shm [tcp]=socket)
timing="$sweep -n 20 -w 5 -c 1 --min-time $min_time"
# Each entry: the name of its outputs (COLLECTIVE.TRANSPORT.PROGRAM), then the command (run
# through eval, so that the sweep splits into words).
declare -A cmd
order=()
for coll in ${collectives//,/ }; do
  for t in ${transports//,/ }; do
    cmd[$coll.$t.loom]="env LOOM_TRANSPORTS=${loom_transport[$t]} $builddir/tools/loomrun/loomrun"
    cmd[$coll.$t.loom]+=" -n $ranks --timeout 900 $loom_bin $coll $timing $loom_pin $loom_args"
    order+=("$coll.$t.loom")
    cmd[$coll.$t.mpi]="$mpirun ${mpi_transport[$t]} $peers/mpi_collective $coll $timing"
    order+=("$coll.$t.mpi")
  done
  [[ " allreduce broadcast " == *" $coll "* ]] || continue  # what gloo_collective.py runs
  cmd[$coll.gloo]="$python perf/peers/gloo_collective.py $coll -N $ranks $timing $gloo_pin"
  order+=("$coll.gloo")
done
# The transports' limits, measured in every round like the programs: on a machine whose speed
# drifts, one measurement of a limit can land in a slow moment and make Loom look above it.
limits=()
[[ ",$transports," == *",shm,"* ]] && limits+=(memcpy)
[[ ",$transports," == *",tcp,"* ]] && limits+=(tcp_loopback)
# As many copying threads as ranks, one per cpu where there are enough: the ranks of a
# collective share the memory bus as these threads do.
memcpy_cpus=""
[ "$ranks" -le "$(nproc)" ] && memcpy_cpus="taskset -c 0-$((ranks - 1)) "
cmd[memcpy]="$memcpy_cpus$peers/memcpy_bw -t $ranks $timing"
cmd[tcp_loopback]="$peers/tcp_loopback_bw $timing"
echo "== commands"
for name in "${order[@]}" "${limits[@]}"; do
  echo "${cmd[$name]}" > "$out/$name.cmd"
  echo "$name: ${cmd[$name]}"
done

# --- runs -----------------------------------------------------------------------------------
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
# run NAME ROUND LABEL: the program, again while other processes took over 10% of the cpus.
run() {
  local name="$1" r="$2" label="$3" try busy foreign line_us
  for ((try = 0; try <= retries; ++try)); do
    busy=$(wait_for_idle)
    echo -n "== $label: $name (cpus busy before it: $busy%"
    if ! eval perf/foreign_load.py "$out/foreign" "${cmd[$name]}" \
        > "$out/$name.$r.txt" 2> "$out/$name.$r.err"; then
      echo ")"
      echo "compare.sh: $name failed (round $r); its output is in $out/$name.$r.{txt,err}:" >&2
      tail -5 "$out/$name.$r.err" >&2
      exit 1
    fi
    foreign=$(cat "$out/foreign")
    # The trip of a cache line between cpus 0 and 1 right after the program: the VMs we meet
    # change it 5x for minutes at a time (docs/RESULTS.md), and with it every figure that
    # moves bytes between the cores; each round's figures carry the phase they ran in.
    line_us=$("$peers/line_exchange" 100000 2>/dev/null | awk '{print $2}' || true)
    line_us=${line_us:-?}
    echo ", other processes while it ran: $foreign%, line exchange after it: $line_us us)"
    [ "$foreign" -le 10 ] && break
    [ "$try" -lt "$retries" ] && echo "   busy machine: running it again"
  done
  echo "$name $r $foreign" >> "$out/foreign.txt"
  echo "$name $r $line_us" >> "$out/line_exchange.txt"
}
for ((r = 1; r <= runs; ++r)); do
  for name in "${order[@]}" "${limits[@]}"; do run "$name" "$r" "round $r/$runs"; done
done

# --- tables and plots -----------------------------------------------------------------------
table_args=(--dir "$out" --collectives "$collectives" --transports "$transports" --ranks "$ranks"
            --pin "$pin" --best "$out/best")
[ -n "$markdown" ] && table_args+=(--markdown "$markdown")
$python perf/compare_table.py "${table_args[@]}"

[ -n "$plot" ] || exit 0
pairs=0
for coll in ${collectives//,/ }; do for t in ${transports//,/ }; do pairs=$((pairs + 1)); done; done
for coll in ${collectives//,/ }; do
  for t in ${transports//,/ }; do
    file="$plot"
    [ "$pairs" -gt 1 ] && file="${plot%.svg}-$coll-$t.svg"
    series=()
    # No memcpy line: loom-plot draws one mode for every file, and memcpy_bw has no in-place.
    for s in "Loom=$coll.$t.loom" "Open MPI=$coll.$t.mpi" "Gloo (TCP)=$coll.gloo"; do
      [ -f "$out/best/${s#*=}.txt" ] && series+=("${s%%=*}=$out/best/${s#*=}.txt")
    done
    # The mode of the main table: all-to-all has no in-place form (compare_table.py).
    mode=ip mode_title=in-place
    [ "$coll" = alltoall ] && mode=oop mode_title="out of place"
    plot_cmd=("$plot_bin" -o "$file" --title "$coll, $t, $ranks ranks, float32, $mode_title" --mode $mode
              "${series[@]}")
    echo "== plot: $(printf '%q ' "${plot_cmd[@]}")"
    "${plot_cmd[@]}"
  done
done
