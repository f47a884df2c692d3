//! What every loader of the embedded eBPF object does first, the live source and the socket
//! switcher alike: check that the object was built, check privileges, resolve the kernel's struct
//! offsets from its BTF, lift the locked-memory limit, and load the object, each failure said one
//! way.

use anyhow::{anyhow, bail, Context, Result};
use aya::{Ebpf, EbpfLoader};

use super::attach::error_chain;
use super::{caps, offsets};

/// The eBPF object built by `build.rs`; empty when the build machine lacked the eBPF toolchain.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));
/// Why the object is empty, if it is.
const EBPF_UNAVAILABLE: &str = env!("CCTRACE_EBPF_UNAVAILABLE");

/// What the start of loading learned: the offsets the programs read, and whether the
/// locked-memory limit could be lifted.
pub(super) struct Prelude {
    pub(super) resolved: offsets::Resolved,
    /// Why RLIMIT_MEMLOCK stayed where it was, when `setrlimit` refused to lift it: harmless
    /// on kernels since 5.11 (they charge maps to the memory cgroup), the cause of a refused map
    /// creation before them (see [`object_load_failed`]).
    memlock_kept: Option<rustix::io::Errno>,
}

/// Check the object and privileges, resolve the offsets, lift the locked-memory limit. The
/// kernel's BTF comes back too, for what a caller reads from it beyond the offsets.
pub(super) fn prelude(kernel_btf: &super::btf_file::KernelBtf) -> Result<(Prelude, offsets::BtfResolver)> {
    check_object_and_caps()?;
    let btf = offsets::BtfResolver::from_kernel_btf(kernel_btf)?;
    let resolved = offsets::resolve(&btf).context("resolving kernel struct offsets from BTF")?;
    Ok((Prelude::lift_memlock(resolved), btf))
}

/// The same for the mode without BTF: no offsets (its programs read no kernel struct).
pub(super) fn prelude_without_btf() -> Result<Prelude> {
    check_object_and_caps()?;
    let resolved = offsets::Resolved { offsets: tracer_common::Offsets::unresolved(), missing: Vec::new() };
    Ok(Prelude::lift_memlock(resolved))
}

fn check_object_and_caps() -> Result<()> {
    if EBPF_OBJECT.is_empty() {
        bail!(
            "this cctrace was built without its eBPF programs ({EBPF_UNAVAILABLE}); run `cargo xtask setup` \
             (installs bpf-linker and the nightly rust-src component) and rebuild"
        );
    }
    caps::check()
}

impl Prelude {
    fn lift_memlock(resolved: offsets::Resolved) -> Self {
        let memlock_kept = raise_memlock().err();
        if let Some(errno) = memlock_kept {
            // Said in the load error where it matters (before 5.11); on later kernels nothing
            // depends on it, so a log line is all it is worth.
            log::debug!("raising RLIMIT_MEMLOCK failed ({errno}); kernels since 5.11 do not need it");
        }
        Self { resolved, memlock_kept }
    }

    /// Load the object with the resolved offsets and what `loader` sets besides.
    pub(super) fn load<'a>(&'a self, loader: &mut EbpfLoader<'a>) -> Result<Ebpf> {
        loader
            .override_global("OFFSETS", &self.resolved.offsets, true)
            .load(EBPF_OBJECT)
            .map_err(|e| object_load_failed(&e, self.memlock_kept))
    }
}

/// Locked memory is charged to the memory cgroup since 5.11; the old limit is lifted anyway so
/// that older kernels do not refuse map creation.
fn raise_memlock() -> rustix::io::Result<()> {
    let unlimited = rustix::process::Rlimit { current: None, maximum: None };
    rustix::process::setrlimit(rustix::process::Resource::Memlock, unlimited)
}

/// Why the eBPF object did not load, in one line; when map creation was refused under a
/// finite locked-memory limit, that limit and how to lift it (kernels before 5.11 charge maps to
/// RLIMIT_MEMLOCK, which cctrace cannot raise without CAP_SYS_RESOURCE: a systemd unit's
/// dynamic user on Debian 11, say).
fn object_load_failed(e: &aya::EbpfError, memlock_kept: Option<rustix::io::Errno>) -> anyhow::Error {
    let chain = error_chain(e);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
    match limit {
        Some(bytes) if chain.contains("failed to create map") && chain.contains("(os error 1)") => {
            anyhow!("{}", memlock_refusal(bytes, memlock_kept))
        }
        _ => anyhow!("loading the eBPF object into the kernel failed: {chain}"),
    }
}

/// The refused map creation under a finite RLIMIT_MEMLOCK of `bytes`, with `setrlimit`'s
/// refusal when it is known.
fn memlock_refusal(bytes: u64, memlock_kept: Option<rustix::io::Errno>) -> String {
    let refused = memlock_kept.map(|errno| format!(" (setrlimit RLIMIT_MEMLOCK: {errno})")).unwrap_or_default();
    format!(
        "creating the eBPF maps was refused: kernels before 5.11 charge them to the locked-memory limit, \
         {} KiB here, which cctrace cannot raise without CAP_SYS_RESOURCE{refused}; lift it (LimitMEMLOCK=infinity in a \
         systemd unit, ulimit -l unlimited in a shell) or run cctrace as root",
        bytes / 1024
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_memlock_limit_is_named_with_setrlimits_answer() {
        let kept = memlock_refusal(64 * 1024, Some(rustix::io::Errno::PERM));
        assert!(kept.contains("64 KiB here"), "{kept}");
        assert!(kept.contains("CAP_SYS_RESOURCE (setrlimit RLIMIT_MEMLOCK: "), "{kept}");
        assert_eq!(kept.lines().count(), 1);
        let unknown = memlock_refusal(64 * 1024, None);
        assert!(!unknown.contains("setrlimit"), "{unknown}");
    }
}
