//! `cargo xtask kernels`: boot cctrace on the kernels users run and check that it traces them
//! correctly, not just that it starts.
//!
//! Each kernel (Debian's 5.10, 6.1 and 6.12 cloud images from the package registry, the host's
//! own image when /boot has it, and any image given with `--kernel`) boots under qemu with
//! software emulation (TCG) and an initramfs holding busybox, the cctrace binary, iproute2, nft,
//! bpftool, socat and setpriv with their libraries, and the modules the checks need. Its init
//! (`guest_init.sh`) runs a bulk loopback flow, a lossy flow between two namespaces and a UDP
//! flow under each hook mode while cctrace traces them, then the kernel-wide stages (`fix
//! --live`, deep mode, the packaged unit's user), and writes cctrace's output next to the
//! kernel's own counters to a second serial port. The checks run here, on the host, against
//! that.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::arch::Arch;
use crate::foreign::ForeignApt;
use crate::guest_checks::Stage;
use crate::guest_hooks::{self, Hooks};
use crate::guest_ports;
use crate::shell::{copy, set_executable, sh};

/// One kernel series of the matrix: the Debian release whose package lists carry it (`None`:
/// this machine's own), the meta package there that names its newest image, and the hook modes
/// and kernel-wide stages the suite's matrix runs on it (`cargo xtask kernels` runs all of them).
pub(crate) struct DebianKernel {
    pub(crate) release: Option<&'static str>,
    pub(crate) meta: &'static str,
    pub(crate) hooks_in_suite: &'static [Hooks],
    pub(crate) in_suite: &'static [Stage],
}

/// The kernels of the matrix, oldest first: Debian 11's 5.10 (from the bullseye suites through a
/// private apt configuration), Debian 12's 6.1 and its 6.12. A row more is one line more here.
/// The suite runs each kernel-wide stage where its path is new, to keep within its time:
/// `fix --live` and deep mode before 5.15 (5.10: no `bpf_setsockopt` from `iter/tcp`, no
/// struct_ops links), the packaged unit under `perf_event_paranoid=3` on 6.12 (the host's own
/// tests cover `fix --live` and deep mode through `iter/tcp` and struct_ops links); and the
/// mode without BTF, forced, on the oldest kernel, whose tracepoint records carry the least
/// (the host's own tests run it with the kernel's BTF hidden).
pub(crate) const DEBIAN_KERNELS: &[DebianKernel] = &[
    DebianKernel {
        release: Some("bullseye"),
        meta: "linux-image-cloud-amd64",
        hooks_in_suite: Hooks::ALL,
        in_suite: &[Stage::Fix, Stage::Deep],
    },
    DebianKernel {
        release: None,
        meta: "linux-image-cloud-amd64",
        hooks_in_suite: &[Hooks::Auto, Hooks::Classic],
        in_suite: &[],
    },
    DebianKernel {
        release: None,
        meta: "linux-image-6.12-cloud-amd64",
        hooks_in_suite: &[Hooks::Auto, Hooks::Classic],
        in_suite: &[Stage::Unit],
    },
];

/// Which kernel-wide stages a run of the matrix asks each guest for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// All of them on every kernel (`cargo xtask kernels`).
    Every,
    /// Each kernel's [`DebianKernel::in_suite`] (the suite's matrix, beside its tests).
    Suite,
}
/// Modules the guest checks load when the kernel builds them as modules (veth for the lossy
/// path, nf_tables and numgen for its random loss, BBR for `fix --live`, and tcp_diag, without
/// which ss shows no socket's congestion control).
const GUEST_MODULES: &[&str] = &["veth", "nf_tables", "nft_numgen", "tcp_bbr", "tcp_diag"];
/// Host tools copied into the guest with their libraries: those the hook modes' flows need.
pub(crate) const GUEST_TOOLS: &[&str] = &["/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/bpftool", "/usr/bin/socat"];
/// And those of the kernel-wide stages (ss reads what a socket runs, setpriv runs cctrace as the
/// systemd unit would).
const STAGE_TOOLS: &[&str] = &["/usr/bin/ss", "/usr/bin/setpriv"];
/// A guest that has not powered off by then is stuck.
const GUEST_TIMEOUT: Duration = Duration::from_secs(420);
/// The lossy flow's nft rules: 2 % of its data dropped at random.
fn loss_rules() -> String {
    format!(
        "table inet matrix_loss {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    tcp sport {} numgen random mod 100 < 2 drop\n  }}\n}}\n",
        guest_ports::LOSSY
    )
}

/// One kernel to boot: its image and, when it has them, its modules.
pub(crate) struct Kernel {
    label: String,
    pub(crate) image: PathBuf,
    modules: Option<PathBuf>,
    /// The architecture it boots on.
    pub(crate) arch: Arch,
    /// Added to its command line (`bytes=N`: the guest's flows' size, for a slow emulator).
    pub(crate) append: String,
    /// The hook modes its guest runs its flows under.
    pub(crate) hooks: &'static [Hooks],
    /// The kernel-wide stages its guest runs after the hook modes.
    pub(crate) stages: &'static [Stage],
}

impl Kernel {
    /// A kernel built here without BTF (no modules: what it needs is built in), with every
    /// kernel-wide stage.
    pub(crate) fn without_btf(label: String, image: PathBuf, arch: Arch) -> Self {
        Kernel {
            label,
            image,
            modules: None,
            arch,
            append: String::new(),
            hooks: Hooks::WITHOUT_BTF,
            stages: Stage::ALL,
        }
    }
}

