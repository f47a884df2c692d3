//! Project tasks: `cargo xtask setup | run | test | kernels | bench | dist`.
//!
//! This file is the dispatch: the command line, and each task as the steps it runs. Every task
//! starts with the machine's set-up (`setup.rs`), which installs what a fresh machine lacks and
//! does nothing when it is all there, so the README's two commands work on a clean machine and
//! in CI alike.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{targets, Row, Section};
use clap::{Parser, Subcommand};

mod arch;
mod beside;
mod cross;
mod dist;
mod foreign;
mod image;
mod kernels;
mod setup;
mod shell;
mod suite;
mod verdicts;

use arch::Arch;

const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";

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
        Task::Setup => setup::machine(),
        Task::Run { args } => setup::machine().and_then(|()| run_cctrace(args)),
        Task::Test => step("set-up", setup::machine).and_then(|()| test()),
        Task::Kernels { images, target: Arch::Aarch64, .. } if !images.is_empty() => {
            Err(anyhow::anyhow!("--kernel boots x86-64 images; the arm64 row boots Debian's arm64 kernels"))
        }
        Task::Kernels { no_boot: true, target: Arch::Aarch64, .. } => {
            Err(anyhow::anyhow!("--no-boot fetches the x86-64 matrix's kernels; the arm64 row's come with its boot"))
        }
        Task::Kernels { images, only, no_boot: true, .. } => {
            setup::machine().and_then(|()| kernels::fetch(&workspace_root(), &images, only.as_deref()))
        }
        Task::Kernels { only: Some(_), target: Arch::Aarch64, .. } => {
            Err(anyhow::anyhow!("--only picks among the x86-64 matrix's kernels; the arm64 row boots one"))
        }
        Task::Kernels { debug, target: Arch::Aarch64, .. } => setup::machine().and_then(|()| kernels_arm64(debug)),
        Task::Kernels { images, debug, only, target: Arch::X86_64, .. } => {
            setup::machine().and_then(|()| kernels_x86_64(&images, debug, only.as_deref()))
        }
        Task::Dist { profile, no_boot, target } => setup::machine().and_then(|()| dist(profile, no_boot, target)),
        Task::Beside { gates } => beside::run(&workspace_root(), gates),
        Task::Bench { base, benches, no_page, args } => {
            setup::machine().and_then(|()| bench(base.as_deref(), &benches, !no_page, args))
        }
        Task::Verdicts { runs, only, no_page } => {
            setup::machine().and_then(|()| verdicts::run(&workspace_root(), runs, only.as_deref(), !no_page))
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
    step("arm64 guests", || {
        kernels::arm64::run(
            &workspace_root(),
            &artifacts.binary,
            kernels::arm64::KERNELS,
            kernels::hook_modes::Hooks::ALL,
        )
    })
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
