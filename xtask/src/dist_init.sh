#!/bin/busybox sh
# PID 1 of the `cargo xtask dist` check guest: an initramfs with busybox and the dist cctrace
# only (no libc, no libelf, no zlib). It traces one loopback bulk flow, stops cctrace with
# SIGINT, and writes what the host checks to the second serial port as sections
# (`@@BEGIN name` ... `@@END name`).
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up

OUT=/dev/ttyS1
section() { # NAME, content on stdin
    echo "@@BEGIN $1" >"$OUT"
    cat >>"$OUT"
    echo "@@END $1" >"$OUT"
}

uname -r | section kernel
# What the guest holds besides busybox and cctrace: the host checks it is nothing.
find / -xdev -type f | section files
cctrace --version 2>&1 | section version

BYTES=20000000
head -c "$BYTES" /dev/zero >/tmp/blob
echo "$BYTES" | section bytes
mkfifo /tmp/hold
sleep 100000 >/tmp/hold &

cctrace --json --events --interval 500 >/tmp/out.jsonl 2>/tmp/err.txt &
tracer=$!
i=0
while ! grep -q 'tracing TCP' /tmp/err.txt 2>/dev/null && kill -0 "$tracer" 2>/dev/null && [ "$i" -lt 900 ]; do
    sleep 0.1
    i=$((i + 1))
done
# The sender accepts; the client reads until the server has sent all and closed.
{ cat /tmp/blob; sleep 1; } | nc -l -p "$LOOPBACK_PORT" &
sleep 0.5
nc 127.0.0.1 "$LOOPBACK_PORT" </tmp/hold >/dev/null
sleep 1
kill -INT "$tracer"
wait "$tracer"
echo $? | section exit
# Nothing left behind: cctrace pins nothing, so the BPF file system is as empty as at boot.
ls -A /sys/fs/bpf | section "bpffs after"
section stderr </tmp/err.txt
section jsonl </tmp/out.jsonl
echo done | section end
poweroff -f
