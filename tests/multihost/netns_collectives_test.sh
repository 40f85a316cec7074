#!/usr/bin/env bash
# Every collective across two "hosts": network namespaces joined by a veth pair, two ranks
# in each with distinct LOOM_HOSTID, so the pair inside a namespace talks over shared memory
# and pairs across namespaces over TCP. collectives_rank (tests/multihost/collectives_rank.cc)
# runs every collective x every type, with rotating ops, counts, roots and in-place, against
# the reference of tests/multirank/collective_reference.h: once per LOOM_ALGO value, started
# by hand with LOOM_* variables, then once with LOOM_TRANSPORTS=socket through one
# `loomrun --nnodes 2 --node-rank K` per namespace. The namespaces are made here and removed
# on exit; without root or netns support the test is skipped with the reason.
#
#   netns_collectives_test.sh COLLECTIVES_RANK LOOMRUN
#
# LOOM_TEST_FULL=1 runs the full case list (every type x op x count x in-place, and ~16M
# elements) instead of the rotating slice; that takes minutes per LOOM_ALGO value.
set -u
rankprog=$1
loomrun=$2
# shellcheck source=netns_hosts.sh
. "$(dirname "$0")/netns_hosts.sh"
# Addresses of our own test hosts, which exist only inside these namespaces (so the ports
# below cannot collide with anything outside them).
make_two_hosts lcol 10.231.8
out=$(mktemp -d)
trap 'remove_hosts; rm -rf "$out"' EXIT

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
failed=0
coverage=
limit=150
if [ "${LOOM_TEST_FULL:-}" = 1 ]; then coverage=full limit=3000; fi
# "" is the default choice; the last one forces a different algorithm per collective.
algos=("" ring tree rd oneshot pairwise hierarchical "allreduce=rd,broadcast=tree,reduce=tree")

# Four ranks by hand, interleaved: 0 and 2 on host A, 1 and 3 on host B, so the ring keeps
# each host's ranks together (0 2 1 3, docs/TOPOLOGY.md) and every algorithm runs in that order.
for i in "${!algos[@]}"; do
  algo=${algos[$i]}
  label=${algo:-default}
  start=$SECONDS
  pids=()
  for rank in 0 1 2 3; do
    if [ $(( rank % 2 )) -eq 0 ]; then ns=$nsA host=hostA; else ns=$nsB host=hostB; fi
    ip netns exec "$ns" env LOOM_RANK=$rank LOOM_WORLD_SIZE=4 LOOM_MASTER_ADDR=10.231.8.1 \
      LOOM_MASTER_PORT=$((29610 + i)) LOOM_SECRET="$secret" LOOM_HOSTID=$host LOOM_DEBUG=INFO \
      LOOM_ALGO="$algo" LOOM_TRANSPORTS= LOOM_INIT_TIMEOUT_MS=30000 LOOM_TIMEOUT_MS=30000 \
      timeout $limit "$rankprog" "$i" $coverage >"$out/$i.$rank.out" 2>"$out/$i.$rank.err" &
    pids+=($!)
  done
  run_failed=0
  for rank in 0 1 2 3; do
    wait "${pids[$rank]}"; status=$?
    if [ $status -ne 0 ] || ! grep -q "checks passed" "$out/$i.$rank.out"; then
      echo "LOOM_ALGO=$label: rank $rank failed (status $status):"
      cat "$out/$i.$rank.out"; grep -v " INFO " "$out/$i.$rank.err" | head -40
      run_failed=1
    fi
    grep -q "(local rank $(( rank / 2 )) of 2, 2 hosts)" "$out/$i.$rank.err" ||
      { echo "LOOM_ALGO=$label: rank $rank did not see 2 hosts"; run_failed=1; }
    # The other rank of its namespace over shared memory, the other namespace's over TCP.
    if [ "$i" -eq 0 ]; then
      peer=$(( rank ^ 2 )) far=$(( 1 - rank % 2 ))
      grep -q "shm to ranks \[$peer\]" "$out/$i.$rank.err" &&
        grep -q "socket.* to ranks \[$far,$(( far + 2 ))\]" "$out/$i.$rank.err" ||
        { echo "rank $rank: not shm to rank $peer and socket to ranks $far,$(( far + 2 )):";
          grep -i "transport\|to ranks" "$out/$i.$rank.err"; run_failed=1; }
      grep -q "ring 0 2 1 3;" "$out/$i.$rank.err" ||
        { echo "rank $rank: the ring does not keep each host's ranks together:";
          grep "ring " "$out/$i.$rank.err"; run_failed=1; }
    fi
  done
  if [ $run_failed -eq 0 ]; then
    echo "LOOM_ALGO=$label: 4 ranks on 2 hosts: $(sed -n 's/.*: all \([0-9]*\) checks passed.*/\1/p' "$out/$i.0.out") checks passed on every rank ($((SECONDS - start)) s)"
  fi
  failed=$((failed | run_failed))
