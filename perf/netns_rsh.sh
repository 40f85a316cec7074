#!/usr/bin/env bash
# Open MPI's remote shell (--mca plm_rsh_agent) for "hosts" that are network namespaces on
# this machine (tests/multihost/netns_hosts.sh): `netns_rsh.sh ADDRESS COMMAND...` runs
# COMMAND, as a remote shell would, in the namespace whose eth0 has ADDRESS.
set -u
address=$1
shift
for ns in $(ip netns list | awk '{print $1}'); do
  if ip -n "$ns" -4 addr show dev eth0 2>/dev/null | grep -q "inet $address/"; then
    exec ip netns exec "$ns" /bin/sh -c "$*"
  fi
done
echo "netns_rsh.sh: no network namespace has $address on eth0" >&2
exit 1
