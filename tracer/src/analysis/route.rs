//! Where a TCP flow's packets leave the host: its route's device and the path MTU the socket
//! uses, as the kernel's cached route says. A flow through a tunnel (tailscale0, wg0, a TUN
//! device) shows the tunnel, whose outer UDP is what crosses the path.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One socket's route, as read from the kernel with a sample of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Device name, as in its network namespace.
    pub dev: DeviceName,
    pub ifindex: u32,
    /// The device's MTU, bytes.
    pub dev_mtu: u32,
    /// The socket's path MTU (`icsk_pmtu_cookie`), bytes; 0 when not set yet.
    pub pmtu: u32,
}

impl Route {
    /// The route a sample's socket had cached, if any.
    pub fn from_raw(ifindex: u32, dev_mtu: u32, pmtu: u32, name: [u8; 16]) -> Option<Self> {
        (ifindex != 0).then_some(Self { dev: DeviceName::from_raw(name), ifindex, dev_mtu, pmtu })
    }

    /// The path MTU: the socket's own when set, else the device's.
    pub fn mtu(&self) -> u32 {
        if self.pmtu != 0 {
            self.pmtu
        } else {
            self.dev_mtu
        }
    }
}

/// A network device's name (`IFNAMSIZ`, 16 bytes with its NUL), held inline: a route travels
/// with every sample, which must not allocate for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceName([u8; 16]);

impl DeviceName {
    /// From the kernel's NUL-padded bytes; a name that is not UTF-8 is kept as it is shown
    /// (lossily) the first time it is printed, never refused.
    pub fn from_raw(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// Up to 15 bytes of `name` (longer names cannot exist in the kernel).
    pub fn new(name: &str) -> Self {
        let mut bytes = [0u8; 16];
        let mut end = name.len().min(15);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        Self(bytes)
    }

    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|b| *b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end])
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl fmt::Debug for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for DeviceName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for DeviceName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        if name.len() > 15 {
            return Err(serde::de::Error::custom(format!("device name {name:?} is longer than 15 bytes")));
        }
        Ok(Self::new(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_path_mtu_wins_over_the_devices() {
        let r = Route { dev: DeviceName::new("wg0"), ifindex: 4, dev_mtu: 1420, pmtu: 0 };
        assert_eq!(r.mtu(), 1420);
        assert_eq!(Route { pmtu: 1280, ..r }.mtu(), 1280);
    }

    #[test]
    fn no_cached_route_is_no_route() {
        assert_eq!(Route::from_raw(0, 1500, 1500, *b"eth0\0\0\0\0\0\0\0\0\0\0\0\0"), None);
        let r = Route::from_raw(2, 1500, 1400, *b"eth0\0\0\0\0\0\0\0\0\0\0\0\0").expect("a route");
        assert_eq!(r.dev.to_string(), "eth0");
        assert_eq!(r.mtu(), 1400);
    }

    #[test]
    fn device_names_round_trip_through_serde() {
        let full = DeviceName::new("fifteen-bytes-x");
        let json = serde_json::to_string(&full).expect("serialises");
        assert_eq!(json, "\"fifteen-bytes-x\"");
        assert_eq!(serde_json::from_str::<DeviceName>(&json).expect("parses"), full);
        assert!(serde_json::from_str::<DeviceName>("\"sixteen-bytes-xx\"").is_err());
    }
}
