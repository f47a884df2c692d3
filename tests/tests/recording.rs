//! Recording and replay against the real kernel: `cctrace demo --record` on the lossy path,
//! then `cctrace replay --json` prints what the live run printed; the file is private, never
//! overwrites, survives being cut in half, and `zstdcat` reads it.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use cctrace_tests::{cctrace_bin, require_kernel, serial};
use serde_json::Value;

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("cctrace-rec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Run {
    code: i32,
    lines: Vec<Value>,
    stderr: String,
}

fn cctrace(args: &[&str]) -> Result<Run> {
    let out = Command::new(cctrace_bin()).args(args).output_within(CHILD_DEADLINE).context("running cctrace")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect::<Result<Vec<Value>>>()?;
    Ok(Run { code: out.status.code().unwrap_or(-1), lines, stderr: String::from_utf8_lossy(&out.stderr).into() })
}

fn flagged(lines: &[Value], comm: &str) -> bool {
    lines.iter().any(|v| v["type"] == "flow" && v["owner"]["comm"] == comm && v["flagged"] == true)
}

/// Seconds from the first line to the first flagged flow of `comm`, by the lines' own times.
fn time_to_flag(lines: &[Value], comm: &str) -> Option<f64> {
    let t0 = lines.iter().find_map(|v| v["time"].as_f64())?;
    lines
        .iter()
        .find(|v| v["type"] == "flow" && v["owner"]["comm"] == comm && v["flagged"] == true)
        .and_then(|v| v["time"].as_f64())
        .map(|t| t - t0)
}

/// Lines equal as values, except the summary's `source`.
fn assert_same_output(live: &[Value], replay: &[Value]) {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if v["type"] == "summary" {
            v.as_object_mut().map(|o| o.remove("source"));
        }
        v
    };
    for (i, (a, b)) in live.iter().zip(replay).enumerate() {
        assert_eq!(strip(a), strip(b), "line {} differs", i + 1);
    }
    assert_eq!(live.len(), replay.len(), "as many lines");
}

/// Record the demo for `secs`; returns the live run.
fn record_demo(file: &Path, secs: u64) -> Result<Run> {
    let f = file.to_str().context("utf-8 path")?;
    let run = cctrace(&["demo", "--json", "--events", "--record", f, "--duration", &secs.to_string()])?;
    ensure!(run.code == 0, "the recorded demo failed: {}", run.stderr);
    Ok(run)
}

#[test]
fn the_demo_recorded_replays_line_for_line() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let dir = Scratch::new("demo")?;
    // The demo flags its CUBIC flows within about ten seconds here (the diagnosis tests give it
    // up to 40): record 20 s, and if this run was slower to flag, once more for twice as long
    // as it needed.
    let mut file = dir.path("demo.cctrace");
    let mut live = record_demo(&file, 20)?;
    if !(flagged(&live.lines, "cubic-bulk") && flagged(&live.lines, "cubic-video")) {
        let needed =
            ["cubic-bulk", "cubic-video"].iter().filter_map(|c| time_to_flag(&live.lines, c)).fold(20.0_f64, f64::max);
        eprintln!("CUBIC not flagged within 20 s; recording {:.0} s", 2.0 * needed.max(20.0));
        file = dir.path("demo-longer.cctrace");
        live = record_demo(&file, (2.0 * needed.max(20.0)) as u64)?;
    }
    for comm in ["cubic-bulk", "cubic-video"] {
        println!("{comm} flagged after {:?} s", time_to_flag(&live.lines, comm));
    }
    assert!(live.stderr.contains("recorded "), "{}", live.stderr);
    assert!(live.stderr.contains("0 entries (0 samples) dropped"), "{}", live.stderr);

    let mode = std::fs::metadata(&file)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the recording is private");

    let f = file.to_str().context("utf-8")?;
    let replay = cctrace(&["replay", f, "--json", "--events"])?;
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert!(!replay.stderr.contains("truncated"), "{}", replay.stderr);
    assert!(live.lines.iter().filter(|v| v["type"] == "sample").count() > 1000, "a real recording");
    assert_same_output(&live.lines, &replay.lines);
    for lines in [&live.lines, &replay.lines] {
        assert!(flagged(lines, "cubic-bulk") && flagged(lines, "cubic-video"), "CUBIC flagged");
        assert!(!flagged(lines, "bbr-bulk") && !flagged(lines, "bbr-video"), "BBR not flagged");
    }

    // Cut in half: a prefix of the samples, then "truncated", exit 0.
    let bytes = std::fs::read(&file)?;
    let half = dir.path("half.cctrace");
    std::fs::write(&half, &bytes[..bytes.len() / 2])?;
    let cut = cctrace(&["replay", half.to_str().context("utf-8")?, "--json", "--events"])?;
    assert_eq!(cut.code, 0, "{}", cut.stderr);
    assert!(cut.stderr.contains("recording truncated at byte"), "{}", cut.stderr);
    let samples = |lines: &[Value]| lines.iter().filter(|v| v["type"] == "sample").cloned().collect::<Vec<_>>();
    let (all, some) = (samples(&replay.lines), samples(&cut.lines));
    assert!(!some.is_empty() && some.len() < all.len(), "{} of {} samples", some.len(), all.len());
    assert_eq!(some[..], all[..some.len()], "a prefix");
    println!("half the file ({} bytes) replays {} of {} samples", bytes.len() / 2, some.len(), all.len());

    // zstdcat shows JSON Lines, the header first.
    let out = Command::new("zstdcat")
        .arg(&file)
        .output_within(CHILD_DEADLINE)
        .context("running zstdcat (apt-get install zstd)")?;
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout)?;
    let first: Value = serde_json::from_str(text.lines().next().context("a line")?)?;
    assert_eq!(first["type"], "header");
    assert_eq!(first["format"], "cctrace-recording");
    assert!(text.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
    assert_eq!(serde_json::from_str::<Value>(text.lines().last().context("a line")?)?["type"], "end");
    Ok(())
}

