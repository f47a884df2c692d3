//! Project tasks: `cargo xtask setup | run | test | kernels | bench | dist`.
//!
//! Every task starts with `setup`, which installs what a fresh machine lacks (Debian packages,
//! the nightly rust-src component, bpf-linker built against LLVM 22) and does nothing when it is
//! all there, so the README's two commands work on a clean machine and in CI alike.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{targets, Row, Section};
use clap::{Parser, Subcommand};

mod arch;
mod arm64;
mod beside;
mod cross;
mod dist;
mod foreign;
mod guest_checks;
mod guest_hooks;
mod guest_ports;
mod image;
mod kernels;
mod nobtf_kernel;
mod suite;
mod verdicts;

use arch::Arch;

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
    // The kernel matrix's kernel without BTF (nobtf_kernel.rs), built from Debian's
    // linux-source: Kconfig's parser and lexer are generated at build time.
    "bison",
    "flex",
];
/// Packages whose service the install must not leave running or enabled, with the service's
/// name: the tests start their own instances (on a loopback port, inside containers or lab
/// namespaces), with their own config and data.
const NO_SERVICE: &[(&str, &str)] = &[("prometheus", "prometheus"), ("nginx", "nginx"), ("openssh-server", "ssh")];
const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";
/// Rotel, the OpenTelemetry collector tests/tests/otlp.rs starts: PyPI ships it as a wheel with
/// its binary, installed into a virtual environment of its own under target/tools/rotel.
const ROTEL: &str = "rotel==0.0.1a15";
/// Rust targets besides the host's that `cargo xtask dist --target` builds for.
const RUST_TARGETS: &[Arch] = &[Arch::Aarch64];
const BPF_LINKER_VERSION: &str = "0.13";

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything building and testing needs (idempotent).
    Setup,
    /// Set up, build, and run cctrace: the live view, or the built-in demo when this host has
    /// no TCP traffic worth showing. Arguments after `--` go to cctrace.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, check formatting and lints, build, and run the whole test suite.
    Test,
    /// Set up, build cctrace, and check it on Debian's 5.10, 6.1 and 6.12 kernels, a 6.1 built
    /// here without BTF, the host's own image when /boot has it, and any image given with
    /// --kernel, each booted under qemu.
    Kernels {
        /// Another kernel image (bzImage) to boot; repeatable.
        #[arg(long = "kernel")]
        images: Vec<PathBuf>,
        /// Check the debug build (what `cargo xtask test` checks) instead of the release build.
        #[arg(long)]
        debug: bool,
        /// Boot only the kernels whose release contains this (`5.10`, `6.12`, `nobtf`).
        #[arg(long)]
        only: Option<String>,
        /// Fetch the kernels and build the one without BTF (minutes, once), print where each
        /// image is, and boot none.
        #[arg(long)]
        no_boot: bool,
        /// `aarch64-unknown-linux-gnu`: cross-build cctrace and boot Debian's arm64 kernel
        /// (qemu-system-aarch64) instead of the x86-64 matrix.
        #[arg(long, value_parser = Arch::from_target, default_value = "x86_64-unknown-linux-gnu")]
        target: Arch,
    },
    /// Build what users install into target/dist: the static cctrace (no shared library, the
    /// eBPF programs and deep mode built in), cctrace_VERSION_amd64.deb and SHA256SUMS, and
    /// check them (static, the package in a scratch root, a boot under qemu with busybox only).
    Dist {
        /// `release` for users; `check` is the cheap unoptimised build the suite checks.
        #[arg(long, value_enum, default_value = "release")]
        profile: dist::Profile,
        /// Skip the qemu boot (20 to 30 s of emulation here; minutes for arm64).
        #[arg(long)]
        no_boot: bool,
        /// The Rust target to build for: x86_64-unknown-linux-gnu (amd64) or
        /// aarch64-unknown-linux-gnu (arm64, cross-built).
        #[arg(long, value_parser = Arch::from_target, default_value = "x86_64-unknown-linux-gnu")]
        target: Arch,
    },
    /// The checks `test` runs beside its test binaries (lints, kernel matrix, dist), at idle
    /// priority; started by `test`, not by hand.
    #[command(hide = true)]
    Beside {
        #[arg(long)]
        gates: PathBuf,
    },
    /// Run each diagnosis test that asserts a flag several times in a row: the flag must hold in
    /// every run; the spread of time to flag goes to the figures page (docs/figures.md).
    Verdicts {
        /// Runs of each test.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Only the checks whose test binary or name contains this.
        #[arg(long)]
        only: Option<String>,
        /// Print the figures without writing them to docs/figures.md.
        #[arg(long)]
        no_page: bool,
    },
    /// Set up and run the benchmarks (CUBIC vs BBR goodput on the emulated path, overhead), and
    /// write each one's section of the figures page (docs/figures.md).
    Bench {
        /// Also measure the release binary of this commit (built in a worktree of its own under
        /// target/base) beside this one: the overhead benchmark's "before" figures.
        #[arg(long, value_name = "COMMIT")]
        base: Option<String>,
        /// Only this benchmark (repeatable): binaries, or a bench target of the tracer and tests
        /// packages (overhead, goodput, skb_cost, deep, flow_table, frame, exporter, recording).
        #[arg(long = "bench", value_name = "NAME")]
        benches: Vec<String>,
        /// Print the figures without writing them to docs/figures.md.
        #[arg(long)]
        no_page: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// What `cargo test` is given for the suite: the workspace but the eBPF crate, which builds
/// only for its own target (tracer's build script builds it).
const SUITE_ARGS: &[&str] = &["--workspace", "--exclude", "tracer-ebpf"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).to_path_buf()
}

