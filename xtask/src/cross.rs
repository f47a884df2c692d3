//! Building cctrace for another architecture than this machine's (`cargo xtask dist --target
//! aarch64-unknown-linux-gnu`): Debian's cross gcc compiles the C parts (libbpf, zstd) and links,
//! its `libc6-dev-<arch>-cross` brings the static glibc, and the target's static libelf and zlib
//! come from that architecture's Debian packages, unpacked into a sysroot under target/. The
//! eBPF programs need nothing more: aya-build compiles them for the target's architecture
//! (`bpf_target_arch`) as it does for the host's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::arch::Arch;
use crate::foreign::{self, ForeignApt};

/// The target's packages whose static archives and headers the link needs (libbpf's libelf and
/// zlib; glibc comes with the cross compiler).
const SYSROOT_PACKAGES: &[&str] = &["libelf-dev", "zlib1g-dev"];

/// Debian's multiarch directory name for `arch`.
fn multiarch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "x86_64-linux-gnu",
        Arch::Aarch64 => "aarch64-linux-gnu",
    }
}

/// The sysroot for `arch` under target/, unpacked once.
fn sysroot(root: &Path, arch: Arch) -> Result<PathBuf> {
    let dir = root.join("target").join(format!("sysroot-{}", arch.debian()));
    let archive = |name: &str| dir.join("usr/lib").join(multiarch(arch)).join(name);
    if archive("libelf.a").is_file() && archive("libz.a").is_file() {
        return Ok(dir);
    }
    let apt = ForeignApt::new(root, arch)?;
    let debs = apt.download(SYSROOT_PACKAGES, &dir.with_extension("debs"))?;
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    foreign::unpack(&debs, &partial)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir)?;
    Ok(dir)
}

/// Point `cargo` at `arch`'s cross toolchain and sysroot; nothing for the host's architecture.
pub(crate) fn configure(cargo: &mut Command, root: &Path, arch: Arch) -> Result<()> {
    let Some(gcc) = arch.cross_gcc() else { return Ok(()) };
    let sysroot = sysroot(root, arch).with_context(|| format!("the {} sysroot", arch.debian()))?;
    let triple = arch.target();
    let env_triple = triple.replace('-', "_");
    cargo
        .env(format!("CARGO_TARGET_{}_LINKER", env_triple.to_uppercase()), gcc)
        .env(format!("CC_{env_triple}"), gcc)
        .env(format!("AR_{env_triple}"), gcc.replace("-gcc", "-ar"))
        // libbpf-sys: where the target's libelf.a and libz.a are, and their headers (the cross
        // gcc does not look in this machine's /usr/include).
        .env(format!("LIBBPF_SYS_LIBRARY_PATH_{env_triple}"), sysroot.join("usr/lib").join(multiarch(arch)))
        .env("LIBBPF_SYS_EXTRA_CFLAGS", format!("-I{}", sysroot.join("usr/include").display()));
    Ok(())
}
