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
    /// Tests that returned early because this machine cannot run them (`cctrace_lab::skip`):
    /// libtest counts them as passed.
    skipped_at_run_time: u64,
    /// How long each test that holds the machine-wide lock held it (`cctrace_lab::serial`).
    test_times: Vec<(String, f64)>,
}

/// The longest any test binary may run. The slowest takes about 3 minutes on a loaded 2-core
/// machine (deep mode, 107-193 s measured); one still running after this is stuck (a child
/// process that never ends, a lost signal), and is stopped so the suite ends and says which
/// tests had not finished, instead of waiting for CI's own limit.
const BINARY_DEADLINE: Duration = Duration::from_secs(12 * 60);

/// The variable the skip rule (`cctrace_lab::skip`) reads: a file to append each skip to.
const SKIP_LOG_ENV: &str = "CCTRACE_SKIP_LOG";
/// The variable the machine-wide test lock (`cctrace_lab::serial`) reads: a file to append
/// each test's time holding it to.
const TIMES_ENV: &str = "CCTRACE_TEST_TIMES";
/// How many of the slowest tests the suite names at its end.
const SLOWEST_SHOWN: usize = 3;

/// Build every test binary of `cargo test <args>` without running them, run them one after
/// another, and close with one line counting their tests. (The doc tests, which cargo compiles
/// as it runs them, run beside: see `beside.rs`.)
///
/// The tests run a copy of the built cctrace (`$CCTRACE_BIN`), which the kernel matrix beside
/// them runs too; the tracer package's own tests, which run target/debug/cctrace by path, go
/// first, and once they are done the dist check beside may relink that file statically.
pub(crate) fn run(workspace: &Path, args: &[&str], gates: &Gates) -> Result<Ran> {
    let build_started = Instant::now();
    let Built { mut binaries, cctrace } = crate::step("test build", || build(workspace, args))?;
    let build_secs = build_started.elapsed().as_secs_f64();
    let suite_binary = gates.suite_binary();
    std::fs::copy(&cctrace, &suite_binary)
        .with_context(|| format!("copying {} to {}", cctrace.display(), suite_binary.display()))?;
    gates.open(Gate::BinaryReady)?;
    // A stable sort: the tracer package's binaries first (the dist check beside waits for them),
    // the ones that load both cores last (by then the checks beside, which slowed them by a tenth
    // when they met, are done), the rest in cargo's order.
    // Those no emulator may run beside come right after the tracer package's: the kernel matrix
    // beside waits for them.
    // The ones that wait for the container image the dist build beside writes go late, when it
    // is there (run early, the runtimes test waited a minute for it).
    binaries.sort_by_key(|b| {
        (
            b.package_name != TRACER_PACKAGE,
            !NO_EMULATOR_BESIDE.contains(&b.target.as_str()),
            LOADS_BOTH_CORES.contains(&b.target.as_str()),
            NEEDS_THE_IMAGE.contains(&b.target.as_str()),
        )
    });
    let tracer_binaries = binaries.iter().filter(|b| b.package_name == TRACER_PACKAGE).count();
    let quiet_done = tracer_binaries
        + binaries
            .iter()
            .filter(|b| b.package_name != TRACER_PACKAGE && NO_EMULATOR_BESIDE.contains(&b.target.as_str()))
            .count();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let mut times = Times::default();
    for (i, binary) in binaries.iter().enumerate() {
        if i == tracer_binaries {
            gates.open(Gate::TracerTestsDone)?;
        }
        if i == quiet_done {
            gates.open(Gate::QuietTestsDone)?;
        }
        let outcome = run_one(binary, gates);
        println!("     Running {} ({:.0} s)", outcome.label, outcome.took.as_secs_f64());
        print!("{}", outcome.output);
        tally.add(Tally::of(&outcome.output).with_skips(outcome.skipped_at_run_time));
        times.add(&outcome);
        if !outcome.success {
            failures.push(outcome.label);
        }
    }
    if tracer_binaries == binaries.len() {
        gates.open(Gate::TracerTestsDone)?;
    }
    if quiet_done == binaries.len() {
        gates.open(Gate::QuietTestsDone)?;
    }
    print!("{times}");
    println!("test binaries: {tally}");
    if !failures.is_empty() {
        bail!("test binaries failed: {}", failures.join(", "));
    }
    Ok(Ran { tally, build_secs, slowest: times.slowest() })
}

