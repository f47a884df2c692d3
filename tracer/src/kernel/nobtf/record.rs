//! The records the mode without BTF hands over: each hook's classic tracepoint record, read at
//! the offsets its tracefs `format` file gives (the layout changed between kernels: `skaddr`
//! and `family` came to `tcp:tcp_probe` after 6.1, `sock_cookie` before 5.10), decoded into a
//! [`TraceEvent`].

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tracer_common::family::{AF_INET, AF_INET6};
use tracer_common::{
    record_kind, HookId, RecordHeader, TraceRecord, TRACE_RECORD_BYTES, TRACE_RECORD_SIZE, WIRE_VERSION,
};

use compact_str::CompactString;

use crate::analysis::sample::Owner;
use crate::kernel::tracefs::FormatField;

/// Where one hook's record keeps what cctrace reads, from its `format` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct HookLayout {
    fields: HashMap<String, FormatField>,
}

impl HookLayout {
    pub(super) fn new(fields: HashMap<String, FormatField>) -> Self {
        Self { fields }
    }

    /// A field's offset, if the record has it whole within what the programs copy.
    pub(super) fn offset(&self, name: &str) -> Option<u32> {
        let f = self.fields.get(name)?;
        ((f.offset + f.size) as usize <= TRACE_RECORD_BYTES).then_some(f.offset)
    }

    fn field<'r>(&self, record: &'r [u8], name: &str) -> Option<&'r [u8]> {
        let f = self.fields.get(name)?;
        record.get(f.offset as usize..(f.offset + f.size) as usize)
    }

    fn uint(&self, record: &[u8], name: &str) -> Option<u64> {
        let b = self.field(record, name)?;
        Some(match b.len() {
            1 => u64::from(b[0]),
            2 => u64::from(u16::from_ne_bytes([b[0], b[1]])),
            4 => u64::from(u32::from_ne_bytes(b.try_into().ok()?)),
            8 => u64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
}

/// One hook's record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TraceEvent {
    pub hook: HookId,
    pub ts_ns: u64,
    /// The socket's address, as a key only (never dereferenced).
    pub skaddr: Option<u64>,
    pub cookie: Option<u64>,
    pub family: u16,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// `inet_sock_set_state`'s states.
    pub old_state: Option<u8>,
    pub new_state: Option<u8>,
    /// The process that called `connect()`, on its move to SYN_SENT.
    pub owner: Option<Owner>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum RecordError {
    #[error("a trace record of {0} bytes")]
    Length(usize),
    #[error("record wire version {0} (this build reads {WIRE_VERSION})")]
    Version(u16),
    #[error("record kind {0} where trace records were expected")]
    Kind(u16),
    #[error("hook {0} has no program in the mode without BTF")]
    Hook(u32),
    #[error("{0}'s record has no address of its socket")]
    NoAddress(&'static str),
}

/// Every hook's layout, by [`HookId::index`] (`None`: the kernel has no such event).
#[derive(Clone, Debug, Default)]
pub(super) struct Layouts {
    pub(super) hooks: [Option<HookLayout>; HookId::COUNT],
}

impl Layouts {
    pub(super) fn decode(&self, bytes: &[u8]) -> Result<TraceEvent, RecordError> {
        if bytes.len() < TRACE_RECORD_SIZE {
            return Err(RecordError::Length(bytes.len()));
        }
        let header: RecordHeader = bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<RecordHeader>()]);
        if header.version != WIRE_VERSION {
            return Err(RecordError::Version(header.version));
        }
        if header.kind != record_kind::TRACE_RECORD {
            return Err(RecordError::Kind(header.kind));
        }
        let raw: TraceRecord = bytemuck::pod_read_unaligned(&bytes[..TRACE_RECORD_SIZE]);
        let hook = HookId::ALL.get(raw.hook as usize).copied().ok_or(RecordError::Hook(raw.hook))?;
        let layout = self.hooks[hook.index()].as_ref().ok_or(RecordError::Hook(raw.hook))?;
        let mut event = decode_record(hook, layout, raw.ts_ns, &raw.record)?;
        if raw.pid != 0 {
            let end = raw.comm.iter().position(|&b| b == 0).unwrap_or(raw.comm.len());
            event.owner = Some(Owner { pid: raw.pid, comm: CompactString::from_utf8_lossy(&raw.comm[..end]) });
        }
        Ok(event)
    }
}

fn decode_record(hook: HookId, l: &HookLayout, ts_ns: u64, r: &[u8]) -> Result<TraceEvent, RecordError> {
    let (family, local, remote) = addresses(l, r).ok_or(RecordError::NoAddress(hook_name(hook)))?;
    let state = |name| l.uint(r, name).map(|v| v as u8);
    Ok(TraceEvent {
        hook,
        ts_ns,
        skaddr: l.uint(r, "skaddr").filter(|&a| a != 0),
        cookie: l.uint(r, "sock_cookie").filter(|&c| c != 0),
        family,
        local,
        remote,
        old_state: state("oldstate"),
        new_state: state("newstate"),
        owner: None,
    })
}

fn hook_name(hook: HookId) -> &'static str {
    match hook {
        HookId::TcpProbe => "tcp_probe",
        HookId::Retransmit => "tcp_retransmit_skb",
        HookId::CongState => "tcp_cong_state_set",
        HookId::SetState => "inet_sock_set_state",
        HookId::Destroy => "tcp_destroy_sock",
        HookId::SendCall => "sock_send_length",
    }
}

