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
connected() { # PORT: a connection to PORT is established
    tcp_wait " [0-9A-F]+:$(printf '%04X' "$1") 01 "
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
    nc -l -p 5003 </tmp/hold >/dev/null &
    idle_server=$!
    listening 5003
    nc 127.0.0.1 5003 </tmp/hold >/dev/null &
    idle_client=$!
    connected 5003
    # Files of this mode's own: the shell truncates a redirect only once the child runs, and a
    # wait reading the previous mode's "tracing TCP" went on before this cctrace had attached.
    err=/tmp/err-$mode.txt
    out=/tmp/out-$mode.jsonl
    # Under TCG a tracepoint switched on and off ten times a second can stop the guest: qemu
    # does not always see the kernel's code patch in time (a 6.12 guest hit the stale
    # breakpoint in tcp_rcv_established once), so tcp_probe stays attached here.
    cctrace --json --events --interval 500 --probe-always-attached "$@" >"$out" 2>"$err" &
    tracer=$!
    i=0
    while ! grep -q 'tracing TCP' "$err" 2>/dev/null && kill -0 "$tracer" 2>/dev/null && [ "$i" -lt 900 ]; do
        sleep 0.1
        i=$((i + 1))
    done

    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs during $mode"

    # A bulk flow on loopback; the sender is the side that accepted the connection. It holds
    # the connection 5 s past its data: without tcp_sendmsg_locked the owner of an accepted
    # connection is found by scanning /proc, whose pace follows its cost (slow under
    # emulation, slower still at idle priority beside the suite), and a 30 MB transfer here
    # can end between two scans. ($! of a pipeline is its last process, nc.)
    { cat /tmp/blob; sleep 5; } | nc -l -p 5001 &
    loop_server=$!
    listening 5001
    nc 127.0.0.1 5001 </tmp/hold >/dev/null

    # A lossy flow between two namespaces: 2 % of the data packets dropped on arrival.
    lossy_server=none
    if /usr/sbin/ip netns add "snd$mode" && /usr/sbin/ip netns add "rcv$mode" &&
        /usr/sbin/ip link add "vs$mode" type veth peer name "vr$mode" &&
        /usr/sbin/ip link set "vs$mode" netns "snd$mode" && /usr/sbin/ip link set "vr$mode" netns "rcv$mode" &&
        /usr/sbin/ip -n "snd$mode" addr add 198.18.0.1/24 dev "vs$mode" && /usr/sbin/ip -n "rcv$mode" addr add 198.18.0.2/24 dev "vr$mode" &&
        /usr/sbin/ip -n "snd$mode" link set "vs$mode" up && /usr/sbin/ip -n "rcv$mode" link set "vr$mode" up &&
        /usr/sbin/ip -n "snd$mode" link set lo up && /usr/sbin/ip -n "rcv$mode" link set lo up &&
        /usr/sbin/ip netns exec "rcv$mode" nft -f /etc/matrix-loss.nft; then
        /usr/sbin/ip netns exec "snd$mode" nc -l -p 5002 </tmp/blob &
        lossy_server=$!
        listening 5002 "snd$mode"
        /usr/sbin/ip netns exec "rcv$mode" nc 198.18.0.1 5002 </tmp/hold >/dev/null
        sleep 1
        /usr/sbin/ip netns exec "snd$mode" cat /proc/net/snmp | section "snmp $mode"
    fi >/tmp/lossy.txt 2>&1
    section "lossy setup $mode" </tmp/lossy.txt

    # A UDP flow on loopback: socat sends the file a datagram per read (`sendto` to a peer it
    # names: no connected socket) and stays, its socket open, until cctrace is stopped; the
    # heavy UDP sockets are read once a second, so wait for the count the kernel gives (up to
    # 60 s: at idle priority beside the suite's tests the emulator may get little of a core).
    udp_before=$(udp_sent)
    socat -u UDP-RECV:5004 /dev/null &
    udp_server=$!
    udp_bound 5004
    socat -u -b "$UDP_DATAGRAM" FILE:/tmp/quic,ignoreeof UDP-SENDTO:127.0.0.1:5004 &
    udp_client=$!
    i=0
    while [ "$i" -lt 600 ]; do
        udp_after=$(udp_sent)
        [ "$((udp_after - udp_before))" -ge 2048 ] && grep -q "\"tx_packets\":$((udp_after - udp_before))[,}]" "$out" && break
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
    rm -f "$out" "$err"
    { bpftool prog show; echo "status $?"; } 2>&1 | section "programs after $mode"
    kill "$idle_server" "$idle_client" "$udp_client" "$udp_server" 2>/dev/null
    /usr/sbin/ip netns del "snd$mode" 2>/dev/null
    /usr/sbin/ip netns del "rcv$mode" 2>/dev/null
}

run_mode tp_btf
run_mode classic --hooks classic
echo done | section end
poweroff -f