/// What the test lane did: its tests' counts, its build's time, its slowest tests.
pub(crate) struct Ran {
    pub(crate) tally: Tally,
    pub(crate) build_secs: f64,
    /// (binary, test, seconds holding the machine-wide lock), slowest first.
    pub(crate) slowest: Vec<(String, String, f64)>,
}

/// Test binaries that keep both cores busy (deep mode's BBR and CUBIC twins at line rate, beside
/// plain runs): run last, after the checks beside the suite are likely done.
const LOADS_BOTH_CORES: &[&str] = &["deep"];

/// Test binaries that run cctrace's container image, which the dist build beside the suite
/// writes a few minutes into the run (`beside.rs`): last but the ones that load both cores.
const NEEDS_THE_IMAGE: &[&str] = &["runtimes"];

/// Test binaries no qemu guest may run beside: `live`'s tcp_probe window test judges that
/// windows save runs, and beside an emulator the attach/detach cycle cctrace measures costs more
/// than they save, so it rightly keeps the program attached (the test failed 3 of 3 times with
/// a guest beside, passed without). They run first after the tracer package's (35 s).
const NO_EMULATOR_BESIDE: &[&str] = &["live"];

/// The package whose tests run the cctrace binary by its path in target/ (`CARGO_BIN_EXE_cctrace`).
const TRACER_PACKAGE: &str = "tracer";

/// What `cargo test --no-run` built: the test executables in cargo's order, and cctrace.
struct Built {
    binaries: Vec<TestBinary>,
    cctrace: PathBuf,
}

/// `cargo test --no-run` with JSON messages.
fn build(workspace: &Path, args: &[&str]) -> Result<Built> {
    let mut cargo = super::suite_cargo(&["test"])?;
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

fn run_one(binary: &TestBinary, gates: &Gates) -> Outcome {
    let start = Instant::now();
    eprintln!("xtask: started {}", binary.label);
    let log =
        |what: &str| std::env::temp_dir().join(format!("cctrace-{what}-{}-{}", std::process::id(), binary.target));
    let (skip_log, times_log) = (log("skips"), log("times"));
    let _ = std::fs::remove_file(&skip_log);
    let _ = std::fs::remove_file(&times_log);
    let (success, output) = match run_within(binary, gates, &[(SKIP_LOG_ENV, &skip_log), (TIMES_ENV, &times_log)]) {
        Ok(done) => done,
        Err(e) => (false, format!("could not run {}: {e:#}\n", binary.executable.display())),
    };
    let skips = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let times = std::fs::read_to_string(&times_log).unwrap_or_default();
    let _ = std::fs::remove_file(&skip_log);
    let _ = std::fs::remove_file(&times_log);
    Outcome {
        label: binary.label.clone(),
        output,
        success,
        took: start.elapsed(),
        skipped_at_run_time: skips.lines().count() as u64,
        test_times: test_times(&times),
    }
}

/// `name<TAB>seconds` lines, as `cctrace_lab::serial` writes them.
fn test_times(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let (name, secs) = l.rsplit_once('\t')?;
            Some((name.to_string(), secs.trim().parse().ok()?))
        })
        .collect()
}

/// What the run's end says of where its time went: each binary's time, slowest first, and the
/// slowest tests.
#[derive(Default)]
struct Times {
    binaries: Vec<(String, f64)>,
    /// (binary, test, seconds holding the machine-wide lock)
    tests: Vec<(String, String, f64)>,
}

