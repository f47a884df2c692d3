//! A real video player through a real tunnel: nginx serves an HLS stream (made by ffmpeg) from
//! the home end of a wireguard-go tunnel (MTU 1280, as Tailscale sets it) across the lab's lossy
//! emulated path, and Debian's ffmpeg plays it at the video's own rate from the other end, over
//! IPv4 and over IPv6 inside the tunnel, side by side. The truth first, without a tracer: under
//! CUBIC on the server the players stall, under BBR they keep up. Then, traced: each stalled
//! player is flagged in at least 90 % of the evaluations after the first 10 s, none of its
//! connections is ever called `path` there, and `cctrace fix --live` during playback brings both
//! players to at least 0.97x, read from ffmpeg's own progress.
//!
//! A player is flagged at an evaluation when one of its connections is. ffmpeg fetches the next
//! segment on a second connection while it reads the current one (`http_multiple`), so a
//! connection that finished its segment early waits for the next request: it is honestly
//! `application` for a window now and then, while the connection the player waits on is held by
//! CUBIC. What the user needs is the player flagged, with the fix.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cctrace_lab::{EmulatedPathSpec, PathSpec, WireGuardLab, WireGuardSpec};
use cctrace_tests::player::{HlsStream, Player, PLAYLIST};
use cctrace_tests::services::{at, Nginx};
use cctrace_tests::{require_kernel, run_cctrace, serial, AllowedCc, RemoveOnDrop, Tracer};
use serde_json::Value;

const CC: &str = "net.ipv4.tcp_congestion_control";
const HTTP_PORT: u16 = 8080;
/// The stream: 16 Mbit/s (a good 1080p stream) in 2 s segments, long enough for every phase.
const BITRATE_BPS: u64 = 16_000_000;
const STREAM_SECS: u32 = 80;
const SEGMENT_SECS: u32 = 2;
/// The underlay: 30 ms, 1 % random loss on the data direction, a 100 Mbit/s bottleneck with a
/// queue of one BDP: room for both players under BBR and for their catching up together after
/// the live fix, while CUBIC at 1 % gets about a quarter of the stream's rate per connection.
/// (With a quarter-BDP queue the two BBR start-ups overflowed it together, and one player
/// stalled 2.5 s on the losses. On 60 Mbit/s the two catching up split it unevenly for seconds,
/// and one of them played at 0.81-0.93x in 2 of 15 runs.)
const UNDERLAY_BPS: u64 = 100_000_000;
const UNDERLAY_LOSS: f64 = 0.01;
/// Tailscale's MTU, the least IPv6 allows.
const TUNNEL_MTU: u32 = 1280;
/// How long each truth play runs, and the span its speed is read over (its start-up left out).
const TRUTH_PLAY: Duration = Duration::from_secs(12);
const TRUTH_SPAN: Duration = Duration::from_secs(6);
/// How long the stalled players play traced before the fix; the flag share counts from 10 s.
const STALLED_PLAY: Duration = Duration::from_secs(22);
const FLAG_FROM: Duration = Duration::from_secs(10);
/// After the fix: time for the switched connections to ramp up, then the span read.
const RAMP: Duration = Duration::from_secs(3);
const FIXED_SPAN: Duration = Duration::from_secs(6);

/// The two families inside the tunnel, each played by its own ffmpeg.
struct Family {
    name: &'static str,
    server: SocketAddr,
    client_ip: String,
}

fn families(lab: &WireGuardLab) -> Result<[Family; 2]> {
    let v6 = |a: Option<std::net::Ipv6Addr>| a.context("the tunnel's IPv6 address");
    Ok([
        Family {
            name: "IPv4",
            server: at(lab.server_inner_addr(), HTTP_PORT),
            client_ip: lab.client_inner_addr().to_string(),
        },
        Family {
            name: "IPv6",
            server: at(v6(lab.server_inner_addr_v6())?, HTTP_PORT),
            client_ip: v6(lab.client_inner_addr_v6())?.to_string(),
        },
    ])
}

