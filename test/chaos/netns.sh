# shellcheck shell=bash
# test/chaos/netns.sh -- the chaos test's network (sourced by run.sh)
#
# Eight network namespaces, all named "$NETNS_PREFIX-*", joined by veth
# pairs to two bridges in a hub namespace:
#
#	cluster net 198.18.0.0/24 (bridge brc): replication, Patroni's REST API,
#		etcd.  Nodes n1-n3 are .11-.13, etcd members e1-e3 are .21-.23,
#		the client namespace is .100.
#	app net 198.18.1.0/24 (bridge bra): what the workers use to reach
#		PostgreSQL.  Nodes are .11-.13, the client namespace is .100.
#
# A partition cuts a node's cluster link at its bridge port (ip link set
# down), so the node loses etcd and the other nodes while its clients still
# reach it, the way a primary behind a broken switch keeps serving the
# connections it has.  Addresses exist only inside these namespaces; the
# root namespace gets no address, no route and no interface.
#
# 198.18.0.0/15 is the block RFC 2544 sets aside for benchmarking: it is
# never routed on the Internet.

NODES=(n1 n2 n3)
ETCDS=(e1 e2 e3)

# Run "ip" in one of our namespaces.  nsenter, not "ip -n" or "ip netns
# exec": those also make "/" a slave mount, which fails in a chroot whose
# root is not a mount point (a brand-new Debian root is such a chroot).
netns_ip()
{
	local ns=$1

	shift
	netns_exec "$ns" ip "$@"
}

# Run a command in the network namespace of one of ours.
netns_exec()
{
	local ns=$1

	shift
	nsenter --net="/run/netns/$NETNS_PREFIX-$ns" "$@"
}

# Link namespace $1 to bridge $3 through a veth pair: "$2" inside the
# namespace with address $4, "$5" on the bridge's side.
netns_attach()
{
	local ns=$1 inner=$2 bridge=$3 address=$4 outer=$5

	netns_ip hub link add "$outer" type veth peer name "$inner" netns "$NETNS_PREFIX-$ns"
	netns_ip hub link set "$outer" master "$bridge" up
	netns_ip "$ns" addr add "$address/24" dev "$inner"
	netns_ip "$ns" link set "$inner" up
}

# Create the namespaces and links.  Every namespace is recorded in
# $NETNS_STATE before it is created, so netns_down finds all of them even
# when this function stops half way.
netns_up()
{
	local ns i

	for ns in hub "${NODES[@]}" "${ETCDS[@]}" cl; do
		echo "$NETNS_PREFIX-$ns" >>"$NETNS_STATE"
		ip netns add "$NETNS_PREFIX-$ns"
		netns_ip "$ns" link set lo up
	done
	netns_ip hub link add brc type bridge
	netns_ip hub link add bra type bridge
	netns_ip hub link set brc up
	netns_ip hub link set bra up
	for i in 1 2 3; do
		netns_attach "n$i" c0 brc "198.18.0.1$i" "cn$i"
		netns_attach "n$i" a0 bra "198.18.1.1$i" "an$i"
		netns_attach "e$i" c0 brc "198.18.0.2$i" "ce$i"
	done
	netns_attach cl c0 brc 198.18.0.100 ccl
	netns_attach cl a0 bra 198.18.1.100 acl
}

# Every process still running inside one of the recorded namespaces: they
# were all started by this run (nothing else lives in them).
netns_pids()
{
	local ns

	[ -s "$NETNS_STATE" ] || return 0
	while IFS= read -r ns; do
		[ -e "/run/netns/$ns" ] && ip netns pids "$ns" 2>/dev/null
	done <"$NETNS_STATE"
	return 0
}

# Stop what runs in the namespaces and delete them (their veths and
# bridges go with them).  Stopped processes are continued first so that
# they can die; Patroni is killed so that it restarts nothing; postmasters
# get SIGQUIT (immediate shutdown, which also removes their shared memory),
# everything else SIGTERM; what is left after five seconds is killed.
netns_down()
{
	local pids pid ns tries

	[ -n "${NETNS_STATE:-}" ] && [ -s "$NETNS_STATE" ] || return 0
	mapfile -t pids < <(netns_pids)
	if [ ${#pids[@]} -gt 0 ]; then
		kill -CONT "${pids[@]}" 2>/dev/null || true
		for pid in "${pids[@]}"; do
			if grep -q patroni "/proc/$pid/cmdline" 2>/dev/null; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
		done
		for pid in "${pids[@]}"; do
			# a postmaster's command line still has its -D (its children
			# have renamed theirs to "postgres: checkpointer" and so on)
			if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ]; then
				if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' -D '; then
					kill -QUIT "$pid" 2>/dev/null || true
				fi
			else
				kill -TERM "$pid" 2>/dev/null || true
			fi
		done
		for tries in $(seq 1 100); do
			mapfile -t pids < <(netns_pids)
			[ ${#pids[@]} -gt 0 ] || break
			[ "$tries" -ne 50 ] || kill -KILL "${pids[@]}" 2>/dev/null || true
			sleep 0.1
		done
	fi
	while IFS= read -r ns; do
		[ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
	done <"$NETNS_STATE"
	: >"$NETNS_STATE"
}
