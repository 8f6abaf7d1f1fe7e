# SPDX-License-Identifier: BSD-3-Clause
# guest/rxe-setup.sh - sourced (as root, inside the VM) by run-in-vm.sh's job script before
# the command: two soft-RoCE devices over a veth pair. Adapted from the reference harness of
# the steering repository (../shared/rxe-vm/guest/rxe-setup.sh).
#
# Linux 6.1's rdma_rxe opens its RoCE v2 UDP socket (port 4791) only in the initial network
# namespace and routes only there, so the two ends can NOT live in separate netns (tried:
# the QP goes to error with IBV_WC_LOC_QP_OP_ERR, 0 packets sent). Instead both veth ends
# stay in init_net and policy routing forces traffic between the two local addresses over
# the veth wire instead of the loopback shortcut:
#   rxe0 / vethA / 10.77.0.1   <== veth ==>   rxe1 / vethB / 10.77.0.2
# Exports RXE_DEV0 RXE_DEV1 RXE_IP0 RXE_IP1 RXE_GID0 RXE_GID1 (RoCE v2 IPv4 GID indexes).
# Sourced: no set -e / exit; returns non-zero on failure.
# Every exec costs ~0.2 s under TCG (9p + dynamic linking), hence one `ip -batch` and
# shell builtins instead of cat/seq.

# rxe_gid_index DEV IPV4 -> index of the RoCE v2 GID ::ffff:IPV4
rxe_gid_index() {
  _dev=$1
  _ifs=$IFS; IFS=.; set -- $2; IFS=$_ifs
  _hex=$(printf '%02x%02x:%02x%02x' $1 $2 $3 $4)
  _i=0
  while [ $_i -lt 16 ]; do
    _g='' _t=''
    read -r _g < /sys/class/infiniband/$_dev/ports/1/gids/$_i 2>/dev/null
    read -r _t < /sys/class/infiniband/$_dev/ports/1/gid_attrs/types/$_i 2>/dev/null
    case "$_g" in *ffff:$_hex) [ "$_t" = "RoCE v2" ] && { echo $_i; return 0; };; esac
    _i=$((_i + 1))
  done
  return 1
}

rxe_setup() {
  RXE_IP0=10.77.0.1 RXE_IP1=10.77.0.2
  _mtu=${RXE_VM_MTU:-9000}
  # rxe bursts a whole message (1 MiB = 256..1024 packets) into the veth; the default per-CPU
  # backlog (1000 packets) drops them -> "Failed sending ACK", retries, 3x slower / stalls.
  echo 100000 > /proc/sys/net/core/netdev_max_backlog
  [ -d /sys/module/rdma_rxe ] || { echo "rxe-setup: rdma_rxe is not loaded (see the console for insmod errors)"; return 1; }
  ip link add vethA mtu $_mtu type veth peer name vethB mtu $_mtu || { echo "rxe-setup: cannot create the veth pair"; return 1; }
  for _c in all default vethA vethB; do
    echo 0 > /proc/sys/net/ipv4/conf/$_c/rp_filter    # packets from a local source address
    echo 1 > /proc/sys/net/ipv4/conf/$_c/accept_local # arrive on the wire: accept them
  done
  read -r _macA < /sys/class/net/vethA/address
  read -r _macB < /sys/class/net/vethB/address
  cat > /tmp/.rxe-ip-batch <<EOB
link set lo up
addr add $RXE_IP0/32 dev vethA
addr add $RXE_IP1/32 dev vethB
link set vethA up
link set vethB up
rule add pref 100 lookup local
rule del pref 0
route add $RXE_IP1/32 dev vethA src $RXE_IP0 table 101
route add $RXE_IP0/32 dev vethB src $RXE_IP1 table 102
rule add pref 10 iif lo to $RXE_IP1 lookup 101
rule add pref 11 iif lo to $RXE_IP0 lookup 102
rule add pref 12 oif vethB to $RXE_IP0 lookup 102
rule add pref 13 oif vethA to $RXE_IP1 lookup 101
neigh replace $RXE_IP1 lladdr $_macB dev vethA nud permanent
neigh replace $RXE_IP0 lladdr $_macA dev vethB nud permanent
EOB
  # pref 0 (local) moved to 100: locally generated traffic to the peer address takes the
  # wire (rules 10/11). Rules 12/13: rdma_cm's passive side checks the peer with
  # fib_lookup(oif=<its netdev>, iif=0) (validate_ipv4_net_dev); without them that lookup
  # hits the local table, returns the other veth and every CM REQ is rejected (status 28).
  ip -batch /tmp/.rxe-ip-batch || { echo "rxe-setup: ip -batch (addresses, policy routes) failed"; return 1; }
  rdma link add rxe0 type rxe netdev vethA || { echo "rxe-setup: rdma link add rxe0 failed"; return 1; }
  rdma link add rxe1 type rxe netdev vethB || { echo "rxe-setup: rdma link add rxe1 failed"; return 1; }
  _n=0
  until RXE_GID0=$(rxe_gid_index rxe0 $RXE_IP0) && RXE_GID1=$(rxe_gid_index rxe1 $RXE_IP1); do
    _n=$((_n + 1)); [ $_n -lt 200 ] || { echo "rxe-setup: no RoCE v2 IPv4 GID on rxe0/rxe1 after 10 s"; return 1; }; sleep 0.05
  done
  export RXE_DEV0=rxe0 RXE_DEV1=rxe1 RXE_IP0 RXE_IP1 RXE_GID0 RXE_GID1
  echo "rxe0 ($RXE_IP0, gid $RXE_GID0) <-> rxe1 ($RXE_IP1, gid $RXE_GID1), mtu $_mtu, ready after ${_n} GID polls"
}
rxe_setup
