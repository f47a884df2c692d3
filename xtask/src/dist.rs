//! `cargo xtask dist`: what a user installs, built and checked as a user would meet it.
//!
//! The binary is linked fully statically against glibc (`+crt-static`, non-PIE): no shared
//! library, no dynamic loader, so it runs on any x86-64 (or arm64) Linux whatever its libc
//! (Debian 11's glibc 2.31 as newer ones) and without /usr/lib. libelf and zlib, which deep
//! mode's libbpf needs, come from Debian's static archives. Beside it the Debian package
//! (cargo-deb) and SHA256SUMS. `--target aarch64-unknown-linux-gnu` cross-builds the same for
//! arm64 (see cross.rs) into target/dist-aarch64; what the checks run of that binary here
//! (`--version`, the man page and completions it writes) runs under qemu's user-mode emulation,
//! and its boot is the arm64 row of the kernel matrix.
//!
//! Static glibc cannot use NSS (it would dlopen the host's libnss_*.so). cctrace looks up no
//! user or group names (owners come from /proc) and resolves no host names: every address it
//! takes is parsed as a number (`--listen` is a socket address, the demo's peers too), which
//! std does without getaddrinfo. getaddrinfo is linked in (std's `ToSocketAddrs for str`) but
//! only a host name would reach it.
//!
//! The checks: no dynamic section and `ldd`'s "not a dynamic executable"; `--version` says the
//! eBPF programs and deep mode are built in; the binary runs in a chroot that holds nothing else;
//! it traces a loopback flow on one kernel of the matrix from an initramfs that holds busybox and
//! it only; the package installs into a scratch root with every file where Debian puts it, and
//! starts nothing; the man page renders; the completions parse in bash, zsh and fish.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::arch::Arch;
use crate::image;
use crate::kernels;
use crate::kernels::guest_ports;
use crate::shell;

/// Static glibc, and a non-PIE executable: a static PIE still carries a dynamic section, which
/// `ldd` and `file` then describe as dynamic.
const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static -C relocation-model=static";
const CARGO_DEB_VERSION: &str = "3.8";
/// The matrix kernel the dist guest boots: Debian 11's 5.10, the oldest of the matrix.
const GUEST_KERNEL: &kernels::DebianKernel = &kernels::DEBIAN_KERNELS[0];
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The Cargo profile a dist is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
    /// Optimised and stripped: the artifacts users download (target/dist).
    Release,
    /// The suite's debug build linked statically, to check the whole dist path cheaply
    /// (target/dist-check).
    Check,
}

impl Profile {
    fn cargo_profile(self) -> &'static str {
        match self {
            Self::Release => "static-release",
            Self::Check => "dev",
        }
    }

    /// Where the artifacts go: target/dist for users, target/dist-check for the suite; another
    /// architecture's beside them (target/dist-aarch64).
    fn out_dir(self, root: &Path, arch: Arch) -> PathBuf {
        let name = match self {
            Self::Release => "dist",
            Self::Check => "dist-check",
        };
        match arch {
            Arch::X86_64 => root.join("target").join(name),
            other => root.join("target").join(format!("{name}-{}", other.rust_name())),
        }
    }
}

/// What `build` made.
pub(crate) struct Artifacts {
    pub(crate) arch: Arch,
    pub(crate) binary: PathBuf,
    pub(crate) deb: PathBuf,
    /// The container image archive (image.rs).
    pub(crate) image: PathBuf,
    /// Both architectures' images under one index, when the other's of the same build is there.
    pub(crate) multiarch: Option<PathBuf>,
    pub(crate) sums: PathBuf,
}

fn cargo_deb_installed() -> bool {
    crate::output(Command::new("cargo").args(["deb", "--version"]))
        .is_some_and(|v| v.contains(&format!("cargo-deb {CARGO_DEB_VERSION}")))
}

/// cargo-deb from crates.io, when missing (like bpf-linker).
pub(crate) fn setup_cargo_deb() -> Result<()> {
    if cargo_deb_installed() {
        return Ok(());
    }
    crate::say(&format!("installing cargo-deb {CARGO_DEB_VERSION} (about two minutes)"));
    crate::run(Command::new("cargo").args([
        "install",
        "cargo-deb",
        "--locked",
        "--version",
        &format!("~{CARGO_DEB_VERSION}"),
    ]))
    .context("could not install cargo-deb from crates.io")
}

