//! Builds the eBPF programs (tracer-ebpf) with aya-build and leaves the object in OUT_DIR, and
//! compiles deep mode's struct_ops twins (src/kernel/deep/twins.bpf.c) with clang into
//! OUT_DIR/twins.bpf.o against a vmlinux.h that bpftool writes from this machine's kernel BTF.
//!
//! Host-only work (unit tests, clippy, fmt) must not need the eBPF toolchain, so when it is
//! missing this writes an empty object and records why; the binary reports that at start-up.
//! Set CCTRACE_REQUIRE_EBPF=1 (CI does) to make a missing toolchain a build error instead.
//!
//! It also records the commit the build comes from, for `cctrace --version`.

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

/// Where clang comes from: the LLVM 22 packages the set-up installs, else PATH.
const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

fn tool(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.iter().map(PathBuf::from).chain(std::env::split_paths(&path)).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Compile the twins; `Err` says why deep mode is unavailable in this build.
fn build_twins(manifest_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let source = manifest_dir.join("src/kernel/deep/twins.bpf.c");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed={}", manifest_dir.join("src/kernel/deep/decision.h").display());
    let clang = tool("clang", &[LLVM_BIN]).ok_or("clang not found (the clang-22 package)")?;
    let bpftool = tool("bpftool", &["/usr/sbin", "/sbin"]).ok_or("bpftool not found (the bpftool package)")?;
    if !Path::new(KERNEL_BTF).is_file() {
        return Err(format!("{KERNEL_BTF} missing: the build machine's kernel has no BTF"));
    }
    // The vendored libbpf's headers (bpf_helpers.h, bpf_tracing.h, bpf_core_read.h).
    let libbpf_include = std::env::var("DEP_BPF_INCLUDE").map_err(|_| "libbpf-sys gave no include directory")?;
    let vmlinux = Command::new(&bpftool)
        .args(["btf", "dump", "file", KERNEL_BTF, "format", "c"])
        .output()
        .map_err(|e| format!("running bpftool: {e}"))?;
    if !vmlinux.status.success() {
        return Err(format!("bpftool btf dump failed: {}", String::from_utf8_lossy(&vmlinux.stderr).trim()));
    }
    let include = out_dir.join("twins-include");
    std::fs::create_dir_all(&include).map_err(|e| e.to_string())?;
    std::fs::write(include.join("vmlinux.h"), &vmlinux.stdout).map_err(|e| e.to_string())?;
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok("riscv64") => "riscv",
        Ok("s390x") => "s390",
        Ok(other) => return Err(format!("no BPF target arch name for {other}")),
        Err(_) => return Err("CARGO_CFG_TARGET_ARCH unset".into()),
    };
    let out = Command::new(&clang)
        .args(["-target", "bpf", "-g", "-O2", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(&include)
        .arg("-I")
        .arg(&libbpf_include)
        .arg("-I")
        .arg(manifest_dir.join("src/kernel/deep"))
        .arg("-c")
        .arg(&source)
        .arg("-o")
        .arg(out_dir.join("twins.bpf.o"))
        .output()
        .map_err(|e| format!("running {}: {e}", clang.display()))?;
    if !out.status.success() {
        return Err(format!("clang failed on twins.bpf.c:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// The commit HEAD names (12 hex digits), or why there is none: a build outside a git checkout.
/// The build reruns when HEAD moves: HEAD itself, the branch it names, and packed refs.
fn commit(manifest_dir: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(manifest_dir)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(hash) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown (not built from a git checkout)".into();
    };
    // logs/HEAD grows on every commit and checkout in this worktree, even when the branch ref
    // is packed.
    let mut watched = vec!["HEAD".to_string(), "logs/HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        // In a worktree HEAD is the worktree's own and the branch refs are the shared ones:
        // --git-path knows which is where.
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    hash
}

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=CCTRACE_REQUIRE_EBPF");
    println!("cargo:rerun-if-env-changed=PATH");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    println!("cargo:rustc-env=CCTRACE_COMMIT={}", commit(&manifest_dir));
    let ebpf_dir = manifest_dir.parent().unwrap_or(Path::new("..")).join("tracer-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.parent().unwrap_or(Path::new("..")).join("tracer-common/src").display()
    );

    match build_twins(&manifest_dir, &out_dir) {
        Ok(()) => println!("cargo:rustc-env=CCTRACE_DEEP_UNAVAILABLE="),
        Err(problem) if std::env::var("CCTRACE_REQUIRE_EBPF").is_ok_and(|v| v == "1") => {
            anyhow::bail!("cannot build the deep-mode twins: {problem}")
        }
        Err(problem) => {
            println!("cargo:warning=building cctrace without deep mode: {problem}");
            std::fs::write(out_dir.join("twins.bpf.o"), [])?;
            let first = problem.lines().next().unwrap_or_default().to_string();
            println!("cargo:rustc-env=CCTRACE_DEEP_UNAVAILABLE={first}");
        }
    }

    // Check-only builds (clippy, `cargo check`) ask for no object: the eBPF crate has its own
    // clippy run, and each build-script run compiles core and the programs from nothing.
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        std::fs::write(out_dir.join("tracer"), [])?;
        println!("cargo:rustc-env=CCTRACE_EBPF_UNAVAILABLE=built with AYA_BUILD_SKIP (a check-only build)");
        return Ok(());
    }
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
