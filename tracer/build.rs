//! Builds the eBPF programs (tracer-ebpf) with aya-build and leaves the object in OUT_DIR.
//!
//! Host-only work (unit tests, clippy, fmt) must not need the eBPF toolchain, so when it is
//! missing this writes an empty object and records why; the binary reports that at start-up.
//! Set CCTRACE_REQUIRE_EBPF=1 (CI does) to make a missing toolchain a build error instead.

use std::path::{Path, PathBuf};
use std::process::Command;

fn toolchain_problem() -> Option<String> {
    let linker_on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("bpf-linker").is_file()))
        .unwrap_or(false);
    if !linker_on_path {
        return Some("bpf-linker not found on PATH".into());
    }
    let sysroot = Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]).output();
    match sysroot {
        Ok(out) if out.status.success() => {
            let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if !root.join("lib/rustlib/src/rust/library/core").is_dir() {
                return Some("the nightly toolchain lacks the rust-src component".into());
            }
            None
        }
        _ => Some("no nightly Rust toolchain (rustup run nightly rustc failed)".into()),
    }
}

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=CCTRACE_REQUIRE_EBPF");
    println!("cargo:rerun-if-env-changed=PATH");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let ebpf_dir = manifest_dir.parent().unwrap_or(Path::new("..")).join("tracer-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.parent().unwrap_or(Path::new("..")).join("tracer-common/src").display()
    );

    if let Some(problem) = toolchain_problem() {
        if std::env::var("CCTRACE_REQUIRE_EBPF").is_ok_and(|v| v == "1") {
            anyhow::bail!("cannot build the eBPF programs: {problem}");
        }
        println!("cargo:warning=building cctrace without eBPF programs: {problem}");
        std::fs::write(out_dir.join("tracer"), [])?;
        println!("cargo:rustc-env=CCTRACE_EBPF_UNAVAILABLE={problem}");
        return Ok(());
    }
    let root_dir = ebpf_dir.to_str().ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    aya_build::build_ebpf(
        [aya_build::Package { name: "tracer-ebpf", root_dir, ..Default::default() }],
        aya_build::Toolchain::Nightly,
    )?;
    println!("cargo:rustc-env=CCTRACE_EBPF_UNAVAILABLE=");
    Ok(())
}
