#!/usr/bin/env bash
# Hierarchical against flat allreduce where the network is the bottleneck: 4 "hosts" of 2
# ranks (network namespaces on one bridge, tests/multihost/netns_hosts.sh), every host's
# link limited to RATE each way with tc, one loomrun per host running loom-perf's allreduce
# with the ring, the tree, the hierarchical allreduce and the tuner's choice in one run.
# Prints loom-perf's tables, then busbw per algorithm as a fraction of the link rate and
# the ratios the issue asks for. Needs root (namespaces, tc).
#
#   perf/hierarchical_netns.sh [--builddir DIR] [--rate 1gbit] [--size 64M] [--iters 5]
#                              [--transports socket|ucx] [--out DIR]
#
# The bound: a host sends 2(n-1)/n of the buffer through its link in a flat ring of n ranks
# and 2(H-1)/H in any allreduce over H hosts (hierarchical meets it), so with the link the
# only limit the ring's busbw reaches the link rate and the hierarchical one
# (2(n-1)/n) / (2(H-1)/H) of it: 1.17x for 4 hosts of 2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
builddir=$here/../build-perf rate=1gbit size=64M iters=5 transports=socket out=
while [ $# -gt 0 ]; do
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--builddir DIR] [--rate 1gbit] [--size 64M] [--iters 5] [--transports socket|ucx] [--out DIR]" >&2
       exit 2 ;;
  esac
done
perfexe=$builddir/perf/loom-perf loomrun=$builddir/tools/loomrun/loomrun
for f in "$perfexe" "$loomrun"; do [ -x "$f" ] || { echo "$f: not built (meson compile -C $builddir)" >&2; exit 1; }; done
# shellcheck source=../tests/multihost/netns_hosts.sh
. "$here/../tests/multihost/netns_hosts.sh"
subnet=10.231.10
make_hosts lhier $subnet 4
shape_hosts "$rate" || { echo "tc could not shape the links" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
case $transports in
  socket) env=(LOOM_TRANSPORTS=) ;;
  ucx) env=(LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp) ;;
  *) echo "--transports: socket or ucx" >&2; exit 2 ;;
esac

echo "# 4 hosts x 2 ranks, each host's link $rate each way (tc tbf), allreduce of $size, $transports between hosts"
echo "# $(cd "$here" && python3 -c 'import machine; print(machine.cpu_model())'), $(nproc) cores"
pids=()
for node in 0 1 2 3; do
  ip netns exec "${hostNs[$node]}" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_DEBUG=INFO "${env[@]}" \
    "$loomrun" -n 8 --nnodes 4 --node-rank $node --master-addr $subnet.1 --master-port 29700 --timeout 900 \
    "$perfexe" allreduce -b "$size" -e "$size" -n "$iters" -w 1 --algo ring,tree,hierarchical,tuned \
    --csv "$out/allreduce.csv" >"$out/host$node.log" 2>&1 &
  pids+=($!)
done
failed=0
for node in 0 1 2 3; do wait "${pids[$node]}" || { echo "host $node failed:"; grep -v " INFO " "$out/host$node.log" | tail -20; failed=1; }; done
[ $failed -eq 0 ] || exit 1
grep -v " INFO " "$out/host0.log" | grep -v "^\[" | sed -n '/^# Algorithm/,$p'
echo "# the tuner chose: $(grep -m1 -o 'loomAllReduce(count [0-9]*, float32, sum) uses [a-z]*/[a-z]*' "$out/host0.log")"
python3 - "$out/allreduce.csv" "$rate" <<'EOF'
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[2].lower())
link = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8 / 1e9  # GB/s
bound = {"ring": 1.0, "hierarchical": (2 * 7 / 8) / (2 * 3 / 4)}
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