fn url(server: SocketAddr) -> String {
    format!("http://{server}/{PLAYLIST}")
}

/// Both families played at once for `play`; each player's speed over the last `span`, from
/// ffmpeg's own progress.
fn play_both(lab: &WireGuardLab, fams: &[Family; 2], play: Duration, span: Duration) -> Result<[f64; 2]> {
    let players = fams.iter().map(|f| Player::start(lab.client(), &url(f.server))).collect::<Result<Vec<_>>>()?;
    std::thread::sleep(play - span);
    let from = Instant::now();
    std::thread::sleep(span);
    let to = Instant::now();
    let speed = |p: &Player| p.speed_between(from, to).context("ffmpeg reported no progress");
    for (f, p) in fams.iter().zip(&players) {
        print_progress(f, p);
    }
    Ok([speed(&players[0])?, speed(&players[1])?])
}

/// A player's progress as ffmpeg reported it: what a failure's reader needs to see the stall.
fn print_progress(f: &Family, p: &Player) {
    let reports: Vec<String> = p
        .reports()
        .iter()
        .map(|r| format!("{:.1}:{:.1}", r.at.duration_since(p.started).as_secs_f64(), r.out_time_us as f64 / 1e6))
        .collect();
    println!("  {} progress (wall s: media s): {}", f.name, reports.join(" "));
}

/// The server's flow records of one player's connections (by the client's address), those that
/// carried the stream (a few MB at least), judged (not "not enough data"), from `after` on.
fn player_records<'a>(lines: &'a [Value], netns: u64, client_ip: &str, after: u64, before: u64) -> Vec<&'a Value> {
    let ours = |v: &&Value| {
        v["type"] == "flow"
            && v["netns"].as_u64() == Some(netns)
            && v["sport"] == HTTP_PORT
            && v["dst"].as_str() == Some(client_ip)
            && v["closed"] == false
    };
    let carried: std::collections::HashSet<u64> = lines
        .iter()
        .filter(ours)
        .filter(|v| v["bytes_acked"].as_u64() > Some(2_000_000))
        .filter_map(|v| v["cookie"].as_u64())
        .collect();
    lines
        .iter()
        .filter(ours)
        .filter(|v| v["cookie"].as_u64().is_some_and(|c| carried.contains(&c)))
        .filter(|v| v["limited_by"] != "unknown")
        .filter(|v| v["ts_ns"].as_u64().is_some_and(|t| t >= after && t < before))
        .collect()
}

/// The records grouped by evaluation: the tracer judges every flow at each interval, so records
/// less than half an interval apart belong to one evaluation.
fn evaluations<'a>(records: &[&'a Value]) -> Vec<Vec<&'a Value>> {
    const HALF_INTERVAL_NS: u64 = 500_000_000;
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|v| v["ts_ns"].as_u64());
    let mut groups: Vec<Vec<&Value>> = Vec::new();
    for v in sorted {
        let ts = v["ts_ns"].as_u64().unwrap_or_default();
        match groups.last_mut() {
            Some(g) if ts < g[0]["ts_ns"].as_u64().unwrap_or_default() + HALF_INTERVAL_NS => g.push(v),
            _ => groups.push(vec![v]),
        }
    }
    groups
}