/// What one guest showed: per hook mode, the checks and what start-up said about the hooks.
pub(crate) struct GuestResult {
    label: String,
    release: String,
    btf: String,
    modes: Vec<ModeResult>,
    /// Why the guest could not be checked at all.
    failure: Option<String>,
    /// How long each stage of the guest took (`boot 9 s, auto 31 s, ...`).
    stages: String,
}

struct ModeResult {
    mode: String,
    attached: String,
    disabled: Vec<String>,
    checks: Vec<(String, Result<(), String>)>,
}

/// Boot every kernel of the matrix (or those whose label contains `only`) with `cctrace` (a
/// built binary under `root`'s target directory) in its initramfs and check what it traced.
pub(crate) fn run(
    root: &Path,
    cctrace: &Path,
    extra_images: &[PathBuf],
    only: Option<&str>,
    scope: Scope,
) -> Result<()> {
    let work = root.join("target/kernels");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    if !cctrace.is_file() {
        bail!("{} is missing: build cctrace first (cargo xtask kernels does)", cctrace.display());
    }
    let (kernels, notes) = matrix(root, &work, extra_images, only, scope)?;
    let common = common_root(&work, cctrace)?;
    let initrds: Vec<Result<PathBuf>> = kernels.iter().map(|k| initramfs(&work, &common, k, &guest_name(k))).collect();
    let results = boot_all(&work, &kernels, initrds, scope);
    report(&results, &notes)
}

/// Fetch and build the kernels `cargo xtask kernels` would boot (those whose label has `only`),
/// and say where each image is; boot none. What takes minutes (building the kernel without BTF)
/// is then done outside any lock a boot takes.
pub(crate) fn fetch(root: &Path, extra_images: &[PathBuf], only: Option<&str>) -> Result<()> {
    let work = root.join("target/kernels");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let (kernels, notes) = matrix(root, &work, extra_images, only, Scope::Every)?;
    for k in &kernels {
        println!("{}: {}", k.label, k.image.display());
    }
    for n in notes {
        println!("note: {n}");
    }
    Ok(())
}

/// The kernels to boot: Debian's, the host's own (or a note why not), the images given; those
/// whose label has `only` in it when given.
fn matrix(
    root: &Path,
    work: &Path,
    extra_images: &[PathBuf],
    only: Option<&str>,
    scope: Scope,
) -> Result<(Vec<Kernel>, Vec<String>)> {
    let mut kernels = Vec::new();
    for k in DEBIAN_KERNELS {
        let mut kernel = debian_kernel(root, work, k)?;
        if scope == Scope::Suite {
            kernel.hooks = k.hooks_in_suite;
            kernel.stages = k.in_suite;
        }
        kernels.push(kernel);
    }
    // The kernel without BTF is built here (minutes, once per source version and
    // configuration), so only when it is wanted: by `cargo xtask kernels`, not the suite.
    if scope == Scope::Every {
        let planned = crate::nobtf_kernel::planned(work)?;
        if only.is_none_or(|o| planned.label.contains(o)) {
            kernels.push(planned.kernel(work)?);
        }
    }
    let mut notes = Vec::new();
    match host_kernel() {
        Ok(k) => kernels.push(k),
        Err(why) => notes.push(why),
    }
    for image in extra_images {
        if !image.is_file() {
            bail!("--kernel {}: no such file", image.display());
        }
        kernels.push(Kernel {
            label: image.display().to_string(),
            image: image.clone(),
            modules: None,
            arch: Arch::X86_64,
            append: String::new(),
            hooks: Hooks::ALL,
            stages: Stage::ALL,
        });
    }
    if let Some(only) = only {
        kernels.retain(|k| k.label.contains(only));
        if kernels.is_empty() {
            bail!("--only {only}: no kernel of the matrix has it in its release");
        }
    }
    Ok((kernels, notes))
}

/// Boot each kernel with its initramfs and check it. Each initramfs is packed from the one
/// common tree, one after another; the guests then boot side by side on their own. Each is one
/// emulator thread (see `Arch::qemu`), and most of a guest's time is spent waiting on its own
/// flows' timers: side by side, the matrix takes little more than its slowest guest on two
/// otherwise idle cores (121 s against 424 s one after another). Beside the suite's tests, at
/// idle priority, the guests share what the tests leave: side by side there they took 311 s
/// against 359 s and each ran 2.5 times slower, slow enough that 5.10's classic row once missed
/// the owner of its accepted connection. So the suite boots them one after another.
fn boot_all(work: &Path, kernels: &[Kernel], initrds: Vec<Result<PathBuf>>, scope: Scope) -> Vec<GuestResult> {
    let started = Instant::now();
    let boot = |k: &Kernel, initrd: Result<PathBuf>, since: Instant| {
        eprintln!("xtask: booting {} under qemu (TCG)", k.label);
        let result = check_booted(work, k, initrd);
        eprintln!("xtask: {} done in {:.0} s ({})", k.label, since.elapsed().as_secs_f64(), result.stages);
        result
    };
    if scope == Scope::Suite {
        return kernels.iter().zip(initrds).map(|(k, initrd)| boot(k, initrd, Instant::now())).collect();
    }
    std::thread::scope(|threads| {
        let guests: Vec<_> =
            kernels.iter().zip(initrds).map(|(k, initrd)| threads.spawn(move || boot(k, initrd, started))).collect();
        guests.into_iter().map(|g| g.join().expect("a guest's thread panicked")).collect()
    })
}

