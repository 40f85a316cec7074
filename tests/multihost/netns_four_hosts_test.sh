#!/usr/bin/env bash
# Four "hosts" of two ranks each (network namespaces on one bridge, netns_hosts.sh), one
# `loomrun --nnodes 4 --node-rank K` per host: every collective x every type with rotating
# ops, counts, roots and in place (collectives_rank) over sockets between the hosts, with
# the tuner's choices and with the hierarchical algorithms forced (allreduce, broadcast, reduce), and the same over UCX
# (UCX_TLS=tcp) where Loom was built with it (LOOM_TEST_UCX), and loom-perf's broadcast over
# UCX, whose ranks leave one communicator's call for another's that waits on a peer. Shared
# memory joins the two ranks of a host throughout. Then kill trials (survivor_rank): one rank is killed with
# kill -9 mid-loop, and once before its first data connection; every survivor on every host
# must error within 5 s of the kill (Loom's own deadline is 30 s) naming the killed rank.
# Without root or netns support the test is skipped with the reason.
#
#   netns_four_hosts_test.sh COLLECTIVES_RANK LOOMRUN SURVIVOR_RANK LOOM_PERF
set -u
rankprog=$1
loomrun=$2
survivor=$3
perfprog=$4
# shellcheck source=netns_hosts.sh
. "$(dirname "$0")/netns_hosts.sh"
subnet=10.231.9
make_hosts l4h $subnet 4
out=$(mktemp -d)
trap 'remove_hosts; rm -rf "$out"' EXIT

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
failed=0
port=29650

# launch LABEL TIMEOUT VAR=VALUE... -- PROGRAM ARG...: one job of 8 ranks, 2 per host (one
# loomrun each, output tagged with the rank in $out/LABEL.HOST); their pids in `pids`.
launch() {
  local label=$1 timeout=$2 node vars=()
  shift 2
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  port=$((port + 1))
  pids=()
  for node in 0 1 2 3; do
    ip netns exec "${hostNs[$node]}" env LOOM_SECRET="$secret" LOOM_HOSTID=node$node LOOM_TIMEOUT_MS=30000 \
      "${vars[@]}" "$loomrun" -n 8 --nnodes 4 --node-rank $node --master-addr $subnet.1 --master-port $port \
      --timeout "$timeout" --tag-output "$@" >"$out/$label.$node" 2>&1 &
    pids+=($!)
  done
}