impl Times {
    fn add(&mut self, outcome: &Outcome) {
        self.binaries.push((outcome.label.clone(), outcome.took.as_secs_f64()));
        let tests = outcome.test_times.iter().map(|(test, secs)| (outcome.label.clone(), test.clone(), *secs));
        self.tests.extend(tests);
    }

    /// The [`SLOWEST_SHOWN`] slowest tests, slowest first.
    fn slowest(&self) -> Vec<(String, String, f64)> {
        let mut tests = self.tests.clone();
        tests.sort_by(|a, b| b.2.total_cmp(&a.2));
        tests.truncate(SLOWEST_SHOWN);
        tests
    }
}

impl std::fmt::Display for Times {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut binaries: Vec<&(String, f64)> = self.binaries.iter().filter(|(_, secs)| *secs >= 0.5).collect();
        binaries.sort_by(|a, b| b.1.total_cmp(&a.1));
        writeln!(f, "test binaries by time ({:.0} s in all):", self.binaries.iter().map(|(_, s)| s).sum::<f64>())?;
        for (label, secs) in binaries {
            writeln!(f, "  {secs:5.0} s  {label}")?;
        }
        writeln!(f, "slowest tests (time holding the machine-wide test lock):")?;
        for (binary, test, secs) in self.slowest() {
            writeln!(f, "  {secs:5.0} s  {test} ({binary})")?;
        }
        Ok(())
    }
}

/// Run one test binary, with its stdout and stderr joined and `logs` (variable, file) in its
/// environment; after [`BINARY_DEADLINE`] it is killed with
/// every process under it, and the output says which tests had not finished. (It stays in the
/// suite's process group, so a Ctrl-C of the suite reaches it too.)
fn run_within(binary: &TestBinary, gates: &Gates, logs: &[(&str, &Path)]) -> Result<(bool, String)> {
    let deadline = BINARY_DEADLINE;
    let mut child = test_command(binary, gates)
        .envs(logs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting it")?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= until {
            kill_tree(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut output = stdout.join().unwrap_or_default();
    let stderr_text = stderr.join().unwrap_or_default();
    if !stderr_text.is_empty() {
        output.push_str(&stderr_text);
        if !output.ends_with('\n') {
            output.push('\n');
        }
    }
    match status {
        Some(status) => Ok((status.success(), output)),
        None => {
            let listed = list_tests(binary, gates);
            let unfinished = unfinished_tests(&listed, &output);
            output.push_str(&format!(
                "xtask: {} was still running after {:.0} s and was stopped; tests not finished: {}\n",
                binary.label,
                deadline.as_secs_f64(),
                if unfinished.is_empty() { "(unknown)".to_string() } else { unfinished.join(", ") }
            ));
            Ok((false, output))
        }
    }
}

/// SIGKILL `pid` and every process under it (children first found, then killed top down, so
/// none is re-parented out of reach in between).
fn kill_tree(pid: u32) {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(children_of(tree[i]));
        i += 1;
    }
    let pids: Vec<String> = tree.iter().map(u32::to_string).collect();
    let _ = Command::new("kill").arg("-KILL").arg("--").args(&pids).status();
}

/// The processes whose parent is `pid` (from /proc/PID/stat: the field after the command).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(pid)
        })
        .collect()
}

/// The command that runs a test binary as cargo would, with the suite's cctrace and where the
/// dist step beside will write its container image (tests/src/runtimes/image.rs waits for it).
fn test_command(binary: &TestBinary, gates: &Gates) -> Command {
    let mut cmd = Command::new(&binary.executable);
    cmd.args(&binary.args)
        .current_dir(&binary.package_dir)
        .env("PATH", super::tool_path())
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .env("CARGO_PKG_NAME", &binary.package_name)
        .env("CCTRACE_BIN", gates.suite_binary())
        .env("CCTRACE_IMAGE", gates.image_archive());
    cmd
}

