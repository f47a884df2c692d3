#!/bin/busybox sh
# PID 1 of a `cargo xtask kernels` guest: mount what cctrace reads, run the same flows under
# each hook mode while cctrace traces them, and write everything the host checks to the second
# serial port as sections (`@@BEGIN name` ... `@@END name`). The host does the checking; this
# script only gathers the kernel's own view next to cctrace's.
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /var
ln -s /run /var/run
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up

# The results port: the second serial port, or what the kernel command line names (arm64's
# virtio console, `results=/dev/hvc0`; the kernel hands unknown parameters to init as variables).
OUT=${results:-/dev/ttyS1}
section() { # NAME, content on stdin
    echo "@@BEGIN $1" >"$OUT"
    cat >>"$OUT"
    echo "@@END $1" >"$OUT"
}
# When each stage ended (seconds since boot), for the host to say where a guest's time went.
stage() { # NAME
    echo "$1 $(cut -d ' ' -f 1 /proc/uptime)" >>/tmp/stages
}

for m in $(cat /etc/matrix-modules); do
    insmod "/lib/matrix-modules/$m" >"/tmp/insmod-$m" 2>&1
done
# The results port may be a device one of those modules made: wait for it (up to 10 s).
i=0
while [ ! -e "$OUT" ] && [ "$i" -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
for m in $(cat /etc/matrix-modules); do
    section "insmod $m" <"/tmp/insmod-$m"
done
uname -r | section kernel
if [ -e /sys/kernel/btf/vmlinux ]; then echo yes; else echo no; fi | section btf
cat /proc/sys/net/ipv4/tcp_congestion_control | section default_cc
# The classic tracepoints' record layouts, which the mode without BTF reads its records by: for
# whoever reads the results file after a failure.
for event in tcp/tcp_probe tcp/tcp_retransmit_skb tcp/tcp_cong_state_set sock/inet_sock_set_state tcp/tcp_destroy_sock; do
    echo "$event"
    grep 'field:' "/sys/kernel/tracing/events/$event/format" 2>&1
done | section formats

# Each flow's size: the kernel command line may make it smaller (`bytes=`, for a slower emulator).
BYTES=${bytes:-30000000}
head -c "$BYTES" /dev/zero >/tmp/blob
echo "$BYTES" | section bytes
# Clients read from a FIFO nobody writes, so they close only when the server has sent all.
mkfifo /tmp/hold
sleep 100000 >/tmp/hold &

# Wait (up to 10 s) until a socket of /proc/net/tcp matches PATTERN (an extended regex over
# "local remote state"), in namespace NETNS when given. The guest may run at idle priority
# beside the suite's tests, and fixed pauses were then too short for a server to bind before
# its client connected.
tcp_wait() { # PATTERN [NETNS]
    i=0
    while [ "$i" -lt 100 ]; do
        if [ -n "$2" ]; then
            /usr/sbin/ip netns exec "$2" cat /proc/net/tcp /proc/net/tcp6
        else
            cat /proc/net/tcp /proc/net/tcp6
        fi 2>/dev/null | grep -qE "$1" && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
listening() { # PORT [NETNS]
    tcp_wait ":$(printf '%04X' "$1") [0-9A-F]+:0000 0A " "$2"
}
connected() { # PORT [NETNS]: a connection to PORT is established
    tcp_wait " [0-9A-F]+:$(printf '%04X' "$1") 01 " "$2"
}
udp_bound() { # PORT: a UDP socket is bound to PORT
    i=0
    while [ "$i" -lt 100 ]; do
        grep -qE ":$(printf '%04X' "$1") 00000000:0000 07 " /proc/net/udp && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
owner_named() { # PORT FILE LOG: wait (up to 30 s) until cctrace's JSON in FILE names the owner
    # of the connection whose local port is PORT, or its LOG says it found it in /proc (without
    # periodic samples the flow's next line is its close)
    i=0
    while [ "$i" -lt 300 ]; do
        grep -qE "\"sport\":$1,[^{]*\"owner\":\\{\"pid\"" "$2" 2>/dev/null && return 0
        grep -qE "owner of [^ ]*:$1 -> .* found in /proc" "$3" 2>/dev/null && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
udp_sent() { # the kernel's count of UDP datagrams sent (Udp OutDatagrams)
    awk '/^Udp:/ { if (n++) { for (i = 1; i <= NF; i++) if (name[i] == "OutDatagrams") print $i } else for (i = 1; i <= NF; i++) name[i] = $i }' /proc/net/snmp
}

# The UDP flow's datagrams: 1024 bytes each, each starting as a QUIC long header (version 1, an
# 8-byte connection id), 2048 of them.
UDP_DATAGRAM=1024
{ printf '\303\000\000\000\001\010'; head -c $((UDP_DATAGRAM - 6)) /dev/zero; } >/tmp/quic
i=0
while [ "$i" -lt 11 ]; do
    cat /tmp/quic /tmp/quic >/tmp/quic2
    mv /tmp/quic2 /tmp/quic
    i=$((i + 1))
done

run_mode() { # MODE, cctrace arguments...
    mode=$1
    shift
    # An idle connection opened before cctrace starts: only the start-up listing (iter/tcp)
    # can show it.
    nc -l -p "$IDLE_PORT" </tmp/hold >/dev/null &
    idle_server=$!
    listening "$IDLE_PORT"
    nc 127.0.0.1 "$IDLE_PORT" </tmp/hold >/dev/null &
    idle_client=$!
    connected "$IDLE_PORT"
    # Files of this mode's own: the shell truncates a redirect only once the child runs, and a
    # wait reading the previous mode's "tracing TCP" went on before this cctrace had attached.
    err=/tmp/err-$mode.txt
    out=/tmp/out-$mode.jsonl
    # Under TCG a tracepoint switched on and off ten times a second can stop the guest: qemu
    # does not always see the kernel's code patch in time (a 6.12 guest hit the stale
    # breakpoint in tcp_rcv_established once), so tcp_probe stays attached here.
    # (The owner lookup's findings at debug level: see owner_named.)
    RUST_LOG=tracer::host::owners=debug cctrace --json --events --interval "$interval" --probe-always-attached --log-file "/tmp/log-$mode.txt" "$@" >"$out" 2>"$err" &
    tracer=$!
    i=0
    while ! grep -q 'tracing TCP' "$err" 2>/dev/null && kill -0 "$tracer" 2>/dev/null && [ "$i" -lt 900 ]; do
        sleep 0.1
        i=$((i + 1))
    done

    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs during $mode"

    # A bulk flow on loopback; the sender is the side that accepted the connection. It holds
    # the connection past its data until cctrace has named its owner (at most 30 s): without
    # tcp_sendmsg_locked the owner of an accepted connection is found by scanning /proc, whose
    # pace follows its cost (slow under emulation, slower still at idle priority beside the
    # suite), and a 30 MB transfer here can end between two scans. (A fixed 5 s hold was
    # most of each mode's loopback flow.) ($! of a pipeline is its last process, nc.)
    { cat /tmp/blob; owner_named "$LOOPBACK_PORT" "$out" "/tmp/log-$mode.txt"; } | nc -l -p "$LOOPBACK_PORT" &
    loop_server=$!
    listening "$LOOPBACK_PORT"
    nc 127.0.0.1 "$LOOPBACK_PORT" </tmp/hold >/dev/null

    # A lossy flow between two namespaces: 2 % of the data packets dropped on arrival. Its sender
    # holds the connection 2 s past its data: the mode without BTF reads a flow's counters with
    # sock_diag an interval after its records, and a socket closed by then has none to give.
    lossy_server=none
    if /usr/sbin/ip netns add "snd$mode" && /usr/sbin/ip netns add "rcv$mode" &&
        /usr/sbin/ip link add "vs$mode" type veth peer name "vr$mode" &&
        /usr/sbin/ip link set "vs$mode" netns "snd$mode" && /usr/sbin/ip link set "vr$mode" netns "rcv$mode" &&
        /usr/sbin/ip -n "snd$mode" addr add 198.18.0.1/24 dev "vs$mode" && /usr/sbin/ip -n "rcv$mode" addr add 198.18.0.2/24 dev "vr$mode" &&
        /usr/sbin/ip -n "snd$mode" link set "vs$mode" up && /usr/sbin/ip -n "rcv$mode" link set "vr$mode" up &&
        /usr/sbin/ip -n "snd$mode" link set lo up && /usr/sbin/ip -n "rcv$mode" link set lo up &&
        /usr/sbin/ip netns exec "rcv$mode" nft -f /etc/matrix-loss.nft; then
        { cat /tmp/blob; sleep 2; } | /usr/sbin/ip netns exec "snd$mode" nc -l -p "$LOSSY_PORT" &
        lossy_server=$!
        listening "$LOSSY_PORT" "snd$mode"
        /usr/sbin/ip netns exec "rcv$mode" nc 198.18.0.1 "$LOSSY_PORT" </tmp/hold >/dev/null
        sleep 1
        /usr/sbin/ip netns exec "snd$mode" cat /proc/net/snmp | section "snmp $mode"
    fi >/tmp/lossy.txt 2>&1
    section "lossy setup $mode" </tmp/lossy.txt

    # A UDP flow on loopback: socat sends the file a datagram per read (`sendto` to a peer it
    # names: no connected socket) and stays, its socket open, until cctrace is stopped; the
    # heavy UDP sockets are read once a second, so wait for the count the kernel gives (up to
    # 60 s: at idle priority beside the suite's tests the emulator may get little of a core).
    udp_before=$(udp_sent)
    socat -u "UDP-RECV:$UDP_PORT" /dev/null &
    udp_server=$!
    udp_bound "$UDP_PORT"
    socat -u -b "$UDP_DATAGRAM" FILE:/tmp/quic,ignoreeof "UDP-SENDTO:127.0.0.1:$UDP_PORT" &
    udp_client=$!
    i=0
    while [ "$i" -lt 600 ]; do
        udp_after=$(udp_sent)
        # (Or cctrace said at start-up that it tracks no UDP: the mode without BTF.)
        [ "$((udp_after - udp_before))" -ge 2048 ] &&
            { grep -q "\"tx_packets\":$((udp_after - udp_before))[,}]" "$out" || grep -q 'UDP flows not tracked' "$err"; } && break
        sleep 0.1
        i=$((i + 1))
    done
    echo "sent=$((udp_after - udp_before)) datagram=$UDP_DATAGRAM client=$udp_client" | section "udp $mode"
    sleep 1

    kill -INT "$tracer"
    wait "$tracer"
    echo $? | section "exit $mode"
    echo "loopback=$loop_server lossy=$lossy_server" | section "pids $mode"
    section "stderr $mode" <"$err"
    section "jsonl $mode" <"$out"
    # What the start-up notes shorten (a refusing verifier's whole log), for whoever reads the
    # results file after a failure.
    section "log $mode" <"/tmp/log-$mode.txt"
    rm -f "$out" "$err" "/tmp/log-$mode.txt"
    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs after $mode"
    kill "$idle_server" "$idle_client" "$udp_client" "$udp_server" 2>/dev/null
    /usr/sbin/ip netns del "snd$mode" 2>/dev/null
    /usr/sbin/ip netns del "rcv$mode" 2>/dev/null
}

# The kernel-wide stages this guest runs (`checks=fix,deep,unit` on the kernel command line,
# `checks=none` for none; all of them when it says nothing).
CHECKS=",${checks:-fix,deep,unit},"
asked() { # STAGE
    case "$CHECKS" in *",$1,"*) return 0 ;; esac
    return 1
}

# An idle connection of a namespace of its own (fx), on the kernel's default CUBIC.
fx_connection() {
    /usr/sbin/ip netns add fx && /usr/sbin/ip -n fx link set lo up || return
    /usr/sbin/ip netns exec fx nc -l -p "$FIX_PORT" </tmp/hold >/dev/null &
    listening "$FIX_PORT" fx
    /usr/sbin/ip netns exec fx nc 127.0.0.1 "$FIX_PORT" </tmp/hold >/dev/null &
    connected "$FIX_PORT" fx
}

# cctrace fix --live: fx's connection switched to BBR and back (--undo); ss, the kernel's own
# view, says what each end runs.
fix_live() {
    # A namespace other than the first may default only to what the host allows.
    echo "reno cubic bbr" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
    ss_fx() { /usr/sbin/ip netns exec fx ss -tinH state established; }
    ss_fx | section "ss before fix"
    { cctrace fix --netns fx --cc bbr --live --yes; echo "exit $?"; } 2>&1 | section "fix"
    ss_fx | section "ss after fix"
    { cctrace fix --undo --netns fx --yes; echo "exit $?"; } 2>&1 | section "fix undo"
    ss_fx | section "ss after undo"
}

# cctrace --deep on fx: it runs, or one line says what the kernel lacks and tracing goes on
# (fx's idle connection is listed all the same).
deep_mode() {
    cctrace --json --events --deep --netns fx --duration 1 >/tmp/deep.jsonl 2>/tmp/deep.txt
    echo $? | section "deep exit"
    section "deep stderr" </tmp/deep.txt
    section "deep jsonl" </tmp/deep.jsonl
    # The kernel frees unregistered twins after a grace period of its own, seconds under
    # emulation: what is still loaded 30 s on was left behind.
    i=0
    while bpftool prog show | grep -q cct_ && [ "$i" -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs after deep"
}

# The packaged systemd unit on a host that locks perf events down (kernel.perf_event_paranoid=3:
# Debian's kernels then refuse perf_event_open to anything without CAP_SYS_ADMIN): cctrace
# serve as an unprivileged user with exactly the unit's capabilities, its locked-memory limit
# and no new privileges, serving the metrics of a flow; and the classic hooks, which need perf
# events, as that user. (setpriv by path: this busybox runs its own applet, which has no
# --reuid, before any on PATH.)
UNIT_CAPS=+bpf,+perfmon,+dac_read_search
AS_UNIT="/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all,$UNIT_CAPS --ambient-caps=-all,$UNIT_CAPS --bounding-set=-all,$UNIT_CAPS --no-new-privs"
unit_service() {
    # Without BTF every hook is a perf event, which 3 keeps from all but CAP_SYS_ADMIN: there the
    # unit runs at the kernel's own default (2, as on Unraid and Raspberry Pi OS), and 3 must
    # refuse it in one line.
    if [ -e /sys/kernel/btf/vmlinux ]; then echo 3; else echo 2; fi >/proc/sys/kernel/perf_event_paranoid
    cat /proc/sys/kernel/perf_event_paranoid | section "perf_event_paranoid"
    # LimitMEMLOCK=infinity
    ulimit -l unlimited
    $AS_UNIT cctrace serve --listen 127.0.0.1:9617 >/dev/null 2>/tmp/serve.txt &
    serve=$!
    i=0
    while ! grep -q 'tracing TCP' /tmp/serve.txt && kill -0 "$serve" 2>/dev/null && [ "$i" -lt 900 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    # Held past its data as the lossy flow is (the mode without BTF).
    { head -c "$UNIT_BYTES" /dev/zero; sleep 2; } | nc -l -p 5020 &
    listening 5020
    nc 127.0.0.1 5020 </tmp/hold >/dev/null
    sleep 2
    wget -q -O - http://127.0.0.1:9617/metrics 2>&1 | section "unit metrics"
    kill -TERM "$serve"
    wait "$serve"
    echo $? | section "unit exit"
    section "unit stderr" </tmp/serve.txt
    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs after unit"
    if [ -e /sys/kernel/btf/vmlinux ]; then
        $AS_UNIT cctrace --hooks classic --json --duration 1 >/dev/null 2>/tmp/classic.txt
        echo $? | section "unit classic exit"
        section "unit classic stderr" </tmp/classic.txt
    else
        echo 3 >/proc/sys/kernel/perf_event_paranoid
        $AS_UNIT cctrace --json --duration 1 >/dev/null 2>/tmp/strict.txt
        echo $? | section "unit strict exit"
        section "unit strict stderr" </tmp/strict.txt
        { bpftool prog show; echo "status $?"; } 2>&1 | section "programs after unit strict"
    fi
}

# The hook modes this guest runs its flows under (`hooks=auto,classic,nobtf` on the kernel command
# line; `nobtf=FLAG` is how cctrace is told to run without BTF).
HOOKS=",${hooks:-auto,classic},"
stage boot
for mode in auto classic nobtf; do
    case "$HOOKS" in *",$mode,"*) ;; *) continue ;; esac
    case $mode in
    auto) run_mode auto ;;
    classic) run_mode classic --hooks classic ;;
    nobtf) run_mode nobtf "$nobtf" ;;
    esac
    stage "$mode"
done
if asked fix || asked deep; then
    fx_connection >/tmp/fx.txt 2>&1
    section "fx setup" </tmp/fx.txt
fi
if asked fix; then
    fix_live >/tmp/fix.txt 2>&1
    section "fix setup" </tmp/fix.txt
    stage fix
fi
if asked deep; then
    deep_mode
    stage deep
fi
if asked unit; then
    UNIT_BYTES=5000000
    echo "$UNIT_BYTES" | section "unit bytes"
    unit_service
    stage unit
fi
section stages </tmp/stages
echo done | section end
# A reboot, not a power-off: qemu runs with -no-reboot, so either ends it, and a kernel without
# ACPI (the matrix's own build without BTF) halts where it cannot power off.
reboot -f
