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
//!
//! One job a file. This one says which kernels make the matrix and runs it; `debian.rs` fetches
//! and unpacks Debian's images (the machine's package lists, or a private apt configuration for
//! another release or architecture) and `nobtf_build.rs` builds the 6.1 without BTF;
//! `initramfs.rs` packs what a guest boots with (`guest_init.sh` its init, `guest_ports.rs` the
//! ports of its flows); `qemu.rs` boots it and reads what its init wrote; `mode_checks.rs` checks
//! each hook mode's output (`hook_modes.rs`: the modes, and the checks only the mode without BTF
//! answers to) and `stage_checks.rs` the kernel-wide stages; `table.rs` draws the table;
//! `arm64.rs` is the arm64 row.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::shell::sh;

pub(crate) mod arm64;
pub(crate) mod debian;
pub(crate) mod guest_ports;
pub(crate) mod hook_modes;
pub(crate) mod initramfs;
pub(crate) mod mode_checks;
pub(crate) mod nobtf_build;
pub(crate) mod qemu;
pub(crate) mod stage_checks;
pub(crate) mod table;

use debian::debian_kernel;
use hook_modes::Hooks;
use initramfs::{common_root, initramfs};
use qemu::{check_booted, guest_name};
use stage_checks::Stage;
use table::{report, GuestResult};

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
    /// An image given with `--kernel` (x86-64, its modules built in), with every hook mode and
    /// kernel-wide stage.
    fn given(image: &Path) -> Result<Self> {
        if !image.is_file() {
            bail!("--kernel {}: no such file", image.display());
        }
        Ok(Kernel {
            label: image.display().to_string(),
            image: image.to_path_buf(),
            modules: None,
            arch: Arch::X86_64,
            append: String::new(),
            hooks: Hooks::ALL,
            stages: Stage::ALL,
        })
    }

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
        let planned = nobtf_build::planned(work)?;
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
        kernels.push(Kernel::given(image)?);
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