/// Build the static binary, the package and SHA256SUMS for `arch` into target/dist (or
/// target/dist-check; target/dist-aarch64 for arm64).
pub(crate) fn build(root: &Path, profile: Profile, arch: Arch) -> Result<Artifacts> {
    setup_cargo_deb()?;
    let built_dir = build_static(root, profile, arch)?;
    let built = built_dir.join("cctrace");
    shell::check_static(&built)?;
    write_assets(root, &built_dir, &built, arch)?;
    let (mut artifacts, unpacked) = package(root, profile, arch, &built)?;
    artifacts.multiarch = multiarch(root, profile, arch)?;
    let out = artifacts.sums.parent().context("SHA256SUMS has a directory")?;
    let files = [Some(&artifacts.binary), Some(&artifacts.deb), Some(&artifacts.image), artifacts.multiarch.as_ref()];
    let names: Vec<String> =
        files.iter().flatten().filter_map(|p| Some(p.file_name()?.to_str()?.to_string())).collect();
    std::fs::write(&artifacts.sums, shell::sh(Command::new("sha256sum").args(&names).current_dir(out))?)?;
    for path in files.into_iter().flatten().chain([&artifacts.sums]) {
        crate::say(&format!("{}: {}", path.display(), human_size(std::fs::metadata(path)?.len())));
    }
    crate::say(&format!("the image {} unpacked (`docker images` shows this): {}", image::tag(), human_size(unpacked)));
    Ok(artifacts)
}

/// The per-architecture image archives `multiarch` joins, in [`Arch::ALL`]'s order.
fn image_parts(root: &Path, profile: Profile) -> Vec<PathBuf> {
    Arch::ALL.iter().map(|a| profile.out_dir(root, *a).join(image::file_name(*a))).collect()
}

/// Both architectures' images under one index, written beside `arch`'s when the other
/// architecture's image of the same build is in its directory (`cargo xtask dist` for one and
/// then for the other); none otherwise, said why.
fn multiarch(root: &Path, profile: Profile, arch: Arch) -> Result<Option<PathBuf>> {
    let parts = image_parts(root, profile);
    if let Some(missing) = parts.iter().find(|p| !p.is_file()) {
        crate::say(&format!("no image of both architectures: {} is not built (yet)", missing.display()));
        return Ok(None);
    }
    if let Some(why) = image::not_one_build(&parts)? {
        crate::say(&format!("no image of both architectures: {why}"));
        return Ok(None);
    }
    let started = Instant::now();
    let written = image::write_index(&parts, &profile.out_dir(root, arch));
    crate::say(&format!("the image of both architectures written in {:.1} s", started.elapsed().as_secs_f64()));
    written.map(Some).context("writing the image of both architectures")
}

/// The static binary, built for `arch`: the directory it is in.
fn build_static(root: &Path, profile: Profile, arch: Arch) -> Result<PathBuf> {
    let cargo_profile = profile.cargo_profile();
    let target = arch.target();
    Ok(if profile == Profile::Check && arch == Arch::host() {
        // The suite's debug build, linked again statically: only the binary's own crate is
        // compiled with the static flags (the link is what they change). It reuses the eBPF
        // object and the libraries whose features are the same for tracer alone as for the
        // whole workspace's tests; the rest (tokio with its dev-dependency features, and what
        // depends on it) are compiled again for tracer's own feature set.
        let mut cargo = crate::suite_cargo(&["rustc", "-p", "tracer", "--bin", "cctrace", "--"])?;
        cargo.args(STATIC_RUSTFLAGS.split_whitespace()).args(["-C", "strip=symbols"]);
        crate::run(&mut cargo).context("linking the debug build statically")?;
        root.join("target").join("debug")
    } else {
        // Everything for the target only, so build scripts and proc macros (built for the host)
        // keep their usual flags: optimised for users, unoptimised for the suite's check of
        // another architecture (whose symbols go, as the host's check build's do).
        let args = ["rustc", "-p", "tracer", "--bin", "cctrace", "--target", target, "--profile", cargo_profile];
        // The suite's check shares the suite's target directory (its build scripts and proc
        // macros), so it compiles as the suite does.
        let mut cargo = if profile == Profile::Check { crate::suite_cargo(&args)? } else { crate::cargo(&args) };
        if profile == Profile::Check {
            cargo.args(["--", "-C", "strip=symbols"]);
        }
        cargo.env(format!("CARGO_TARGET_{}_RUSTFLAGS", target.to_uppercase().replace('-', "_")), STATIC_RUSTFLAGS);
        crate::cross::configure(&mut cargo, root, arch)?;
        crate::run(&mut cargo).with_context(|| format!("building the static cctrace for {target}"))?;
        root.join("target").join(target).join(match profile {
            Profile::Release => cargo_profile,
            Profile::Check => "debug",
        })
    })
}

