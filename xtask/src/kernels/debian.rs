//! Debian's kernel images, downloaded and unpacked once under the work directory: from the
//! machine's own package lists or through a private apt configuration (another release or
//! architecture).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::hook_modes::Hooks;
use super::stage_checks::Stage;
use super::{DebianKernel, Kernel};
use crate::arch::Arch;
use crate::foreign::ForeignApt;
use crate::shell::sh;

/// The image a Debian meta package points at, downloaded and unpacked once under target/.
pub(crate) fn debian_kernel(root: &Path, work: &Path, kernel: &DebianKernel) -> Result<Kernel> {
    match kernel.release {
        None => debian_kernel_from(work, kernel.meta, None),
        Some(release) => {
            let apt = ForeignApt::for_release(root, Arch::host(), release)?;
            debian_kernel_from(work, kernel.meta, Some(&apt))
        }
    }
}

/// The same from the packages of a private apt configuration (`apt`: another architecture or
/// release), or the host's (`None`).
pub(crate) fn debian_kernel_from(work: &Path, meta: &str, apt: Option<&ForeignApt>) -> Result<Kernel> {
    if let Some(apt) = apt {
        apt.update(false)?;
    }
    download_debian_kernel(work, meta, apt).or_else(|_| {
        // Stale package lists name a version the mirror no longer has.
        match apt {
            Some(apt) => apt.update(true)?,
            None => drop(sh(Command::new("apt-get").args(["update", "-qq"]))?),
        }
        download_debian_kernel(work, meta, apt)
    })
}

fn download_debian_kernel(work: &Path, meta: &str, apt: Option<&ForeignApt>) -> Result<Kernel> {
    let apt_command = |program: &str| apt.map_or_else(|| Command::new(program), |a| a.command(program));
    let depends = sh(apt_command("apt-cache").args(["depends", meta]))?;
    let Some(package) = depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
    else {
        bail!("apt-cache depends {meta} names no linux-image package (are the package lists there?)");
    };
    let unpacked = work.join("unpacked").join(&package);
    if !unpacked.join("boot").is_dir() {
        let deb = download_deb_with(
            work,
            apt_command("apt-get").args(["download", "-qq", &package]),
            &format!("{package}_"),
        )?;
        let partial = work.join("unpacked").join(format!("{package}.partial"));
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial)?;
        sh(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
        std::fs::rename(&partial, &unpacked)?;
    }
    let image = std::fs::read_dir(unpacked.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-")))
        .with_context(|| format!("{package} holds no /boot/vmlinuz-*"))?;
    let modules = std::fs::read_dir(unpacked.join("lib/modules"))?.filter_map(|e| e.ok().map(|e| e.path())).next();
    let label = package.trim_start_matches("linux-image-").to_string();
    let arch = apt.map_or_else(Arch::host, ForeignApt::arch);
    Ok(Kernel { label, image, modules, arch, append: String::new(), hooks: Hooks::ALL, stages: Stage::ALL })
}

/// `package` at `version` (from the machine's own package lists) as a .deb under `work`/debs,
/// downloaded unless it is there (after fetching the lists again, when they name a version the
/// mirror no longer has).
pub(crate) fn download_deb(work: &Path, package: &str, version: &str) -> Result<PathBuf> {
    // apt's file name: PACKAGE_VERSION_ARCH.deb, an epoch's colon written %3a.
    let prefix = format!("{package}_{}_", version.replace(':', "%3a"));
    if let Ok(deb) = deb_in(&work.join("debs"), &prefix) {
        return Ok(deb);
    }
    let wanted = format!("{package}={version}");
    download_deb_with(work, Command::new("apt-get").args(["download", "-qq", &wanted]), &prefix).or_else(|_| {
        sh(Command::new("apt-get").args(["update", "-qq"]))?;
        download_deb_with(work, Command::new("apt-get").args(["download", "-qq", &wanted]), &prefix)
    })
}

/// Run `download` (an `apt-get download`) in `work`/debs; the .deb it left there, found by the
/// start of its name (`PACKAGE_` or `PACKAGE_VERSION_`).
fn download_deb_with(work: &Path, download: &mut Command, prefix: &str) -> Result<PathBuf> {
    let debs = work.join("debs");
    std::fs::create_dir_all(&debs)?;
    let package = prefix.split('_').next().unwrap_or(prefix);
    eprintln!("xtask: downloading {package}");
    sh(download.current_dir(&debs)).with_context(|| format!("downloading {package} with apt-get"))?;
    deb_in(&debs, prefix).with_context(|| format!("apt-get download left no {prefix}*.deb in {}", debs.display()))
}

fn deb_in(dir: &Path, prefix: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix) && n.ends_with(".deb")))
        .with_context(|| format!("no {prefix}*.deb in {}", dir.display()))
}
