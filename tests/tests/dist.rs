//! What a user who copies only the binary gets from it: `--version` names the commit and says
//! what is built in, and `cctrace completions SHELL` and `cctrace man` print what the package
//! installs, in a form the shells and man accept. (The static build, the package and the boot
//! with busybox only are checked by `cargo xtask dist`, which the suite runs.)

use cctrace_lab::child::{collect_within, OutputWithin, CHILD_DEADLINE};
use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};
use cctrace_tests::cctrace_bin;

fn cctrace(args: &[&str]) -> Result<std::process::Output> {
    Command::new(cctrace_bin())
        .args(args)
        .output_within(CHILD_DEADLINE)
        .with_context(|| format!("running cctrace {}", args.join(" ")))
}

fn stdout_of(args: &[&str]) -> Result<String> {
    let out = cctrace(args)?;
    ensure!(
        out.status.success(),
        "cctrace {}: {} {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn version_names_the_commit_and_what_is_built_in() -> Result<()> {
    let text = stdout_of(&["--version"])?;
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
    assert!(text.starts_with(&format!("cctrace {}\n", env!("CARGO_PKG_VERSION"))), "{text}");
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output_within(CHILD_DEADLINE);
    match head {
        Ok(head) if head.status.success() => {
            let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
            assert_eq!(field("commit:"), head, "the commit the binary was built from: {text}");
        }
        // A source tree without git (a release tarball) says so instead of naming a commit.
        _ => assert!(field("commit:").starts_with("unknown"), "{text}"),
    }
    // The architecture it was built for: the tests run on the machine that built it.
    assert_eq!(field("architecture:"), std::env::consts::ARCH, "{text}");
    if std::env::var("CCTRACE_REQUIRE_EBPF").is_ok_and(|v| v == "1") {
        // The suite builds with the whole toolchain: nothing may be missing.
        assert_eq!(field("eBPF programs:"), "built in", "{text}");
        assert_eq!(field("deep mode:"), "built in", "{text}");
    }
    // The test build is the ordinary dynamic one; the static one says so (cargo xtask dist).
    assert!(field("linked:").starts_with("dynamic"), "{text}");
    // -V stays one line, for scripts.
    assert_eq!(stdout_of(&["-V"])?.trim(), format!("cctrace {}", env!("CARGO_PKG_VERSION")));
    Ok(())
}

/// Run `shell` with `args` and the script on a file; succeed only if it exits 0.
fn shell_accepts(shell: &str, args: &[&str], script: &str, file_name: &str) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("cctrace-completions-{}-{shell}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(file_name);
    std::fs::write(&path, script)?;
    let out = Command::new(shell)
        .args(args)
        .arg(&path)
        .output_within(CHILD_DEADLINE)
        .with_context(|| format!("running {shell}"));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    ensure!(out.status.success(), "{shell} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn completions_parse_in_their_shells_and_complete_the_subcommands() -> Result<()> {
    let bash = stdout_of(&["completions", "bash"])?;
    for word in ["serve", "record", "replay", "completions", "man", "--deep", "--netns"] {
        assert!(bash.contains(word), "the bash completions lack {word}");
    }
    shell_accepts("bash", &["-n"], &bash, "cctrace")?;
    // Loaded, it registers a completion function for cctrace.
    let registered = shell_accepts("bash", &["-c", "source \"$0\" && complete -p cctrace"], &bash, "cctrace")?;
    assert!(registered.contains("cctrace"), "{registered}");
    for (shell, args, file) in [("zsh", &["-n"][..], "_cctrace"), ("fish", &["--no-execute"][..], "cctrace.fish")] {
        let script = stdout_of(&["completions", shell])?;
        if Command::new(shell).arg("--version").stdout(Stdio::null()).status_within(CHILD_DEADLINE).is_err() {
            cctrace_lab::skip::skip(&format!("{shell} is not installed (a set-up package: cargo xtask setup)"));
            continue;
        }
        shell_accepts(shell, args, &script, file)?;
    }
    Ok(())
}

#[test]
fn a_shell_cctrace_does_not_know_is_one_line_and_status_2() -> Result<()> {
    let out = cctrace(&["completions", "tcsh"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("tcsh"), "{stderr}");
    Ok(())
}

#[test]
fn the_man_page_renders_and_documents_the_command_line() -> Result<()> {
    let page = stdout_of(&["man"])?;
    let mut man = Command::new("man")
        .args(["--warnings", "-l", "-"])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running man (man-db)")?;
    man.stdin.take().context("stdin")?.write_all(page.as_bytes())?;
    let out = collect_within(&mut man, CHILD_DEADLINE, "man")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "man -l: {warnings}");
    assert!(warnings.trim().is_empty(), "man -l warns: {warnings}");
    for wanted in ["NAME", "SYNOPSIS", "cctrace", "--deep", "--interval", "serve", "completions"] {
        assert!(text.contains(wanted), "the rendered page lacks {wanted:?}:\n{text}");
    }
    Ok(())
}
