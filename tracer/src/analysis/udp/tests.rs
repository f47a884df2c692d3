//! What heavy UDP flows carry, their verdicts and advice, and the relays found for TCP hops.

use std::net::SocketAddr;

use super::*;
use crate::analysis::environment::Environment;

fn head(bytes: &[u8], len: usize) -> Head {
    let mut h = Head { bytes: [0; HEAD_LEN], len: len as u16 };
    let n = bytes.len().min(HEAD_LEN);
    h.bytes[..n].copy_from_slice(&bytes[..n]);
    h
}

/// A QUIC v1 client Initial as quinn sends it: 0xc0 | packet-number length, version 1,
/// DCID length 8 and id, SCID length 8 ...; padded to 1200 bytes.
const QUIC_INITIAL: [u8; 16] =
    [0xc3, 0x00, 0x00, 0x00, 0x01, 0x08, 0x5e, 0x1a, 0x77, 0x02, 0x9c, 0x41, 0xd0, 0x33, 0x08, 0x91];
/// A 1-RTT packet: 0x40 | spin/key-phase/pn-length bits, then the DCID.
const QUIC_SHORT: [u8; 16] =
    [0x5b, 0x8a, 0x13, 0x02, 0x77, 0xf0, 0x42, 0x19, 0x6c, 0x21, 0x85, 0x90, 0x3e, 0x4d, 0x11, 0x07];
/// WireGuard transport data: type 4, three reserved zero bytes, receiver index, counter.
const WG_DATA: [u8; 16] = [4, 0, 0, 0, 0x9a, 0x3c, 0x51, 0x0e, 0x27, 0, 0, 0, 0, 0, 0, 0];
/// iperf3 UDP payload: seconds and microseconds of the send time, then a counter.
const IPERF3: [u8; 16] = [0x69, 0x2f, 0x4a, 0x10, 0x00, 0x03, 0x8b, 0x2c, 0, 0, 0, 0, 0, 0, 0x01, 0x2d];
/// A DNS query: id, flags 0x0100, one question.
const DNS: [u8; 16] = [0x1c, 0x3d, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 7, b'e', b'x', b'a'];

#[test]
fn datagram_shapes() {
    assert_eq!(shape(&head(&QUIC_INITIAL, 1200)), Shape::QuicLong { version: 1 });
    assert_eq!(shape(&head(&QUIC_SHORT, 1252)), Shape::QuicShort);
    assert_eq!(shape(&head(&WG_DATA, 1440)), Shape::WireGuard(4));
    assert_eq!(shape(&head(&WG_DATA, 1441)), Shape::Other, "data messages are 16-byte aligned");
    let mut init = WG_DATA;
    init[0] = 1;
    assert_eq!(shape(&head(&init, 148)), Shape::WireGuard(1));
    assert_eq!(shape(&head(&init, 149)), Shape::Other);
    init[0] = 2;
    assert_eq!(shape(&head(&init, 92)), Shape::WireGuard(2));
    init[0] = 3;
    assert_eq!(shape(&head(&init, 64)), Shape::WireGuard(3));
    let mut reserved = WG_DATA;
    reserved[2] = 1;
    assert_eq!(shape(&head(&reserved, 1440)), Shape::Other, "reserved bytes must be zero");
    assert_eq!(shape(&head(&DNS, 40)), Shape::Other);
    // Version negotiation (version 0) is no evidence of a QUIC flow by itself.
    let mut vn = QUIC_INITIAL;
    vn[1..5].copy_from_slice(&[0, 0, 0, 0]);
    assert_eq!(shape(&head(&vn, 60)), Shape::Other);
}

#[test]
fn short_headers_count_as_quic_only_after_a_long_header() {
    let mut plain = ShapeCounts::default();
    for _ in 0..10 {
        plain.add(&head(&IPERF3, 1448));
    }
    assert_eq!(plain.quic_short, 10, "iperf3's timestamp has the fixed bit");
    assert_eq!(plain.protocol(), None);
    let mut quic = ShapeCounts::default();
    quic.add(&head(&QUIC_INITIAL, 1200));
    for _ in 0..10 {
        quic.add(&head(&QUIC_SHORT, 1252));
    }
    assert_eq!(quic.protocol(), Some(AppProto::Quic));
    let mut wg = ShapeCounts::default();
    wg.add(&head(&[1, 0, 0, 0], 148));
    wg.add(&head(&WG_DATA, 1440));
    assert_eq!(wg.protocol(), Some(AppProto::WireGuard));
    let mut dns = ShapeCounts::default();
    dns.add(&head(&DNS, 40));
    assert_eq!(dns.protocol(), None);
}