/// What the package installs beside the binary, generated by the binary itself: the same text
/// `cctrace man` and `cctrace completions SHELL` give users of the bare binary; the unit.
fn write_assets(root: &Path, built_dir: &Path, built: &Path, arch: Arch) -> Result<()> {
    let assets = built_dir.join("cctrace-assets");
    std::fs::create_dir_all(&assets)?;
    let generated: [(&str, &[&str]); 4] = [
        ("cctrace.1", &["man"]),
        ("cctrace.bash", &["completions", "bash"]),
        ("_cctrace", &["completions", "zsh"]),
        ("cctrace.fish", &["completions", "fish"]),
    ];
    for (file, args) in generated {
        let text = shell::sh(arch.run_here(built).args(args))?;
        ensure!(!text.trim().is_empty(), "cctrace {} printed nothing", args.join(" "));
        std::fs::write(assets.join(file), text)?;
    }
    // Debian installs man pages gzipped; -n leaves out the time, so the package is reproducible.
    let _ = std::fs::remove_file(assets.join("cctrace.1.gz"));
    shell::sh(Command::new("gzip").args(["-9", "-n"]).arg(assets.join("cctrace.1")))?;
    std::fs::write(
        assets.join("cctrace.service"),
        packaged_unit(&std::fs::read_to_string(root.join("tracer/deploy/cctrace.service"))?)?,
    )?;
    Ok(())
}

/// The binary, the .deb and the image in the profile's output directory (SHA256SUMS is
/// written after them); the image's size unpacked.
fn package(root: &Path, profile: Profile, arch: Arch, built: &Path) -> Result<(Artifacts, u64)> {
    let (cargo_profile, target) = (profile.cargo_profile(), arch.target());
    let out = profile.out_dir(root, arch);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let binary = out.join("cctrace");
    std::fs::copy(built, &binary)?;
    let mut deb = crate::cargo(&["deb", "-p", "tracer", "--no-build", "--no-strip", "--profile", cargo_profile]);
    if profile == Profile::Release || arch != Arch::host() {
        deb.args(["--target", target]);
    }
    deb.arg("--output").arg(&out);
    if profile == Profile::Check {
        deb.arg("--fast");
    }
    crate::run(&mut deb).context("cargo deb")?;
    let version = env!("CARGO_PKG_VERSION");
    let deb_name = format!("cctrace_{version}_{}.deb", arch.debian());
    let deb = out.join(&deb_name);
    ensure!(deb.is_file(), "cargo deb left no {}", deb.display());
    let packing = match profile {
        Profile::Release => image::Packing::Smallest,
        Profile::Check => image::Packing::Fastest,
    };
    let started = Instant::now();
    let image = image::write(root, &binary, arch, packing, &out).context("writing the container image")?;
    crate::say(&format!("the container image written in {:.1} s", started.elapsed().as_secs_f64()));
    let sums = out.join("SHA256SUMS");
    Ok((Artifacts { arch, binary, deb, image: image.path, multiarch: None, sums }, image.unpacked))
}

/// The unit of tracer/deploy for the package: the binary where the package puts it, and the
/// comment that tells how to install it by hand replaced by how to enable the packaged one.
fn packaged_unit(unit: &str) -> Result<String> {
    const MANUAL_PATH: &str = "/usr/local/bin/cctrace";
    ensure!(
        unit.lines().any(|l| l.starts_with("ExecStart=") && l.contains(MANUAL_PATH)),
        "tracer/deploy/cctrace.service has no ExecStart={MANUAL_PATH}: update the packaging in xtask/src/dist.rs"
    );
    let mut out = String::new();
    let mut skipping_install_comment = false;
    for line in unit.lines() {
        if line.starts_with("# Install:") {
            out.push_str(
                "# Installed by the cctrace package, neither enabled nor started: systemctl enable --now cctrace\n",
            );
            skipping_install_comment = true;
            continue;
        }
        if skipping_install_comment && line.starts_with("#    ") {
            continue;
        }
        skipping_install_comment = false;
        out.push_str(&line.replace(MANUAL_PATH, "/usr/bin/cctrace"));
        out.push('\n');
    }
    Ok(out)
}

fn human_size(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// `--version` must name a commit and the architecture, and say the eBPF programs and deep mode
/// are built in.
fn check_version_text(text: &str, arch: Arch) -> Result<()> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    ensure!(
        text.starts_with(&format!("cctrace {}", env!("CARGO_PKG_VERSION"))),
        "--version does not start with the version: {text}"
    );
    ensure!(
        field("commit:").is_some_and(|c| c.len() >= 7 && c.chars().all(|ch| ch.is_ascii_hexdigit())),
        "--version names no commit: {text}"
    );
    ensure!(
        field("architecture:") == Some(arch.rust_name()),
        "--version does not name the architecture {}: {text}",
        arch.rust_name()
    );
    ensure!(field("eBPF programs:") == Some("built in"), "--version: the eBPF programs are not built in: {text}");
    ensure!(field("deep mode:") == Some("built in"), "--version: deep mode is not built in: {text}");
    ensure!(field("linked:").is_some_and(|l| l.starts_with("static")), "--version: not linked statically: {text}");
    Ok(())
}