fn say(msg: &str) {
    eprintln!("xtask: {msg}");
}

/// Run one step of a task and say how long it took: the suite has a time budget, and this is
/// where a run shows which step spent it.
fn step<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    let result = f();
    say(&format!("{what}: {:.0} s{}", start.elapsed().as_secs_f64(), if result.is_err() { " (failed)" } else { "" }));
    result
}

/// PATH with LLVM 22 and cargo's bin directory first.
fn tool_path() -> String {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let current = std::env::var("PATH").unwrap_or_default();
    format!("{LLVM_BIN}:{home}/.cargo/bin:{current}")
}

fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.env("PATH", tool_path()).status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.env("PATH", tool_path()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.env("PATH", tool_path()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

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

fn setup() -> Result<()> {
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

/// The release binary of `commit`, built in a worktree of its own (`target/base/src`, with
/// its own target directory): what the overhead benchmark measures as "before".
fn build_base(commit: &str) -> Result<PathBuf> {
    let root = workspace_root();
    let dir = root.join("target/base");
    let src = dir.join("src");
    if src.exists() {
        run(Command::new("git").current_dir(&src).args(["checkout", "--detach", "--quiet", commit]))?;
    } else {
        std::fs::create_dir_all(&dir)?;
        let src_arg = src.to_string_lossy().into_owned();
        run(Command::new("git").current_dir(&root).args(["worktree", "add", "--detach", &src_arg, commit]))?;
    }
    let mut build = cargo(&["build", "--release", "-p", "tracer"]);
    build.current_dir(&src).env("CARGO_TARGET_DIR", dir.join("target"));
    run(&mut build)?;
    Ok(dir.join("target/release/cctrace"))
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root()).args(args).env("CCTRACE_REQUIRE_EBPF", "1");
    cmd
}

/// Cargo for what the suite builds in its target directory (the test build, the doc tests, the
/// dist check's builds): the workspace's own crates compiled by clippy's driver, as `cargo
/// clippy` has them checked (`RUSTC_WORKSPACE_WRAPPER`), so one build both lints and makes the
/// test binaries. A lint is a warning there; the suite's clippy step fails on any (see
/// `beside::clippy`). Every build in that directory must set the same wrapper: cargo hashes
/// it into the workspace crates' artifacts, and a build without it would compile them all
/// again, the eBPF programs included.
fn suite_cargo(args: &[&str]) -> Result<Command> {
    let mut cmd = cargo(args);
    cmd.env("RUSTC_WORKSPACE_WRAPPER", clippy_driver()?);
    Ok(cmd)
}

/// clippy's driver of the toolchain cargo builds with.
fn clippy_driver() -> Result<PathBuf> {
    let sysroot =
        output(Command::new("rustc").arg("--print").arg("sysroot")).context("rustc --print sysroot failed")?;
    let driver = Path::new(sysroot.trim()).join("bin/clippy-driver");
    if !driver.is_file() {
        bail!("{} is missing: rustup component add clippy", driver.display());
    }
    Ok(driver)
}

/// Clippy over the eBPF crate, for the target it is built for.
fn ebpf_clippy() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root().join("tracer-ebpf")).args([
        "+nightly",
        "clippy",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--release",
        "--",
        "-D",
        "warnings",
    ]);
    cmd
}

