//! The kernel matrix's kernel without BTF: Linux 6.1 built here from Debian's `linux-source-6.1`
//! with `CONFIG_DEBUG_INFO_BTF` off, as Unraid's and Raspberry Pi OS's kernels are built. No
//! distribution ships such an x86-64 kernel to download, so the matrix makes one.
//!
//! The configuration is `make allnoconfig` plus `nobtf_kernel.config`, which turns on only what
//! the guest's init and its checks use (a defconfig kernel took 13 minutes here; this one is a
//! fraction of it). Kconfig silently drops an option whose dependencies are unmet, so the build
//! checks that every option asked for is in the final `.config`, and that what must be off is.
//!
//! The image is cached as the downloaded kernels are, under `target/kernels/built/`, keyed by
//! the source package's version and a digest of the configuration and of how it is built: a
//! second run, or a run after an unrelated change, boots it at once; a new Debian source upload
//! or a changed configuration builds it again. The compiler is the machine's own gcc.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use super::Kernel;
use crate::arch::Arch;
use crate::shell::{self, sh};

/// Debian's package of the kernel's source (the 6.1 series, bookworm's own and Unraid's).
const SOURCE_PACKAGE: &str = "linux-source-6.1";
/// The options the kernel is built with, on top of `make allnoconfig`.
const CONFIG: &str = include_str!("nobtf_kernel.config");
/// What `uname -r` says after the version (`CONFIG_LOCALVERSION`), and how `--only` finds it.
pub(crate) const LOCALVERSION: &str = "-nobtf";
/// How the image is made, in the cache key beside the configuration: change it when the build
/// steps change what they make.
const RECIPE: &str = "make allnoconfig KCONFIG_ALLCONFIG=nobtf_kernel.config; make bzImage";

/// The kernel to build: its source package's version, and what its image is cached under.
pub(crate) struct Planned {
    /// The Debian version of the source package (`6.1.192-3`).
    version: String,
    /// `6.1.192-nobtf`: the kernel's release, as `uname -r` will say it.
    pub(crate) label: String,
    /// `work`/built/VERSION-DIGEST: the image, the configuration it was built with, the log.
    dir: PathBuf,
}

/// The kernel the matrix would build now (the source version the package lists name), without
/// building it: enough to tell whether `--only` wants it.
pub(crate) fn planned(work: &Path) -> Result<Planned> {
    let version = candidate_version(SOURCE_PACKAGE)?;
    let upstream = version.split('-').next().unwrap_or(&version).to_string();
    let digest = digest(&format!("{RECIPE}\n{LOCALVERSION}\n{CONFIG}"))?;
    let dir = work.join("built").join(format!("{version}-{}", &digest[..12]));
    Ok(Planned { label: format!("{upstream}{LOCALVERSION}"), version, dir })
}

impl Planned {
    /// The image, built now unless the cache has it.
    pub(crate) fn kernel(&self, work: &Path) -> Result<Kernel> {
        let image = self.dir.join("bzImage");
        if !image.is_file() {
            self.build(work).with_context(|| format!("building {} from {SOURCE_PACKAGE}", self.label))?;
        }
        Ok(Kernel::without_btf(self.label.clone(), image, Arch::X86_64))
    }

    fn build(&self, work: &Path) -> Result<()> {
        let deb = super::debian::download_deb(work, SOURCE_PACKAGE, &self.version)?;
        let scratch = work.join("nobtf-build");
        let _ = std::fs::remove_dir_all(&scratch);
        let (src, out) = (scratch.join("src"), scratch.join("out"));
        std::fs::create_dir_all(&out)?;
        crate::say(&format!("unpacking {SOURCE_PACKAGE} {} into {}", self.version, scratch.display()));
        unpack_source(&deb, &scratch, &src)?;
        let fragment = scratch.join("nobtf_kernel.config");
        std::fs::write(&fragment, format!("{CONFIG}\nCONFIG_LOCALVERSION=\"{LOCALVERSION}\"\n"))?;
        let make = |args: &[&str]| {
            // At idle priority: minutes of compiling must not take a core from tests that time
            // emulated paths (the suite's, or another checkout's beside this one).
            let mut cmd = Command::new("chrt");
            cmd.args(["--idle", "0", "make", "-s", "-C"]).arg(&src).arg(format!("O={}", out.display())).args(args);
            cmd
        };
        sh(&mut make(&[&format!("KCONFIG_ALLCONFIG={}", fragment.display()), "allnoconfig"]))
            .context("make allnoconfig (bison and flex build its parser)")?;
        let config = std::fs::read_to_string(out.join(".config"))?;
        if let Err(missing) = config_holds(&config, CONFIG) {
            bail!("Kconfig did not take {missing} (an unmet dependency?); the .config is in {}", out.display());
        }
        let jobs = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        crate::say(&format!("building {} without BTF on {jobs} cores at idle priority (minutes)", self.label));
        let (started, cpu_before) = (Instant::now(), children_cpu_seconds());
        sh(&mut make(&[&format!("-j{jobs}"), "bzImage"])).context("make bzImage")?;
        let (wall, cpu) = (started.elapsed().as_secs_f64(), children_cpu_seconds() - cpu_before);
        let release = std::fs::read_to_string(out.join("include/config/kernel.release"))?.trim().to_string();
        ensure!(release == self.label, "the kernel calls itself {release}, not {}", self.label);
        let image = out.join("arch/x86/boot/bzImage");
        let size = std::fs::metadata(&image)?.len();
        crate::say(&format!(
            "built {} in {wall:.0} s ({cpu:.0} s of CPU), a {:.1} MB bzImage",
            self.label,
            size as f64 / 1e6
        ));
        let partial = self.dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial)?;
        shell::copy(&image, &partial.join("bzImage"))?;
        shell::copy(&out.join(".config"), &partial.join("config"))?;
        std::fs::write(
            partial.join("built.txt"),
            format!("{SOURCE_PACKAGE} {}: {wall:.0} s, {cpu:.0} s of CPU, {jobs} jobs, {size} bytes\n", self.version),
        )?;
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::rename(&partial, &self.dir)?;
        // The source and objects are 1.5 GB or more; the image is all the matrix boots.
        std::fs::remove_dir_all(&scratch).with_context(|| format!("removing {}", scratch.display()))
    }
}