/// The binary alone in an otherwise empty root: no /usr/lib, no /lib, no loader.
fn check_alone_in_chroot(work: &Path, binary: &Path) -> Result<()> {
    let jail = work.join("chroot");
    let _ = std::fs::remove_dir_all(&jail);
    std::fs::create_dir_all(&jail)?;
    shell::copy(binary, &jail.join("cctrace"))?;
    for args in [&["--version"][..], &["man"], &["completions", "bash"]] {
        let out =
            Command::new("chroot").arg(&jail).arg("/cctrace").args(args).output().context("chroot (needs root)")?;
        ensure!(
            out.status.success() && !out.stdout.is_empty(),
            "cctrace {} in a chroot holding nothing else: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Every file the package must install, with its mode.
const PACKAGE_FILES: &[(&str, u32)] = &[
    ("usr/bin/cctrace", 0o755),
    ("usr/lib/systemd/system/cctrace.service", 0o644),
    ("usr/share/cctrace/cctrace-rules.yml", 0o644),
    ("usr/share/cctrace/cctrace-dashboard.json", 0o644),
    ("usr/share/man/man1/cctrace.1.gz", 0o644),
    ("usr/share/bash-completion/completions/cctrace", 0o644),
    ("usr/share/zsh/vendor-completions/_cctrace", 0o644),
    ("usr/share/fish/vendor_completions.d/cctrace.fish", 0o644),
    ("usr/share/doc/cctrace/copyright", 0o644),
];

/// Install the package into a scratch root with dpkg, check where everything landed, and
/// remove it again. Returns the scratch root.
fn check_package(work: &Path, deb: &Path, binary: &Path, arch: Arch) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    // cargo-deb writes the Depends field even when it is empty.
    let control = shell::sh(Command::new("dpkg-deb").arg("--field").arg(deb))?;
    let field = |name: &str| control.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).map(str::trim);
    ensure!(field("Package") == Some("cctrace"), "package name: {control}");
    ensure!(field("Architecture") == Some(arch.debian()), "architecture: {control}");
    ensure!(field("Version") == Some(env!("CARGO_PKG_VERSION")), "version: {control}");
    ensure!(
        field("Depends").is_none_or(str::is_empty) && field("Pre-Depends").is_none(),
        "a static binary depends on nothing: {control}"
    );
    // Installing starts nothing: no maintainer script at all, so nothing enables or starts the
    // unit, and `dpkg --root` needs no shell inside the scratch root.
    let members = shell::sh(Command::new("dpkg-deb").arg("--info").arg(deb))?;
    for script in ["preinst", "postinst", "prerm", "postrm"] {
        ensure!(!members.contains(&format!(" {script} ")), "the package has a {script} script: {members}");
    }

    let scratch = work.join("root");
    let _ = std::fs::remove_dir_all(&scratch);
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"] {
        std::fs::create_dir_all(scratch.join(dir))?;
    }
    std::fs::write(scratch.join("var/lib/dpkg/status"), "")?;
    let dpkg = |args: &[&str]| {
        let mut cmd = Command::new("dpkg");
        cmd.arg(format!("--root={}", scratch.display())).arg("--log=/dev/null").args(args);
        cmd
    };
    if arch != Arch::host() {
        // The scratch root's dpkg is this machine's, whose own architecture it takes as native:
        // the other one is added to the scratch root's database (never to the machine's), as
        // it is native on the hosts the package is for.
        shell::sh(&mut dpkg(&["--add-architecture", arch.debian()]))?;
    }
    shell::sh(dpkg(&["--install"]).arg(deb)).context("dpkg --install into a scratch root")?;
    let status = shell::sh(&mut dpkg(&["--status", "cctrace"]))?;
    ensure!(status.contains("Status: install ok installed"), "dpkg --status after install: {status}");
    for (file, mode) in PACKAGE_FILES {
        let path = scratch.join(file);
        let meta = std::fs::metadata(&path).with_context(|| format!("the package installs no /{file}"))?;
        ensure!(
            meta.permissions().mode() & 0o7777 == *mode,
            "/{file} has mode {:o}, not {mode:o}",
            meta.permissions().mode() & 0o7777
        );
    }
    ensure!(
        std::fs::read(scratch.join("usr/bin/cctrace"))? == std::fs::read(binary)?,
        "the packaged /usr/bin/cctrace differs from the dist binary"
    );
    let unit = std::fs::read_to_string(scratch.join("usr/lib/systemd/system/cctrace.service"))?;
    ensure!(
        unit.lines().any(|l| l.starts_with("ExecStart=/usr/bin/cctrace ")),
        "the packaged unit does not start /usr/bin/cctrace: {unit}"
    );
    ensure!(!unit.contains("/usr/local/bin"), "the packaged unit still names /usr/local/bin");
    // Nothing enabled: no wants symlink anywhere under /etc.
    ensure!(!scratch.join("etc/systemd").exists(), "installing created /etc/systemd in the scratch root");
    Ok(scratch)
}

