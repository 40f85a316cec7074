#!/usr/bin/env bash
# perf/ucx_compare.py across hosts: each rank in a network namespace of its own, the
# namespaces joined by veth pairs on one bridge (tests/multihost/netns_hosts.sh), so that
# Loom over sockets, Loom over UCX and Open MPI over UCX cross a link between "hosts" instead
# of one host's loopback. Needs root (namespaces). Arguments go to ucx_compare.py.
#
#   perf/ucx_netns.sh [--ranks 2] [--sweep "-b 8 -e 128M -f 8"] [--runs 3] [--markdown FILE] ...
set -u
here=$(cd "$(dirname "$0")" && pwd)
ranks=2
args=("$@")
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    *) shift ;;
  esac
done
# shellcheck source=../tests/multihost/netns_hosts.sh
. "$here/../tests/multihost/netns_hosts.sh"
subnet=10.231.30
make_hosts lucx $subnet "$ranks"
hosts=
for ((i = 0; i < ranks; i++)); do hosts+="${hosts:+,}${hostNs[$i]}=$subnet.$((i + 1))"; done
/usr/bin/python3 "$here/ucx_compare.py" "${args[@]}" --hosts "$hosts"
