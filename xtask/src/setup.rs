//! Machine set-up (`cargo xtask setup`, and the first step of every other task): the Debian
//! packages the suite and the kernel matrix use, the nightly rust-src component, bpf-linker built
//! against LLVM 22, cargo-deb, the OpenTelemetry collector and the cross targets. Each step does
//! nothing when what it installs is already there, so it costs a fresh machine once and a set-up
//! one nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::{dist, output, run, say, succeeds, workspace_root};

const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "bpftool",
    // Deep mode (tracer/src/kernel/deep): clang compiles the struct_ops twins, and libbpf-sys builds
    // its vendored libbpf with make against the system's libelf and zlib (pkg-config finds them).
    "clang-22",
    "libelf-dev",
    "pkg-config",
    "make",
    "nftables",
    "ethtool",
    "iproute2",
    "kmod",
    "tmux",
    // tests/tests/report.rs renders `cctrace report` in headless Chromium.
    "chromium",
    // tests/tests/udp.rs: plain UDP bulk traffic (`iperf3 -u`).
    "iperf3",
    // zstdcat: the recording tests read a recording as its users would.
    "zstd",
    "util-linux",
    // cargo xtask kernels: boots the kernel matrix under qemu with a busybox initramfs.
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "xz-utils",
    // tests/tests/metrics.rs: a real Prometheus server scraping `cctrace serve`, and promtool
    // for the exposition and the shipped alert rules. Installed without starting its service.
    "prometheus",
    // The overhead benchmark compares cctrace with a bpftrace script doing per-flow work.
    "bpftrace",
    // tests/tests/runtimes.rs: the distribution's container runtimes, each running nginx. The
    // test starts its own dockerd (state under its own directory) when none runs.
    "docker.io",
    "podman",
    "lxc",
    "nginx",
    // tests/tests/tunnel.rs: a real WireGuard tunnel (wireguard-go, the engine Tailscale is built
    // on, configured with `wg`), sshd serving a bulk pull to ssh and nginx a file to curl
    // through it.
    "wireguard-go",
    "wireguard-tools",
    "openssh-server",
    "openssh-client",
    "curl",
    // tests/tests/player.rs: a real HLS player and encoder (ffmpeg) playing a stream nginx serves
    // through the tunnel, its speed read from its own progress.
    "ffmpeg",
    // cargo xtask dist: a static glibc build links Debian's static libelf and zlib (libelf-dev
    // and zlib1g-dev above ship the .a files); file, readelf (binutils) and ldd check that the
    // binary needs no shared library; man-db renders the generated man page; zsh and fish parse
    // the generated completions (bash is always there).
    "libc6-dev",
    "binutils",
    "file",
    "man-db",
    "zsh",
    "fish",
    // cargo xtask dist --target aarch64-unknown-linux-gnu: Debian's cross gcc and static glibc
    // for arm64 (the arm64 libelf and zlib come through a private apt configuration: see
    // foreign.rs); qemu-user runs the arm64 binary here for what the package holds beside it.
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "qemu-user",
    // The kernel matrix's arm64 row (arm64.rs).
    "qemu-system-arm",
    // The kernel matrix's UDP flow (guest_init.sh): a sender and receiver of datagrams.
    "socat",
    // The kernel matrix's kernel without BTF (kernels/nobtf_build.rs), built from Debian's
    // linux-source: Kconfig's parser and lexer are generated at build time.
    "bison",
    "flex",
];
/// Packages whose service the install must not leave running or enabled, with the service's
/// name: the tests start their own instances (on a loopback port, inside containers or lab
/// namespaces), with their own config and data.
const NO_SERVICE: &[(&str, &str)] = &[("prometheus", "prometheus"), ("nginx", "nginx"), ("openssh-server", "ssh")];
/// Rotel, the OpenTelemetry collector tests/tests/otlp.rs starts: PyPI ships it as a wheel with
/// its binary, installed into a virtual environment of its own under target/tools/rotel.
const ROTEL: &str = "rotel==0.0.1a15";
/// Rust targets besides the host's that `cargo xtask dist --target` builds for.
const RUST_TARGETS: &[Arch] = &[Arch::Aarch64];
const BPF_LINKER_VERSION: &str = "0.13";

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

fn setup_apt() -> Result<()> {
    let missing: Vec<&str> =
        APT_PACKAGES.iter().copied().filter(|p| !succeeds(Command::new("dpkg").args(["-s", p]))).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "Debian packages missing: {}; run `sudo cargo xtask setup` or install them with apt-get",
            missing.join(" ")
        );
    }
    say(&format!("installing Debian packages: {}", missing.join(" ")));
    run(Command::new("apt-get").args(["update", "-qq"]))
        .context("apt-get update failed: is a Debian mirror reachable?")?;
    let installed = {
        // invoke-rc.d and deb-systemd-invoke ask policy-rc.d whether to start a service: "no"
        // (101) while installing, so no system Prometheus starts on port 9090.
        let _no_start = NoServiceStart::install()?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"))
        .with_context(|| format!("could not install {}", missing.join(" ")))
    };
    installed?;
    // The package also enabled its service for the next boot (a systemd unit, or sysvinit
    // links): undo that for the services this setup installed, not for ones the user had.
    let systemd = std::path::Path::new("/run/systemd/system").exists();
    for (_, unit) in NO_SERVICE.iter().filter(|(p, _)| missing.contains(p)) {
        let _ = if systemd {
            run(Command::new("systemctl").args(["disable", "--now", &format!("{unit}.service")]))
        } else {
            run(Command::new("update-rc.d").args([unit, "disable"]))
        };
    }
    Ok(())
}