/// The version apt would download of `package` (its candidate), from the package lists.
fn candidate_version(package: &str) -> Result<String> {
    let shown = sh(Command::new("apt-cache").args(["show", "--no-all-versions", package]))
        .with_context(|| format!("apt-cache show {package} (are Debian's package lists there?)"))?;
    shown
        .lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("apt-cache show {package} names no version"))
}

/// The SHA-256 of `text`, in hex (coreutils' sha256sum).
fn digest(text: &str) -> Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting sha256sum")?;
    child.stdin.take().context("sha256sum's stdin")?.write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let hex = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or("").to_string();
    ensure!(out.status.success() && hex.len() == 64, "sha256sum failed");
    Ok(hex)
}

/// The tarball inside the source package, unpacked so that `src` is its top directory.
fn unpack_source(deb: &Path, scratch: &Path, src: &Path) -> Result<()> {
    let unpacked = scratch.join("deb");
    sh(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&unpacked))?;
    let tarball = unpacked.join(format!("usr/src/{SOURCE_PACKAGE}.tar.xz"));
    sh(Command::new("tar").arg("-xJf").arg(&tarball).arg("-C").arg(scratch))
        .with_context(|| format!("unpacking {}", tarball.display()))?;
    std::fs::remove_dir_all(&unpacked)?;
    std::fs::rename(scratch.join(SOURCE_PACKAGE), src)
        .with_context(|| format!("{} holds no {SOURCE_PACKAGE}/ directory", tarball.display()))
}

/// Whether `config` (a `.config`) has every `CONFIG_X=...` line of `wanted`, and none of the
/// options `wanted` says must be off (`# CONFIG_X is not set`) on; else the first it lacks.
fn config_holds(config: &str, wanted: &str) -> Result<(), String> {
    let set: Vec<&str> = config.lines().filter(|l| l.starts_with("CONFIG_")).collect();
    for line in wanted.lines().map(str::trim) {
        if line.starts_with("CONFIG_") {
            if !set.contains(&line) {
                return Err(line.to_string());
            }
        } else if let Some(off) = line.strip_prefix("# ").and_then(|l| l.strip_suffix(" is not set")) {
            if let Some(on) = set.iter().find(|l| l.split('=').next() == Some(off)) {
                return Err(format!("{off} off (it is {on})"));
            }
        }
    }
    Ok(())
}

/// The CPU time (user and system, seconds) of this process's waited-for children so far, from
/// /proc/self/stat (in clock ticks, `getconf CLK_TCK` a second).
fn children_cpu_seconds() -> f64 {
    let ticks: f64 =
        sh(Command::new("getconf").arg("CLK_TCK")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(100.0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis: cutime and cstime are the 14th and 15th.
    let fields: Vec<f64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect())
        .unwrap_or_default();
    fields.get(13).zip(fields.get(14)).map_or(0.0, |(u, s)| (u + s) / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_asks_for_no_btf_and_what_the_guest_needs() {
        for on in ["CONFIG_BPF_SYSCALL=y", "CONFIG_BPF_EVENTS=y", "CONFIG_TCP_CONG_BBR=y", "CONFIG_INET_DIAG=y"] {
            assert!(CONFIG.lines().any(|l| l == on), "{on}");
        }
        assert!(CONFIG.lines().any(|l| l == "# CONFIG_DEBUG_INFO_BTF is not set"));
    }

    #[test]
    fn a_dropped_option_or_one_that_must_be_off_fails_the_check() {
        let wanted = "# comment\nCONFIG_A=y\n# CONFIG_B is not set\n";
        assert_eq!(config_holds("CONFIG_A=y\n# CONFIG_B is not set\n", wanted), Ok(()));
        assert_eq!(config_holds("CONFIG_A=y\n", wanted), Ok(()));
        assert_eq!(config_holds("# CONFIG_A is not set\n", wanted), Err("CONFIG_A=y".into()));
        assert_eq!(config_holds("CONFIG_A=y\nCONFIG_B=y\n", wanted), Err("CONFIG_B off (it is CONFIG_B=y)".into()));
    }
}