fn sample(ts_s: u64, tx: u64, owner: Option<Process>) -> UdpSample {
    UdpSample {
        netns: 1,
        local: "198.18.0.1:4433".parse().expect("addr"),
        remote: "198.18.0.2:50000".parse().expect("addr"),
        first_tx: head(&QUIC_INITIAL, 1200),
        first_rx: head(&QUIC_INITIAL, 1200),
        last_tx: head(&QUIC_SHORT, 1252),
        owner,
        ..UdpSample::fixture(9, ts_s * 1_000_000_000, tx)
    }
}

#[test]
fn a_quic_flow_names_its_process_and_the_way_to_tcp() {
    let owner =
        Process { pid: 4321, comm: "caddy".into(), cmdline: vec!["caddy".into()], tun_open: false, tcp: Vec::new() };
    let mut t = UdpTable::default();
    t.ingest(&sample(1, 0, Some(owner.clone())));
    t.ingest(&sample(2, 2_500_000, None));
    let flow = t.get(9).expect("flow");
    assert_eq!(flow.app_proto, Some(AppProto::Quic));
    assert_eq!(flow.tx_bps, 20_000_000.0);
    assert_eq!(flow.latest.owner.as_ref(), Some(&owner), "the owner is kept when a reading lacks it");
    let v = judge(flow, &Environment::default());
    assert!(v.text.contains("caddy (pid 4321)") && v.text.contains("QUIC"), "{}", v.text);
    assert!(v.advice.iter().any(|a| a.contains("without HTTP/3")), "{:?}", v.advice);
    t.expire(40 * 1_000_000_000);
    assert!(t.is_empty());
}

#[test]
fn tailscaled_in_userspace_mode_gets_the_tun_advice() {
    let p = Process {
        pid: 812,
        comm: "tailscaled".into(),
        cmdline: vec!["/usr/sbin/tailscaled".into(), "--tun=userspace-networking".into()],
        tun_open: false,
        tcp: Vec::new(),
    };
    assert!(p.is_tailscaled_userspace());
    let kernel_mode = Process { cmdline: vec!["/usr/sbin/tailscaled".into()], tun_open: true, ..p.clone() };
    assert!(!kernel_mode.is_tailscaled_userspace());
    let mut t = UdpTable::default();
    let mut s = sample(1, 0, Some(p));
    s.first_tx = head(&WG_DATA, 1440);
    s.first_rx = head(&WG_DATA, 32);
    s.last_tx = head(&WG_DATA, 1440);
    t.ingest(&s);
    let flow = t.get(9).expect("flow");
    assert_eq!(flow.app_proto, Some(AppProto::WireGuard));
    let v = judge(flow, &Environment::default());
    assert!(v.text.contains("userspace-networking"), "{}", v.text);
    assert!(v.advice.contains(&"lxc.cgroup2.devices.allow: c 10:200 rwm".to_string()), "{:?}", v.advice);
    assert!(v.advice.iter().any(|a| a.contains("--device /dev/net/tun --cap-add NET_ADMIN")), "{:?}", v.advice);
}

#[test]
fn kernel_wireguard_points_at_the_tunnels_tcp_flows() {
    let mut s = sample(1, 0, None);
    s.first_tx = head(&WG_DATA, 1440);
    s.last_tx = head(&WG_DATA, 1440);
    let mut t = UdpTable::default();
    t.ingest(&s);
    let v = judge(t.get(9).expect("flow"), &Environment::default());
    assert!(v.text.starts_with("kernel WireGuard"), "{}", v.text);
    // A socket some process holds but nobody was found for is not the kernel's.
    let mut held = s.clone();
    held.inode = 12345;
    let mut t = UdpTable::default();
    t.ingest(&held);
    assert!(!judge(t.get(9).expect("flow"), &Environment::default()).text.starts_with("kernel"));
}

/// The relay's end of a hop: the service's endpoints mirrored.
fn relay_end(service: &crate::analysis::sample::Sample) -> (SocketAddr, SocketAddr) {
    (service.remote, service.local)
}

