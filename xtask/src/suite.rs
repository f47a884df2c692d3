//! The suite's test binaries: built once by cargo, then run one after another, each one's
//! output printed whole with its time, and one line counting every test at the end.
//!
//! The checks that need no test binary run beside them at idle priority (`beside.rs`): the
//! suite hands them its cctrace once built and says when the tracer package's tests are done.
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

use crate::beside::{Gate, Gates};

/// One test executable cargo built.
struct TestBinary {
    /// `tests/diagnosis.rs (cctrace-tests: diagnosis)`.
    label: String,
    executable: PathBuf,
    args: Vec<String>,
    /// The package's directory: cargo runs a test binary there, with CARGO_MANIFEST_DIR set.
    package_dir: PathBuf,
    package_name: String,
    /// The test target's name (`diagnosis`).
    target: String,
}

/// What a binary printed and how it ended.
struct Outcome {
    label: String,
    output: String,
    success: bool,
    took: Duration,
}

/// Build every test binary of `cargo test <args>` without running them, run them one after
/// another, and close with one line counting their tests. (The doc tests, which cargo compiles
/// as it runs them, run beside: see `beside.rs`.)
///
/// The tests run a copy of the built cctrace (`$CCTRACE_BIN`), which the kernel matrix beside
/// them runs too; the tracer package's own tests, which run target/debug/cctrace by path, go
/// first, and once they are done the dist check beside may relink that file statically.
pub(crate) fn run(workspace: &Path, args: &[&str], gates: &Gates) -> Result<Tally> {
    let Built { mut binaries, cctrace } = crate::step("test build", || build(workspace, args))?;
    let suite_binary = gates.suite_binary();
    std::fs::copy(&cctrace, &suite_binary)
        .with_context(|| format!("copying {} to {}", cctrace.display(), suite_binary.display()))?;
    gates.open(Gate::BinaryReady)?;
    // A stable sort: the tracer package's binaries first (the dist check beside waits for them),
    // the ones that load both cores last (by then the checks beside, which slowed them by a tenth
    // when they met, are done), the rest in cargo's order.
    binaries.sort_by_key(|b| (b.package_name != TRACER_PACKAGE, LOADS_BOTH_CORES.contains(&b.target.as_str())));
    let tracer_binaries = binaries.iter().filter(|b| b.package_name == TRACER_PACKAGE).count();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for (i, binary) in binaries.iter().enumerate() {
        if i == tracer_binaries {
            gates.open(Gate::TracerTestsDone)?;
        }
        let outcome = run_one(binary, &suite_binary);
        println!("     Running {} ({:.0} s)", outcome.label, outcome.took.as_secs_f64());
        print!("{}", outcome.output);
        tally.add(Tally::of(&outcome.output));
        if !outcome.success {
            failures.push(outcome.label);
        }
    }
    if tracer_binaries == binaries.len() {
        gates.open(Gate::TracerTestsDone)?;
    }
    println!("test binaries: {tally}");
    if !failures.is_empty() {
        bail!("test binaries failed: {}", failures.join(", "));
    }
    Ok(tally)
}

/// Test binaries that keep both cores busy (deep mode's BBR and CUBIC twins at line rate, beside
/// plain runs): run last, after the checks beside the suite are likely done.
const LOADS_BOTH_CORES: &[&str] = &["deep"];

/// The package whose tests run the cctrace binary by its path in target/ (`CARGO_BIN_EXE_cctrace`).
const TRACER_PACKAGE: &str = "tracer";

/// What `cargo test --no-run` built: the test executables in cargo's order, and cctrace.
struct Built {
    binaries: Vec<TestBinary>,
    cctrace: PathBuf,
}

/// `cargo test --no-run` with JSON messages.
fn build(workspace: &Path, args: &[&str]) -> Result<Built> {
    let mut cargo = super::cargo(&["test"]);
    cargo.current_dir(workspace).args(args).args(["--no-run", "--message-format=json-render-diagnostics"]);
    let shown = format!("{cargo:?}");
    let mut child = cargo
        .env("PATH", super::tool_path())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {shown}"))?;
    let mut binaries = Vec::new();
    let mut cctrace = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
            if let Some(binary) = test_binary(&msg) {
                binaries.push(binary);
            } else if let Some(path) = cctrace_binary(&msg) {
                cctrace = Some(path);
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
    let cctrace = cctrace.with_context(|| format!("{shown} built no cctrace binary"))?;
    Ok(Built { binaries, cctrace })
}

/// A compiler-artifact message for the cctrace binary itself (not its test harness).
fn cctrace_binary(msg: &Value) -> Option<PathBuf> {
    let is_it = msg["reason"] == "compiler-artifact"
        && msg["profile"]["test"] == false
        && msg["target"]["name"] == "cctrace"
        && msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin"));
    is_it.then(|| msg["executable"].as_str().map(PathBuf::from)).flatten()
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
        target,
    })
}

fn run_one(binary: &TestBinary, cctrace: &Path) -> Outcome {
    let start = Instant::now();
    eprintln!("xtask: started {}", binary.label);
    let result = Command::new(&binary.executable)
        .args(&binary.args)
        .current_dir(&binary.package_dir)
        .env("PATH", super::tool_path())
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .env("CARGO_PKG_NAME", &binary.package_name)
        .env("CCTRACE_BIN", cctrace)
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

/// Passed, failed and ignored tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
}

impl Tally {
    /// The counts of libtest's `test result:` lines in `output`.
    pub(crate) fn of(output: &str) -> Self {
        let mut tally = Self::default();
        for rest in output.lines().filter_map(|l| l.strip_prefix("test result: ")) {
            for part in rest.split(';') {
                let mut words: VecDeque<&str> = part.split_whitespace().collect();
                let (Some(what), Some(n)) = (words.pop_back(), words.pop_back()) else { continue };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "passed" => tally.passed += n,
                    "failed" => tally.failed += n,
                    "ignored" => tally.ignored += n,
                    _ => {}
                }
            }
        }
        tally
    }

    pub(crate) fn add(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed, {} skipped", self.passed, self.failed, self.ignored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_result_line() {
        let out = "running 2 tests\ntest a ... ok\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
                   test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n";
        assert_eq!(Tally::of(out), Tally { passed: 5, failed: 2, ignored: 1 });
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
