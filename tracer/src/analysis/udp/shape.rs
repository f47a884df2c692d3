//! What a UDP socket carries, from its datagrams' first bytes: QUIC (long and short headers),
//! WireGuard (by message type and size), or plain UDP.

use serde::{Deserialize, Serialize};

/// First payload bytes kept per datagram (as the kernel keeps them).
pub const HEAD_LEN: usize = 16;

/// The start of one datagram: its first payload bytes and its UDP payload length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub bytes: [u8; HEAD_LEN],
    /// UDP payload length in bytes; 0: no datagram seen.
    pub len: u16,
}

/// What one datagram's first bytes look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// QUIC long header (RFC 9000 17.2): header form and fixed bit set, a non-zero version,
    /// a destination connection id of at most 20 bytes.
    QuicLong {
        version: u32,
    },
    /// Header form clear, fixed bit set: a QUIC short header if the flow has shown a long one.
    QuicShort,
    /// WireGuard message of this type (1 initiation, 2 response, 3 cookie reply, 4 data) with
    /// the reserved bytes zero and the message type's size.
    WireGuard(u8),
    Other,
}

/// WireGuard's fixed message sizes (whitepaper section 5.4): initiation 148, response 92,
/// cookie reply 64; transport data is a 16-byte header, the padded plaintext (a multiple of
/// 16) and a 16-byte tag.
fn wireguard_size_fits(kind: u8, len: u16) -> bool {
    match kind {
        1 => len == 148,
        2 => len == 92,
        3 => len == 64,
        4 => len >= 32 && len.is_multiple_of(16),
        _ => false,
    }
}

/// The shape of one datagram.
pub fn shape(head: &Head) -> Shape {
    let b = &head.bytes;
    if head.len == 0 {
        return Shape::Other;
    }
    if (1..=4).contains(&b[0]) && b[1..4] == [0, 0, 0] && wireguard_size_fits(b[0], head.len) {
        return Shape::WireGuard(b[0]);
    }
    if b[0] & 0xc0 == 0xc0 && head.len >= 7 {
        let version = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        if version != 0 && b[5] <= 20 {
            return Shape::QuicLong { version };
        }
    }
    if b[0] & 0xc0 == 0x40 {
        return Shape::QuicShort;
    }
    Shape::Other
}

/// The application protocol a UDP flow carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppProto {
    Quic,
    #[serde(rename = "wireguard")]
    WireGuard,
}

impl AppProto {
    pub fn name(self) -> &'static str {
        match self {
            Self::Quic => "quic",
            Self::WireGuard => "wireguard",
        }
    }
}

/// Datagram shapes seen on one flow, counted; the flow's protocol follows from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShapeCounts {
    pub quic_long: u32,
    pub quic_short: u32,
    pub wireguard: u32,
    pub other: u32,
}

impl ShapeCounts {
    pub fn add(&mut self, head: &Head) {
        if head.len == 0 {
            return;
        }
        match shape(head) {
            Shape::QuicLong { .. } => self.quic_long += 1,
            Shape::QuicShort => self.quic_short += 1,
            Shape::WireGuard(_) => self.wireguard += 1,
            Shape::Other => self.other += 1,
        }
    }

    /// QUIC when a long header was seen and QUIC-shaped datagrams are most of what was seen
    /// (short headers count only then: a plain payload whose first byte happens to have the
    /// fixed bit is not QUIC); WireGuard when its messages are; else plain UDP.
    pub fn protocol(&self) -> Option<AppProto> {
        let quic = self.quic_long + self.quic_short;
        if self.quic_long > 0 && quic >= self.wireguard + self.other {
            return Some(AppProto::Quic);
        }
        let not_wireguard = self.other + self.quic_short + self.quic_long;
        if self.wireguard > 0 && self.wireguard >= not_wireguard {
            return Some(AppProto::WireGuard);
        }
        None
    }
}