#[test]
fn record_never_overwrites_or_follows_links_and_records_headless() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let dir = Scratch::new("paths")?;
    let existing = dir.path("existing");
    std::fs::write(&existing, "keep me")?;
    let dangling = dir.path("link-to-nothing");
    std::os::unix::fs::symlink(dir.path("target"), &dangling)?;
    let to_file = dir.path("link-to-existing");
    std::os::unix::fs::symlink(&existing, &to_file)?;
    for path in [&existing, &dangling, &to_file] {
        let p = path.to_str().context("utf-8")?;
        for args in [&["--json", "--record", p, "--duration", "1"][..], &["record", p, "--duration", "1"]] {
            let run = cctrace(args)?;
            assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
            let lines: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "one line: {}", run.stderr);
            assert!(lines[0].contains(p), "names the path: {}", lines[0]);
            assert!(run.lines.is_empty());
        }
    }
    assert_eq!(std::fs::read_to_string(&existing)?, "keep me", "nothing lost");
    assert!(!dir.path("target").exists(), "nothing created through the link");

    // Headless: nothing on stdout, one closing line on stderr, a file that replays.
    let file = dir.path("headless.cctrace");
    let run = cctrace(&["record", file.to_str().context("utf-8")?, "--duration", "2"])?;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.lines.is_empty(), "nothing on stdout");
    let closing: Vec<&str> = run.stderr.lines().filter(|l| l.contains("recorded ")).collect();
    assert_eq!(closing.len(), 1, "{}", run.stderr);
    assert!(closing[0].contains("entries") && closing[0].contains("bytes") && closing[0].contains("lost"));
    let replay = cctrace(&["replay", file.to_str().context("utf-8")?, "--json"])?;
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    assert_eq!(replay.lines.last().map(|v| v["type"].clone()), Some(Value::from("summary")));

    // Damage is one line and exit 1.
    let mut bytes = std::fs::read(&file)?;
    let n = bytes.len();
    for b in &mut bytes[n / 2..] {
        *b ^= 0x55;
    }
    let damaged = dir.path("flipped.cctrace");
    std::fs::write(&damaged, &bytes)?;
    let run = cctrace(&["replay", damaged.to_str().context("utf-8")?, "--json"])?;
    assert_eq!(run.code, 1, "{}", run.stderr);
    let errors: Vec<&str> = run.stderr.lines().filter(|l| l.contains("damaged recording")).collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    Ok(())
}

#[test]
fn an_anonymized_recording_holds_no_address_process_or_container_of_the_host() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let dir = Scratch::new("anon")?;
    let file = dir.path("anon.cctrace");
    let path = file.to_str().context("utf-8")?;
    let run = cctrace(&["demo", "--json", "--duration", "6", "--record", path, "--anonymize"])?;
    assert_eq!(run.code, 0, "{}", run.stderr);
    // What the live run printed names the real flows; the recording must name none of them.
    let live_ports: Vec<String> = run
        .lines
        .iter()
        .filter(|v| v["type"] == "flow" && v["owner"]["comm"].is_string())
        .map(|v| v["src"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(!live_ports.is_empty(), "the demo's senders ran: {}", run.stderr);
    let out = Command::new("zstdcat").arg(&file).output_within(CHILD_DEADLINE).context("running zstdcat")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Value = serde_json::from_str(text.lines().next().context("a header")?)?;
    assert_eq!(header["anonymized"], true);
    assert!(text.contains("\"type\":\"samples\""), "samples were recorded");
    for original in
        live_ports.iter().map(String::as_str).chain(["cubic-bulk", "bbr-video", "jellyfin", "proxy\"", "cct-lab-"])
    {
        assert!(!text.contains(original), "{original:?} is in the anonymized recording");
    }
    // It still replays, and the verdicts stand on pseudonyms.
    let replay = cctrace(&["replay", path, "--json"])?;
    assert_eq!(replay.code, 0, "{}", replay.stderr);
    Ok(())
}