/// Print the matrix's table and notes; an error when a check failed.
fn report(results: &[GuestResult], notes: &[String]) -> Result<()> {
    let (table, failed) = render(results);
    println!("{table}");
    for n in notes {
        println!("note: {n}");
    }
    if failed {
        bail!("the kernel matrix has failing checks (see the table above)");
    }
    Ok(())
}

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

/// The running kernel's image, when /boot has it.
fn host_kernel() -> Result<Kernel, String> {
    let release = sh(Command::new("uname").arg("-r")).map_err(|e| e.to_string())?.trim().to_string();
    let image = PathBuf::from(format!("/boot/vmlinuz-{release}"));
    if !image.is_file() {
        return Err(format!(
            "the host kernel {release} is not in the matrix: {} does not exist (boot images given with --kernel are)",
            image.display()
        ));
    }
    let modules = Path::new("/lib/modules").join(&release);
    Ok(Kernel {
        label: format!("host {release}"),
        image,
        modules: modules.is_dir().then_some(modules),
        arch: Arch::host(),
        append: String::new(),
        hooks: Hooks::ALL,
        stages: Stage::ALL,
    })
}

/// The directories, init and nft rules of every guest's initramfs, in a fresh `work`/initramfs-common.
pub(crate) fn guest_skeleton(work: &Path) -> Result<PathBuf> {
    let root = work.join("initramfs-common");
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "run", "lib/matrix-modules"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    let init = root.join("init");
    std::fs::write(&init, guest_ports::with_ports(include_str!("guest_init.sh")))?;
    set_executable(&init)?;
    std::fs::write(root.join("etc/matrix-loss.nft"), loss_rules())?;
    Ok(root)
}

/// The part of the initramfs every kernel shares: busybox, cctrace, the tools and libraries.
fn common_root(work: &Path, cctrace: &Path) -> Result<PathBuf> {
    let root = guest_skeleton(work)?;
    copy(Path::new("/bin/busybox"), &root.join("bin/busybox"))
        .context("busybox-static is needed for the guest (apt-get install busybox-static)")?;
    // cctrace goes in without its debug information: a debug build's is most of its 120 MB,
    // which the guest would unpack at emulated speed on every boot.
    let guest_cctrace = root.join("usr/bin/cctrace");
    sh(Command::new("objcopy").arg("--strip-debug").arg(cctrace).arg(&guest_cctrace))
        .context("objcopy (binutils) strips cctrace for the guest")?;
    let mut libraries: BTreeSet<PathBuf> = shared_libraries(cctrace)?.into_iter().collect();
    let mut binaries = Vec::new();
    for tool in GUEST_TOOLS.iter().chain(STAGE_TOOLS) {
        binaries.push((PathBuf::from(tool), root.join(tool.trim_start_matches('/'))));
    }
    for (from, to) in &binaries {
        copy(from, to)?;
        libraries.extend(shared_libraries(from)?);
    }
    for lib in &libraries {
        copy(lib, &root.join(lib.strip_prefix("/").unwrap_or(lib)))?;
    }
    Ok(root)
}

/// The shared libraries `ldd` resolves for a binary, the dynamic loader included.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = sh(Command::new("ldd").arg(binary))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Modules to load, dependencies first, from the kernel's modules.dep (built-in ones need none).
fn module_load_order(modules: &Path, wanted: &[&str]) -> Result<Vec<PathBuf>> {
    if !modules.join("modules.dep").is_file() {
        // A package's modules come without the index the installer's depmod writes.
        let (Some(version), Some(base)) =
            (modules.file_name(), modules.parent().and_then(Path::parent).and_then(Path::parent))
        else {
            bail!("{} is not a lib/modules/VERSION directory", modules.display());
        };
        sh(Command::new("depmod").arg("-b").arg(base).arg(version))?;
    }
    let dep = std::fs::read_to_string(modules.join("modules.dep"))
        .with_context(|| format!("reading {}/modules.dep", modules.display()))?;
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut by_name = BTreeMap::new();
    for line in dep.lines() {
        let Some((module, needs)) = line.split_once(':') else { continue };
        let name = module.rsplit('/').next().unwrap_or(module).split('.').next().unwrap_or("").replace('-', "_");
        by_name.insert(name, module.to_string());
        deps.insert(module.to_string(), needs.split_whitespace().map(str::to_string).collect());
    }
    fn visit(m: &str, deps: &BTreeMap<String, Vec<String>>, seen: &mut BTreeSet<String>, order: &mut Vec<String>) {
        if !seen.insert(m.to_string()) {
            return;
        }
        for d in deps.get(m).into_iter().flatten() {
            visit(d, deps, seen, order);
        }
        order.push(m.to_string());
    }
    let (mut seen, mut order) = (BTreeSet::new(), Vec::new());
    for wanted in wanted {
        if let Some(path) = by_name.get(*wanted) {
            visit(path, &deps, &mut seen, &mut order);
        }
    }
    Ok(order.into_iter().map(|m| modules.join(m)).collect())
}