/// Another architecture's package holds what the host's does, file for file, but the binary:
/// the same paths and modes, the same man page (but for the architecture its version block
/// names), completions, unit, rules and dashboard. Compared with the host's package of the same
/// profile when that one was built from the same commit.
fn same_as_host_package(root: &Path, profile: Profile, work: &Path, artifacts: &Artifacts) -> Result<()> {
    let host_dir = profile.out_dir(root, Arch::host());
    let host_deb = host_dir.join(format!("cctrace_{}_{}.deb", env!("CARGO_PKG_VERSION"), Arch::host().debian()));
    let commit = |text: &str| text.lines().find(|l| l.starts_with("commit:")).map(str::to_string);
    let theirs = shell::sh(artifacts.arch.run_here(&artifacts.binary).arg("--version"))?;
    let ours = shell::sh(Command::new(host_dir.join("cctrace")).arg("--version")).unwrap_or_default();
    if !host_deb.is_file() || commit(&ours) != commit(&theirs) {
        crate::say(&format!(
            "no {} package of this commit in {} to compare with",
            Arch::host().debian(),
            host_dir.display()
        ));
        return Ok(());
    }
    let unpack = |deb: &Path, name: &str| -> Result<(PathBuf, String)> {
        let dir = work.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        shell::sh(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir))?;
        let listing = shell::sh(Command::new("find").arg(".").args(["-printf", "%p %m %y\n"]).current_dir(&dir))?;
        let mut lines: Vec<&str> = listing.lines().collect();
        lines.sort_unstable();
        Ok((dir, lines.join("\n")))
    };
    let (host_tree, host_listing) = unpack(&host_deb, "host-package")?;
    let (tree, listing) = unpack(&artifacts.deb, "package-contents")?;
    ensure!(
        listing == host_listing,
        "the packages' files differ:\n{listing}\nand {}:\n{host_listing}",
        host_deb.display()
    );
    // The man page's version block names the architecture the binary was built for, as
    // `--version` does: the one line allowed to differ.
    let text = |path: &Path, arch: Arch| -> Result<String> {
        let raw = if path.extension().is_some_and(|x| x == "gz") {
            shell::sh(Command::new("zcat").arg(path))?
        } else {
            String::from_utf8_lossy(&std::fs::read(path)?).into_owned()
        };
        Ok(raw.replace(&format!("architecture: {}", arch.rust_name()), "architecture: ARCH"))
    };
    for (file, _) in PACKAGE_FILES.iter().filter(|(f, _)| *f != "usr/bin/cctrace") {
        ensure!(
            text(&tree.join(file), artifacts.arch)? == text(&host_tree.join(file), Arch::host())?,
            "/{file} differs from the {} package's",
            Arch::host().debian()
        );
    }
    Ok(())
}

/// Remove the package from the scratch root: dpkg must leave none of its files.
fn check_removal(scratch: &Path) -> Result<()> {
    shell::sh(Command::new("dpkg").arg(format!("--root={}", scratch.display())).args([
        "--log=/dev/null",
        "--purge",
        "cctrace",
    ]))
    .context("dpkg --purge")?;
    for (file, _) in PACKAGE_FILES {
        ensure!(!scratch.join(file).exists(), "/{file} is left after dpkg --purge");
    }
    Ok(())
}