/// The socket's family and endpoints. `tcp_probe` keeps them as two `sockaddr_in6`-sized
/// `sockaddr`s (the family and the port in network order inside); the others as `sport`,
/// `dport`, `family` and the addresses of both families apart. Before `family` came to
/// `tcp_retransmit_skb` and `tcp_destroy_sock` (5.10 has none), the family is read off the
/// IPv6 address, which the kernel writes IPv4-mapped for an IPv4 socket.
fn addresses(l: &HookLayout, r: &[u8]) -> Option<(u16, SocketAddr, SocketAddr)> {
    let saddr = l.field(r, "saddr")?;
    let daddr = l.field(r, "daddr")?;
    if saddr.len() >= 24 && daddr.len() >= 24 {
        let family = u16::from_ne_bytes([saddr[0], saddr[1]]);
        return Some((family, from_sockaddr(family, saddr)?, from_sockaddr(family, daddr)?));
    }
    let family = match l.uint(r, "family") {
        Some(family) => family as u16,
        None => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(l.field(r, "saddr_v6")?).ok()?);
            if v6.to_ipv4_mapped().is_some() {
                AF_INET
            } else {
                AF_INET6
            }
        }
    };
    let (sport, dport) = (l.uint(r, "sport")? as u16, l.uint(r, "dport")? as u16);
    let (local, remote) = if family == AF_INET6 {
        let v6 = |b: &[u8]| Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?)).to_canonical());
        (v6(l.field(r, "saddr_v6")?)?, v6(l.field(r, "daddr_v6")?)?)
    } else {
        let v4 = |b: &[u8]| Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?)));
        (v4(saddr)?, v4(daddr)?)
    };
    Some((family, SocketAddr::new(local, sport), SocketAddr::new(remote, dport)))
}

fn from_sockaddr(family: u16, b: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes([b[2], b[3]]);
    let ip = match family {
        AF_INET => IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
        AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?)).to_canonical(),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tracefs::parse_format;

    /// `tcp:tcp_probe` on Linux 6.18.
    const PROBE_6_18: &str = "format:
\tfield:__u8 saddr[28];\toffset:8;\tsize:28;\tsigned:0;
\tfield:__u8 daddr[28];\toffset:36;\tsize:28;\tsigned:0;
\tfield:__u16 sport;\toffset:64;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:66;\tsize:2;\tsigned:0;
\tfield:__u16 family;\toffset:68;\tsize:2;\tsigned:0;
\tfield:__u32 snd_cwnd;\toffset:88;\tsize:4;\tsigned:0;
\tfield:__u64 sock_cookie;\toffset:112;\tsize:8;\tsigned:0;
\tfield:const void * skbaddr;\toffset:120;\tsize:8;\tsigned:0;
\tfield:const void * skaddr;\toffset:128;\tsize:8;\tsigned:0;
";
    /// `sock:inet_sock_set_state` on Linux 6.18.
    const SET_STATE_6_18: &str = "format:
\tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int oldstate;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int newstate;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:24;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:26;\tsize:2;\tsigned:0;
\tfield:__u16 family;\toffset:28;\tsize:2;\tsigned:0;
\tfield:__u16 protocol;\toffset:30;\tsize:2;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:32;\tsize:4;\tsigned:0;
\tfield:__u8 daddr[4];\toffset:36;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:__u8 daddr_v6[16];\toffset:56;\tsize:16;\tsigned:0;
";

    fn record(hook: HookId, fill: impl FnOnce(&mut [u8; TRACE_RECORD_BYTES])) -> Vec<u8> {
        let mut raw = TraceRecord {
            header: RecordHeader {
                version: WIRE_VERSION,
                kind: record_kind::TRACE_RECORD,
                size: TRACE_RECORD_SIZE as u32,
            },
            ts_ns: 77,
            hook: hook as u32,
            pid: 0,
            comm: [0; 16],
            record: [0; TRACE_RECORD_BYTES],
        };
        fill(&mut raw.record);
        bytemuck::bytes_of(&raw).to_vec()
    }

    fn layouts() -> Layouts {
        let mut l = Layouts::default();
        l.hooks[HookId::TcpProbe.index()] = Some(HookLayout::new(parse_format(PROBE_6_18)));
        l.hooks[HookId::SetState.index()] = Some(HookLayout::new(parse_format(SET_STATE_6_18)));
        l
    }

    #[test]
    fn tcp_probe_reads_its_sockaddrs_cookie_and_socket() {
        let bytes = record(HookId::TcpProbe, |r| {
            r[8..10].copy_from_slice(&AF_INET.to_ne_bytes());
            r[10..12].copy_from_slice(&5201u16.to_be_bytes());
            r[12..16].copy_from_slice(&[198, 18, 0, 1]);
            r[36..38].copy_from_slice(&AF_INET.to_ne_bytes());
            r[38..40].copy_from_slice(&40000u16.to_be_bytes());
            r[40..44].copy_from_slice(&[198, 18, 0, 2]);
            r[112..120].copy_from_slice(&42u64.to_ne_bytes());
            r[128..136].copy_from_slice(&0xffff_8880_1234_5600u64.to_ne_bytes());
        });
        let e = layouts().decode(&bytes).expect("decodes");
        assert_eq!(
            (e.hook, e.ts_ns, e.cookie, e.skaddr),
            (HookId::TcpProbe, 77, Some(42), Some(0xffff_8880_1234_5600))
        );
        assert_eq!(e.local.to_string(), "198.18.0.1:5201");
        assert_eq!(e.remote.to_string(), "198.18.0.2:40000");
    }

    #[test]
    fn a_state_change_of_an_ipv6_socket_talking_ipv4_reads_as_ipv4() {
        let bytes = record(HookId::SetState, |r| {
            r[16..20].copy_from_slice(&2i32.to_ne_bytes());
            r[20..24].copy_from_slice(&1i32.to_ne_bytes());
            r[24..26].copy_from_slice(&40000u16.to_ne_bytes());
            r[26..28].copy_from_slice(&80u16.to_ne_bytes());
            r[28..30].copy_from_slice(&AF_INET6.to_ne_bytes());
            r[40..56].copy_from_slice(&Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped().octets());
            r[56..72].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        });
        let mut raw: TraceRecord = bytemuck::pod_read_unaligned(&bytes);
        raw.pid = 4242;
        raw.comm[..4].copy_from_slice(b"curl");
        let bytes = bytemuck::bytes_of(&raw).to_vec();
        let e = layouts().decode(&bytes).expect("decodes");
        assert_eq!(e.owner, Some(Owner { pid: 4242, comm: "curl".into() }));
        assert_eq!((e.old_state, e.new_state, e.cookie, e.skaddr), (Some(2), Some(1), None, None));
        assert_eq!(e.local.to_string(), "198.18.0.1:40000");
        assert_eq!(e.remote.to_string(), "[::1]:80");
    }

    /// `tcp:tcp_retransmit_skb` on Linux 5.10: no `family` field.
    const RETRANSMIT_5_10: &str = "format:
\tfield:const void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int state;\toffset:24;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:28;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:30;\tsize:2;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:32;\tsize:4;\tsigned:0;
\tfield:__u8 daddr[4];\toffset:36;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:__u8 daddr_v6[16];\toffset:56;\tsize:16;\tsigned:0;
";

    #[test]
    fn without_a_family_field_the_ipv6_address_tells_the_family() {
        let mut l = Layouts::default();
        l.hooks[HookId::Retransmit.index()] = Some(HookLayout::new(parse_format(RETRANSMIT_5_10)));
        let v4 = record(HookId::Retransmit, |r| {
            r[28..30].copy_from_slice(&5002u16.to_ne_bytes());
            r[30..32].copy_from_slice(&40000u16.to_ne_bytes());
            r[32..36].copy_from_slice(&[198, 18, 0, 1]);
            r[36..40].copy_from_slice(&[198, 18, 0, 2]);
            r[40..56].copy_from_slice(&Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped().octets());
            r[56..72].copy_from_slice(&Ipv4Addr::new(198, 18, 0, 2).to_ipv6_mapped().octets());
        });
        let e = l.decode(&v4).expect("decodes");
        assert_eq!(
            (e.family, e.local.to_string(), e.remote.to_string()),
            (AF_INET, "198.18.0.1:5002".into(), "198.18.0.2:40000".into())
        );
        let v6 = record(HookId::Retransmit, |r| {
            r[28..30].copy_from_slice(&5002u16.to_ne_bytes());
            r[30..32].copy_from_slice(&40000u16.to_ne_bytes());
            r[40..56].copy_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
            r[56..72].copy_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        });
        let e = l.decode(&v6).expect("decodes");
        assert_eq!((e.family, e.local.to_string()), (AF_INET6, "[2001:db8::1]:5002".into()));
    }

    #[test]
    fn foreign_and_unknown_records_are_errors() {
        let l = layouts();
        let mut bytes = record(HookId::Destroy, |_| {});
        assert_eq!(l.decode(&bytes), Err(RecordError::Hook(HookId::Destroy as u32)));
        bytes[2] = 1; // kind: a flow sample
        assert_eq!(l.decode(&bytes), Err(RecordError::Kind(1)));
        assert_eq!(l.decode(&bytes[..100]), Err(RecordError::Length(100)));
    }
}