/// The initramfs for one kernel: the common tree plus its modules, uncompressed, as one cpio.
fn initramfs(work: &Path, common: &Path, k: &Kernel, name: &str) -> Result<PathBuf> {
    let modules_dir = common.join("lib/matrix-modules");
    let _ = std::fs::remove_dir_all(&modules_dir);
    std::fs::create_dir_all(&modules_dir)?;
    let mut list = String::new();
    if let Some(modules) = &k.modules {
        let wanted: Vec<&str> = k.arch.guest_plumbing_modules().iter().chain(GUEST_MODULES).copied().collect();
        for (i, module) in module_load_order(modules, &wanted)?.iter().enumerate() {
            let file = format!("{i:02}.ko");
            let target = modules_dir.join(&file);
            let name = module.to_string_lossy();
            if name.ends_with(".xz") {
                let bytes = Command::new("xz").arg("-dc").arg(module).output()?.stdout;
                std::fs::write(&target, bytes)?;
            } else if name.ends_with(".zst") {
                let bytes = Command::new("zstd").arg("-dc").arg(module).output()?.stdout;
                std::fs::write(&target, bytes)?;
            } else {
                copy(module, &target)?;
            }
            let _ = writeln!(list, "{file}");
        }
    }
    std::fs::write(common.join("etc/matrix-modules"), list)?;
    let cpio = work.join(format!("{name}.cpio"));
    pack_cpio(common, &cpio)?;
    Ok(cpio)
}

/// Pack the tree under `root` into an uncompressed newc cpio archive, the initramfs format.
pub(crate) fn pack_cpio(root: &Path, cpio: &Path) -> Result<()> {
    let out = std::fs::File::create(cpio).with_context(|| format!("creating {}", cpio.display()))?;
    let status = Command::new("sh")
        .args(["-c", "find . -print0 | cpio --null -o -H newc --quiet"])
        .current_dir(root)
        .stdout(out)
        .status()?;
    if !status.success() {
        bail!("packing the initramfs with cpio failed");
    }
    Ok(())
}

pub(crate) fn boot_and_check(work: &Path, common: &Path, k: &Kernel) -> GuestResult {
    check_booted(work, k, initramfs(work, common, k, &guest_name(k)))
}

/// Boot the kernel with `initrd` (or say why there is none) and check what its init wrote.
fn check_booted(work: &Path, k: &Kernel, initrd: Result<PathBuf>) -> GuestResult {
    let mut result = GuestResult {
        label: k.label.clone(),
        release: String::new(),
        btf: "?".into(),
        modes: Vec::new(),
        failure: None,
        stages: String::new(),
    };
    let append = format!("{} {} {}", k.append, Hooks::command_line(k.hooks), Stage::command_line(k.stages));
    let booted =
        initrd.and_then(|initrd| run_guest(k.arch, work, &k.image, &initrd, &guest_name(k), &append, GUEST_TIMEOUT));
    match booted {
        Ok(sections) => check_guest(&sections, k.hooks, k.stages, &mut result),
        Err(e) => result.failure = Some(format!("{e:#}")),
    }
    result
}

/// The kernel's label as a file name (its initramfs, console and results under the work
/// directory).
fn guest_name(k: &Kernel) -> String {
    k.label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect()
}

/// Boot `image` with `initrd` under qemu (TCG) until its init ends it, and return the
/// sections the init wrote to the second serial port (`@@BEGIN name` ... `@@END name`), which
/// must include `end`. The console goes to `work/NAME.console.log`.
pub(crate) fn run_guest(
    arch: Arch,
    work: &Path,
    image: &Path,
    initrd: &Path,
    name: &str,
    append: &str,
    timeout: Duration,
) -> Result<BTreeMap<String, String>> {
    let console = work.join(format!("{name}.console.log"));
    let results = work.join(format!("{name}.results.log"));
    let _ = std::fs::remove_file(&results);
    let mut child = arch
        .qemu(&console, &results, image, initrd, append)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting qemu for {} (apt-get install {})", arch.debian(), arch.qemu_package()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("qemu exited with {status}; console in {}", console.display());
            }
            break;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the guest did not power off within {} s; console in {}", timeout.as_secs(), console.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = std::fs::read_to_string(&results).unwrap_or_default();
    let sections = parse_sections(&text);
    if !sections.contains_key("end") {
        bail!("the guest stopped before its checks ended; console in {}", console.display());
    }
    Ok(sections)
}

