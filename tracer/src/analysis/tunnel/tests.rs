use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::analysis::flow_table::tests::sample;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::route::{DeviceName, Route};
use crate::analysis::sample::{Owner, Sample};
use crate::analysis::udp::{Process, UdpSample};

const HOME: u32 = 4026531840;
const ROUTER: u32 = 4026532001;
const WG: u32 = 7;
const VETH: u32 = 3;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("addr")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn engine() -> TunHolder {
    TunHolder { pid: 812, comm: "wireguard-go".into() }
}

fn wg_device(netns: u32) -> TunDevice {
    TunDevice { netns, ifindex: WG, name: "wg0".into(), mtu: 1420, holders: vec![engine()] }
}

/// A bulk flow (cookie) of sshd in `netns` that has sent 10 MB a second, leaving by `ifindex`.
fn bulk_flow(table: &mut FlowTable, cookie: u64, netns: u32, ifindex: u32, remote: &str) {
    for second in 0..3u64 {
        let mut s: Sample = sample(cookie, second * 1000);
        s.netns = netns;
        s.remote = addr(remote);
        s.owner = Some(Owner { pid: 90, comm: "sshd".into() });
        s.bytes_acked = second * 10_000_000;
        s.bytes_sent = s.bytes_acked;
        s.route = Some(Route { dev: DeviceName::new("x"), ifindex, dev_mtu: 1420, pmtu: 1420 });
        table.ingest(&s);
    }
}

/// The UDP view with pid `pid`'s flow sending 40 Mbit/s.
fn underlay(pid: u32, netns: u32) -> UdpTable {
    let owner = Process { pid, comm: "wireguard-go".into(), cmdline: Vec::new(), tun_open: true, tcp: Vec::new() };
    let mut udp = UdpTable::default();
    for (s, tx) in [(1u64, 0u64), (2, 5_000_000)] {
        let mut r = UdpSample::fixture(55, s * 1_000_000_000, tx);
        r.netns = netns;
        r.owner = Some(owner.clone());
        udp.ingest(&r);
    }
    udp
}

fn env_with(devices: Vec<TunDevice>) -> Environment {
    Environment { tunnels: TunnelFacts { devices, ..TunnelFacts::default() }, ..Environment::default() }
}

#[test]
fn a_flow_leaving_by_a_held_tun_device_names_the_tunnel_and_its_underlay() {
    let mut table = FlowTable::new(TableConfig::default());
    bulk_flow(&mut table, 1, HOME, WG, "198.18.5.2:40000");
    bulk_flow(&mut table, 2, HOME, VETH, "198.18.6.2:40000");
    let env = env_with(vec![wg_device(HOME)]);
    let tunnels = find_tunnels(&table, &env, &underlay(812, HOME));
    assert_eq!(tunnels.len(), 1, "{tunnels:?}");
    let t = &tunnels[&1];
    assert_eq!((t.dev.as_str(), t.mtu, t.netns, t.process.comm.as_str()), ("wg0", 1420, HOME, "wireguard-go"));
    assert_eq!(t.via, None);
    assert_eq!((t.udp.cookie, t.udp.tx_bps), (55, 40_000_000));
    assert_eq!(t.udp.endpoints(), "198.18.0.1:41641 -> 198.18.0.2:41641");
    assert!(
        t.describe().starts_with("wg0 (MTU 1420) of wireguard-go (pid 812), over UDP 198.18.0.1"),
        "{}",
        t.describe()
    );
    // A TUN device whose holder sends no UDP (a path emulator) is no tunnel; nor one in another
    // namespace with the same index.
    assert!(find_tunnels(&table, &env, &underlay(999, HOME)).is_empty());
    assert!(find_tunnels(&table, &env_with(vec![wg_device(ROUTER)]), &underlay(812, HOME)).is_empty());
}

/// A router with a held wg0 that forwards, and its LAN address 198.18.9.1.
fn router_facts() -> TunnelFacts {
    TunnelFacts {
        devices: vec![wg_device(ROUTER)],
        routing: vec![NetnsRouting {
            netns: ROUTER,
            addrs: vec![ip("198.18.9.1"), ip("198.18.7.1")],
            forwarding: true,
        }],
        routes: Vec::new(),
    }
}

