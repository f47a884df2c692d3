//! Creating layer-3 TUN devices (IFF_TUN | IFF_NO_PI): each read returns one
//! raw IP packet, each write injects one, which is exactly what the path
//! emulator forwards.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result};

use crate::error::LabError;
use crate::netns::Netns;
use crate::sys::cvt;

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
    // SAFETY: the path literal is NUL-terminated; flags are plain integers.
    let raw = cvt(unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) })
        .context("opening /dev/net/tun")?;
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };

    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `ifr` is.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut ifr) }).context("ioctl(TUNSETIFF)")?;

    // The kernel writes back the final name (relevant for "%d" patterns).
    // SAFETY: ifr_name is NUL-terminated: we wrote < IFNAMSIZ bytes into a
    // zeroed array and the kernel keeps names below IFNAMSIZ as well.
    let actual = unsafe { CStr::from_ptr(ifr.ifr_name.as_ptr()) }.to_string_lossy().into_owned();
    Ok(Tun { fd, name: actual })
}
