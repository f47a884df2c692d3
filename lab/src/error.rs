//! Typed root causes for lab failures.
//!
//! Public functions return `anyhow::Result` so every layer can add context,
//! but the root cause is one of these variants whenever the caller may want to
//! react to it (skip a test without privileges, report a missing tool).
//! Recover it with `err.downcast_ref::<LabError>()`, which looks through
//! context layers.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A failure the caller can match on.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The process lacks the capabilities needed to create namespaces.
    #[error("needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces: {0}")]
    NotPrivileged(String),

    /// An external tool (ip, nft, ethtool) could not be started at all.
    #[error("cannot run `{program}` (is it installed?): {source}")]
    ToolMissing {
        program: String,
        #[source]
        source: std::io::Error,
    },

    /// An external command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed { command: String, status: String, stderr: String },

    /// The lab only ever talks to 198.18.0.0/15 (RFC 2544 benchmarking range).
    #[error("{0} is outside the lab range 198.18.0.0/15; refusing to send traffic there")]
    AddressOutsideLab(Ipv4Addr),

    /// The lab's IPv6 range is 2001:db8::/32 (RFC 3849, documentation only).
    #[error("{0} is outside the lab's IPv6 range 2001:db8::/32; refusing to send traffic there")]
    AddressOutsideLabV6(Ipv6Addr),

    /// A caller-supplied parameter is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