fn parse_sections(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("@@BEGIN ") {
            current = Some((name.to_string(), String::new()));
        } else if line.strip_prefix("@@END ").is_some() {
            if let Some((name, body)) = current.take() {
                out.insert(name, body);
            }
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

fn check_guest(sections: &BTreeMap<String, String>, hooks: &[Hooks], stages: &[Stage], result: &mut GuestResult) {
    let get = |name: &str| sections.get(name).map(|s| s.trim().to_string()).unwrap_or_default();
    result.release = get("kernel");
    result.btf = get("btf");
    result.stages = stage_times(&get("stages"));
    let default_cc = get("default_cc");
    let bytes: u64 = get("bytes").parse().unwrap_or(0);
    for &mode in hooks {
        // The checks of the mode without BTF where it ran: forced, or picked on a kernel without.
        let without_btf = mode == Hooks::NoBtf || result.btf == "no";
        result.modes.push(check_mode(sections, mode.name(), &default_cc, bytes, without_btf));
    }
    // What concerns the kernel rather than a hook mode runs with the default hooks.
    if let Some(default_hooks) = result.modes.first_mut() {
        default_hooks.checks.extend(crate::guest_checks::kernel_wide(sections, stages, result.btf != "no"));
    }
}

/// `boot 9.1\nauto 40.3\n...` (when each stage ended, in seconds since boot) as how long each
/// took: `boot 9 s, auto 31 s, ...`.
fn stage_times(stages: &str) -> String {
    let mut last = 0.0;
    let mut out = Vec::new();
    for (name, end) in stages.lines().filter_map(|l| l.split_once(' ')) {
        let Ok(end) = end.trim().parse::<f64>() else { continue };
        out.push(format!("{name} {:.0} s", end - last));
        last = end;
    }
    out.join(", ")
}

/// The last value of every flow's fields, by local port, from the samples and flow records.
pub(crate) fn last_by_port(lines: &[Value], port: u16) -> Option<Value> {
    let mut merged = serde_json::Map::new();
    for v in lines {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !(kind == "sample" || kind == "flow") || v.get("sport").and_then(Value::as_u64) != Some(u64::from(port)) {
            continue;
        }
        if let Some(obj) = v.as_object() {
            for (k, val) in obj {
                if !val.is_null() {
                    merged.insert(k.clone(), val.clone());
                }
            }
        }
    }
    (!merged.is_empty()).then_some(Value::Object(merged))
}

fn snmp_counter(snmp: &str, table: &str, field: &str) -> Option<u64> {
    let mut lines = snmp.lines().filter(|l| l.starts_with(&format!("{table}:")));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    values.get(names.iter().position(|n| *n == field)?)?.parse().ok()
}

/// One hook mode's sections as the guest wrote them, read once.
struct ModeOutput<'a> {
    sections: &'a BTreeMap<String, String>,
    mode: &'a str,
    stderr: String,
    lines: Vec<Value>,
    /// The loopback sender's last record (samples and flows merged).
    loopback: Option<Value>,
}

impl ModeOutput<'_> {
    fn get(&self, name: &str) -> String {
        self.sections.get(&format!("{name} {}", self.mode)).cloned().unwrap_or_default()
    }

    /// A sample of `reason` whose local (or, with `either_end`, remote) port is `port`.
    fn has_sample(&self, reason: &str, port: u16, either_end: bool) -> bool {
        let at = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64) == Some(u64::from(port));
        self.lines.iter().any(|v| {
            v.get("type").and_then(Value::as_str) == Some("sample")
                && v.get("reason").and_then(Value::as_str) == Some(reason)
                && (at(v, "sport") || (either_end && at(v, "dport")))
        })
    }
}

/// One hook mode's checks; `without_btf` adds those of the mode without BTF (forced, or picked
/// where the kernel has none).
fn check_mode(
    sections: &BTreeMap<String, String>,
    mode: &str,
    default_cc: &str,
    bytes: u64,
    without_btf: bool,
) -> ModeResult {
    let mut out = ModeOutput { sections, mode, stderr: String::new(), lines: Vec::new(), loopback: None };
    out.stderr = out.get("stderr");
    out.lines = out.get("jsonl").lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    out.loopback = last_by_port(&out.lines, guest_ports::LOOPBACK);
    let hook_lines: Vec<&str> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cctrace: "))
        .filter(|l| l.starts_with("tcp:") || l.starts_with("sock:"))
        .collect();
    let attached = attached_hooks(&out.stderr);
    let disabled: Vec<String> =
        hook_lines.iter().filter(|l| l.contains(": disabled")).map(|l| short_disabled(l)).collect();
    let probe_said_off = disabled.iter().any(|d| d.starts_with("tcp_probe:"));
    let checks = vec![
        ("exits cleanly", exits_cleanly(&out)),
        ("hooks attach", hooks_attach(&attached, &out)),
        ("bulk flow traced", bulk_flow_traced(&out, bytes)),
        ("CA and cwnd sane", ca_and_cwnd_sane(&out, default_cc)),
        ("periodic samples (or start-up says they are off)", periodic_samples(&out, probe_said_off)),
        ("owner of the accepted connection", owner_of_accepted(&out)),
        ("retransmissions match the namespace's counters", retransmissions_match(&out)),
        ("idle flow listed at start-up", idle_listed(&out)),
        ("clean detach", clean_detach(&out)),
    ];
    let mut checks: Vec<_> = checks.into_iter().map(|(name, outcome)| (name.to_string(), outcome)).collect();
    let udp = || udp_flow(&out.lines, &out.get("udp"));
    if without_btf {
        let lines = &out.lines;
        let without = [
            ("start-up names the mode without BTF", guest_hooks::names_the_mode(&out.stderr)),
            ("only tracepoint programs (bpftool)", guest_hooks::only_tracepoint_programs(&out.get("programs during"))),
            (
                "bulk flow recorded at every interval",
                guest_hooks::recorded_every_interval(lines, guest_ports::LOOPBACK, bytes),
            ),
            // The mode accounts no UDP: its start-up must say so, or the flow be right.
            (
                "UDP flow counted, or start-up says UDP is not tracked",
                guest_hooks::udp_said_off(&out.stderr).or_else(|_| udp()),
            ),
            // Its samples are made in user space from the records: none of those may be lost.
            ("no record lost or undecodable", summary(&out).and_then(guest_hooks::no_record_lost)),
        ];
        // Its counters are sock_diag's at each lookup: a socket closed within an interval of
        // its last data ends short by what that interval moved, at most.
        checks.retain(|(name, _)| name != "bulk flow traced");
        checks.push((
            "bulk flow traced (to its last lookup)".to_string(),
            guest_hooks::traced_to_its_last_lookup(lines, guest_ports::LOOPBACK, bytes),
        ));
        checks.extend(without.map(|(name, outcome)| (name.to_string(), outcome)));
    } else {
        checks.push(("every emitted sample accounted for".to_string(), summary(&out).and_then(every_sample_accounted)));
        checks.push(("UDP flow counted and classified".to_string(), udp()));
    }
    ModeResult { mode: mode.to_string(), attached, disabled, checks }
}