# run LABEL ROTATION VAR=VALUE...: collectives_rank on every rank; checks every rank passed.
run() {
  local label=$1 rotation=$2 node pids rank start=$SECONDS ok=1
  shift 2
  launch "$label" 150 LOOM_DEBUG=INFO "$@" -- "$rankprog" "$rotation"
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
# The default network choice (LOOM_TRANSPORTS's auto): no RDMA device exists here, so sockets,
# and the INFO log says why.
if [ -n "${LOOM_TEST_UCX:-}" ]; then
  grep -q "sockets between hosts (LOOM_TRANSPORTS auto): rank 0's UCX reports no RDMA device" "$out/default.0" ||
    { echo "default: the INFO log does not say why the hosts use sockets"; failed=1; }
fi
if run hierarchical 1 LOOM_TRANSPORTS= LOOM_ALGO=hierarchical; then
  for call in loomAllReduce loomBroadcast loomReduce; do
    grep -q "$call.* uses hierarchical/" "$out/hierarchical.0" ||
      { echo "hierarchical: the INFO log names no hierarchical $call"; failed=1; }
  done
else
  failed=1
fi
if [ -n "${LOOM_TEST_UCX:-}" ]; then
  run ucx-hierarchical 2 LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp LOOM_ALGO=hierarchical || failed=1
  grep -q "ucx ([0-9]* link(s) each) to ranks" "$out/ucx-hierarchical.0" ||
    { echo "ucx-hierarchical: no UCX links between the hosts"; failed=1; }
  # A rank that finished its part of a chain went on to loom-perf's other communicator and
  # waited there for a peer whose flush, at the end of the same broadcast, waited for that
  # rank's progress: every run stalled until UCX declared the endpoints dead, before the
  # transport progressed its worker between runs.
  launch ucx-perf 150 LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp -- \
    "$perfprog" broadcast -b 64M -e 64M -n 5 -w 1 --algo ring,hierarchical
  for node in 0 1 2 3; do
    wait "${pids[$node]}" || { echo "ucx-perf: loom-perf on host $node failed:"; tail -5 "$out/ucx-perf.$node"; failed=1; }
  done
  if [ "$(awk '$1 == "[0]" && $2 == 67108864 && $10 == 0 && $14 == 0' "$out/ucx-perf.0" | wc -l)" = 2 ]; then
    echo "ucx-perf: loom-perf's 64 MiB broadcast over UCX, ring and hierarchical, checked on 4 hosts"
  else
    echo "ucx-perf: loom-perf printed no checked 64 MiB rows:"; tail -20 "$out/ucx-perf.0"; failed=1
  fi
else
  echo "UCX across the hosts: skipped: this Loom was built without UCX"
fi

# kill_trial LABEL MODE VICTIM VAR=VALUE...: 8 survivor_rank processes, VICTIM killed with
# kill -9 one second after every rank is ready; each survivor's error within 5 s of the kill
# (or of its first call, which in before-mode comes a second after the kill), naming it.
kill_trial() {
  local label=$1 mode=$2 victim=$3 node pids rank start=$SECONDS ok=1 ready=0 pid killMs at from late=0 line
  shift 3
  launch "$label" 60 "$@" -- "$survivor" "$victim" "$mode"
  for _ in $(seq 300); do
    ready=$(cat "$out/$label".? | grep -c " pid [0-9]* ready")
    [ "$ready" -eq 8 ] && break
    sleep 0.1
  done
  pid=$(sed -n "s/^\[$victim\] rank $victim pid \([0-9]*\) ready/\1/p" "$out/$label.$((victim / 2))")
  if [ "$ready" -ne 8 ] || [ -z "$pid" ]; then
    echo "$label: only $ready of 8 ranks became ready"; cat "$out/$label".? | head -40
    kill "${pids[@]}" 2>/dev/null; wait; return 1
  fi
  sleep 1
  kill -9 "$pid"
  killMs=$(date +%s%3N)
  for node in 0 1 2 3; do wait "${pids[$node]}"; done
  for rank in 0 1 2 3 4 5 6 7; do
    [ $rank -eq "$victim" ] && continue
    node=$((rank / 2))
    line=$(grep "^\[$rank\] rank $rank failed at" "$out/$label.$node")
    if [ -z "$line" ]; then
      echo "$label: rank $rank (host $node) reported no error:"; grep "^\[$rank\]" "$out/$label.$node" | head -5; ok=0; continue
    fi
    at=$(echo "$line" | sed 's/.* failed at \([0-9]*\) ms.*/\1/')
    # From the kill, or from the rank's first call where that came later (before-mode).
    from=$(sed -n "s/^\[$rank\] rank $rank calls from \([0-9]*\) ms/\1/p" "$out/$label.$node")
    [ -n "$from" ] && [ "$from" -gt "$killMs" ] || from=$killMs
    [ $((at - from)) -gt $late ] && late=$((at - from))
    [ $((at - from)) -le 5000 ] || { echo "$label: rank $rank erred $((at - from)) ms after the kill or its first call: $line"; ok=0; }
    echo "$line" | grep -Eq "rank $victim([^0-9]|\$)" || { echo "$label: rank $rank does not name rank $victim: $line"; ok=0; }
  done
  [ $ok -eq 1 ] || { echo "$label: every rank's last words:"; cat "$out/$label".? | grep -v "ready$" | head -40; }
  [ $ok -eq 1 ] && echo "$label: rank $victim killed ($([ "$mode" = before ] && echo "before its first call" || echo "mid-loop")); 7 survivors on 4 hosts erred within $late ms of it or their first call, naming it ($((SECONDS - start)) s)"
  [ $ok -eq 1 ]
}

kill_trial kill-during during 5 LOOM_TRANSPORTS= || failed=1
kill_trial kill-before before 2 LOOM_TRANSPORTS= || failed=1
if [ -n "${LOOM_TEST_UCX:-}" ]; then
  kill_trial ucx-kill-during during 3 LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp || failed=1
  kill_trial ucx-kill-before before 6 LOOM_TRANSPORTS=shm,ucx UCX_TLS=tcp || failed=1
fi
[ $failed -eq 0 ] && echo "every collective passed on 4 namespace hosts of 2 ranks, hierarchical forced and chosen; every kill found"
exit $failed
