//! Booting a guest under qemu (TCG) until its init powers it off, and reading the sections its
//! init wrote to the second serial port.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::hook_modes::Hooks;
use super::initramfs::initramfs;
use super::mode_checks::check_guest;
use super::stage_checks::Stage;
use super::table::GuestResult;
use super::Kernel;
use crate::arch::Arch;

/// A guest that has not powered off by then is stuck.
const GUEST_TIMEOUT: Duration = Duration::from_secs(420);

/// Pack the initramfs of `k` from the `common` tree, boot it and check what its init wrote.
pub(crate) fn boot_and_check(work: &Path, common: &Path, k: &Kernel) -> GuestResult {
    check_booted(work, k, initramfs(work, common, k, &guest_name(k)))
}

/// Boot the kernel with `initrd` (or say why there is none) and check what its init wrote.
pub(super) fn check_booted(work: &Path, k: &Kernel, initrd: Result<PathBuf>) -> GuestResult {
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
pub(super) fn guest_name(k: &Kernel) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_split_on_their_markers_and_an_unfinished_one_is_dropped() {
        let text = "noise\n@@BEGIN kernel\n6.1.0\n@@END kernel\n@@BEGIN jsonl tp_btf\n{}\n{}\n@@END jsonl tp_btf\n@@BEGIN cut\nhalf";
        let s = parse_sections(text);
        assert_eq!(s["kernel"], "6.1.0\n");
        assert_eq!(s["jsonl tp_btf"], "{}\n{}\n");
        assert!(!s.contains_key("cut"));
    }
}
