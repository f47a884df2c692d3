//! The architectures cctrace is built, packaged and booted for, and what differs between them:
//! the Rust target, Debian's name, the cross linker, and the qemu machine a guest boots on.
//! Everything else (the eBPF objects, the struct offsets, the syscall registers) follows the
//! target at build time or the running kernel's BTF at run time.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub(crate) const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture `--target` names (a Rust target triple), for clap.
    pub(crate) fn from_target(triple: &str) -> Result<Self> {
        match Self::ALL.into_iter().find(|a| a.target() == triple) {
            Some(arch) => Ok(arch),
            None => bail!(
                "unsupported target {triple:?}: cctrace is built for {}",
                Self::ALL.map(Arch::target).join(" and ")
            ),
        }
    }

    pub(crate) fn target(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-unknown-linux-gnu",
            Self::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// What `cctrace --version` says (Rust's `std::env::consts::ARCH`).
    pub(crate) fn rust_name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// Debian's name: the package's Architecture field and its file name.
    pub(crate) fn debian(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Aarch64 => "arm64",
        }
    }

    /// The machine the xtask runs on, which builds natively for its own architecture only.
    pub(crate) fn host() -> Self {
        if cfg!(target_arch = "aarch64") {
            Self::Aarch64
        } else {
            Self::X86_64
        }
    }

    /// The C cross compiler (and linker) from Debian's `gcc-<triplet>` package, when the target is
    /// not the host.
    pub(crate) fn cross_gcc(self) -> Option<&'static str> {
        match (self == Self::host(), self) {
            (true, _) => None,
            (false, Self::X86_64) => Some("x86_64-linux-gnu-gcc"),
            (false, Self::Aarch64) => Some("aarch64-linux-gnu-gcc"),
        }
    }

    /// Where a guest's init writes what the host checks: a second serial port on x86-64; on
    /// arm64's `virt` machine, which has one UART, a virtio console (a module the init loads).
    pub(crate) fn results_device(self) -> &'static str {
        match self {
            Self::X86_64 => "/dev/ttyS1",
            Self::Aarch64 => "/dev/hvc0",
        }
    }

    /// Modules a guest needs for its own plumbing, before the checks' own: arm64's results
    /// console (virtio over MMIO, both modules in Debian's cloud kernel).
    pub(crate) fn guest_plumbing_modules(self) -> &'static [&'static str] {
        match self {
            Self::X86_64 => &[],
            Self::Aarch64 => &["virtio_mmio", "virtio_console"],
        }
    }

    /// qemu under software emulation (TCG), the console to `console` and the results channel to
    /// `results`, booting `image` with `initrd`; `append` goes on the kernel command line.
    pub(crate) fn qemu(self, console: &Path, results: &Path, image: &Path, initrd: &Path, append: &str) -> Command {
        let mut cmd;
        let serial_console;
        match self {
            Self::X86_64 => {
                cmd = Command::new("qemu-system-x86_64");
                cmd.args(["-machine", "q35", "-accel", "tcg", "-cpu", "max"]);
                cmd.arg("-serial").arg(format!("file:{}", console.display()));
                cmd.arg("-serial").arg(format!("file:{}", results.display()));
                serial_console = "ttyS0";
            }
            Self::Aarch64 => {
                cmd = Command::new("qemu-system-aarch64");
                // pauth-impdef: pointer authentication with qemu's own cheap hash instead of the
                // architected one, which made every function return cost a QARMA computation.
                cmd.args(["-machine", "virt", "-accel", "tcg", "-cpu", "max,pauth-impdef=on"]);
                cmd.arg("-serial").arg(format!("file:{}", console.display()));
                cmd.args(["-device", "virtio-serial-device", "-chardev"]);
                cmd.arg(format!("file,id=results,path={}", results.display()));
                cmd.args(["-device", "virtconsole,chardev=results"]);
                serial_console = "ttyAMA0";
            }
        }
        cmd.args(["-smp", "2", "-m", "1536", "-nographic", "-no-reboot", "-monitor", "none"]);
        cmd.arg("-kernel").arg(image).arg("-initrd").arg(initrd);
        // `results=` is no kernel parameter: the kernel hands it to init as an environment variable.
        cmd.arg("-append").arg(format!(
            "console={serial_console} panic=-1 rdinit=/init quiet results={} {append}",
            self.results_device()
        ));
        cmd
    }

    /// A command that runs `binary`, built for this architecture, here: directly on its own
    /// machine, else under qemu's user-mode emulation (Debian's qemu-user; no binfmt handler is
    /// registered, the machine's configuration stays as it is).
    pub(crate) fn run_here(self, binary: &Path) -> Command {
        if self == Self::host() {
            return Command::new(binary);
        }
        let mut cmd = Command::new(format!("qemu-{}", self.rust_name()));
        cmd.arg(binary);
        cmd
    }

    /// The Debian package that installs this architecture's qemu.
    pub(crate) fn qemu_package(self) -> &'static str {
        match self {
            Self::X86_64 => "qemu-system-x86",
            Self::Aarch64 => "qemu-system-arm",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_architecture_and_others_are_refused() {
        assert_eq!(Arch::from_target("aarch64-unknown-linux-gnu").unwrap(), Arch::Aarch64);
        assert_eq!(Arch::from_target("x86_64-unknown-linux-gnu").unwrap().debian(), "amd64");
        let err = Arch::from_target("riscv64gc-unknown-linux-gnu").unwrap_err().to_string();
        assert!(err.contains("x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu"), "{err}");
        assert_eq!(Arch::host().rust_name(), std::env::consts::ARCH);
        assert_eq!(Arch::host().cross_gcc(), None);
    }

    #[test]
    fn the_guest_learns_where_to_write_from_its_command_line() {
        let q = Arch::Aarch64.qemu(
            Path::new("c.log"),
            Path::new("r.log"),
            Path::new("Image"),
            Path::new("i.cpio"),
            "bytes=1",
        );
        let args: Vec<String> = q.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.iter().any(|a| a.ends_with("results=/dev/hvc0 bytes=1")), "{args:?}");
        assert!(args.contains(&"file,id=results,path=r.log".to_string()), "{args:?}");
    }
}
