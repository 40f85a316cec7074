#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair. Four ranks, two in
# each, with distinct LOOM_HOSTID, form one communicator over TCP between the namespaces
# and pass a token around the ring (examples/ring_hello): first started by hand with
# LOOM_* variables, then by one `loomrun --nnodes 2 --node-rank K` per namespace. The
# namespaces are made here and removed on exit; without root or netns support the test is
# skipped with the reason.
set -u
example=$1
loomrun=$2
# shellcheck source=netns_hosts.sh
. "$(dirname "$0")/netns_hosts.sh"
make_two_hosts loom 10.231.7

out=$(mktemp -d)
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
pids=()
for rank in 0 1 2 3; do
  if [ "$rank" -lt 2 ]; then ns=$nsA host=hostA; else ns=$nsB host=hostB; fi
  ip netns exec "$ns" env LOOM_RANK=$rank LOOM_WORLD_SIZE=4 LOOM_MASTER_ADDR=10.231.7.1 \
    LOOM_MASTER_PORT=29517 LOOM_SECRET="$secret" LOOM_HOSTID=$host LOOM_DEBUG=INFO \
    LOOM_INIT_TIMEOUT_MS=30000 LOOM_TIMEOUT_MS=30000 \
    timeout 60 "$example" >"$out/$rank.out" 2>"$out/$rank.err" &
  pids+=($!)
done
failed=0
for rank in 0 1 2 3; do
  wait "${pids[$rank]}"; status=$?
  cat "$out/$rank.out"
  if [ $status -ne 0 ]; then
    echo "rank $rank failed with status $status:"; cat "$out/$rank.err"; failed=1
  fi
  left=$(( (rank + 3) % 4 ))
  grep -q "rank $rank of 4 received $left" "$out/$rank.out" || { echo "rank $rank: wrong or no token"; failed=1; }
  grep -q "(local rank $(( rank % 2 )) of 2, 2 hosts)" "$out/$rank.err" || { echo "rank $rank did not see 2 hosts:"; cat "$out/$rank.err"; failed=1; }
done
# The ranks in B reached rank 0 across the veth, from their own namespace's address.
grep -q "bootstrap 10.231.7.2:" "$out/2.err" || { echo "rank 2 did not listen on its namespace's address"; failed=1; }

# The same job through loomrun's static rendezvous, one launcher per "host".
for node in 0 1; do
  if [ $node -eq 0 ]; then ns=$nsA; else ns=$nsB; fi
  ip netns exec "$ns" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_DEBUG=INFO \
    "$loomrun" -n 4 --nnodes 2 --node-rank $node --master-addr 10.231.7.1 --master-port 29518 \
    --timeout 60 --tag-output "$example" >"$out/node$node.out" 2>&1 &
  pids[$node]=$!
done
for node in 0 1; do
  wait "${pids[$node]}" || { echo "loomrun on node $node failed:"; cat "$out/node$node.out"; failed=1; }
done
for rank in 0 1 2 3; do
  node=$(( rank / 2 )) left=$(( (rank + 3) % 4 ))
  grep -q "^\[$rank\] rank $rank of 4 received $left" "$out/node$node.out" ||
    { echo "loomrun job: rank $rank missing or wrong on node $node:"; cat "$out/node$node.out"; failed=1; }
done
grep -q "2 hosts" "$out/node1.out" || { echo "loomrun job: node 1 did not see 2 hosts"; failed=1; }

rm -rf "$out"
[ $failed -eq 0 ] && echo "4 ranks on 2 namespace hosts formed one communicator, by hand and through loomrun"
exit $failed