/// `5/6` from the start-up line: "tracing TCP in all network namespaces (live kernel (5/6 hooks))",
/// or "(live kernel without BTF (3/6 tracepoints, sock_diag))".
fn attached_hooks(stderr: &str) -> String {
    stderr
        .split("live kernel")
        .nth(1)
        .and_then(|rest| rest.split_once('(').map(|(_, counts)| counts))
        .and_then(|counts| counts.split_whitespace().next())
        .filter(|n| n.contains('/'))
        .unwrap_or("0/?")
        .to_string()
}

fn exits_cleanly(out: &ModeOutput) -> Result<(), String> {
    let exit = out.get("exit");
    if exit.trim() == "0" {
        Ok(())
    } else {
        Err(format!("exit status {}; stderr: {}", exit.trim(), out.stderr.trim()))
    }
}

fn hooks_attach(attached: &str, out: &ModeOutput) -> Result<(), String> {
    if attached.split('/').next().is_some_and(|n| n.parse().is_ok_and(|n: u32| n > 0)) {
        Ok(())
    } else {
        Err(format!("no hook attached: {}", out.stderr.trim()))
    }
}

fn bulk_flow_traced(out: &ModeOutput, bytes: u64) -> Result<(), String> {
    let f = out
        .loopback
        .as_ref()
        .ok_or_else(|| format!("no sample of the loopback sender (local port {})", guest_ports::LOOPBACK))?;
    let acked = f.get("bytes_acked").and_then(Value::as_u64).unwrap_or(0);
    if acked >= bytes {
        Ok(())
    } else {
        Err(format!("bytes_acked {acked}, sent {bytes}"))
    }
}

fn ca_and_cwnd_sane(out: &ModeOutput, default_cc: &str) -> Result<(), String> {
    let f = out.loopback.as_ref().ok_or("no sample")?;
    let cc = f.get("cc").and_then(Value::as_str).unwrap_or("");
    let cwnd = f.get("cwnd").and_then(Value::as_u64).unwrap_or(0);
    let mss = f.get("mss").and_then(Value::as_u64).unwrap_or(0);
    if cc != default_cc {
        Err(format!("cc {cc:?}, the kernel's default is {default_cc:?}"))
    } else if cwnd == 0 || cwnd > 1_000_000 || mss == 0 {
        Err(format!("cwnd {cwnd}, mss {mss}"))
    } else {
        Ok(())
    }
}

fn periodic_samples(out: &ModeOutput, probe_said_off: bool) -> Result<(), String> {
    if out.has_sample("periodic", guest_ports::LOOPBACK, false) || probe_said_off {
        Ok(())
    } else {
        Err("no periodic sample and no word of why".into())
    }
}

fn owner_of_accepted(out: &ModeOutput) -> Result<(), String> {
    let pids: BTreeMap<String, String> = out
        .get("pids")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let (Some(f), Some(pid)) = (&out.loopback, pids.get("loopback")) else {
        return Err("no sample or no pid".into());
    };
    let owner = f.get("owner").and_then(|o| o.get("pid")).and_then(Value::as_u64).map(|p| p.to_string());
    if owner.as_deref() == Some(pid.as_str()) {
        Ok(())
    } else {
        Err(format!("owner {owner:?}, the accepting process is {pid}"))
    }
}

fn retransmissions_match(out: &ModeOutput) -> Result<(), String> {
    match (last_by_port(&out.lines, guest_ports::LOSSY), snmp_counter(&out.get("snmp"), "Tcp", "RetransSegs")) {
        (_, None) => Err(format!("lossy path not built: {}", out.get("lossy setup").trim())),
        (None, Some(_)) => Err(format!("no sample of the lossy sender (local port {})", guest_ports::LOSSY)),
        (Some(f), Some(kernel)) => {
            let seen = f.get("retrans").and_then(Value::as_u64).unwrap_or(0);
            if kernel == 0 {
                Err("the lossy path lost nothing".into())
            } else if seen == kernel {
                Ok(())
            } else {
                Err(format!("cctrace counted {seen} retransmissions, RetransSegs is {kernel}"))
            }
        }
    }
}

/// The run's closing summary line.
fn summary<'a>(out: &'a ModeOutput) -> Result<&'a Value, String> {
    out.lines.iter().rev().find(|v| v["type"] == "summary").ok_or_else(|| "no summary line".to_string())
}

fn every_sample_accounted(s: &Value) -> Result<(), String> {
    let n = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (received, lost, emitted) = (n("events_received"), n("events_lost"), n("kernel_emitted"));
    if received + lost == emitted {
        Ok(())
    } else {
        Err(format!("received {received} + lost {lost} != emitted {emitted}"))
    }
}