#[test]
fn a_loopback_hop_to_a_process_with_heavy_udp_is_relayed_by_it() {
    use crate::analysis::flow_table::{tests::sample as tcp_sample, FlowTable, TableConfig};
    use crate::analysis::sample::Owner;
    let mut table = FlowTable::new(TableConfig::default());
    // The service's socket (accepted, sending) and the relay's (it connected).
    let mut service = tcp_sample(1, 0);
    service.local = "127.0.0.1:8096".parse().expect("addr");
    service.remote = "127.0.0.1:51000".parse().expect("addr");
    service.owner = Some(Owner { pid: 100, comm: "jellyfin".into() });
    let mut relay = tcp_sample(2, 0);
    relay.local = service.remote;
    relay.remote = service.local;
    relay.owner = Some(Owner { pid: 812, comm: "tailscaled".into() });
    // The same endpoints in another namespace are another hop.
    let mut elsewhere = relay.clone();
    elsewhere.cookie = 3;
    elsewhere.netns += 1;
    for s in [&service, &relay, &elsewhere] {
        table.ingest(s);
    }
    let p = Process { pid: 812, comm: "tailscaled".into(), cmdline: Vec::new(), tun_open: false, tcp: Vec::new() };
    let mut udp = UdpTable::default();
    let mut s = sample(1, 0, Some(p));
    s.cookie = 77;
    udp.ingest(&s);
    s.ts_ns += 1_000_000_000;
    s.tx_bytes = 5_000_000;
    udp.ingest(&s);
    let relays = find_relays(&table, &udp, 1e6);
    let hop = relays.get(&1).expect("the service's socket is relayed");
    assert_eq!((hop.pid, hop.udp_cookie, hop.peer_cookie), (812, 77, 2));
    assert!(hop.note().starts_with("relayed by tailscaled (pid 812)"));
    assert_eq!(relays.get(&2).map(|r| r.peer_cookie), Some(2), "the relay's own end too");
    assert!(!relays.contains_key(&3), "no peer in its namespace");
    assert!(find_relays(&table, &udp, 1e9).is_empty(), "a relay must be moving traffic");
    // A process that only receives heavy UDP relays nothing onwards.
    let mut rx_only = UdpTable::default();
    let mut r = s.clone();
    r.tx_bytes = 0;
    r.owner =
        Some(Process { pid: 812, comm: "tailscaled".into(), cmdline: Vec::new(), tun_open: false, tcp: Vec::new() });
    rx_only.ingest(&UdpSample { ts_ns: r.ts_ns - 1_000_000_000, rx_bytes: 0, ..r.clone() });
    rx_only.ingest(&UdpSample { rx_bytes: 5_000_000, ..r });
    assert!(find_relays(&table, &rx_only, 1e6).is_empty());

    // With the relay's own socket left out of the table (a kernel filter), the relay's
    // connections from its fd table name it all the same.
    let mut only_service = FlowTable::new(TableConfig::default());
    only_service.ingest(&service);
    let mut udp = UdpTable::default();
    let mut r = UdpSample { netns: service.netns, ..s.clone() };
    let relay = r.owner.as_mut().expect("owner");
    relay.tcp = vec![(relay_end(&service).0, relay_end(&service).1)];
    udp.ingest(&UdpSample { ts_ns: r.ts_ns - 1_000_000_000, tx_bytes: 0, ..r.clone() });
    udp.ingest(&r);
    let hop = find_relays(&only_service, &udp, 1e6);
    assert_eq!(hop.get(&1).map(|h| (h.pid, h.peer_cookie)), Some((812, 0)));
    // On loopback, the same endpoints in another namespace are another hop.
    udp.ingest(&UdpSample {
        netns: service.netns + 1,
        ts_ns: r.ts_ns + 1_000_000_000,
        tx_bytes: 10_000_000,
        ..r.clone()
    });
    assert!(find_relays(&only_service, &udp, 1e6).is_empty());
}

#[test]
fn an_unconnected_sockets_peer_stands_through_readings_that_name_none() {
    let mut t = UdpTable::default();
    let mut s = UdpSample::fixture(5, 1_000_000_000, 0);
    t.ingest(&s);
    // The latest call was a receive on an unconnected socket: no peer in the reading.
    s.ts_ns += 1_000_000_000;
    s.remote = "0.0.0.0:0".parse().expect("addr");
    t.ingest(&s);
    assert_eq!(t.get(5).map(|f| f.latest.remote), "198.18.0.2:41641".parse().ok());
    s.ts_ns += 1_000_000_000;
    s.remote = "198.18.0.3:51820".parse().expect("addr");
    t.ingest(&s);
    assert_eq!(t.get(5).map(|f| f.latest.remote), "198.18.0.3:51820".parse().ok());
}

#[test]
fn a_wireguard_engine_with_a_tun_device_is_not_told_to_get_one() {
    let engine = Process {
        pid: 812,
        comm: "wireguard-go".into(),
        cmdline: vec!["wireguard-go".into()],
        tun_open: true,
        tcp: Vec::new(),
    };
    let mut s = sample(1, 0, Some(engine));
    s.first_tx = head(&WG_DATA, 1440);
    s.last_tx = head(&WG_DATA, 1440);
    let mut t = UdpTable::default();
    t.ingest(&s);
    let v = judge(t.get(9).expect("flow"), &Environment::default());
    assert!(v.tunnel && v.carries.is_empty());
    assert!(v.text.contains("holds a TUN device") && !v.text.contains("userspace congestion control"), "{}", v.text);
    assert!(!v.advice.iter().any(|a| a.contains("give it a kernel TUN device")), "{:?}", v.advice);
}
