//! What a guest boots with: one uncompressed cpio holding busybox, cctrace, the tools the checks
//! run with their libraries, the init script and the modules its kernel needs, in load order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::guest_ports;
use super::Kernel;
use crate::shell::{copy, set_executable, sh};

/// Modules the guest checks load when the kernel builds them as modules (veth for the lossy
/// path, nf_tables and numgen for its random loss, BBR for `fix --live`, and tcp_diag, without
/// which ss shows no socket's congestion control).
const GUEST_MODULES: &[&str] = &["veth", "nf_tables", "nft_numgen", "tcp_bbr", "tcp_diag"];
/// Host tools copied into the guest with their libraries: those the hook modes' flows need.
pub(crate) const GUEST_TOOLS: &[&str] = &["/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/bpftool", "/usr/bin/socat"];
/// And those of the kernel-wide stages (ss reads what a socket runs, setpriv runs cctrace as the
/// systemd unit would).
const STAGE_TOOLS: &[&str] = &["/usr/bin/ss", "/usr/bin/setpriv"];
/// The lossy flow's nft rules: 2 % of its data dropped at random.
fn loss_rules() -> String {
    format!(
        "table inet matrix_loss {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    tcp sport {} numgen random mod 100 < 2 drop\n  }}\n}}\n",
        guest_ports::LOSSY
    )
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
pub(super) fn common_root(work: &Path, cctrace: &Path) -> Result<PathBuf> {
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
pub(super) fn initramfs(work: &Path, common: &Path, k: &Kernel, name: &str) -> Result<PathBuf> {
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