/// `man -l` renders the installed page without a warning, and the page documents the CLI.
fn check_man_page(page: &Path) -> Result<()> {
    let out = Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .context("running man (man-db)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let warnings = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "man -l {}: {} {}", page.display(), out.status, warnings.trim());
    ensure!(warnings.trim().is_empty(), "man -l {} warns: {}", page.display(), warnings.trim());
    for wanted in ["NAME", "SYNOPSIS", "--deep", "--netns", "completions", "serve"] {
        ensure!(text.contains(wanted), "the rendered man page lacks {wanted:?}");
    }
    Ok(())
}

/// Each completion script parses in its shell, and bash's registers a completion for cctrace.
fn check_completions(scratch: &Path) -> Result<()> {
    let bash = scratch.join("usr/share/bash-completion/completions/cctrace");
    shell::sh(Command::new("bash").arg("-n").arg(&bash)).context("bash -n on the bash completions")?;
    let registered =
        shell::sh(Command::new("bash").arg("-c").arg("source \"$1\" && complete -p cctrace").arg("bash").arg(&bash))
            .context("loading the bash completions")?;
    ensure!(registered.contains("cctrace"), "the bash completions register nothing for cctrace: {registered}");
    shell::sh(Command::new("zsh").arg("-n").arg(scratch.join("usr/share/zsh/vendor-completions/_cctrace")))
        .context("zsh -n on the zsh completions")?;
    shell::sh(
        Command::new("fish").arg("--no-execute").arg(scratch.join("usr/share/fish/vendor_completions.d/cctrace.fish")),
    )
    .context("fish --no-execute on the fish completions")?;
    Ok(())
}

/// Boot one matrix kernel with an initramfs of busybox and the dist binary only; the guest
/// traces a loopback bulk flow and stops cctrace.
fn check_guest(root: &Path, work: &Path, binary: &Path) -> Result<()> {
    let kernels_dir = root.join("target/kernels");
    std::fs::create_dir_all(&kernels_dir)?;
    let kernel = kernels::debian::debian_kernel(root, &kernels_dir, GUEST_KERNEL)?;
    let tree = work.join("initramfs");
    let _ = std::fs::remove_dir_all(&tree);
    for dir in ["bin", "usr/bin", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(tree.join(dir))?;
    }
    // busybox-static: the guest's shell and tools need no library either.
    shell::check_static(Path::new("/bin/busybox")).context("the guest's busybox must be static (busybox-static)")?;
    shell::copy(Path::new("/bin/busybox"), &tree.join("bin/busybox"))?;
    shell::copy(binary, &tree.join("usr/bin/cctrace"))?;
    let init = tree.join("init");
    std::fs::write(&init, guest_ports::with_ports(include_str!("dist_init.sh")))?;
    shell::set_executable(&init)?;
    let cpio = work.join("guest.cpio");
    kernels::initramfs::pack_cpio(&tree, &cpio)?;
    let started = Instant::now();
    crate::say(&format!("booting {} with busybox and the dist cctrace only (qemu TCG)", kernel.image.display()));
    let sections = kernels::qemu::run_guest(kernel.arch, work, &kernel.image, &cpio, "dist-guest", "", GUEST_TIMEOUT)?;
    crate::say(&format!("dist guest done in {:.0} s", started.elapsed().as_secs_f64()));
    check_guest_sections(&sections)
}

fn check_guest_sections(sections: &BTreeMap<String, String>) -> Result<()> {
    let get = |name: &str| sections.get(name).map(|s| s.trim().to_string()).unwrap_or_default();
    let files: Vec<String> = get("files").lines().map(str::to_string).collect();
    ensure!(
        files.iter().all(|f| ["/init", "/bin/busybox", "/usr/bin/cctrace"].contains(&f.as_str())),
        "the guest holds more than busybox and cctrace: {files:?}"
    );
    check_version_text(&get("version"), Arch::X86_64).context("cctrace --version in the guest")?;
    let stderr = get("stderr");
    ensure!(
        get("exit") == "0",
        "cctrace exited with {} in the guest (kernel {}); stderr: {stderr}",
        get("exit"),
        get("kernel")
    );
    ensure!(stderr.contains("tracing TCP"), "cctrace did not start tracing in the guest: {stderr}");
    ensure!(sections.contains_key("bpffs after"), "the guest did not list /sys/fs/bpf after cctrace exited");
    ensure!(get("bpffs after").is_empty(), "cctrace left pinned BPF objects: {}", get("bpffs after"));
    let lines: Vec<Value> = get("jsonl").lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let bytes: u64 = get("bytes").parse().context("the guest wrote no byte count")?;
    let flow = guest_ports::last_by_port(&lines, guest_ports::LOOPBACK)
        .with_context(|| format!("no sample of the loopback sender (local port {})", guest_ports::LOOPBACK))?;
    let acked = flow.get("bytes_acked").and_then(Value::as_u64).unwrap_or(0);
    ensure!(acked >= bytes, "the loopback sender acked {acked} bytes, it sent {bytes}");
    let summary = lines
        .iter()
        .rev()
        .find(|v| v.get("type").and_then(Value::as_str) == Some("summary"))
        .context("no summary line: cctrace did not end its run")?;
    let n = |k: &str| summary.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (received, lost, emitted) = (n("events_received"), n("events_lost"), n("kernel_emitted"));
    ensure!(received > 0, "no sample received: {summary}");
    ensure!(lost == 0 && received + lost == emitted, "received {received} + lost {lost}, emitted {emitted}");
    Ok(())
}

/// Every check of a built dist. `boot` adds the qemu guest (20 to 30 s of emulation here; for
/// arm64, the kernel matrix's arm64 row, minutes).
pub(crate) fn check(root: &Path, profile: Profile, artifacts: &Artifacts, boot: bool) -> Result<()> {
    let arch = artifacts.arch;
    let work = root.join("target").join(match arch {
        Arch::X86_64 => format!("{}-work", profile.cargo_profile()),
        other => format!("{}-work-{}", profile.cargo_profile(), other.rust_name()),
    });
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let timed = |what: &str, f: &mut dyn FnMut() -> Result<()>| {
        let started = Instant::now();
        let result = f().with_context(|| format!("dist check: {what}"));
        crate::say(&format!("dist check {what}: {:.1} s", started.elapsed().as_secs_f64()));
        result
    };
    timed("static", &mut || shell::check_static(&artifacts.binary))?;
    timed("version", &mut || check_version_text(&shell::sh(arch.run_here(&artifacts.binary).arg("--version"))?, arch))?;
    if arch == Arch::host() {
        timed("chroot", &mut || check_alone_in_chroot(&work, &artifacts.binary))?;
    } else {
        // This machine cannot exec it in a chroot (no binfmt handler is registered for it): the
        // static checks above (no interpreter, no dynamic section: nothing it could load) and
        // the arm64 guest, which runs it, stand for it.
        crate::say(&format!("dist check chroot: not on this {} machine", Arch::host().rust_name()));
    }
    timed("sums", &mut || {
        shell::sh(
            Command::new("sha256sum")
                .args(["--check", "--strict", "SHA256SUMS"])
                .current_dir(artifacts.sums.parent().unwrap_or(root)),
        )
        .map(drop)
    })?;
    let mut scratch = PathBuf::new();
    timed("package", &mut || {
        scratch = check_package(&work, &artifacts.deb, &artifacts.binary, arch)?;
        Ok(())
    })?;
    timed("image", &mut || image::check(&artifacts.image, arch, &artifacts.binary))?;
    if let Some(multiarch) = &artifacts.multiarch {
        timed("image of both architectures", &mut || image::check_index(multiarch, &image_parts(root, profile)))?;
    }
    timed("man page", &mut || check_man_page(&scratch.join("usr/share/man/man1/cctrace.1.gz")))?;
    timed("completions", &mut || check_completions(&scratch))?;
    timed("removal", &mut || check_removal(&scratch))?;
    if arch != Arch::host() {
        timed("same package as the host's", &mut || same_as_host_package(root, profile, &work, artifacts))?;
    }
    if boot {
        match arch {
            Arch::X86_64 => timed("guest", &mut || check_guest(root, &work, &artifacts.binary))?,
            Arch::Aarch64 => {
                let (kernels, hooks) = (crate::kernels::arm64::SUITE_KERNELS, crate::kernels::arm64::SUITE_HOOKS);
                timed("guest", &mut || crate::kernels::arm64::run(root, &artifacts.binary, kernels, hooks))?;
            }
        }
    }
    Ok(())
}

/// `cargo xtask bench`: the dist (static release) binary's size and start-up next to the debug
/// build's. Start-up is the time from exec to cctrace's "tracing TCP" line on stderr: loading,
/// verifying and attaching the eBPF programs and listing the host's sockets, what a user waits
/// for; `--version` time is shown too (exec and dynamic loading alone).
/// Size and start-up of each of `binaries`, and the size of each of `downloads` (the package,
/// the container image): printed, and written to the figures page's "binaries" section when
/// `page` names it.
pub(crate) fn bench_report(binaries: &[(&str, &Path)], downloads: &[(&str, &Path)], page: Option<&Path>) -> Result<()> {
    use cctrace_lab::figures::{Row, Section};
    let mut section = Section::new("binaries", "The binaries: size and start-up").about(
        "`cargo xtask bench` (`--bench binaries`): each build's size, `--version` (median of 20 runs) and \
         the time from exec to \"tracing TCP\" on stderr, the programs loaded, verified and attached (median \
         of 5 starts with `--json`).",
    );
    // The starts load programs: one lab at a time on this machine.
    let _lock = cctrace_lab::serial::serial()?;
    println!("| build | size | --version (median of 20) | exec to \"tracing TCP\" (median of 5) |");
    println!("|---|---|---|---|");
    for (label, binary) in binaries {
        let size = std::fs::metadata(binary).with_context(|| format!("{} missing", binary.display()))?.len();
        let version = median((0..20).map(|_| time_version(binary)).collect::<Result<Vec<_>>>()?);
        let attach = median((0..5).map(|_| time_to_attach(binary)).collect::<Result<Vec<_>>>()?);
        println!("| {label} | {} | {:.1} ms | {:.0} ms |", human_size(size), version * 1e3, attach * 1e3);
        section.row(Row::new(format!("size, {label}"), human_size(size)));
        section.row(
            Row::new(format!("start-up to attached, {label}"), format!("{:.0} ms", attach * 1e3)).how("median of 5"),
        );
    }
    for (label, file) in downloads {
        let size = std::fs::metadata(file).with_context(|| format!("{} missing", file.display()))?.len();
        println!("{label}: {}", human_size(size));
        section.row(Row::new(format!("size, {label} (dist)"), human_size(size)));
    }
    match page {
        Some(page) => section.write_to(page),
        None => Ok(()),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time_version(binary: &Path) -> Result<f64> {
    let started = Instant::now();
    let status = Command::new(binary).arg("--version").stdout(Stdio::null()).status()?;
    ensure!(status.success(), "{} --version: {status}", binary.display());
    Ok(started.elapsed().as_secs_f64())
}

fn time_to_attach(binary: &Path) -> Result<f64> {
    use std::io::{BufRead, BufReader};
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(["--json", "--duration", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut attached = None;
    let mut seen = Vec::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if line.contains("tracing TCP") && attached.is_none() {
            attached = Some(started.elapsed().as_secs_f64());
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        }
        seen.push(line);
    }
    let status = child.wait()?;
    match attached {
        Some(t) if status.success() => Ok(t),
        _ => bail!("{} did not attach and exit cleanly ({status}): {}", binary.display(), seen.join(" | ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text_must_say_everything_is_built_in() {
        let v = env!("CARGO_PKG_VERSION");
        let good = format!(
            "cctrace {v}\ncommit: 7e82f81abcd1\narchitecture: x86_64\neBPF programs: built in\ndeep mode: built in\nlinked: static (x)\n"
        );
        check_version_text(&good, Arch::X86_64).unwrap();
        assert!(check_version_text(&good, Arch::Aarch64).is_err(), "an x86-64 build passed for arm64");
        check_version_text(&good.replace("x86_64", "aarch64"), Arch::Aarch64).unwrap();
        for (from, to) in [
            ("deep mode: built in", "deep mode: not built in (clang not found)"),
            ("eBPF programs: built in", "eBPF programs: not built in (no bpf-linker)"),
            ("linked: static (x)", "linked: dynamic (y)"),
            ("commit: 7e82f81abcd1", "commit: unknown (not built from a git checkout)"),
        ] {
            assert!(check_version_text(&good.replace(from, to), Arch::X86_64).is_err(), "accepted without {from:?}");
        }
    }

    #[test]
    fn the_packaged_unit_starts_the_packaged_binary() {
        let unit = std::fs::read_to_string(crate::workspace_root().join("tracer/deploy/cctrace.service")).unwrap();
        let packaged = packaged_unit(&unit).unwrap();
        assert!(packaged.contains("ExecStart=/usr/bin/cctrace serve"), "{packaged}");
        assert!(!packaged.contains("/usr/local/bin"), "{packaged}");
        assert!(packaged.contains("[Install]") && packaged.contains("WantedBy=multi-user.target"));
        assert!(packaged_unit("[Service]\nExecStart=/opt/cctrace\n").is_err());
    }

    #[test]
    fn broken_completions_fail_the_shell_check() {
        let dir = std::env::temp_dir().join(format!("xtask-completions-{}", std::process::id()));
        let bash_dir = dir.join("usr/share/bash-completion/completions");
        std::fs::create_dir_all(&bash_dir).unwrap();
        std::fs::write(bash_dir.join("cctrace"), "_cctrace() {\n  if [ x ]; then\n}\n").unwrap();
        assert!(check_completions(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_guest_must_trace_the_flow_and_lose_nothing() {
        let v = env!("CARGO_PKG_VERSION");
        let mut s: BTreeMap<String, String> = [
            ("files", "/init\n/bin/busybox\n/usr/bin/cctrace\n"),
            ("exit", "0"),
            ("bpffs after", ""),
            ("bytes", "1000"),
            ("stderr", "cctrace: tracing TCP in all network namespaces"),
            (
                "jsonl",
                "{\"type\":\"sample\",\"sport\":5001,\"bytes_acked\":1001}\n{\"type\":\"summary\",\"events_received\":9,\"events_lost\":0,\"kernel_emitted\":9}\n",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        s.insert(
            "version".into(),
            format!(
                "cctrace {v}\ncommit: 7e82f81abcd1\narchitecture: x86_64\neBPF programs: built in\ndeep mode: built in\nlinked: static\n"
            ),
        );
        check_guest_sections(&s).unwrap();
        let bad = |key: &str, value: &str| {
            let mut b = s.clone();
            b.insert(key.into(), value.into());
            check_guest_sections(&b).is_err()
        };
        assert!(bad("files", "/init\n/bin/busybox\n/usr/bin/cctrace\n/lib/libc.so.6\n"));
        assert!(bad("exit", "1"));
        assert!(bad("bpffs after", "cct_flows"));
        assert!(bad("jsonl", "{\"type\":\"sample\",\"sport\":5001,\"bytes_acked\":1001}\n{\"type\":\"summary\",\"events_received\":9,\"events_lost\":1,\"kernel_emitted\":10}\n"));
        assert!(bad("jsonl", "{\"type\":\"sample\",\"sport\":5001,\"bytes_acked\":10}\n{\"type\":\"summary\",\"events_received\":9,\"events_lost\":0,\"kernel_emitted\":9}\n"));
    }
}
