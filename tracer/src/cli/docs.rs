//! What the package installs beside the binary, generated from the clap definition so it never
//! drifts from it: the man page (`cctrace man`), shell completions (`cctrace completions SHELL`),
//! and the build facts `cctrace --version` prints.

use std::io::Write;

use anyhow::{Context, Result};
use clap_complete::Shell;

/// The name users type, and the one completions register for.
const BIN_NAME: &str = "cctrace";

/// `cctrace --version`: the version, the commit it was built from, the architecture it was built
/// for (`x86_64`, `aarch64`: one binary per architecture), and what is built in. The
/// eBPF and deep-mode lines come from build.rs, which leaves an empty object (and says why) when
/// the build machine lacked the toolchain for one of them.
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let built_in = |why_not: &str| {
            if why_not.is_empty() {
                "built in".to_string()
            } else {
                format!("not built in ({why_not})")
            }
        };
        // Asked of the running process, not of how this crate was compiled: a static binary has
        // no dynamic loader mapped (the dist build, cargo xtask dist, links everything in).
        let dynamic = std::fs::read_to_string("/proc/self/maps").is_ok_and(|m| m.contains("/ld-linux"));
        let linkage = if !dynamic {
            "static (needs no shared library)"
        } else {
            "dynamic (needs the build host's glibc, libelf and zlib)"
        };
        format!(
            "{}\ncommit: {}\narchitecture: {}\neBPF programs: {}\ndeep mode: {}\nlinked: {linkage}",
            env!("CARGO_PKG_VERSION"),
            env!("CCTRACE_COMMIT"),
            std::env::consts::ARCH,
            built_in(env!("CCTRACE_EBPF_UNAVAILABLE")),
            built_in(env!("CCTRACE_DEEP_UNAVAILABLE")),
        )
    })
}

/// Write the completion script for `shell` (what the package puts in that shell's directory).
pub fn completions(mut command: clap::Command, shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut buffer = Vec::new();
    clap_complete::generate(shell, &mut command, BIN_NAME, &mut buffer);
    out.write_all(&buffer).and_then(|()| out.flush()).context("writing the completions")
}

/// Write the man page, section 1, in roff (what the package installs as cctrace.1.gz).
pub fn man_page(command: clap::Command, out: &mut dyn Write) -> Result<()> {
    let mut buffer = Vec::new();
    clap_mangen::Man::new(command).render(&mut buffer).context("rendering the man page")?;
    out.write_all(&buffer).and_then(|()| out.flush()).context("writing the man page")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> clap::Command {
        clap::Command::new(BIN_NAME)
            .about("sample")
            .arg(clap::Arg::new("deep").long("deep").action(clap::ArgAction::SetTrue).help("deep mode"))
            .subcommand(clap::Command::new("serve").about("serve metrics"))
    }

    #[test]
    fn the_man_page_names_the_options_and_subcommands() {
        let mut out = Vec::new();
        man_page(sample(), &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(page.starts_with(".ie") || page.contains(".TH cctrace 1"), "{page}");
        assert!(page.contains("deep mode") && page.contains("serve"), "{page}");
    }

    #[test]
    fn completions_register_for_cctrace_in_each_shell() {
        for (shell, registration) in [
            (Shell::Bash, "complete -F _cctrace"),
            (Shell::Zsh, "#compdef cctrace"),
            (Shell::Fish, "complete -c cctrace"),
        ] {
            let mut out = Vec::new();
            completions(sample(), shell, &mut out).unwrap();
            let script = String::from_utf8(out).unwrap();
            assert!(script.contains(registration), "{shell}: {script}");
            assert!(script.contains("serve"), "{shell} completes the subcommands: {script}");
        }
    }

    #[test]
    fn the_long_version_says_what_is_built_in() {
        let text = long_version();
        assert!(text.starts_with(env!("CARGO_PKG_VERSION")), "{text}");
        assert!(text.contains(&format!("\narchitecture: {}\n", std::env::consts::ARCH)), "{text}");
        for line in ["commit: ", "eBPF programs: ", "deep mode: ", "linked: "] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}
