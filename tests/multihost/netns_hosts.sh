# Sourced by the multi-host tests and perf/hierarchical_netns.sh: "hosts" on this machine,
# network namespaces ${hostNs[0..N-1]}, each joined by a veth pair to a bridge in a switch
# namespace of its own, with addresses SUBNET.1 .. SUBNET.N that exist only inside them.
# remove_hosts deletes them all; make_hosts sets it as the EXIT trap (a caller with more to
# clean sets its own trap that calls it). Without root, iproute2 or namespace support the
# caller is skipped with the reason (exit 77).
#
#   make_hosts NAME_PREFIX SUBNET N     e.g. make_hosts lcol 10.231.8 4
#   make_two_hosts NAME_PREFIX SUBNET   make_hosts ... 2, naming the two $nsA and $nsB
#   shape_hosts RATE                    every host's link limited to RATE (tc: "1gbit") each way

hostNs=()
hostLinks=()  # "namespace device" of both ends of every host's link
switchNs=

remove_hosts() {
  local ns
  for ns in "${hostNs[@]}" $switchNs; do ip netns del "$ns" 2>/dev/null; done
}

make_hosts() {
  local prefix=$1 subnet=$2 count=$3 tag=$$ err i ns
  if [ "$(id -u)" != 0 ]; then echo "skipped: creating network namespaces needs root"; exit 77; fi
  if ! command -v ip >/dev/null; then echo "skipped: iproute2 (ip) is not installed"; exit 77; fi
  switchNs=${prefix}S$tag
  trap remove_hosts EXIT
  if ! err=$(ip netns add "$switchNs" 2>&1); then echo "skipped: cannot create network namespaces: $err"; exit 77; fi
  set -e
  ip -n "$switchNs" link add br0 type bridge
  ip -n "$switchNs" link set br0 up
  for ((i = 0; i < count; i++)); do
    ns=${prefix}$i-$tag
    hostNs+=("$ns")
    ip netns add "$ns"
    ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$switchNs"
    ip -n "$switchNs" link set "h$i" master br0 up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    hostLinks+=("$ns eth0" "$switchNs h$i")
  done
  set +e
}

make_two_hosts() {
  make_hosts "$1" "$2" 2
  nsA=${hostNs[0]} nsB=${hostNs[1]}
}

# A token bucket on both ends of each host's link: what the host sends and what it receives
# each pass RATE, as through one network port.
shape_hosts() {
  local rate=$1 end
  for end in "${hostLinks[@]}"; do
    set -- $end
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst 512kb latency 100ms || return 1
  done
}