fn trail(records: &[&Value]) -> String {
    records
        .iter()
        .map(|v| {
            let e = &v["evidence"];
            format!(
                "\n  {} {} {} flagged={} {:.1} Mbit/s busy={:.2} rwnd={:.2} cwnd_full={:.2} app_limited={:.2} srtt {:.1} ms: {}",
                v["cookie"],
                v["cc"],
                v["limited_by"],
                v["flagged"],
                e["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                e["busy_share"].as_f64().unwrap_or(0.0),
                e["rwnd_share"].as_f64().unwrap_or(0.0),
                e["cwnd_full_share"].as_f64().unwrap_or(0.0),
                e["app_limited_share"].as_f64().unwrap_or(0.0),
                e["srtt_ms"].as_f64().unwrap_or(0.0),
                v["verdict"].as_str().unwrap_or_default().chars().take(240).collect::<String>()
            )
        })
        .collect()
}

#[test]
fn a_stalled_hls_player_through_wireguard_go_is_flagged_and_the_live_fix_brings_it_to_real_time() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let began = Instant::now();
    let stream = HlsStream::make(BITRATE_BPS, STREAM_SECS, SEGMENT_SECS)?;
    let queue = (UNDERLAY_BPS / 8 * 30 / 1000) as usize;
    let mut underlay = EmulatedPathSpec::new(
        PathSpec::delay(Duration::from_millis(15)).with_loss(UNDERLAY_LOSS).with_rate(UNDERLAY_BPS, queue),
    );
    underlay.reverse = PathSpec::delay(Duration::from_millis(15));
    let lab =
        WireGuardLab::create(WireGuardSpec { mtu: Some(TUNNEL_MTU), ipv6: true, ..WireGuardSpec::new(underlay) })?;
    let home = lab.server();
    let _no_state = RemoveOnDrop(PathBuf::from(format!("/run/cctrace/fix-netns-{}.json", home.inode())));
    // CUBIC as the server namespace's default, as most distributions ship it (this host allows
    // only reno and bbr to namespaces: added for the test, put back after).
    let _cubic = AllowedCc::add("cubic")?;
    let fams = families(&lab)?;
    let nginx = Nginx::serve_dir(home, &[fams[0].server, fams[1].server], stream.dir())?;

    // The truth, without a tracer: the same players under each algorithm.
    let mut truth = Vec::new();
    for cc in ["cubic", "bbr"] {
        home.sysctl_set(CC, cc)?;
        let speeds = play_both(&lab, &fams, TRUTH_PLAY, TRUTH_SPAN)?;
        println!("truth, {cc} on the server: IPv4 {:.2}x, IPv6 {:.2}x", speeds[0], speeds[1]);
        truth.push(speeds);
    }
    for (f, (cubic, bbr)) in fams.iter().zip(truth[0].iter().zip(&truth[1])) {
        anyhow::ensure!(*cubic < 0.8, "{}: the player must stall under CUBIC ({cubic:.2}x)", f.name);
        anyhow::ensure!(*bbr >= 0.97, "{}: the player must keep up under BBR ({bbr:.2}x)", f.name);
    }

    // Traced: CUBIC, both players stalled.
    home.sysctl_set(CC, "cubic")?;
    let tracer = Tracer::start(&["--interval", "1000"])?;
    let t0 = cctrace_tests::monotonic_ns();
    let mut players =
        fams.iter().map(|f| Player::start(lab.client(), &url(f.server))).collect::<Result<Vec<Player>>>()?;
    std::thread::sleep(STALLED_PLAY);
    let fixed_at = cctrace_tests::monotonic_ns();
    let stalled: Vec<f64> = players.iter().map(|p| p.speed().unwrap_or(0.0)).collect();
    let (code, out, err) = run_cctrace(&["fix", "--netns", home.name(), "--live", "--yes"])?;
    anyhow::ensure!(code == 0 && out.contains("from cubic to bbr"), "{out}{err}");
    std::thread::sleep(RAMP);
    let from = Instant::now();
    std::thread::sleep(FIXED_SPAN);
    let to = Instant::now();
    let fixed: Vec<f64> =
        players.iter().map(|p| p.speed_between(from, to).context("no progress")).collect::<Result<_>>()?;
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", home.name(), "--yes"])?;
    anyhow::ensure!(code == 0, "{out}{err}");
    for (f, p) in fams.iter().zip(&mut players) {
        print_progress(f, p);
        anyhow::ensure!(p.playing(), "ffmpeg stopped playing");
    }
    drop(players);
    let (code, lines) = tracer.stop()?;
    anyhow::ensure!(code == 0, "cctrace exited {code}");

    // Each family judged in full before either fails, so that a failure shows both.
    let flag_from = t0 + FLAG_FROM.as_nanos() as u64;
    let failures: Vec<String> = fams
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let phases = Phases { t0, flag_from, fixed_at };
            let speeds = Speeds { truth_cubic: truth[0][i], stalled: stalled[i], fixed: fixed[i] };
            judge(f, &lines, home.inode(), phases, speeds).err().map(|e| format!("{e:#}"))
        })
        .collect();
    anyhow::ensure!(failures.is_empty(), "{}", failures.join("\n"));
    drop(nginx);
    drop(lab);
    println!("the player test took {:.0?}", began.elapsed());
    Ok(())
}

