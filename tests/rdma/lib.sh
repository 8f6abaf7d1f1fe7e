# SPDX-License-Identifier: BSD-3-Clause
# Sourced INSIDE the soft-RoCE VM by e2e.sh, pool.sh, loss.sh and tools/rdma-compare.sh: the two
# kvlane sides of the rxe0 <-> rxe1 link, so that every RDMA scenario sets them up alike.

: "${RXE_DEV0:?run inside the VM harness}" "${RXE_DEV1:?}" "${RXE_IP0:?}" "${RXE_IP1:?}"

# kvl_rdma_inis DIR NAME BLOCKS [SERVER_IDLE [CLIENT_IDLE]]
# Writes DIR/secret (0600) and DIR/a.ini (client: rxe0, control on an ephemeral port) and
# DIR/b.ini (server: rxe1, control on $RXE_IP1:18515, a readwrite pattern segment "kv" of
# BLOCKS x 1 MiB).
# The QPs' ACK timeout is 18 (1.07 s a try; KVL_RDMA_ACK_TIMEOUT overrides it), not kvlane's
# default 15 (134 ms): the responder is an emulated kernel on a host that other work shares,
# and at load 15+ it takes longer than 134 ms to answer, so every try resends up to 128 PSNs
# that were never lost. Under such storms the guest's rxe (6.1) was seen failing a WRITE with
# a remote access NAK (CI, and beside other VMs here). Nothing is lost on the veth (its
# backlog is raised in vm/guest/rxe-setup.sh), so the longer timeout costs nothing, except
# where a test drops packets on purpose: loss.sh keeps 15. The handshake may take 30 s (not
# 10): at load 18 on the host the guest needs 50 s to load its modules, and a handshake over
# its TCP took longer than 10 s (seen here).
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
ack_timeout = ${KVL_RDMA_ACK_TIMEOUT:-18}
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
connect_timeout_ms = 30000
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

# kvl_rdma_sample_qps PID FILE: while PID lives, both runtimes' /kvlane/qps and /kvlane/lcores
# (client "cli", server "srv") every 15 s into FILE, so that a run that stalls shows what each QP held
# (posted, completed, outstanding, state) while it did; every 5 s what the guest kernel did.
# Beside them, what the guest kernel did: each vCPU's local timer interrupts and timer
# softirqs, and every thread of both processes (state, CPU last run on, user + system ticks),
# so that a stall tells a runtime that stopped polling from a QP that stopped completing.
kvl_rdma_sample_qps() {
	_k=0
	while sleep 5 && kill -0 "$1" 2> /dev/null; do
		_k=$((_k + 1))
		kvl_rdma_sample_sched "$1" ${srv:-} >> "$2"
		[ $((_k % 3)) = 0 ] || continue
		for _p in cli srv; do
			echo "== $(date +%T) $_p: $(timeout 20 python3 "${KVL_SRC:?}/tools/kvlane_telemetry.py" \
				-f $_p /kvlane/qps /kvlane/lcores 2>&1 | tr -d '\n' | cut -c1-3000)"
		done >> "$2"
	done
}

# kvl_rdma_sample_rxe PID FILE: while PID lives, once a second, the guest's uptime (the clock
# of kvlane-perf's t0_mono) and both devices' packet and retry counters, one line each, read
# with the shell's own `read` (no process per sample: under TCG a fork costs ~100 ms), so that
# a stall is placed to the second against kvlane-perf's ok_timeline.
kvl_rdma_sample_rxe() {
	echo "# uptime_s ${RXE_DEV0}:sent,rcvd,retry,dup ${RXE_DEV1}:sent,rcvd,retry,dup" > "$2"
	while kill -0 "$1" 2> /dev/null; do
		read -r _up _ < /proc/uptime
		_l=$_up
		for _r in $RXE_DEV0 $RXE_DEV1; do
			_h=/sys/class/infiniband/$_r/ports/1/hw_counters
			read -r _a < $_h/sent_pkts; read -r _b < $_h/rcvd_pkts
			read -r _c < $_h/completer_retry_err; read -r _d < $_h/duplicate_request
			_l="$_l $_a,$_b,$_c,$_d"
		done
		echo "$_l" >> "$2"
		sleep 1
	done
}

