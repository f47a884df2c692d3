//! Resolve the kernel struct field offsets the eBPF programs read, from the running kernel's BTF.
//!
//! This is the only place that knows kernel struct layouts. The programs get the result as the
//! `OFFSETS` global, so one binary runs on any kernel whose BTF names these fields. Fields the
//! kernel lacks are marked absent (the sample then carries 0) and reported, not fatal, except
//! those without which no sample means anything.

use anyhow::{anyhow, bail, Context, Result};
use btf_rs::{Btf, Type};
use tracer_common::{BitField, Offsets, ABSENT};

/// Where a field was found: byte offset from the struct start, and bit-field geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLoc {
    pub bit_offset: u32,
    pub bitfield_bits: Option<u32>,
    /// Size of the field's type in bytes (0 when not an integer/pointer/array/struct).
    pub size: usize,
}

/// Resolves dotted member paths (`__sk_common.skc_num`) through anonymous structs and unions.
pub struct BtfResolver {
    btf: Btf,
}

impl BtfResolver {
    pub fn from_sys_fs() -> Result<Self> {
        let path = "/sys/kernel/btf/vmlinux";
        // Mapped, the kernel's BTF is ready at once (parsing it into tables took a third of
        // cctrace's start-up); kernels that cannot map it are read the usual way.
        if let Ok(btf) = Btf::from_file_with_backend(path, btf_rs::Backend::Mmap) {
            return Ok(Self { btf });
        }
        let btf = Btf::from_file(path).with_context(|| {
            format!("cannot read kernel BTF at {path}: cctrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
        })?;
        Ok(Self { btf })
    }

    /// The BTF `kernel_btf` names: the kernel's own, or a file's.
    pub fn from_kernel_btf(kernel_btf: &super::btf_file::KernelBtf) -> Result<Self> {
        match kernel_btf {
            super::btf_file::KernelBtf::Kernel => Self::from_sys_fs(),
            super::btf_file::KernelBtf::File { path, raw } => {
                let btf = Btf::from_bytes(raw).map_err(|e| anyhow!("reading the BTF of {}: {e}", path.display()))?;
                Ok(Self { btf })
            }
        }
    }

    fn find_struct(&self, name: &str) -> Result<btf_rs::Struct> {
        let types = self.btf.resolve_types_by_name(name).map_err(|e| anyhow!("BTF: no type named {name}: {e}"))?;
        types
            .into_iter()
            .find_map(|t| match t {
                // A forward declaration has no members; the definition has a size.
                Type::Struct(s) if !s.members.is_empty() => Some(s),
                _ => None,
            })
            .ok_or_else(|| anyhow!("BTF: struct {name} not found"))
    }

    /// Whether the kernel has a function named `name` (BTF lists the functions it was built
    /// with, helpers included, so this tells which kernel features exist before anything loads).
    pub fn has_function(&self, name: &str) -> bool {
        self.btf.resolve_types_by_name(name).is_ok_and(|types| types.iter().any(|t| matches!(t, Type::Func(_))))
    }

    /// Whether the kernel has a typedef named `name` (`btf_trace_EVENT`: a BTF tracepoint).
    pub fn has_typedef(&self, name: &str) -> bool {
        self.btf.resolve_types_by_name(name).is_ok_and(|types| types.iter().any(|t| matches!(t, Type::Typedef(_))))
    }

    /// Size in bytes of struct `name`.
    pub fn struct_size(&self, name: &str) -> Result<usize> {
        Ok(self.find_struct(name)?.size())
    }

    /// Strip typedefs and qualifiers.
    fn concrete(&self, mut t: Type) -> Result<Type> {
        for _ in 0..32 {
            let next = match &t {
                Type::Typedef(x) => self.btf.resolve_chained_type(x),
                Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => self.btf.resolve_chained_type(x),
                Type::TypeTag(x) => self.btf.resolve_chained_type(x),
                _ => return Ok(t),
            };
            t = next.map_err(|e| anyhow!("BTF: {e}"))?;
        }
        bail!("BTF: type chain too long")
    }

    fn type_size(&self, t: &Type) -> usize {
        match t {
            Type::Int(i) => i.size(),
            Type::Ptr(_) => 8,
            Type::Enum(e) => e.size(),
            Type::Struct(s) | Type::Union(s) => s.size(),
            Type::Array(a) => {
                let elem = self.btf.resolve_chained_type(a).ok().and_then(|e| self.concrete(e).ok());
                elem.map_or(0, |e| self.type_size(&e) * a.len())
            }
            _ => 0,
        }
    }

    /// Search `s` for `name`, descending into anonymous members; returns the member's bit offset
    /// relative to `s` and its type.
    fn find_member(&self, s: &btf_rs::Struct, name: &str, depth: u32) -> Result<Option<(u32, Option<u32>, Type)>> {
        if depth > 8 {
            return Ok(None);
        }
        for m in &s.members {
            let mname = self.btf.resolve_name(m).unwrap_or_default();
            let mtype = self.concrete(self.btf.resolve_chained_type(m).map_err(|e| anyhow!("BTF: {e}"))?)?;
            if mname == name {
                return Ok(Some((m.bit_offset(), m.bitfield_size().filter(|&b| b > 0), mtype)));
            }
            if mname.is_empty() {
                if let Type::Struct(inner) | Type::Union(inner) = &mtype {
                    if let Some((off, bits, t)) = self.find_member(inner, name, depth + 1)? {
                        return Ok(Some((m.bit_offset() + off, bits, t)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Locate `struct_name.path` (path components separated by dots; an array member may be
    /// indexed, as in `user_regs.regs[1]`).
    pub fn field(&self, struct_name: &str, path: &str) -> Result<FieldLoc> {
        let mut current = Type::Struct(self.find_struct(struct_name)?);
        let mut bit_offset = 0u32;
        let mut bits = None;
        for part in path.split('.') {
            let (name, index) = split_index(part).with_context(|| format!("BTF: {struct_name}.{path}"))?;
            let s = match &current {
                Type::Struct(s) | Type::Union(s) => s.clone(),
                _ => bail!("BTF: {struct_name}.{path}: {name} is inside a non-struct"),
            };
            let (off, b, t) =
                self.find_member(&s, name, 0)?.ok_or_else(|| anyhow!("BTF: {struct_name} has no member {path}"))?;
            bit_offset += off;
            bits = b;
            current = t;
            if let Some(index) = index {
                let Type::Array(array) = &current else { bail!("BTF: {struct_name}.{path}: {name} is not an array") };
                if index >= array.len() {
                    bail!("BTF: {struct_name}.{path}: {name} has {} elements", array.len());
                }
                let element = self.concrete(self.btf.resolve_chained_type(array).map_err(|e| anyhow!("BTF: {e}"))?)?;
                let stride = u32::try_from(self.type_size(&element) * 8 * index)?;
                bit_offset += stride;
                current = element;
            }
        }
        Ok(FieldLoc { bit_offset, bitfield_bits: bits, size: self.type_size(&current) })
    }
}

/// A path component and its array index: `regs[1]` is `("regs", Some(1))`, `sp` is `("sp", None)`.
fn split_index(part: &str) -> Result<(&str, Option<usize>)> {
    let Some((name, rest)) = part.split_once('[') else { return Ok((part, None)) };
    let index = rest.strip_suffix(']').and_then(|i| i.parse().ok()).ok_or_else(|| anyhow!("bad index in {part}"))?;
    Ok((name, Some(index)))
}

/// One field the programs read: struct, path, and the size the program reads it as.
struct Want {
    strukt: &'static str,
    path: &'static str,
    /// Bytes the eBPF program reads (0: any size, e.g. a struct whose inner offset is used).
    read_size: usize,
    required: bool,
}

const fn want(strukt: &'static str, path: &'static str, read_size: usize, required: bool) -> Want {
    Want { strukt, path, read_size, required }
}

/// An optional field this kernel's BTF does not have as cctrace reads it: the samples carry 0
/// for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct MissingField {
    pub strukt: &'static str,
    pub path: &'static str,
    pub why: String,
}

/// Outcome of resolving: the offsets and what is missing on this kernel.
#[derive(Debug)]
pub struct Resolved {
    pub offsets: Offsets,
    /// Optional fields the kernel lacks, with the reason (reported, not fatal).
    pub missing: Vec<MissingField>,
}

fn byte_offset(loc: &FieldLoc, w: &Want) -> Result<u32> {
    if loc.bitfield_bits.is_some() || !loc.bit_offset.is_multiple_of(8) {
        bail!("{}.{} is a bit field", w.strukt, w.path);
    }
    if w.read_size != 0 && loc.size != w.read_size {
        bail!("{}.{} is {} bytes, cctrace reads {}", w.strukt, w.path, loc.size, w.read_size);
    }
    Ok(loc.bit_offset / 8)
}

fn bit_field(loc: &FieldLoc, w: &Want) -> Result<BitField> {
    let (shift, width) = match loc.bitfield_bits {
        Some(bits) => (loc.bit_offset % 8, bits),
        // A plain byte works as an 8-bit field.
        None if loc.size == 1 => (0, 8),
        None => bail!("{}.{} is {} bytes, expected a bit field or a byte", w.strukt, w.path, loc.size),
    };
    if shift + width > 8 {
        bail!("{}.{} straddles a byte boundary", w.strukt, w.path);
    }
    Ok(BitField {
        byte_offset: loc.bit_offset / 8,
        shift: shift as u8,
        mask: ((1u32 << width) - 1) as u8,
        _pad: [0; 2],
    })
}

/// Resolve every offset in [`Offsets`] against `btf`.
pub fn resolve(btf: &BtfResolver) -> Result<Resolved> {
    let mut o = Offsets::unresolved();
    let mut missing = Vec::new();
    fill(btf, plain_fields(&mut o), byte_offset, Some(ABSENT), &mut missing)?;

    // Renamed `__parent` in 6.14 (readers must now hold a lock or RCU, which a probe read of a
    // cgroup that stays alive while its socket exists does not need).
    let parent = btf
        .field("kernfs_node", "__parent")
        .or_else(|_| btf.field("kernfs_node", "parent"))
        .and_then(|loc| byte_offset(&loc, &want("kernfs_node", "parent", 8, false)));
    match parent {
        Ok(off) => o.kernfs_node_parent = off,
        Err(e) => missing.push(MissingField { strukt: "kernfs_node", path: "parent", why: e.to_string() }),
    }

    // A received segment's sequence numbers: `TCP_SKB_CB(skb)`, the `struct tcp_skb_cb` the
    // kernel keeps in `sk_buff.cb[]`.
    let cb = btf.field("sk_buff", "cb").and_then(|loc| byte_offset(&loc, &want("sk_buff", "cb", 0, false)));
    for (dst, path) in [(&mut o.skb_seq, "seq"), (&mut o.skb_end_seq, "end_seq")] {
        let w = want("tcp_skb_cb", path, 4, false);
        match (&cb, btf.field(w.strukt, w.path).and_then(|loc| byte_offset(&loc, &w))) {
            (Ok(cb), Ok(off)) => *dst = cb + off,
            (Err(e), _) => missing.push(MissingField { strukt: "sk_buff", path: "cb", why: e.to_string() }),
            (_, Err(e)) => missing.push(MissingField { strukt: w.strukt, path: w.path, why: e.to_string() }),
        }
    }

    // `sk_userlocks` is a byte since Linux 6.x and a 4-bit field before (5.10: `u8 sk_padding:1,
    // sk_kern_sock:1, sk_no_check_tx:1, sk_no_check_rx:1, sk_userlocks:4`): read as either.
    let bits: [(&mut BitField, Want); 7] = [
        (&mut o.icsk_ca_state, want("inet_connection_sock", "icsk_ca_state", 0, true)),
        (&mut o.chrono_type, want("tcp_sock", "chrono_type", 0, false)),
        (&mut o.rate_app_limited, want("tcp_sock", "rate_app_limited", 0, false)),
        (&mut o.is_cwnd_limited, want("tcp_sock", "is_cwnd_limited", 0, false)),
        (&mut o.sk_userlocks, want("sock", "sk_userlocks", 0, false)),
        (&mut o.wscale_ok, want("tcp_sock", "rx_opt.wscale_ok", 0, false)),
        (&mut o.tcp_usec_ts, want("tcp_sock", "tcp_usec_ts", 0, false)),
    ];
    fill(btf, bits, bit_field, None, &mut missing)?;
    Ok(Resolved { offsets: o, missing })
}

/// Put each wanted field where it goes, located by `place`. A required field that is missing
/// fails; an optional one is set to `absent` (if given) and listed in `missing`.
fn fill<'o, T: Copy + 'o>(
    btf: &BtfResolver,
    fields: impl IntoIterator<Item = (&'o mut T, Want)>,
    place: fn(&FieldLoc, &Want) -> Result<T>,
    absent: Option<T>,
    missing: &mut Vec<MissingField>,
) -> Result<()> {
    for (dst, w) in fields {
        match btf.field(w.strukt, w.path).and_then(|loc| place(&loc, &w)) {
            Ok(value) => *dst = value,
            Err(e) if w.required => return Err(e.context("a field cctrace cannot work without is missing")),
            Err(e) => {
                if let Some(absent) = absent {
                    *dst = absent;
                }
                missing.push(MissingField { strukt: w.strukt, path: w.path, why: e.to_string() });
            }
        }
    }
    Ok(())
}

/// The byte-offset fields of [`Offsets`], each with the field it is read from.
fn plain_fields(o: &mut Offsets) -> [(&mut u32, Want); 72] {
    [
        (&mut o.skc_family, want("sock", "__sk_common.skc_family", 2, true)),
        (&mut o.skc_state, want("sock", "__sk_common.skc_state", 1, true)),
        (&mut o.skc_num, want("sock", "__sk_common.skc_num", 2, true)),
        (&mut o.skc_dport, want("sock", "__sk_common.skc_dport", 2, true)),
        (&mut o.skc_rcv_saddr, want("sock", "__sk_common.skc_rcv_saddr", 4, true)),
        (&mut o.skc_daddr, want("sock", "__sk_common.skc_daddr", 4, true)),
        (&mut o.skc_v6_rcv_saddr, want("sock", "__sk_common.skc_v6_rcv_saddr", 16, false)),
        (&mut o.skc_v6_daddr, want("sock", "__sk_common.skc_v6_daddr", 16, false)),
        (&mut o.skc_net, want("sock", "__sk_common.skc_net", 8, false)),
        (&mut o.skc_cookie, want("sock", "__sk_common.skc_cookie", 8, false)),
        (&mut o.sk_cgrp_cgroup, want("sock", "sk_cgrp_data.cgroup", 8, false)),
        (&mut o.sk_pacing_rate, want("sock", "sk_pacing_rate", 8, false)),
        (&mut o.sk_sndbuf, want("sock", "sk_sndbuf", 4, false)),
        (&mut o.sk_wmem_queued, want("sock", "sk_wmem_queued", 4, false)),
        (&mut o.sk_protocol, want("sock", "sk_protocol", 2, false)),
        (&mut o.icsk_ca_ops, want("inet_connection_sock", "icsk_ca_ops", 8, false)),
        (&mut o.snd_cwnd, want("tcp_sock", "snd_cwnd", 4, true)),
        (&mut o.snd_ssthresh, want("tcp_sock", "snd_ssthresh", 4, true)),
        (&mut o.srtt_us, want("tcp_sock", "srtt_us", 4, true)),
        (&mut o.mdev_us, want("tcp_sock", "mdev_us", 4, false)),
        (&mut o.rtt_min, want("tcp_sock", "rtt_min", 24, false)),
        (&mut o.mss_cache, want("tcp_sock", "mss_cache", 4, true)),
        (&mut o.packets_out, want("tcp_sock", "packets_out", 4, false)),
        (&mut o.lost_out, want("tcp_sock", "lost_out", 4, false)),
        (&mut o.sacked_out, want("tcp_sock", "sacked_out", 4, false)),
        (&mut o.retrans_out, want("tcp_sock", "retrans_out", 4, false)),
        (&mut o.total_retrans, want("tcp_sock", "total_retrans", 4, false)),
        (&mut o.bytes_retrans, want("tcp_sock", "bytes_retrans", 8, false)),
        (&mut o.bytes_sent, want("tcp_sock", "bytes_sent", 8, false)),
        (&mut o.bytes_acked, want("tcp_sock", "bytes_acked", 8, false)),
        (&mut o.bytes_received, want("tcp_sock", "bytes_received", 8, false)),
        (&mut o.delivered, want("tcp_sock", "delivered", 4, false)),
        (&mut o.rate_delivered, want("tcp_sock", "rate_delivered", 4, false)),
        (&mut o.rate_interval_us, want("tcp_sock", "rate_interval_us", 4, false)),
        (&mut o.snd_wnd, want("tcp_sock", "snd_wnd", 4, false)),
        (&mut o.write_seq, want("tcp_sock", "write_seq", 4, false)),
        (&mut o.snd_nxt, want("tcp_sock", "snd_nxt", 4, false)),
        (&mut o.chrono_start, want("tcp_sock", "chrono_start", 4, false)),
        (&mut o.chrono_stat, want("tcp_sock", "chrono_stat", 12, false)),
        (&mut o.net_ns_inum, want("net", "ns.inum", 4, false)),
        (&mut o.cgroup_kn, want("cgroup", "kn", 8, false)),
        (&mut o.kernfs_node_id, want("kernfs_node", "id", 8, false)),
        (&mut o.ca_ops_name, want("tcp_congestion_ops", "name", 16, false)),
        (&mut o.sk_dst_cache, want("sock", "sk_dst_cache", 8, false)),
        (&mut o.icsk_pmtu_cookie, want("inet_connection_sock", "icsk_pmtu_cookie", 4, false)),
        (&mut o.dst_dev, want("dst_entry", "dev", 8, false)),
        (&mut o.netdev_ifindex, want("net_device", "ifindex", 4, false)),
        (&mut o.netdev_mtu, want("net_device", "mtu", 4, false)),
        (&mut o.netdev_name, want("net_device", "name", 16, false)),
        (&mut o.dsack_dups, want("tcp_sock", "dsack_dups", 4, false)),
        (&mut o.reord_seen, want("tcp_sock", "reord_seen", 4, false)),
        (&mut o.reordering, want("tcp_sock", "reordering", 4, false)),
        (&mut o.total_rto, want("tcp_sock", "total_rto", 2, false)),
        (&mut o.total_rto_recoveries, want("tcp_sock", "total_rto_recoveries", 2, false)),
        (&mut o.undo_marker, want("tcp_sock", "undo_marker", 4, false)),
        (&mut o.sk_rcvbuf, want("sock", "sk_rcvbuf", 4, false)),
        (&mut o.sk_socket, want("sock", "sk_socket", 8, false)),
        (&mut o.socket_flags, want("socket", "flags", 8, false)),
        (&mut o.rack_rtt_us, want("tcp_sock", "rack.rtt_us", 4, false)),
        (&mut o.rcv_nxt, want("tcp_sock", "rcv_nxt", 4, false)),
        (&mut o.copied_seq, want("tcp_sock", "copied_seq", 4, false)),
        (&mut o.rcv_wnd, want("tcp_sock", "rcv_wnd", 4, false)),
        (&mut o.window_clamp, want("tcp_sock", "window_clamp", 4, false)),
        (&mut o.rcv_ssthresh, want("tcp_sock", "rcv_ssthresh", 4, false)),
        (&mut o.rcv_rtt_us, want("tcp_sock", "rcv_rtt_est.rtt_us", 4, false)),
        (&mut o.rcvq_space, want("tcp_sock", "rcvq_space.space", 4, false)),
        (&mut o.rcv_ooopack, want("tcp_sock", "rcv_ooopack", 4, false)),
        (&mut o.data_segs_in, want("tcp_sock", "data_segs_in", 4, false)),
        (&mut o.out_of_order_queue, want("tcp_sock", "out_of_order_queue.rb_node", 8, false)),
        (&mut o.rcv_mss, want("inet_connection_sock", "icsk_ack.rcv_mss", 2, false)),
        (&mut o.skb_head, want("sk_buff", "head", 8, false)),
        (&mut o.skb_transport_header, want("sk_buff", "transport_header", 2, false)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver() -> Option<BtfResolver> {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            crate::test_support::skip("/sys/kernel/btf/vmlinux is absent (kernel without CONFIG_DEBUG_INFO_BTF)");
            return None;
        }
        Some(BtfResolver::from_sys_fs().expect("BTF parses"))
    }

    #[test]
    fn resolves_every_field_on_this_kernel() {
        let Some(btf) = resolver() else { return };
        let r = resolve(&btf).expect("resolves");
        assert!(r.missing.is_empty(), "missing on this kernel: {:?}", r.missing);
        // The socket layers nest at offset 0, so sock fields come first.
        assert!(r.offsets.skc_family < r.offsets.snd_cwnd);
        assert!(r.offsets.icsk_ca_state.mask >= 0x1f, "{:?}", r.offsets.icsk_ca_state);
        assert_eq!(r.offsets.rate_app_limited.mask, 1);
        // A byte on 6.18, four bits on 5.10: either way the two lock bits are inside the mask.
        assert!(r.offsets.sk_userlocks.mask >= 0x3, "{:?}", r.offsets.sk_userlocks);
        assert_eq!(r.offsets.wscale_ok.mask, 1, "{:?}", r.offsets.wscale_ok);
        // The control block of a received segment: `seq` then `end_seq`, inside `sk_buff.cb`.
        let cb = btf.field("sk_buff", "cb").expect("cb");
        assert_eq!(r.offsets.skb_seq, cb.bit_offset / 8, "tcp_skb_cb.seq opens the control block");
        assert_eq!(r.offsets.skb_end_seq, r.offsets.skb_seq + 4);
        assert!(r.offsets.out_of_order_queue > r.offsets.snd_cwnd && r.offsets.rcv_mss < r.offsets.snd_cwnd);
    }

    #[test]
    fn reports_missing_members_clearly() {
        let Some(btf) = resolver() else { return };
        let err = btf.field("tcp_sock", "no_such_field").expect_err("absent");
        assert!(err.to_string().contains("tcp_sock has no member no_such_field"), "{err}");
    }

    #[test]
    fn array_members_are_indexed_by_their_element_size() {
        let Some(btf) = resolver() else { return };
        assert_eq!(split_index("regs[4]").unwrap(), ("regs", Some(4)));
        assert_eq!(split_index("sp").unwrap(), ("sp", None));
        assert!(split_index("regs[x]").is_err());
        // tcp_sock.rtt_min is a minmax: an array of three samples of 8 bytes each.
        let whole = btf.field("tcp_sock", "rtt_min.s").unwrap();
        let second = btf.field("tcp_sock", "rtt_min.s[1]").unwrap();
        assert_eq!(second.bit_offset - whole.bit_offset, 8 * 8);
        assert_eq!(second.size, 8);
        assert!(btf.field("tcp_sock", "rtt_min.s[3]").is_err(), "out of bounds");
        assert!(btf.field("tcp_sock", "snd_cwnd[0]").is_err(), "not an array");
    }

    #[test]
    fn bitfield_geometry() {
        let w = want("x", "y", 0, false);
        let loc = FieldLoc { bit_offset: 8 * 10 + 3, bitfield_bits: Some(2), size: 1 };
        let b = bit_field(&loc, &w).expect("fits");
        assert_eq!((b.byte_offset, b.shift, b.mask), (10, 3, 0b11));
        let straddle = FieldLoc { bit_offset: 7, bitfield_bits: Some(2), size: 1 };
        assert!(bit_field(&straddle, &w).is_err());
        let byte = FieldLoc { bit_offset: 16, bitfield_bits: None, size: 1 };
        assert_eq!(bit_field(&byte, &w).expect("byte").mask, 0xff);
    }

    #[test]
    fn sk_userlocks_reads_as_a_byte_on_6_18_and_as_four_bits_on_5_10() {
        let w = want("sock", "sk_userlocks", 0, false);
        // 6.18 (this machine's BTF): `u8 sk_userlocks`, bit offset 1944.
        let byte = bit_field(&FieldLoc { bit_offset: 1944, bitfield_bits: None, size: 1 }, &w).expect("byte");
        assert_eq!((byte.byte_offset, byte.shift, byte.mask), (243, 0, 0xff));
        // Debian 11's 5.10 BTF: `u8 sk_padding:1, sk_kern_sock:1, sk_no_check_tx:1,
        // sk_no_check_rx:1, sk_userlocks:4`, the lock bits at bit offset 4292.
        let bits = bit_field(&FieldLoc { bit_offset: 4292, bitfield_bits: Some(4), size: 1 }, &w).expect("bits");
        assert_eq!((bits.byte_offset, bits.shift, bits.mask), (536, 4, 0xf));
        // That byte with SOCK_SNDBUF_LOCK set and the three flags below it: the lock reads 1.
        let raw: u8 = 0b0001_0111;
        assert_eq!((raw >> bits.shift) & bits.mask, tracer_common::userlock::SNDBUF);
    }
}
