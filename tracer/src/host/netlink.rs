//! The few rtnetlink questions the host facts ask, of the network namespace of the thread
//! that opens the socket: its links, its addresses, how it routes to one address (the kernel's
//! own lookup, policy rules included, as `ip route get` asks it), and its devices' root qdiscs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd as _;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};

use crate::analysis::tunnel::Hop;

/// A netlink socket of `protocol` in the calling thread's network namespace, bound and
/// connected to the kernel, whose reads give up after a second: the kernel answers at once,
/// and a reader that waited on it for ever would stall the host facts or the source.
pub(super) fn open_socket(protocol: isize) -> std::io::Result<Socket> {
    let mut socket = Socket::new(protocol)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
    // SAFETY: a valid socket and a timeval of the size given.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&timeout).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(socket)
}

/// A link of the namespace: its index, name, MTU, and whether it is a TUN (or TAP) device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Link {
    pub ifindex: u32,
    pub name: String,
    pub mtu: u32,
    pub tun: bool,
}

/// An rtnetlink socket of the calling thread's network namespace (as it was when opened).
pub(super) struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    pub(super) fn open() -> std::io::Result<Self> {
        Ok(Self { socket: open_socket(NETLINK_ROUTE)?, seq: 0 })
    }

    /// Send `message` with `flags` and collect the messages answering it, until the dump's end,
    /// the acknowledgement or an error (which ends the answer: a route lookup to an address
    /// with no route answers with one).
    fn ask(&mut self, message: RouteNetlinkMessage, flags: u16) -> std::io::Result<Vec<RouteNetlinkMessage>> {
        self.seq += 1;
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        let mut out = Vec::new();
        loop {
            let (datagram, _) = self.socket.recv_from_full()?;
            let mut rest = &datagram[..];
            while !rest.is_empty() {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
                let len = (msg.header.length as usize).min(rest.len());
                rest = &rest[len.max(1)..];
                if msg.header.sequence_number != self.seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Done(_) | NetlinkPayload::Error(_) => return Ok(out),
                    _ => {}
                }
                if flags & NLM_F_DUMP == 0 && !out.is_empty() && flags & NLM_F_ACK == 0 {
                    return Ok(out);
                }
            }
        }
    }

    /// Every link of the namespace.
    pub(super) fn links(&mut self) -> std::io::Result<Vec<Link>> {
        let answers = self.ask(RouteNetlinkMessage::GetLink(LinkMessage::default()), NLM_F_REQUEST | NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(link_of(&l)),
                _ => None,
            })
            .collect())
    }

    /// The root qdisc of every device, by interface index (`fq`, `fq_codel`, `noqueue`, ...),
    /// as `tc qdisc show` asks for them.
    pub(super) fn root_qdiscs(&mut self) -> std::io::Result<HashMap<u32, String>> {
        let answers =
            self.ask(RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()), NLM_F_REQUEST | NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(tc) if tc.header.parent == TcHandle::ROOT => {
                    let kind = tc.attributes.into_iter().find_map(|a| match a {
                        TcAttribute::Kind(k) => Some(k),
                        _ => None,
                    })?;
                    Some((u32::try_from(tc.header.index).ok()?, kind))
                }
                _ => None,
            })
            .collect())
    }

    /// Every address of the namespace's links.
    pub(super) fn addresses(&mut self) -> std::io::Result<Vec<IpAddr>> {
        let answers =
            self.ask(RouteNetlinkMessage::GetAddress(AddressMessage::default()), NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut out = Vec::new();
        for m in answers {
            let RouteNetlinkMessage::NewAddress(a) = m else { continue };
            // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on a
            // point-to-point link); an address without IFA_LOCAL has only IFA_ADDRESS.
            let local = a.attributes.iter().find_map(|at| match at {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let address = a.attributes.iter().find_map(|at| match at {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            out.extend(local.or(address));
        }
        Ok(out)
    }

    /// How the namespace routes packets to `dst`: the output device and gateway, as
    /// `ip route get DST` says; `None` when it has no route there.
    pub(super) fn route_to(&mut self, dst: IpAddr) -> std::io::Result<Option<Hop>> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = if dst.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
        msg.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
        msg.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst)));
        let answers = self.ask(RouteNetlinkMessage::GetRoute(msg), NLM_F_REQUEST)?;
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => hop_of(&r),
            _ => None,
        }))
    }
}

fn link_of(l: &LinkMessage) -> Link {
    let mut link = Link { ifindex: l.header.index, name: String::new(), mtu: 0, tun: false };
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => link.name.clone_from(n),
            LinkAttribute::Mtu(m) => link.mtu = *m,
            LinkAttribute::LinkInfo(infos) => {
                link.tun = infos.iter().any(|i| matches!(i, LinkInfo::Kind(InfoKind::Tun)));
            }
            _ => {}
        }
    }
    link
}

fn hop_of(r: &RouteMessage) -> Option<Hop> {
    let oif = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(i) => Some(*i),
        _ => None,
    })?;
    let gateway = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(RouteAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
        RouteAttribute::Gateway(RouteAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
        _ => None,
    });
    Some(Hop { oif, gateway })
}
