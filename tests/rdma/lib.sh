# SPDX-License-Identifier: BSD-3-Clause
# Sourced INSIDE the soft-RoCE VM by e2e.sh, loss.sh and tools/rdma-compare.sh: the two
# kvlane sides of the rxe0 <-> rxe1 link, so that every RDMA scenario sets them up alike.

: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"

# kvl_rdma_inis DIR NAME BLOCKS [SERVER_IDLE [CLIENT_IDLE]]
# Writes DIR/secret (0600) and DIR/a.ini (client: rxe0, control on an ephemeral port) and
# DIR/b.ini (server: rxe1, control on $RXE_IP1:18515, a readwrite pattern segment "kv" of
# BLOCKS x 1 MiB).
kvl_rdma_inis() {
	_dir=$1 _name=$2 _blocks=$3 _pol_b=${4:-yield} _pol_a=${5:-yield}
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$_dir/secret"
	chmod 600 "$_dir/secret"
	for _side in a b; do
		if [ $_side = a ]; then
			_dev=$RXE_DEV0 _ip=$RXE_IP0 _port=0 _pol=$_pol_a
		else
			_dev=$RXE_DEV1 _ip=$RXE_IP1 _port=18515 _pol=$_pol_b
		fi
		cat > "$_dir/$_side.ini" <<INI
[runtime]
name = $_name-$_side
idle_policy = $_pol
[nic.r]
device = $_dev
transport = verbs
gid_index = auto
queue_depth = 256
[cq_moderation]
signal_every = 16
[segment.kv]
layers = 1
planes = 1
blocks = $_blocks
block_bytes = 1048576
access = readwrite
fill = pattern
[control]
listen = $_ip:$_port
secret_file = $_dir/secret
heartbeat_interval_ms = 500
peer_timeout_ms = 5000
INI
	done
}

# kvl_rdma_setup OUT
# Creates OUT and a scratch folder $tmp (removed at exit, with the processes $srv and $cli
# killed), and exports RUNTIME_DIRECTORY inside it.
kvl_rdma_setup() {
	mkdir -p "$1"
	tmp=$(mktemp -d)
	export RUNTIME_DIRECTORY=$tmp/run
	mkdir -p "$RUNTIME_DIRECTORY"
	trap 'kill ${srv:-} ${cli:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
}

# kvl_rdma_wait_line FILE TEXT PID [SECONDS (300)]
# Returns 0 once FILE holds TEXT; 1 when PID is gone first, or after SECONDS.
kvl_rdma_wait_line() {
	_f=$1 _t=$2 _p=$3 _n=$((${4:-300} * 10)) _i=0
	until grep -q "$_t" "$_f" 2> /dev/null; do
		_i=$((_i + 1))
		[ $_i -le $_n ] && kill -0 "$_p" 2> /dev/null || return 1
		sleep 0.1
	done
}

# kvl_rdma_server BUILD DIR OUT TAG EAL...
# Starts kvlaned on DIR/b.ini (file prefix "srv", RUNTIME_DIRECTORY must be set), logs to
# OUT/kvlaned.log, sets $srv to its pid and returns once it is ready; exits 1 with its log
# if it dies or takes over a minute.
kvl_rdma_server() {
	_build=$1 _dir=$2 _out=$3 _tag=$4
	shift 4
	"$_build/kvlaned" "$@" --file-prefix srv -- -c "$_dir/b.ini" > "$_out/kvlaned.log" 2>&1 &
	srv=$!
	if ! kvl_rdma_wait_line "$_out/kvlaned.log" "kvlaned: ready" $srv 60; then
		echo "$_tag: kvlaned did not start:"
		cat "$_out/kvlaned.log"
		exit 1
	fi
}
