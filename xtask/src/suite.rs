//! The suite's test binaries: built once by cargo, then run one after another, each one's
//! output printed whole with its time, and one line counting every test at the end.
//!
//! One at a time, on purpose: a second lane of binaries beside the diagnosis tests (emulated
//! WAN paths, which need a core of their own to keep their timing) made the emulator release
//! 9-36 % of packets late on this 2-core machine, with deep mode's tests beside it, and the
//! diagnosis tests rightly refused to judge those paths. Every binary here drives real traffic.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// One test executable cargo built, or the doc tests (which cargo builds as it runs them).
struct TestBinary {
    /// `tests/diagnosis.rs (cctrace-tests: diagnosis)`.
    label: String,
    executable: PathBuf,
    args: Vec<String>,
    /// The package's directory: cargo runs a test binary there, with CARGO_MANIFEST_DIR set.
    package_dir: PathBuf,
    package_name: String,
}

/// What a binary printed and how it ended.
struct Outcome {
    label: String,
    output: String,
    success: bool,
    took: Duration,
}

/// Build every test binary of `cargo test <args>` without running them, run them one after
/// another with the doc tests last, and close with one line counting every test.
pub(crate) fn run(workspace: &Path, args: &[&str]) -> Result<()> {
    let mut binaries = build(workspace, args)?;
    binaries.push(TestBinary {
        label: "doc tests".into(),
        executable: PathBuf::from("cargo"),
        args: ["test"].iter().chain(args).chain(&["--doc"]).map(ToString::to_string).collect(),
        package_dir: workspace.to_path_buf(),
        package_name: String::new(),
    });
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    for binary in &binaries {
        let outcome = run_one(binary);
        println!("     Running {} ({:.0} s)", outcome.label, outcome.took.as_secs_f64());
        print!("{}", outcome.output);
        let (p, f, i) = count(&outcome.output);
        passed += p;
        failed += f;
        ignored += i;
        if !outcome.success {
            failures.push(outcome.label);
        }
    }
    println!("{passed} passed, {failed} failed, {ignored} skipped");
    if !failures.is_empty() {
        bail!("test binaries failed: {}", failures.join(", "));
    }
    Ok(())
}

/// `cargo test --no-run` with JSON messages: the test executables, in cargo's order.
fn build(workspace: &Path, args: &[&str]) -> Result<Vec<TestBinary>> {
    let mut cargo = super::cargo(&["test"]);
    cargo.current_dir(workspace).args(args).args(["--no-run", "--message-format=json-render-diagnostics"]);
    let shown = format!("{cargo:?}");
    let mut child = cargo
        .env("PATH", super::tool_path())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {shown}"))?;
    let mut binaries = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
            if let Some(binary) = test_binary(&msg) {
                binaries.push(binary);
            }
        }
    }
    let status = child.wait().with_context(|| format!("waiting for {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    if binaries.is_empty() {
        bail!("{shown} built no test binary");
    }
    Ok(binaries)
}

/// A compiler-artifact message for a test executable, as a [`TestBinary`].
fn test_binary(msg: &Value) -> Option<TestBinary> {
    if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(msg["executable"].as_str()?);
    let manifest = Path::new(msg["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let target = msg["target"]["name"].as_str()?.to_string();
    let src = Path::new(msg["target"]["src_path"].as_str()?);
    let package_id = msg["package_id"].as_str()?;
    // "path+file:///work/main/tests#cctrace-tests@0.1.0" or ".../tracer#0.1.0" (name = dir).
    let fragment = package_id.rsplit('#').next()?;
    let package_name = match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => package_dir.file_name()?.to_str()?.to_string(),
    };
    let shown_src = src.strip_prefix(&package_dir).unwrap_or(src).display().to_string();
    Some(TestBinary {
        label: format!("{shown_src} ({package_name}: {target})"),
        executable,
        args: Vec::new(),
        package_dir,
        package_name,
    })
}

fn run_one(binary: &TestBinary) -> Outcome {
    let start = Instant::now();
    eprintln!("xtask: started {}", binary.label);
    let result = Command::new(&binary.executable)
        .args(&binary.args)
        .current_dir(&binary.package_dir)
        .env("PATH", super::tool_path())
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .env("CARGO_PKG_NAME", &binary.package_name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let mut stderr = child.stderr.take().expect("piped");
            let err_reader = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text);
                text
            });
            let mut output = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut output)?;
            }
            let status = child.wait()?;
            let stderr_text = err_reader.join().unwrap_or_default();
            if !stderr_text.is_empty() {
                output.push_str(&stderr_text);
                if !output.ends_with('\n') {
                    output.push('\n');
                }
            }
            Ok((status.success(), output))
        });
    let (success, output) = match result {
        Ok(done) => done,
        Err(e) => (false, format!("could not run {}: {e}\n", binary.executable.display())),
    };
    Outcome { label: binary.label.clone(), output, success, took: start.elapsed() }
}

/// Passed, failed and ignored counts from libtest's `test result:` lines.
fn count(output: &str) -> (u64, u64, u64) {
    let (mut passed, mut failed, mut ignored) = (0, 0, 0);
    for rest in output.lines().filter_map(|l| l.strip_prefix("test result: ")) {
        for part in rest.split(';') {
            let mut words: VecDeque<&str> = part.split_whitespace().collect();
            let (Some(what), Some(n)) = (words.pop_back(), words.pop_back()) else { continue };
            let n: u64 = n.parse().unwrap_or(0);
            match what {
                "passed" => passed += n,
                "failed" => failed += n,
                "ignored" => ignored += n,
                _ => {}
            }
        }
    }
    (passed, failed, ignored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_result_line() {
        let out = "running 2 tests\ntest a ... ok\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
                   test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n";
        assert_eq!(count(out), (5, 2, 1));
    }

    #[test]
    fn reads_test_artifacts_only() {
        let msg: Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#cctrace-tests@0.1.0",
                "manifest_path":"/w/tests/Cargo.toml","target":{"kind":["test"],"name":"diagnosis",
                "src_path":"/w/tests/tests/diagnosis.rs"},"profile":{"test":true},
                "executable":"/w/target/debug/deps/diagnosis-1"}"#,
        )
        .unwrap();
        let b = test_binary(&msg).unwrap();
        assert_eq!(b.package_name, "cctrace-tests");
        assert_eq!(b.label, "tests/diagnosis.rs (cctrace-tests: diagnosis)");
        assert_eq!(b.package_dir, PathBuf::from("/w/tests"));
        let lib: Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tracer#0.1.0",
                "manifest_path":"/w/tracer/Cargo.toml","target":{"kind":["lib"],"name":"tracer",
                "src_path":"/w/tracer/src/lib.rs"},"profile":{"test":false},"executable":null}"#,
        )
        .unwrap();
        assert!(test_binary(&lib).is_none());
    }
}