fn idle_listed(out: &ModeOutput) -> Result<(), String> {
    if out.has_sample("snapshot", guest_ports::IDLE, true) {
        Ok(())
    } else {
        Err(format!("no snapshot sample of the idle connection on port {}", guest_ports::IDLE))
    }
}

/// bpftool must be seen to work (it lists cctrace's programs while it runs) for "none left
/// after" to mean anything.
fn clean_detach(out: &ModeOutput) -> Result<(), String> {
    let (during, after) = (out.get("programs during"), out.get("programs after"));
    if !during.contains("cct_") || !during.contains("status 0") {
        Err(format!("bpftool did not list cctrace's programs while it ran: {}", during.trim()))
    } else if !after.contains("status 0") || after.contains("cct_") {
        Err(format!("after exit: {}", after.trim()))
    } else {
        Ok(())
    }
}

/// The guest's UDP flow, from its sender's last record: the datagrams the kernel counted as sent
/// (Udp OutDatagrams), each with 28 bytes of IPv4 and UDP header, socat as its owner, and QUIC
/// as what it carries (its datagrams' first bytes, read from the sender's own buffer where UDP
/// is counted per syscall, from the packets before Linux 6.3). `said` is the guest's
/// `sent=N datagram=BYTES client=PID`.
fn udp_flow(lines: &[Value], said: &str) -> Result<(), String> {
    let facts: BTreeMap<&str, u64> = said
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    let (Some(&sent), Some(&datagram), Some(&client)) = (facts.get("sent"), facts.get("datagram"), facts.get("client"))
    else {
        return Err(format!("the guest ran no UDP flow: {:?}", said.trim()));
    };
    let Some(record) = lines.iter().rev().find(|v| {
        v["type"] == "flow"
            && v["proto"] == "udp"
            && v["dport"] == guest_ports::UDP
            && v["tx_packets"].as_u64() > Some(0)
    }) else {
        return Err(format!("no UDP record of the sender (to port {})", guest_ports::UDP));
    };
    let n = |k: &str| record.get(k).and_then(Value::as_u64).unwrap_or(0);
    if n("tx_packets") != sent {
        Err(format!("tx_packets {}, the kernel sent {sent} datagrams", n("tx_packets")))
    } else if n("tx_bytes") != sent * (datagram + 28) {
        Err(format!("tx_bytes {}, {sent} datagrams of {datagram} bytes are {}", n("tx_bytes"), sent * (datagram + 28)))
    } else if record["app_proto"] != "quic" {
        Err(format!("app_proto {}, the datagrams are QUIC long headers", record["app_proto"]))
    } else if record["owner"]["pid"].as_u64() != Some(client) || record["owner"]["comm"] != "socat" {
        Err(format!("owner {}, the sender is socat {client}", record["owner"]))
    } else {
        Ok(())
    }
}

/// `tcp:tcp_probe: disabled (classic tracepoint: ...; what is lost)` in a few words for the table:
/// the hook, why each flavour failed, what is lost.
fn short_disabled(line: &str) -> String {
    let (hook, rest) = line.split_once(": disabled (").unwrap_or((line, ""));
    let rest = rest.strip_suffix(')').unwrap_or(rest);
    let parts: Vec<String> = rest
        .split("; ")
        .map(|p| {
            if p.contains("unknown BTF type") {
                "no tp_btf".to_string()
            } else if p.contains("skaddr field") {
                "tracefs record lacks skaddr".to_string()
            } else if p.contains("no classic twin") {
                "BTF only".to_string()
            } else if p.contains(" tracepoint") && p.contains("this kernel has no") {
                "no such tracepoint".to_string()
            } else {
                p.to_string()
            }
        })
        .collect();
    format!("{}: {}", hook.trim_start_matches("tcp:").trim_start_matches("sock:"), parts.join(", "))
}