#[test]
fn only_busy_flows_leaving_by_another_device_are_followed_and_only_when_a_router_exists() {
    let mut table = FlowTable::new(TableConfig::default());
    bulk_flow(&mut table, 1, HOME, VETH, "198.18.9.1:40000");
    bulk_flow(&mut table, 2, ROUTER, WG, "198.18.7.2:40000");
    // A keep-alive: one sample, no rate.
    let mut quiet = sample(3, 0);
    quiet.route = Some(Route { dev: DeviceName::new("x"), ifindex: VETH, dev_mtu: 1500, pmtu: 0 });
    table.ingest(&quiet);
    let busy = RouteQuery { netns: HOME, local: addr("198.18.0.1:40000"), remote: addr("198.18.9.1:40000") };
    assert_eq!(route_queries(&table, &router_facts(), &[]), [busy]);
    let no_forwarding = TunnelFacts { routing: Vec::new(), ..router_facts() };
    assert!(route_queries(&table, &no_forwarding, &[]).is_empty(), "no router, no question");
    // A flow followed before is followed again, however slow it went.
    let via = Forwarded { netns: ROUTER, name: None, addr: ip("198.18.9.1"), masquerade: false };
    let known = TunnelRoute {
        netns: quiet.netns,
        local: quiet.local,
        remote: quiet.remote,
        tun_netns: ROUTER,
        tun_ifindex: WG,
        via,
    };
    assert_eq!(route_queries(&table, &router_facts(), &[known]).len(), 2);
}

/// Routing as a test tells it: routes by (namespace, destination), and the router's connection
/// tracking.
#[derive(Default)]
struct FakeRouting {
    routes: HashMap<(u32, IpAddr), Hop>,
    conntrack: Option<IpAddr>,
    asked: Vec<(u32, IpAddr)>,
}

impl Routing for FakeRouting {
    fn route(&mut self, netns: u32, dst: IpAddr) -> Option<Hop> {
        self.asked.push((netns, dst));
        self.routes.get(&(netns, dst)).copied()
    }

    fn unmasquerade(&mut self, netns: u32, _from: SocketAddr, _to: SocketAddr) -> Option<IpAddr> {
        (netns == ROUTER).then_some(self.conntrack).flatten()
    }
}

#[test]
fn a_flow_is_followed_through_the_router_that_forwards_it_into_its_tunnel() {
    let names = HashMap::from([(ROUTER, "router".to_string())]);
    let client = ip("198.18.7.2");
    // Without masquerading: the peer is the client's tunnel address, the next hop the router.
    let q = RouteQuery { netns: HOME, local: addr("198.18.9.2:80"), remote: SocketAddr::new(client, 51234) };
    let mut routing = FakeRouting::default();
    routing.routes.insert((HOME, client), Hop { oif: VETH, gateway: Some(ip("198.18.9.1")) });
    routing.routes.insert((ROUTER, client), Hop { oif: WG, gateway: None });
    let r = follow(&q, &router_facts(), &names, &mut routing).expect("followed");
    assert_eq!((r.tun_netns, r.tun_ifindex), (ROUTER, WG));
    assert_eq!(
        r.via,
        Forwarded { netns: ROUTER, name: Some("router".into()), addr: ip("198.18.9.1"), masquerade: false }
    );
    assert_eq!(r.via.describe(), "forwarded by netns router (next hop 198.18.9.1)");
    // With masquerading: the peer is the router's own address; its conntrack names the client.
    let masq = RouteQuery { remote: addr("198.18.9.1:38112"), ..q };
    routing.routes.insert((HOME, ip("198.18.9.1")), Hop { oif: VETH, gateway: None });
    routing.conntrack = Some(client);
    let r = follow(&masq, &router_facts(), &names, &mut routing).expect("followed");
    assert!(r.via.masquerade && r.tun_ifindex == WG, "{r:?}");
    assert!(routing.asked.contains(&(ROUTER, client)), "the router's route to the client: {:?}", routing.asked);
    // No conntrack to read: the router's one held TUN device.
    routing.conntrack = None;
    routing.routes.remove(&(ROUTER, client));
    assert_eq!(follow(&masq, &router_facts(), &names, &mut routing).map(|r| r.tun_ifindex), Some(WG));
    // Conntrack says the connection is the router's own (its source is the router's address).
    routing.conntrack = Some(ip("198.18.9.1"));
    assert_eq!(follow(&masq, &router_facts(), &names, &mut routing), None);
    // A peer no namespace of the host has, reached directly: nothing to follow.
    let elsewhere = RouteQuery { remote: addr("198.18.200.2:443"), ..q };
    routing.routes.insert((HOME, ip("198.18.200.2")), Hop { oif: VETH, gateway: None });
    assert_eq!(follow(&elsewhere, &router_facts(), &names, &mut routing), None);
}