/// Does this host have established TCP flows that moved real data (over 10 MiB acked)?
fn host_has_busy_flows() -> bool {
    let Some(out) = output(Command::new("ss").args(["-tinH", "state", "established"])) else { return false };
    out.split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_acked:"))
        .any(|v| v.parse::<u64>().is_ok_and(|b| b > 10 << 20))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup(),
        Task::Run { args } => setup().and_then(|()| run_cctrace(args)),
        Task::Test => step("set-up", setup).and_then(|()| test()),
        Task::Kernels { images, target: Arch::Aarch64, .. } if !images.is_empty() => {
            Err(anyhow::anyhow!("--kernel boots x86-64 images; the arm64 row boots Debian's arm64 kernels"))
        }
        Task::Kernels { no_boot: true, target: Arch::Aarch64, .. } => {
            Err(anyhow::anyhow!("--no-boot fetches the x86-64 matrix's kernels; the arm64 row's come with its boot"))
        }
        Task::Kernels { images, only, no_boot: true, .. } => {
            setup().and_then(|()| kernels::fetch(&workspace_root(), &images, only.as_deref()))
        }
        Task::Kernels { only: Some(_), target: Arch::Aarch64, .. } => {
            Err(anyhow::anyhow!("--only picks among the x86-64 matrix's kernels; the arm64 row boots one"))
        }
        Task::Kernels { debug, target: Arch::Aarch64, .. } => setup().and_then(|()| kernels_arm64(debug)),
        Task::Kernels { images, debug, only, target: Arch::X86_64, .. } => {
            setup().and_then(|()| kernels_x86_64(&images, debug, only.as_deref()))
        }
        Task::Dist { profile, no_boot, target } => setup().and_then(|()| dist(profile, no_boot, target)),
        Task::Beside { gates } => beside::run(&workspace_root(), gates),
        Task::Bench { base, benches, no_page, args } => {
            setup().and_then(|()| bench(base.as_deref(), &benches, !no_page, args))
        }
        Task::Verdicts { runs, only, no_page } => {
            setup().and_then(|()| verdicts::run(&workspace_root(), runs, only.as_deref(), !no_page))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask run`: the release build with `args`, or the demo where no flow is busy.
fn run_cctrace(args: Vec<String>) -> Result<()> {
    run(&mut cargo(&["build", "--release", "-p", "tracer"]))?;
    let bin = workspace_root().join("target/release/cctrace");
    let args = if args.is_empty() && !host_has_busy_flows() {
        say(
            "no busy TCP flows on this host: starting the built-in demo (a lossy 30 ms WAN path in network namespaces)",
        );
        vec!["demo".to_string()]
    } else {
        args
    };
    run(Command::new(bin).args(args))
}

/// `cargo xtask test`: formatting, then the test binaries with the other checks beside them.
fn test() -> Result<()> {
    let start = std::time::Instant::now();
    step("fmt", || run(&mut cargo(&["fmt", "--all", "--check"])).context("formatting differs: run cargo fmt --all"))?;
    // Lints, the kernel matrix and the dist check wait on nothing the tests do: they run
    // beside the test binaries at idle priority (see beside.rs), and are waited for after.
    // No release build: the tests and the kernel matrix run the debug binary the tests
    // build anyway (the eBPF object in it is always built optimised), and a second build
    // of everything at release settings was three minutes of a 20-minute budget.
    let beside = beside::start(&workspace_root())?;
    let tests = step("tests", || suite::run(&workspace_root(), SUITE_ARGS, beside.gates()));
    let tests_secs = start.elapsed().as_secs_f64();
    let checks = step("checks beside the tests, after them", || beside.finish(tests.is_ok()));
    let ran = tests?;
    let checked = checks?;
    let mut tally = ran.tally;
    tally.add(checked.tally);
    println!("all tests: {tally}");
    let total = start.elapsed().as_secs_f64();
    say(&format!("all steps after set-up: {total:.0} s"));
    suite_figures(total, tests_secs, checked.lane_secs, &ran).write()?;
    Ok(())
}

/// The run's time as a section of the figures page: written when `CCTRACE_FIGURES_PAGE` names
/// the page (the timing runs on a fresh clone), else printed.
fn suite_figures(total: f64, tests_secs: f64, lane_secs: Option<f64>, ran: &suite::Ran) -> Section {
    let secs = |s: f64| format!("{s:.0} s");
    let mut section = Section::new("suite", "The suite's time").about(
        "`cargo xtask test` (`.ci/run`), after set-up: the test build, then the test binaries one at a \
         time; beside them, at idle priority, the lints, the doc tests, the kernel matrix, the dist \
         check and arm64's cross build and guest. On a fresh clone, as CI runs it.",
    );
    section.row(Row::new("the suite, after set-up", secs(total)).judged(&targets::SUITE_TIME, total));
    section.row(Row::new("the test lane: the test build and the test binaries", secs(tests_secs)));
    if let Some(lane) = lane_secs {
        section.row(Row::new("the checks beside the tests, from the run's start", secs(lane)));
    }
    section.row(Row::new("the test build", secs(ran.build_secs)));
    for (binary, test, held) in &ran.slowest {
        section.row(Row::new(format!("slow test: {test} ({binary})"), secs(*held)).how("time holding the test lock"));
    }
    section
}

fn kernels_arm64(debug: bool) -> Result<()> {
    let profile = if debug { dist::Profile::Check } else { dist::Profile::Release };
    let artifacts = step("cross build", || dist::build(&workspace_root(), profile, Arch::Aarch64))?;
    step("arm64 guests", || arm64::run(&workspace_root(), &artifacts.binary, arm64::KERNELS, guest_hooks::Hooks::ALL))
}

fn kernels_x86_64(images: &[PathBuf], debug: bool, only: Option<&str>) -> Result<()> {
    let profile = if debug { "debug" } else { "release" };
    let mut build = vec!["build", "-p", "tracer"];
    if !debug {
        build.push("--release");
    }
    run(&mut cargo(&build))?;
    let cctrace = workspace_root().join("target").join(profile).join("cctrace");
    kernels::run(&workspace_root(), &cctrace, images, only, kernels::Scope::Every)
}

fn dist(profile: dist::Profile, no_boot: bool, target: Arch) -> Result<()> {
    let root = workspace_root();
    let mut built = None;
    step("dist build", || {
        built = Some(dist::build(&root, profile, target)?);
        Ok(())
    })?;
    let artifacts = built.context("the dist build made nothing")?;
    step("dist checks", || dist::check(&root, profile, &artifacts, !no_boot))
}

/// `cargo xtask bench`: the benches against the release build (and `base`'s, when given), each
/// writing its section of the figures page when `page` (docs/figures.md) is asked for.
fn bench(base: Option<&str>, benches: &[String], page: bool, args: Vec<String>) -> Result<()> {
    let started = std::time::Instant::now();
    let root = workspace_root();
    let page = page.then(|| root.join("docs/figures.md"));
    let wanted = |name: &str| benches.is_empty() || benches.iter().any(|b| b == name);
    let base_bin = base.map(build_base).transpose()?;
    // The benches (skb_cost, overhead) run the release binary next to them.
    run(&mut cargo(&["build", "--release", "-p", "tracer"]))?;
    if wanted("binaries") {
        // What users install (the static release build) next to the debug build.
        run(&mut cargo(&["build", "-p", "tracer"]))?;
        let artifacts = dist::build(&root, dist::Profile::Release, Arch::host())?;
        step("binaries", || {
            dist::bench_report(
                &[
                    ("debug (target/debug)", &root.join("target/debug/cctrace")),
                    ("release (target/release)", &root.join("target/release/cctrace")),
                    ("dist: static release (target/dist)", &artifacts.binary),
                ],
                &[("the Debian package", &artifacts.deb), ("the container image archive", &artifacts.image)],
                page.as_deref(),
            )
        })?;
    }
    let targets: Vec<&String> = benches.iter().filter(|b| *b != "binaries").collect();
    if benches.is_empty() || !targets.is_empty() {
        let mut cmd = cargo(&["bench", "-p", "tracer", "-p", "cctrace-tests"]);
        for target in targets {
            cmd.args(["--bench", target]);
        }
        cmd.arg("--").args(args);
        if let Some(b) = &base_bin {
            cmd.env("CCTRACE_BASE_BIN", b);
        }
        if let Some(page) = &page {
            cmd.env(cctrace_lab::figures::PAGE_ENV, page);
        }
        step("benches", || run(&mut cmd))?;
    }
    say(&format!("bench: {:.0} s in all", started.elapsed().as_secs_f64()));
    Ok(())
}