/// The names of a binary's tests (`--list --format terse`: `name: test` lines).
fn list_tests(binary: &TestBinary, gates: &Gates) -> Vec<String> {
    let out = test_command(binary, gates).args(["--list", "--format", "terse"]).stdin(Stdio::null()).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect()
}

/// The listed tests libtest did not report a result for (`test NAME ... ok|FAILED|ignored`).
fn unfinished_tests(listed: &[String], output: &str) -> Vec<String> {
    let reported: std::collections::HashSet<&str> =
        output.lines().filter_map(|l| l.strip_prefix("test ")?.split_once(" ... ").map(|(name, _)| name)).collect();
    listed.iter().filter(|t| !reported.contains(t.as_str())).cloned().collect()
}

/// Passed, failed and skipped tests: ignored ones, and those that returned early because this
/// machine cannot run them (which libtest counts as passed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
    pub(crate) skipped_at_run_time: u64,
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

    /// Move `skips` tests that returned early from passed to skipped.
    pub(crate) fn with_skips(mut self, skips: u64) -> Self {
        let moved = skips.min(self.passed);
        self.passed -= moved;
        self.skipped_at_run_time += moved;
        self
    }

    pub(crate) fn add(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.skipped_at_run_time += other.skipped_at_run_time;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed,
            self.failed,
            self.ignored + self.skipped_at_run_time
        )?;
        if self.skipped_at_run_time > 0 {
            write!(f, " ({} of them at run time: this machine cannot run them)", self.skipped_at_run_time)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_result_line() {
        let out = "running 2 tests\ntest a ... ok\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
                   test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n";
        assert_eq!(Tally::of(out), Tally { passed: 5, failed: 2, ignored: 1, skipped_at_run_time: 0 });
    }

    #[test]
    fn tests_that_skipped_at_run_time_count_as_skipped_not_passed() {
        let out = "test result: ok. 4 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1s\n";
        let tally = Tally::of(out).with_skips(2);
        assert_eq!(tally, Tally { passed: 2, failed: 0, ignored: 1, skipped_at_run_time: 2 });
        assert_eq!(
            tally.to_string(),
            "2 passed, 0 failed, 3 skipped (2 of them at run time: this machine cannot run them)"
        );
    }

    #[test]
    fn the_end_names_binaries_by_time_and_the_slowest_tests() {
        let outcome = |label: &str, secs: u64, times: &str| Outcome {
            label: label.to_string(),
            output: String::new(),
            success: true,
            took: Duration::from_secs(secs),
            skipped_at_run_time: 0,
            test_times: test_times(times),
        };
        let mut times = Times::default();
        times.add(&outcome("tests/a.rs", 30, "a::one\t10.4\na::two\t19.2\nnot a line\n"));
        times.add(&outcome("tests/b.rs", 50, "b::slow\t49.0\n"));
        times.add(&outcome("src/lib.rs", 0, ""));
        times.add(&outcome("tests/c.rs", 5, "c::quick\t4.0\n"));
        assert_eq!(
            times.to_string(),
            "test binaries by time (85 s in all):\n     50 s  tests/b.rs\n     30 s  tests/a.rs\n      5 s  tests/c.rs\n\
             slowest tests (time holding the machine-wide test lock):\n     49 s  b::slow (tests/b.rs)\n     \
             19 s  a::two (tests/a.rs)\n     10 s  a::one (tests/a.rs)\n"
        );
    }

    #[test]
    fn unfinished_tests_are_the_listed_ones_without_a_result() {
        let listed = vec!["a".to_string(), "b::c".to_string(), "d".to_string()];
        let out = "running 3 tests\ntest a ... ok\ntest d ... FAILED\n";
        assert_eq!(unfinished_tests(&listed, out), vec!["b::c".to_string()]);
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
