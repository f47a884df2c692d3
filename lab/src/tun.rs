//! Creating layer-3 TUN devices (IFF_TUN | IFF_NO_PI): each read returns one
//! raw IP packet, each write injects one, which is exactly what the path
//! emulator forwards.

use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{Context, Result};

use crate::error::LabError;
use crate::netns::Netns;

/// An open TUN device: the fd keeps it alive (it is not persistent, so the
/// kernel deletes the interface when the fd closes, even after a crash).
#[derive(Debug)]
pub(crate) struct Tun {
    pub(crate) fd: OwnedFd,
    pub(crate) name: String,
}

/// Creates TUN device `name` directly inside `ns`.
///
/// The device is created in the namespace of the thread that opens
/// /dev/net/tun, so opening it from inside `ns` gives the same end state as
/// creating it here and `ip link set DEV netns NAME`, without a window where
/// an unconfigured interface is visible in the host namespace and without
/// name clashes there.
pub(crate) fn create_in(ns: &Netns, name: &str) -> Result<Tun> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || !name.is_ascii() {
        return Err(LabError::InvalidArgument(format!("bad interface name {name:?}")).into());
    }
    ns.run_inside(|| open_tun(name))?.with_context(|| format!("creating TUN {name} in {}", ns.name()))
}

fn open_tun(name: &str) -> Result<Tun> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open("/dev/net/tun", OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
        .context("opening /dev/net/tun")?;

    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `ifr` is. (rustix's ioctl is
    // as unsafe as this: it has no TUN call of its own.)
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut ifr) } == -1 {
        return Err(std::io::Error::last_os_error()).context("ioctl(TUNSETIFF)");
    }

    // The kernel writes back the final name (relevant for "%d" patterns), NUL-terminated below
    // IFNAMSIZ.
    let actual: Vec<u8> = ifr.ifr_name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    let actual = String::from_utf8_lossy(&actual).into_owned();
    Ok(Tun { fd, name: actual })
}