/// The table, and whether any check failed.
pub(crate) fn render(results: &[GuestResult]) -> (String, bool) {
    let mut out = String::new();
    let mut failed = false;
    let _ = writeln!(out, "| kernel | BTF | hooks | attached | disabled (why) | checks passed |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for r in results {
        if let Some(why) = &r.failure {
            failed = true;
            let _ = writeln!(out, "| {} | ? | - | - | - | FAILED: {} |", r.label, why);
            continue;
        }
        for m in &r.modes {
            let passed = m.checks.iter().filter(|(_, c)| c.is_ok()).count();
            for (name, c) in &m.checks {
                if let Err(why) = c {
                    failed = true;
                    failures.push(format!("{} {}: {name}: {why}", r.release, m.mode));
                }
            }
            let disabled = if m.disabled.is_empty() { "none".to_string() } else { m.disabled.join("; ") };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {passed}/{} |",
                r.release,
                r.btf,
                m.mode,
                m.attached,
                disabled,
                m.checks.len()
            );
        }
    }
    for f in failures {
        let _ = writeln!(out, "FAILED {f}");
    }
    (out, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_whose_sections_show_every_check_passes_them_and_each_missing_part_is_named() {
        let jsonl = [
            r#"{"type":"sample","reason":"snapshot","sport":40000,"dport":5003}"#,
            r#"{"type":"sample","reason":"periodic","sport":5001,"cc":"bbr","cwnd":10,"mss":1448,"bytes_acked":1000,"owner":{"pid":7}}"#,
            r#"{"type":"sample","reason":"retransmit","sport":5002,"retrans":9}"#,
            r#"{"type":"summary","events_received":3,"events_lost":0,"kernel_emitted":3}"#,
        ]
        .join("\n");
        let mut sections: BTreeMap<String, String> = [
            ("stderr", "cctrace: tracing TCP in all network namespaces (live kernel (6/6 hooks))\n"),
            ("jsonl", jsonl.as_str()),
            ("exit", "0\n"),
            ("pids", "loopback=7\n"),
            ("snmp", "Tcp: RtoAlgorithm RetransSegs\nTcp: 1 9\n"),
            ("programs during", "42: tracepoint name cct_probe\nstatus 0\n"),
            ("programs after", "status 0\n"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{k} auto"), v.to_string()))
        .collect();
        let r = check_mode(&sections, "auto", "bbr", 1000, false);
        assert_eq!(r.attached, "6/6");
        let failed: Vec<&str> = r.checks.iter().filter(|(_, o)| o.is_err()).map(|(n, _)| n.as_str()).collect();
        // The UDP flow is the one part these sections leave out.
        assert_eq!(failed, ["UDP flow counted and classified"], "{:?}", r.checks);
        sections.insert("snmp auto".into(), "Tcp: RetransSegs\nTcp: 8\n".into());
        sections.remove("exit auto");
        let r = check_mode(&sections, "auto", "cubic", 1001, false);
        let failed: Vec<&str> = r.checks.iter().filter(|(_, o)| o.is_err()).map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            failed,
            [
                "exits cleanly",
                "bulk flow traced",
                "CA and cwnd sane",
                "retransmissions match the namespace's counters",
                "UDP flow counted and classified"
            ]
        );
    }

    #[test]
    fn sections_split_on_their_markers_and_an_unfinished_one_is_dropped() {
        let text = "noise\n@@BEGIN kernel\n6.1.0\n@@END kernel\n@@BEGIN jsonl tp_btf\n{}\n{}\n@@END jsonl tp_btf\n@@BEGIN cut\nhalf";
        let s = parse_sections(text);
        assert_eq!(s["kernel"], "6.1.0\n");
        assert_eq!(s["jsonl tp_btf"], "{}\n{}\n");
        assert!(!s.contains_key("cut"));
    }

    #[test]
    fn the_attached_count_is_read_from_either_start_up_line() {
        let btf = "cctrace: tracing TCP in all network namespaces (live kernel (5/6 hooks))";
        assert_eq!(attached_hooks(btf), "5/6");
        let without =
            "cctrace: tracing TCP in all network namespaces (live kernel without BTF (3/6 tracepoints, sock_diag))";
        assert_eq!(attached_hooks(without), "3/6");
        assert_eq!(attached_hooks("cctrace: cannot read kernel BTF"), "0/?");
    }

    #[test]
    fn stage_ends_become_durations() {
        assert_eq!(stage_times("boot 9.4\nauto 40.1\nclassic 70.9\n"), "boot 9 s, auto 31 s, classic 31 s");
        assert_eq!(stage_times(""), "");
    }

    #[test]
    fn snmp_counters_are_read_by_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 37 0\n";
        assert_eq!(snmp_counter(snmp, "Tcp", "RetransSegs"), Some(37));
        assert_eq!(snmp_counter(snmp, "Tcp", "Nope"), None);
    }

    #[test]
    fn a_flow_is_its_samples_merged_with_the_latest_non_null_values() {
        let lines: Vec<Value> = [
            r#"{"type":"sample","sport":5001,"retrans":1,"owner":{"pid":7}}"#,
            r#"{"type":"sample","sport":5002,"retrans":9}"#,
            r#"{"type":"flow","sport":5001,"retrans":3,"owner":null}"#,
        ]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let f = last_by_port(&lines, 5001).unwrap();
        assert_eq!(f["retrans"], 3);
        assert_eq!(f["owner"]["pid"], 7);
        assert!(last_by_port(&lines, 1).is_none());
    }

    #[test]
    fn the_udp_flow_must_count_what_the_kernel_sent_and_be_quic_owned_by_its_sender() {
        let record = |packets: u64, bytes: u64, proto: &str, pid: u64| -> Vec<Value> {
            vec![serde_json::json!({"type": "flow", "proto": "udp", "dport": 5004, "tx_packets": packets,
                "tx_bytes": bytes, "app_proto": proto, "owner": {"comm": "socat", "pid": pid}})]
        };
        let said = "sent=2048 datagram=1024 client=77";
        assert_eq!(udp_flow(&record(2048, 2048 * 1052, "quic", 77), said), Ok(()));
        assert!(udp_flow(&record(2047, 2047 * 1052, "quic", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1024, "quic", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "null", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "quic", 78), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "quic", 77), "").is_err());
        assert!(udp_flow(&[], said).is_err());
    }

    #[test]
    fn disabled_hooks_shrink_to_what_failed_and_what_is_lost() {
        let line = "tcp:tcp_sendmsg_locked: disabled (BTF tracepoint: load: unknown BTF type `x`; classic tracepoint: this kernel has no tcp:tcp_sendmsg_locked tracepoint; owners found in /proc)";
        assert_eq!(short_disabled(line), "tcp_sendmsg_locked: no tp_btf, no such tracepoint, owners found in /proc");
    }
}