/// The traced run's instants: its start, where the flag share starts counting, the live fix.
#[derive(Clone, Copy)]
struct Phases {
    t0: u64,
    flag_from: u64,
    fixed_at: u64,
}

/// One player's speeds: the truth under CUBIC, ffmpeg's own before the fix, after the fix.
#[derive(Clone, Copy)]
struct Speeds {
    truth_cubic: f64,
    stalled: f64,
    fixed: f64,
}

/// One family's player: flagged through its stall (never `path`), its tunnel named, and at
/// real time after the live fix.
fn judge(f: &Family, lines: &[Value], netns: u64, at: Phases, speed: Speeds) -> Result<()> {
    let records = player_records(lines, netns, &f.client_ip, at.flag_from, at.fixed_at);
    let instants = evaluations(&records);
    let flagged = instants.iter().filter(|i| i.iter().any(|v| v["flagged"] == true)).count();
    let all = player_records(lines, netns, &f.client_ip, at.t0, at.fixed_at);
    if let Some(first) = all.iter().find(|v| v["flagged"] == true).and_then(|v| v["ts_ns"].as_u64()) {
        cctrace_tests::print_time_to_flag(&format!("ffmpeg over {}", f.name), first.saturating_sub(at.t0) as f64 / 1e9);
    }
    let share = flagged as f64 / instants.len().max(1) as f64;
    println!(
        "{}: ffmpeg at {:.2}x (its own speed= {:.3}) stalled; flagged in {flagged} of {} evaluations after {FLAG_FROM:?} \
         ({:.0} %); {:.2}x over {FIXED_SPAN:?} after the live fix",
        f.name,
        speed.truth_cubic,
        speed.stalled,
        instants.len(),
        share * 100.0,
        speed.fixed
    );
    anyhow::ensure!(instants.len() >= 10, "{}: too few evaluations: {}", f.name, trail(&records));
    anyhow::ensure!(share >= 0.9, "{}: flagged in {share:.2} of them:{}", f.name, trail(&records));
    // What the player gets is what its busiest connection carries: in no evaluation may that one
    // be called `path`. (The connection it is leaving, its data read late and its srtt rising
    // with the reader's delay, can be for a few seconds: not what holds the player.)
    let goodput = |v: &Value| v["evidence"]["goodput_bps"].as_f64().unwrap_or(0.0);
    let path: Vec<&Value> = instants
        .iter()
        .filter_map(|at| at.iter().copied().max_by(|a, b| goodput(a).total_cmp(&goodput(b))))
        .filter(|v| v["limited_by"] == "path")
        .collect();
    anyhow::ensure!(
        path.is_empty(),
        "{}: {} evaluations call the stalled player `path`:{}\nof these records:{}",
        f.name,
        path.len(),
        trail(&path),
        trail(&records)
    );
    let tunnel = records.iter().rev().find(|v| v["flagged"] == true).map(|v| &v["tunnel"]);
    anyhow::ensure!(
        tunnel.is_some_and(|t| t["process"]["comm"] == "wireguard-go" && t["mtu"] == TUNNEL_MTU),
        "{}: its tunnel named: {tunnel:?}",
        f.name
    );
    // The records after the fix, gathered only for a failure's message.
    anyhow::ensure!(
        speed.fixed >= 0.97,
        "{}: {:.2}x after the live fix:{}",
        f.name,
        speed.fixed,
        trail(&player_records(lines, netns, &f.client_ip, at.fixed_at, u64::MAX))
    );
    Ok(())
}
