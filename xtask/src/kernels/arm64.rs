//! The kernel matrix's arm64 row: Debian bookworm's arm64 cloud kernel (6.1) booted with
//! qemu-system-aarch64 (`virt` machine, TCG), with the static aarch64 cctrace and the same init and
//! checks as the x86-64 guests (guest_init.sh, the rest of kernels/). The guest's busybox,
//! iproute2, nftables, bpftool and socat are Debian's arm64 packages, fetched with their libraries
//! through the private apt configuration (foreign.rs) and unpacked under target/kernels-arm64; the
//! kernel's modules come from its own package, the virtio console the results go through among
//! them.
//!
//! The flows are a third the x86-64 guests' size (`bytes=`): an arm64 guest under TCG on this
//! machine runs several times slower, and the checks need the flows to be traced to their last
//! byte and the lossy one to lose, not to be long.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::hook_modes::Hooks;
use super::initramfs::GUEST_TOOLS;
use crate::arch::Arch;
use crate::foreign::{self, ForeignApt};
use crate::shell::{self, sh};

/// Debian's meta packages for bookworm's arm64 cloud kernels: 6.1, the one the suite boots, and
/// 6.12, the first with the per-syscall UDP hooks (6.3), whose classifier reads the caller's
/// buffer through arm64's saved registers.
pub(crate) const KERNELS: &[&str] = &["linux-image-cloud-arm64", "linux-image-6.12-cloud-arm64"];
/// What the suite boots beside its tests: 6.1 alone (each arm64 guest is a minute or more of
/// emulation), under the default and classic hooks.
pub(crate) const SUITE_KERNELS: &[&str] = &["linux-image-cloud-arm64"];
pub(crate) const SUITE_HOOKS: &[Hooks] = &[Hooks::Auto, Hooks::Classic];
/// What the guest runs besides cctrace (the tools of [`GUEST_TOOLS`] and busybox).
const GUEST_PACKAGES: &[&str] = &["busybox-static", "iproute2", "nftables", "bpftool", "socat"];
/// Each flow's bytes in the arm64 guest.
const FLOW_BYTES: u64 = 10_000_000;
/// Where the packages' libraries are, in the unpacked tree and so in the guest.
const LIBRARY_DIRS: &[&str] = &["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib", "usr/lib"];

/// Boot each of `metas` (arm64 kernels' meta packages) with `cctrace` (a static aarch64 build)
/// and check what it traced under each of `hooks`.
pub(crate) fn run(root: &Path, cctrace: &Path, metas: &[&str], hooks: &'static [Hooks]) -> Result<()> {
    let work = root.join("target/kernels-arm64");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    shell::check_static(cctrace).context("the arm64 guest runs the static cctrace (cargo xtask dist)")?;
    let apt = ForeignApt::new(root, Arch::Aarch64)?;
    let tree = packages_tree(&work, &apt)?;
    let common = guest_root(&work, cctrace, &tree)?;
    let mut results = Vec::new();
    for meta in metas {
        let mut kernel = super::debian::debian_kernel_from(&work, meta, Some(&apt))?;
        kernel.append = format!("bytes={FLOW_BYTES}");
        kernel.hooks = hooks;
        // The hook modes' flows only: fix --live, deep mode and the unit's user are checked on
        // the x86-64 rows (this guest is the slowest, and its packages hold no ss or setpriv).
        kernel.stages = &[];
        let started = Instant::now();
        crate::say(&format!("booting {} under qemu-system-aarch64 (TCG)", kernel.image.display()));
        results.push(super::qemu::boot_and_check(&work, &common, &kernel));
        crate::say(&format!("arm64 guest done in {:.0} s", started.elapsed().as_secs_f64()));
    }
    let (table, failed) = super::table::render(&results);
    println!("{table}");
    if failed {
        bail!("the arm64 guest has failing checks (see the table above)");
    }
    Ok(())
}

/// The guest's packages with everything they depend on, unpacked once into `work`/packages
/// (again when the list changes).
fn packages_tree(work: &Path, apt: &ForeignApt) -> Result<PathBuf> {
    let tree = work.join("packages");
    let stamp = tree.join(".cctrace-packages");
    let wanted = GUEST_PACKAGES.join(" ");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(tree);
    }
    let debs = apt.download_with_dependencies(GUEST_PACKAGES)?;
    let partial = work.join("packages.partial");
    let _ = std::fs::remove_dir_all(&partial);
    foreign::unpack(&debs, &partial)?;
    std::fs::write(partial.join(".cctrace-packages"), &wanted)?;
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::rename(&partial, &tree)?;
    Ok(tree)
}

/// The initramfs every arm64 boot shares: the guest's skeleton, busybox, cctrace, and the tools
/// where the init calls them, with the libraries and loader they name.
fn guest_root(work: &Path, cctrace: &Path, tree: &Path) -> Result<PathBuf> {
    let root = super::initramfs::guest_skeleton(work)?;
    let busybox = foreign::resolve_in(tree, Path::new("bin/busybox"))?;
    shell::check_static(&busybox).context("the guest's busybox must be static (busybox-static)")?;
    shell::copy(&busybox, &root.join("bin/busybox"))?;
    shell::copy(cctrace, &root.join("usr/bin/cctrace"))?;
    let mut libraries = BTreeSet::new();
    for tool in GUEST_TOOLS {
        let name = Path::new(tool).file_name().context("a tool path names a file")?;
        let found = ["usr/sbin", "sbin", "usr/bin", "bin"]
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find_map(|p| foreign::resolve_in(tree, &p).ok())
            .with_context(|| {
                format!("no {} in the arm64 packages {}", name.to_string_lossy(), GUEST_PACKAGES.join(" "))
            })?;
        shell::copy(&found, &root.join(tool.trim_start_matches('/')))?;
        needed_libraries(tree, &found, &mut libraries)?;
    }
    for lib in &libraries {
        shell::copy(&foreign::resolve_in(tree, lib)?, &root.join(lib))?;
    }
    Ok(root)
}

/// Add the shared libraries `binary` needs, and theirs, to `found` (paths inside `tree`, as the
/// guest's loader finds them), with the loader itself.
fn needed_libraries(tree: &Path, binary: &Path, found: &mut BTreeSet<PathBuf>) -> Result<()> {
    let dynamic = sh(Command::new("readelf").args(["-dlW"]).arg(binary))?;
    for line in dynamic.lines() {
        if let Some(loader) = line.split("program interpreter: ").nth(1).and_then(|r| r.strip_suffix(']')) {
            found.insert(PathBuf::from(loader.trim_start_matches('/')));
        }
        let Some(name) = line.split("Shared library: [").nth(1).and_then(|r| r.strip_suffix(']')) else { continue };
        let path = LIBRARY_DIRS
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| foreign::resolve_in(tree, p).is_ok())
            .with_context(|| format!("{} needs {name}, which no arm64 package unpacked holds", binary.display()))?;
        if found.insert(path.clone()) {
            needed_libraries(tree, &foreign::resolve_in(tree, &path)?, found)?;
        }
    }
    Ok(())
}