#[test]
fn forwarded_flows_name_the_routers_tunnel_and_its_process_carries_them_all() {
    let mut table = FlowTable::new(TableConfig::default());
    bulk_flow(&mut table, 1, HOME, VETH, "198.18.9.1:38112");
    bulk_flow(&mut table, 2, ROUTER, WG, "198.18.7.2:40000");
    let mut env = env_with(vec![wg_device(ROUTER)]);
    let via = Forwarded { netns: ROUTER, name: None, addr: ip("198.18.9.1"), masquerade: true };
    env.tunnels.routes.push(TunnelRoute {
        netns: HOME,
        local: addr("198.18.0.1:40000"),
        remote: addr("198.18.9.1:38112"),
        tun_netns: ROUTER,
        tun_ifindex: WG,
        via: via.clone(),
    });
    let udp = underlay(812, ROUTER);
    let tunnels = find_tunnels(&table, &env, &udp);
    assert_eq!(tunnels[&1].via.as_ref(), Some(&via));
    assert_eq!(tunnels[&2].via, None, "the router's own flow leaves by its wg0");
    let verdicts = tunnel_verdicts(&table, &tunnels, &udp, |_| None);
    let v = &verdicts[&55];
    assert_eq!(v.carries, [1, 2]);
    assert!(v.text.starts_with("tunnel: wireguard-go (pid 812) carries tunnel wg0 (MTU 1420)"), "{}", v.text);
    assert!(
        v.text.contains("sshd 198.18.0.1:40000 -> 198.18.9.1:38112 (netns 4026531840, forwarded by netns"),
        "{}",
        v.text
    );
    assert!(!v.text.contains("userspace"), "not the place the rate is decided: {}", v.text);
    assert_eq!(v.advice.len(), 1, "nothing flagged, nothing to fix: {:?}", v.advice);
}

#[test]
fn a_flagged_flows_note_places_its_losses_in_the_underlay_and_its_small_mss() {
    let t = Tunnel {
        dev: "tailscale0".into(),
        mtu: 1280,
        netns: HOME,
        process: TunHolder { pid: 5, comm: "tailscaled".into() },
        via: None,
        udp: TunnelUdp {
            cookie: 1,
            src: "198.18.0.1".into(),
            sport: 41641,
            dst: "198.18.0.2".into(),
            dport: 41641,
            tx_bps: 0,
            rx_bps: 0,
            app_proto: Some(AppProto::WireGuard),
        },
    };
    let flagged = tunnel_note(&t, 1228);
    assert!(flagged.contains("losses are in the tunnel's underlay, outside this host"), "{flagged}");
    assert!(flagged.contains("the fix applies to it, in this flow's namespace."), "{flagged}");
    assert!(flagged.contains("MSS of 1228 B follows the tunnel's MTU (1280 B): 15% less"), "{flagged}");
    assert!(!tunnel_note(&t, 1448).contains("MSS"), "a full-sized MSS is no part of the story");
    let smaller = tunnel_note(&t, 1000);
    assert!(smaller.contains("MSS of 1000 B is below what the tunnel's MTU (1280 B) allows: 31% less"), "{smaller}");
    assert!(flagged.starts_with(&format!(" Through tunnel {}.", t.describe())), "{flagged}");
    let routed =
        Tunnel { via: Some(Forwarded { netns: 9, name: None, addr: ip("198.18.9.1"), masquerade: false }), ..t };
    assert!(tunnel_note(&routed, 1448).contains("namespace, not the router's."));
}
