//! Running a host program for its output, placing files, and telling a static binary: the
//! helpers every task uses (the kernel matrix, dist, the image, the private apt configurations).

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};

/// Run `cmd` to its end; its standard output, or an error with the command and its stderr.
pub(crate) fn sh(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.stderr(Stdio::piped()).output().with_context(|| format!("starting {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Copy `from` to `to`, creating `to`'s directory.
pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

pub(crate) fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Fail unless `binary` needs no shared library: no program interpreter, no dynamic section,
/// and `ldd` and `file` agree.
pub(crate) fn check_static(binary: &Path) -> Result<()> {
    let headers = sh(Command::new("readelf").args(["-lW"]).arg(binary))?;
    ensure!(!headers.contains("INTERP"), "{} asks for a program interpreter (dynamically linked)", binary.display());
    ensure!(!headers.contains(" DYNAMIC "), "{} has a dynamic section", binary.display());
    let ldd = Command::new("ldd").arg(binary).output().context("running ldd")?;
    let said = format!("{}{}", String::from_utf8_lossy(&ldd.stdout), String::from_utf8_lossy(&ldd.stderr));
    ensure!(said.contains("not a dynamic executable"), "ldd {}: {}", binary.display(), said.trim());
    let file = sh(Command::new("file").arg("-b").arg(binary))?;
    ensure!(file.contains("statically linked"), "file {}: {}", binary.display(), file.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_binary_fails_the_static_check() {
        // This test binary links glibc dynamically.
        let me = std::env::current_exe().unwrap();
        let err = check_static(&me).unwrap_err().to_string();
        assert!(err.contains("interpreter") || err.contains("dynamic"), "{err}");
    }

    #[test]
    fn a_static_binary_passes_the_static_check() {
        let busybox = Path::new("/bin/busybox");
        if !busybox.is_file() {
            assert!(std::env::var("CI").is_err(), "busybox-static is a set-up package: /bin/busybox missing under CI");
            return;
        }
        check_static(busybox).unwrap();
    }
}
