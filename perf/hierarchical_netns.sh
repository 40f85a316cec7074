#!/usr/bin/env bash
# Hierarchical against flat allreduce, broadcast or reduce where the network is the bottleneck: 4
# "hosts" of 2 ranks (network namespaces on one bridge, tests/multihost/netns_hosts.sh), links
# limited to RATE each way with tc, loom-perf's COLLECTIVE with the ring, the tree, the
# hierarchical algorithm and the tuner's choice in one run. Prints loom-perf's tables, then busbw per
# algorithm as a fraction of the link rate and the ratios the issue asks for. Needs root
# (namespaces, tc).
#
#   perf/hierarchical_netns.sh [--builddir DIR] [--rate 1gbit] [--size 64M] [--iters 5]
#                              [--transports socket|ucx] [--nic host|rank]
#                              [--collective allreduce|broadcast|reduce] [--out DIR]
#
# --nic host (default): one namespace and one shaped link per host, shared by its 2 ranks
#   (one loomrun per host), as a CPU server with one network port.
# --nic rank: one namespace and one shaped link per rank, the 2 ranks of a host grouped by
#   LOOM_HOSTID (shared memory between them works across network namespaces; one loomrun
#   per rank), as a GPU server with a NIC per GPU.
#
# The bound, allreduce: a flat ring of n ranks sends 2(n-1)/n of the buffer through the link
# its host boundary crosses, and any allreduce over H hosts sends at least 2(H-1)/H of it out
# of each host (hierarchical meets it). With one link per host that is all a host has, so the
# hierarchical busbw can reach (2(n-1)/n) / (2(H-1)/H) of the ring's: 1.17x for 4 hosts of 2.
# With a link per rank the ring still crosses each boundary through one rank's link, while
# the hierarchical allreduce spreads the host's 2(H-1)/H over its L ranks' links: L times
# that, 2.33x. Broadcast: the chain and the hierarchical broadcast both send the buffer once
# out of each host but the last, the chain through one rank's link, the hierarchical one
# over all L: 1x with a link per host, L = 2x with a link per rank. Reduce: the same,
# backwards.
set -u
here=$(cd "$(dirname "$0")" && pwd)
builddir=$here/../build-perf rate=1gbit size=64M iters=5 transports=socket nic=host collective=allreduce out=
while [ $# -gt 0 ]; do
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --nic) nic=$2; shift 2 ;;
    --collective) collective=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--builddir DIR] [--rate 1gbit] [--size 64M] [--iters 5] [--transports socket|ucx] [--nic host|rank] [--collective allreduce|broadcast|reduce] [--out DIR]" >&2
       exit 2 ;;
  esac
done
perfexe=$builddir/perf/loom-perf loomrun=$builddir/tools/loomrun/loomrun
for f in "$perfexe" "$loomrun"; do [ -x "$f" ] || { echo "$f: not built (meson compile -C $builddir)" >&2; exit 1; }; done
# shellcheck source=../tests/multihost/netns_hosts.sh
. "$here/../tests/multihost/netns_hosts.sh"
case $nic in
  host) namespaces=4 ranksPerLaunch=2 ;;
  rank) namespaces=8 ranksPerLaunch=1 ;;
  *) echo "--nic: host or rank" >&2; exit 2 ;;
esac
case $collective in
  allreduce | broadcast | reduce) ;;
  *) echo "--collective: allreduce, broadcast or reduce" >&2; exit 2 ;;
esac
subnet=10.231.10
make_hosts lhier $subnet $namespaces
shape_hosts "$rate" || { echo "tc could not shape the links" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
case $transports in
  socket) env=(LOOM_TRANSPORTS=) ;;
  ucx) env=(LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp) ;;
  *) echo "--transports: socket or ucx" >&2; exit 2 ;;
esac

echo "# 4 hosts x 2 ranks, each $nic's link $rate each way (tc tbf), $collective of $size, $transports between hosts"
echo "# $(cd "$here" && python3 -c 'import machine; print(machine.cpu_model())'), $(nproc) cores"
pids=()
for ((i = 0; i < namespaces; i++)); do
  ip netns exec "${hostNs[$i]}" env LOOM_SECRET="$secret" LOOM_HOSTID=node$((i * ranksPerLaunch / 2)) LOOM_DEBUG=INFO \
    "${env[@]}" "$loomrun" -n 8 --nnodes $namespaces --node-rank $i --master-addr $subnet.1 --master-port 29700 \
    --timeout 900 "$perfexe" $collective -b "$size" -e "$size" -n "$iters" -w 1 --algo ring,tree,hierarchical,tuned \
    --csv "$out/$collective.csv" >"$out/launch$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < namespaces; i++)); do
  wait "${pids[$i]}" || { echo "launch $i failed:"; grep -v " INFO " "$out/launch$i.log" | tail -20; failed=1; }
done
[ $failed -eq 0 ] || exit 1
grep -v " INFO " "$out/launch0.log" | grep -v "^\[" | sed -n '/^# Algorithm/,$p'
echo "# the tuner chose: $(grep -o 'loom[A-Za-z]*(count [0-9]*, float32, [a-z0-9, ]*) uses [a-z]*/[a-z]* (predicted fastest' "$out/launch0.log" | grep -m1 "count $(($(numfmt --from=iec "$size") / 4)),")"
python3 - "$out/$collective.csv" "$rate" "$nic" "$collective" <<'EOF'
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[2].lower())
link = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8 / 1e9  # GB/s
links_per_host = 2 if sys.argv[3] == "rank" else 1
fewer = (2 * 7 / 8) / (2 * 3 / 4) if sys.argv[4] == "allreduce" else 1.0  # bytes per host, ring / hierarchical
bound = {"ring": 1.0, "hierarchical": links_per_host * fewer}
busbw = {}
print(f"# busbw as a fraction of the link ({link:.3f} GB/s each way)")
print(f"# {'algorithm':>13} {'out of place':>13} {'in place':>9}")
for r in rows:
    oop, ip = float(r["oop_busbw"]), float(r["ip_busbw"])
    busbw[r["algorithm"]] = (oop, ip)
    print(f"  {r['algorithm']:>13} {oop / link:13.2f} {ip / link:9.2f}")
for i, mode in enumerate(("out of place", "in place")):
    h, ring, tuned = busbw["hierarchical"][i], busbw["ring"][i], busbw["tuned"][i]
    best = max(v[i] for v in busbw.values())
    print(f"# {mode}: hierarchical / ring {h / ring:.2f} (bound {bound['hierarchical']:.2f}); "
          f"tuned / best {tuned / best:.2f}")
EOF