const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// A policy-rc.d that forbids starting services, for as long as it lives; none is written (and
/// none removed) when the host has its own.
struct NoServiceStart(bool);

impl NoServiceStart {
    fn install() -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        if std::path::Path::new(POLICY_RC_D).exists() {
            return Ok(Self(false));
        }
        std::fs::write(
            POLICY_RC_D,
            "#!/bin/sh\n# cargo xtask setup: no service starts while it installs packages\nexit 101\n",
        )
        .with_context(|| format!("writing {POLICY_RC_D}"))?;
        std::fs::set_permissions(POLICY_RC_D, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self(true))
    }
}

impl Drop for NoServiceStart {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_file(POLICY_RC_D);
        }
    }
}

fn setup_rust_src() -> Result<()> {
    let Some(sysroot) = output(Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"])) else {
        bail!(
            "no nightly Rust toolchain: the eBPF programs need one (rustup toolchain install nightly --component rust-src)"
        );
    };
    if Path::new(sysroot.trim()).join("lib/rustlib/src/rust/library/core").is_dir() {
        return Ok(());
    }
    say("adding the rust-src component to the nightly toolchain");
    run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
        .context("could not add rust-src to the nightly toolchain")
}

fn setup_bpf_linker() -> Result<()> {
    let version = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if version.contains(&format!("bpf-linker {BPF_LINKER_VERSION}")) {
        return Ok(());
    }
    say(&format!("building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)"));
    run(Command::new("cargo").args([
        "install",
        "bpf-linker",
        "--locked",
        "--version",
        &format!("~{BPF_LINKER_VERSION}"),
        "--no-default-features",
        "--features",
        "llvm-22",
    ]))
    .context("could not build bpf-linker (needs llvm-22-dev from Debian)")
}

/// The Rust standard library for each cross target (rustup, from the Rust project's servers).
fn setup_rust_targets() -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    for arch in RUST_TARGETS {
        if !installed.lines().any(|l| l.trim() == arch.target()) {
            say(&format!("adding the Rust target {}", arch.target()));
            run(Command::new("rustup").args(["target", "add", arch.target()]))
                .with_context(|| format!("could not add the Rust target {}", arch.target()))?;
        }
    }
    Ok(())
}

fn setup_kernel_mounts() {
    // tracefs for classic tracepoints; harmless if already mounted or impossible.
    if !Path::new("/sys/kernel/tracing/events").is_dir() && is_root() {
        let _ = succeeds(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]));
    }
}

/// Where the tests find the collector: a link to the binary the wheel installed.
fn rotel_agent() -> PathBuf {
    workspace_root().join("target/tools/rotel/rotel-agent")
}

fn setup_rotel() -> Result<()> {
    let agent = rotel_agent();
    if succeeds(Command::new(&agent).arg("--version")) {
        return Ok(());
    }
    say(&format!("installing {ROTEL} (an OpenTelemetry collector, for the OTLP tests) from PyPI"));
    let dir = agent.parent().context("the tools directory")?.to_path_buf();
    let venv = dir.join("venv");
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context("python3 -m venv (Debian: python3-venv)")?;
    run(Command::new(venv.join("bin/pip")).args(["install", "-q", "--disable-pip-version-check", "--pre", ROTEL]))
        .with_context(|| format!("pip install {ROTEL}"))?;
    let binary = output(
        Command::new(venv.join("bin/python"))
            .args(["-c", "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))"]),
    )
    .context("the rotel package names no binary")?;
    let _ = std::fs::remove_file(&agent);
    std::os::unix::fs::symlink(binary.trim(), &agent).with_context(|| format!("linking {}", agent.display()))?;
    if !succeeds(Command::new(&agent).arg("--version")) {
        bail!("{} does not run", agent.display());
    }
    Ok(())
}

/// Install what this machine lacks; nothing when it is all there.
pub(crate) fn machine() -> Result<()> {
    setup_apt()?;
    setup_rust_src()?;
    setup_bpf_linker()?;
    // Packaging needs it, and the suite's dist check beside the tests packages: installed
    // there, at idle priority, it was two to four minutes of the suite's longest lane.
    dist::setup_cargo_deb()?;
    setup_rotel()?;
    setup_rust_targets()?;
    setup_kernel_mounts();
    Ok(())
}
