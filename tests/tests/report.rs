//! `cctrace report` as a user opens it: a recording with a hostile container name rendered by
//! headless Chromium. Every heavy flow must be in the rendered page, and the hostile name shown
//! as text, never run. Needs Chromium (`cargo xtask setup` installs it); in CI a missing one is
//! a failure.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use cctrace_tests::cctrace_bin;
use serde_json::{json, Value};

const HOSTILE: &str = "<script>document.title='pwned'</script>";
const START_NS: u64 = 1_000_000_000_000;

/// A lossy CUBIC upload (2 % of bytes retransmitted, no queue, cwnd full) that the analysis
/// flags, and a BBR download, sampled every 100 ms for 15 s.
fn sample(cookie: u64, tick: u64) -> Value {
    let ts_ns = START_NS + tick * 100_000_000;
    let phase = tick % 20;
    let cubic = cookie == 101;
    let acked = if cubic { 50_000 * tick } else { 517 };
    let sent = if cubic { (acked as f64 / 0.98) as u64 } else { acked };
    json!({
        "ts_ns": ts_ns, "cookie": cookie, "netns": 4026531840u32, "cgroup_id": if cubic { 7321 } else { 1 },
        "reason": "periodic",
        "local": if cubic { "198.18.0.1:41234" } else { "198.18.0.1:48820" },
        "remote": if cubic { "203.0.113.10:5201" } else { "192.0.2.80:443" },
        "tcp_state": "Established", "old_tcp_state": {"Unknown": 0},
        "ca_state": if cubic && (phase == 0 || phase == 1) && tick > 0 { "Recovery" } else { "Open" },
        "cc": if cubic { "cubic" } else { "bbr" },
        "owner": {"pid": 4242, "comm": if cubic { "iperf3" } else { "curl" }},
        "snd_cwnd": if cubic { 8 + (phase / 3) as u32 } else { 10 },
        "snd_ssthresh": if cubic && tick >= 20 { 8 } else { 2147483647u32 },
        "srtt_us": 31_000 + (tick % 3) as u32 * 300, "rttvar_us": 1500, "min_rtt_us": 30_000, "mss": 1448,
        "packets_out": if cubic { 8 + (phase / 3) as u32 } else { 0 }, "lost_out": 0, "sacked_out": 0, "retrans_out": 0,
        "total_retrans": (sent - acked) / 1448, "retrans_events": tick / 20,
        "bytes_sent": sent, "bytes_acked": acked, "bytes_received": if cubic { 0 } else { 625_000 * tick },
        "bytes_retrans": sent - acked, "delivered": 0, "delivery_rate_bps": 4_100_000u64,
        "app_limited": false, "cwnd_limited": cubic, "pacing_rate_bps": 4_900_000u64, "snd_wnd": 65535,
        "notsent_bytes": 0, "sndbuf": 87040, "wmem_queued": 87040,
        "busy_us": tick * 100_000, "rwnd_limited_us": 0, "sndbuf_limited_us": 0,
    })
}

fn recording() -> String {
    let counters = |received: u64| {
        json!({"received": received, "lost": 0, "decode_errors": 0, "kernel_read_errors": 0, "flow_map_full": 0,
               "filtered": 0, "kernel_emitted": null})
    };
    let id = "4c1f0e9a7b2d83c5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9";
    let mut lines = vec![
        json!({"type": "header", "format": "cctrace-recording", "version": 1, "cctrace_version": "0.1.0",
               "host": "edge-07", "kernel": "6.8.0", "start_unix_ns": 1_700_000_000_000_000_000u64,
               "start_monotonic_ns": START_NS, "sample_interval_ms": 100, "tick_ms": 1000, "filters": [],
               "source": "live kernel (6/6 hooks)", "hooks": []}),
        json!({"type": "host", "env": {"bbr_available": true, "host_netns": 4026531840u32, "netns_pids": {},
               "netns_names": {}, "netns_cc": {"4026531840": "cubic"}, "available_cc": ["reno", "cubic", "bbr"],
               "allowed_cc": ["reno", "cubic"],
               "cgroups": {"7321": {"path": format!("/system.slice/docker-{id}.scope"),
                                    "container": {"runtime": "docker", "id": id, "name": HOSTILE}},
                           "1": {"path": "/", "container": null}}}}),
    ];
    for tick in 0..=150u64 {
        lines.push(json!({"type": "samples", "samples": [sample(101, tick), sample(303, tick)]}));
        if tick % 10 == 0 {
            lines
                .push(json!({"type": "tick", "now_ns": START_NS + tick * 100_000_000, "counters": counters(tick * 2)}));
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join(name)).find(|p| p.exists())
    })
}

#[test]
fn the_report_renders_in_chromium_with_every_heavy_flow_and_no_injected_markup() -> Result<()> {
    let Some(browser) = chromium() else {
        cctrace_lab::skip::skip("needs Chromium (cargo xtask setup installs it: apt-get install chromium)");
        return Ok(());
    };
    if !cctrace_bin().exists() {
        bail!("{} is not built (cargo build -p tracer)", cctrace_bin().display());
    }
    let dir = std::env::temp_dir().join(format!("cctrace-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A recording is zstd-compressed JSON Lines of entries: the standard tool makes one too.
    let lines = dir.join("rec.jsonl");
    let rec = dir.join("rec.cctrace");
    let page = dir.join("report.html");
    std::fs::write(&lines, recording())?;
    let zstd = Command::new("zstd")
        .args(["-q", "-f"])
        .arg(&lines)
        .arg("-o")
        .arg(&rec)
        .status_within(CHILD_DEADLINE)
        .context("running zstd")?;
    assert!(zstd.success(), "zstd failed");
    let out = Command::new(cctrace_bin()).arg("report").arg(&rec).arg("-o").arg(&page).output_within(CHILD_DEADLINE)?;
    assert!(out.status.success(), "cctrace report: {}", String::from_utf8_lossy(&out.stderr));

    let dom = Command::new(&browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output_within(CHILD_DEADLINE)
        .context("running Chromium")?;
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("id=\"flow-101\""), "the flagged CUBIC flow is rendered");
    assert!(dom.contains("id=\"flow-303\""), "the heavy receiving flow is rendered");
    assert!(dom.contains("⚑ flagged") && dom.contains("sysctl -w net.ipv4.tcp_congestion_control=bbr"));
    assert!(dom.contains("&lt;script&gt;document.title="), "the hostile name shown as text");
    assert!(!dom.contains("<script") && !dom.contains("pwned</title>"), "no markup from the host ran");
    assert_eq!(dom.matches("<svg").count(), 8, "four charts per heavy flow");

    let shot = dir.join("report.png");
    let status = Command::new(&browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1600"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output_within(CHILD_DEADLINE)?;
    assert!(status.status.success(), "screenshot: {}", String::from_utf8_lossy(&status.stderr));
    // A blank page compresses to almost nothing; charts, text and colour do not.
    let size = std::fs::metadata(&shot)?.len();
    assert!(size > 50_000, "screenshot of {size} bytes looks blank");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