done

# Everything over TCP, through loomrun's static rendezvous, one launcher per host.
start=$SECONDS
for node in 0 1; do
  if [ $node -eq 0 ]; then ns=$nsA; else ns=$nsB; fi
  ip netns exec "$ns" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_TRANSPORTS=socket \
    LOOM_TIMEOUT_MS=30000 "$loomrun" -n 4 --nnodes 2 --node-rank $node --master-addr 10.231.8.1 \
    --master-port 29630 --timeout $limit --tag-output "$rankprog" 99 $coverage >"$out/node$node.out" 2>&1 &
  pids[$node]=$!
done
for node in 0 1; do
  wait "${pids[$node]}" || { echo "loomrun on node $node failed:"; head -60 "$out/node$node.out"; failed=1; }
done
for rank in 0 1 2 3; do
  node=$(( rank / 2 ))
  grep -q "^\[$rank\] rank $rank of 4: all [0-9]* checks passed" "$out/node$node.out" ||
    { echo "loomrun job, LOOM_TRANSPORTS=socket: rank $rank missing or failed on node $node"; failed=1; }
done
[ $failed -eq 0 ] && echo "LOOM_TRANSPORTS=socket through loomrun --nnodes 2: every rank passed ($((SECONDS - start)) s)"

# The same over UCX between the hosts (UCX's TCP, shared memory within each), where Loom was
# built with UCX (meson sets LOOM_TEST_UCX).
if [ -n "${LOOM_TEST_UCX:-}" ]; then
  start=$SECONDS
  for node in 0 1; do
    if [ $node -eq 0 ]; then ns=$nsA; else ns=$nsB; fi
    ip netns exec "$ns" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp \
      LOOM_DEBUG=INFO LOOM_TIMEOUT_MS=30000 "$loomrun" -n 4 --nnodes 2 --node-rank $node --master-addr 10.231.8.1 \
      --master-port 29631 --timeout $limit --tag-output "$rankprog" 98 $coverage >"$out/ucx$node.out" 2>&1 &
    pids[$node]=$!
  done
  for node in 0 1; do
    wait "${pids[$node]}" || { echo "loomrun on node $node failed (UCX):"; grep -v " INFO " "$out/ucx$node.out" | head -60; failed=1; }
  done
  for rank in 0 1 2 3; do
    node=$(( rank / 2 ))
    grep -q "^\[$rank\] rank $rank of 4: all [0-9]* checks passed" "$out/ucx$node.out" ||
      { echo "loomrun job, LOOM_TRANSPORTS=shm,ucx: rank $rank missing or failed on node $node"; failed=1; }
    grep -q "^\[$rank\].*ucx ([0-9]* link(s) each) to ranks" "$out/ucx$node.out" ||
      { echo "rank $rank: no UCX links to the other host:"; grep "to ranks" "$out/ucx$node.out"; failed=1; }
  done
  [ $failed -eq 0 ] && echo "LOOM_TRANSPORTS=shm,ucx (UCX_TLS=tcp) across the hosts: every rank passed ($((SECONDS - start)) s)"
else
  echo "UCX across the hosts: skipped: this Loom was built without UCX"
fi

[ $failed -eq 0 ] && echo "every collective passed across 2 namespace hosts for every LOOM_ALGO value"
exit $failed