# kvl_rdma_sample_sched PID...: both rxe devices' packet and retry counters, the guest's timer
# interrupts per vCPU, and one line per thread of each PID: "tid comm state cpu utime stime"
# (ticks), where it sleeps (wchan) and the system call it is in.
kvl_rdma_sample_sched() {
	_pk=''
	for _r in ${RXE_DEV0:-} ${RXE_DEV1:-}; do
		for _c in sent_pkts rcvd_pkts completer_retry_err duplicate_request; do
			read -r _v < /sys/class/infiniband/$_r/ports/1/hw_counters/$_c 2> /dev/null &&
				_pk="$_pk ${_r}_$_c=$_v"
		done
	done
	echo "-- $(date +%T)$_pk"
	echo "-- LOC: $(awk '/^ *LOC:/ {for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) printf " %s", $i}' /proc/interrupts 2> /dev/null)" \
		"TIMER softirq: $(awk '/^ *TIMER:/ {for (i = 2; i <= NF; i++) printf " %s", $i}' /proc/softirqs 2> /dev/null)"
	for _pid in "$@"; do
		for _t in /proc/"$_pid"/task/*/stat; do
			# comm is in parentheses and may hold spaces: the fields after it, counted
			sed 's/^\([0-9]*\) (\(.*\)) \(.*\)$/\1 \2|\3/' "$_t" 2> /dev/null | awk -F'|' \
				-v p="$_pid" '{split($2, f, " "); print "   " p "/" $1 " " f[1] " cpu " f[37] " utime " f[12] " stime " f[13]}' | tr -d '\n'
			echo " wchan $(cat "${_t%/stat}/wchan" 2> /dev/null) syscall $(cut -d' ' -f1 "${_t%/stat}/syscall" 2> /dev/null)"
		done
	done
}

# kvl_rdma_perf TAG OP SEG_SIZE N "TELEMETRY..." EAL...
# One verified kvlane-perf run (OP --read or --write, N x 1 MiB, 16 in flight) from DIR $tmp's
# a.ini on $RXE_DEV0 against the kvlaned of kvl_rdma_server. It lingers once done, so that each
# /kvlane/NAME command of TELEMETRY is read through its own socket into $out/cli_NAME$OP.json.
# Writes $out/perf$OP.json and .log; returns 1 (with the log) when the run or a read failed.
kvl_rdma_perf() {
	_tag=$1 _op=$2 _seg=$3 _n=$4 _cmds=$5 _rc=0
	shift 5
	"$build/kvlane-perf" "$@" --file-prefix cli -- -c "$tmp/a.ini" -d "$RXE_DEV0" \
		-x "${RXE_GID0:?}" --segment kv --seed 1 --seg-size "$_seg" -s 1M -n "$_n" -t 16 \
		$_op --verify --json --linger 120 "$RXE_IP1:18515" \
		> "$out/perf$_op.json" 2> "$out/perf$_op.log" &
	cli=$!
	kvl_rdma_sample_qps $cli "$out/qps$_op.log" &
	_smp=$!
	kvl_rdma_sample_rxe $cli "$out/rxe$_op.trace" &
	_smp="$_smp $!"
	kvl_rdma_wait_line "$out/perf$_op.log" lingering $cli || true
	kill $_smp 2> /dev/null || true
	kvl_rdma_sample_sched $cli ${srv:-} >> "$out/qps$_op.log" # as the run ended
	for _c in $_cmds; do
		python3 "${KVL_SRC:?}/tools/kvlane_telemetry.py" -f cli "$_c" \
			> "$out/cli_${_c##*/}$_op.json" || _rc=1
	done
	kill -TERM $cli 2> /dev/null || true
	if ! wait $cli; then
		echo "$_tag: kvlane-perf $_op failed:"; cat "$out/perf$_op.log" "$out/perf$_op.json"
		echo "$_tag: the last /kvlane/qps samples of both runtimes ($out/qps$_op.log):"
		tail -n 80 "$out/qps$_op.log" 2> /dev/null
		_rc=1
	fi
	return $_rc
}

# kvl_rdma_snap FILE: both rxe devices' hw counters, one "DEV_COUNTER VALUE" a line (appended).
kvl_rdma_snap() {
	for _r in $RXE_DEV0 $RXE_DEV1; do
		for _c in /sys/class/infiniband/$_r/ports/1/hw_counters/*; do
			read -r _v < "$_c" && echo "${_r}_${_c##*/} $_v" >> "$1"
		done
	done
}

# kvl_rdma_snap_diff A B: the counters that moved from snapshot A to B, "name +n" on one line
# (what rxe did meanwhile: retransmissions, duplicates, sequence NAKs, send errors).
kvl_rdma_snap_diff() {
	awk 'NR == FNR { a[$1] = $2; next } $2 != a[$1] { printf "%s%s +%d", sep, $1, $2 - a[$1]; sep = ", " }
		END { print sep == "" ? "no counter moved" : "" }' "$1" "$2"
}
