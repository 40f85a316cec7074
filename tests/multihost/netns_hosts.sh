# Sourced by the multi-host tests: two "hosts" on this machine, network namespaces $nsA and
# $nsB joined by a veth pair, with addresses SUBNET.1 (A) and SUBNET.2 (B) that exist only
# inside them. remove_two_hosts deletes them; make_two_hosts sets it as the EXIT trap (a
# caller with more to clean sets its own trap that calls it). Without root, iproute2 or
# namespace support the test is skipped with the reason (exit 77).
#
#   make_two_hosts NAME_PREFIX SUBNET      e.g. make_two_hosts lcol 10.231.8

remove_two_hosts() { ip netns del "$nsA" 2>/dev/null; ip netns del "$nsB" 2>/dev/null; }

make_two_hosts() {
  local prefix=$1 subnet=$2 tag=$$ err
  if [ "$(id -u)" != 0 ]; then echo "skipped: creating network namespaces needs root"; exit 77; fi
  if ! command -v ip >/dev/null; then echo "skipped: iproute2 (ip) is not installed"; exit 77; fi
  nsA=${prefix}A$tag nsB=${prefix}B$tag
  local vethA=v${prefix}A$tag vethB=v${prefix}B$tag
  trap remove_two_hosts EXIT
  if ! err=$(ip netns add "$nsA" 2>&1); then echo "skipped: cannot create network namespaces: $err"; exit 77; fi
  set -e
  ip netns add "$nsB"
  ip link add "$vethA" type veth peer name "$vethB"
  ip link set "$vethA" netns "$nsA"
  ip link set "$vethB" netns "$nsB"
  ip -n "$nsA" addr add "$subnet.1/24" dev "$vethA"
  ip -n "$nsB" addr add "$subnet.2/24" dev "$vethB"
  for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
  ip -n "$nsA" link set "$vethA" up
  ip -n "$nsB" link set "$vethB" up
  set +e
}
