#!/usr/bin/env bash
# Four "hosts" of two ranks each (network namespaces on one bridge, netns_hosts.sh), one
# `loomrun --nnodes 4 --node-rank K` per host: every collective x every type with rotating
# ops, counts, roots and in place (collectives_rank) over sockets between the hosts, with
# the tuner's choices and with the hierarchical allreduce forced, and the same over UCX
# (UCX_TLS=tcp) where Loom was built with it (LOOM_TEST_UCX). Shared memory joins the two
# ranks of a host throughout. Without root or netns support the test is skipped with the
# reason.
#
#   netns_four_hosts_test.sh COLLECTIVES_RANK LOOMRUN
set -u
rankprog=$1
loomrun=$2
# shellcheck source=netns_hosts.sh
. "$(dirname "$0")/netns_hosts.sh"
subnet=10.231.9
make_hosts l4h $subnet 4
out=$(mktemp -d)
trap 'remove_hosts; rm -rf "$out"' EXIT

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
failed=0
port=29650

# run LABEL ROTATION VAR=VALUE...: one job of 8 ranks, 2 per host; checks every rank passed.
run() {
  local label=$1 rotation=$2 node pids=() rank start=$SECONDS ok=1
  shift 2
  port=$((port + 1))
  for node in 0 1 2 3; do
    ip netns exec "${hostNs[$node]}" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_DEBUG=INFO \
      LOOM_TIMEOUT_MS=30000 "$@" "$loomrun" -n 8 --nnodes 4 --node-rank $node --master-addr $subnet.1 \
      --master-port $port --timeout 150 --tag-output "$rankprog" "$rotation" >"$out/$label.$node" 2>&1 &
    pids+=($!)
  done
  for node in 0 1 2 3; do
    wait "${pids[$node]}" || { echo "$label: loomrun on host $node failed:"; grep -v " INFO " "$out/$label.$node" | head -40; ok=0; }
  done
  for rank in 0 1 2 3 4 5 6 7; do
    node=$((rank / 2))
    grep -q "^\[$rank\] rank $rank of 8: all [0-9]* checks passed" "$out/$label.$node" ||
      { echo "$label: rank $rank missing or failed on host $node"; ok=0; }
    grep -q "^\[$rank\].*(local rank $((rank % 2)) of 2, 4 hosts)" "$out/$label.$node" ||
      { echo "$label: rank $rank did not see 4 hosts of 2"; ok=0; }
  done
  [ $ok -eq 1 ] && echo "$label: 8 ranks on 4 hosts, every rank passed ($((SECONDS - start)) s)"
  [ $ok -eq 1 ]
}

run default 0 LOOM_TRANSPORTS= || failed=1
if run hierarchical 1 LOOM_TRANSPORTS= LOOM_ALGO=allreduce=hierarchical; then
  grep -q "loomAllReduce.* uses hierarchical/" "$out/hierarchical.0" ||
    { echo "hierarchical: the INFO log names no hierarchical allreduce"; failed=1; }
else
  failed=1
fi
if [ -n "${LOOM_TEST_UCX:-}" ]; then
  run ucx-hierarchical 2 LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp LOOM_ALGO=allreduce=hierarchical || failed=1
  grep -q "ucx (1 link(s) each) to ranks" "$out/ucx-hierarchical.0" ||
    { echo "ucx-hierarchical: no UCX links between the hosts"; failed=1; }
else
  echo "UCX across the hosts: skipped: this Loom was built without UCX"
fi
[ $failed -eq 0 ] && echo "every collective passed on 4 namespace hosts of 2 ranks, hierarchical forced and chosen"
exit $failed
