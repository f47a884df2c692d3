//! Through a real WireGuard tunnel: wireguard-go (the engine Tailscale is built on) on both ends
//! of the lab's lossy path, the loss on its UDP underlay only, configured with `wg`. Real
//! senders the project did not write serve real clients through it, side by side on one lab:
//! sshd (a configuration of the test's own) a bulk pull to `ssh`, nginx a large file to `curl`,
//! and nginx in two LAN namespaces behind the tunnel's end, which routes them (a subnet router,
//! with and without masquerading, as nft does it). Each flow is flagged, names its tunnel, its
//! process and its underlay; wireguard-go's own UDP flow lists what it carries and is not
//! blamed; `cctrace fix --live` speeds the running SSH transfer up by the factor the truth
//! through the same tunnel shows; and nothing is left behind.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use cctrace_lab::{list_namespaces, LanSpec, WireGuardLab};
use cctrace_tests::services::{alive, at, Nginx, Pull, Sshd};
use cctrace_tests::{
    bulk_transfer, cctrace_bin, require_kernel, run_cctrace, serial, tunnel_wan, RemoveOnDrop, Tracer, TUNNEL_WAN_LOSS,
};
use serde_json::Value;

const CC: &str = "net.ipv4.tcp_congestion_control";
const SSH_PORT: u16 = 2222;
const HTTP_PORT: u16 = 8080;
/// A sender through the tunnel must be flagged within this long of its start.
const FLAG_WITHIN: Duration = Duration::from_secs(15);
/// How many of wireguard-go's readings (one a tick) after the last sender's flag may pass before
/// its flow must list every sender: one should do; the rest are for a tick whose route reads the
/// host delayed.
const CARRIES_WITHIN: usize = 3;
/// A bound on waits counted in the tracer's readings, only so a stopped tracer cannot hang the
/// test: a reading a second is the tracer's interval here.
const HANG: Duration = Duration::from_secs(60);
/// How long each goodput is measured over.
const WINDOW: Duration = Duration::from_secs(5);

/// Goodput through the tunnel without a tracer, per socket algorithm: the truth the fix is
/// measured against.
fn truth(lab: &WireGuardLab, cc: &str) -> Result<f64> {
    let duration = WINDOW + Duration::from_secs(1);
    Ok(bulk_transfer(lab.server(), lab.client(), lab.client_inner_addr(), cc, duration)?.goodput_bps)
}

/// One sender through the tunnel: where it runs, its client's pull, and when that started.
struct Served {
    what: &'static str,
    netns: u64,
    /// The forwarding router's LAN address and whether it masquerades, for a LAN's sender.
    via: Option<(String, bool)>,
    ns_name: String,
    pull: Pull,
    started: Instant,
}

fn port_of(s: &Served) -> u16 {
    if s.what == "sshd" {
        SSH_PORT
    } else {
        HTTP_PORT
    }
}

/// The first record that flags the sender with its tunnel named.
fn flagged_with_tunnel(lines: &[Value], s: &Served) -> Option<Value> {
    lines
        .iter()
        .find(|v| {
            v["type"] == "flow"
                && v["netns"].as_u64() == Some(s.netns)
                && v["sport"] == port_of(s)
                && v["flagged"] == true
                && v["tunnel"].is_object()
        })
        .cloned()
}

/// The sender's flow records up to its first flag.
fn before_flag<'a>(lines: &'a [Value], s: &'a Served) -> impl Iterator<Item = &'a Value> + 'a {
    let mut flagged = false;
    lines
        .iter()
        .filter(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(s.netns) && v["sport"] == port_of(s))
        .take_while(move |v| !std::mem::replace(&mut flagged, v["flagged"] == true))
}

/// Whether cctrace saw queue at some of the sender's losses while it did not flag it.
fn queued_before_flag(lines: &[Value], s: &Served) -> bool {
    before_flag(lines, s).any(|v| v["flagged"] != true && v["evidence"]["queued_episodes"].as_u64() > Some(0))
}

/// The sender's verdicts up to its first flag, a line a second: what held the flag back.
fn history(lines: &[Value], s: &Served) -> String {
    let mut out = Vec::new();
    for v in before_flag(lines, s) {
        let e = &v["evidence"];
        out.push(format!(
            "{} {} episodes {}/{} clean, queue at loss {} ms, goodput {} vs response {}: {}",
            v["limited_by"],
            v["cwnd"],
            e["clean_episodes"],
            e["loss_episodes"],
            e["queue_at_loss_ms"],
            e["goodput_bps"],
            e["response_bps"],
            e["decided_by"]
        ));
    }
    out.join("\n")
}

fn check_tunnel(lab: &WireGuardLab, s: &Served, rec: &Value) {
    let t = &rec["tunnel"];
    assert_eq!(rec["owner"]["comm"], s.what.trim_end_matches("-lan"), "{rec}");
    assert_eq!(t["dev"], lab.server_dev(), "{rec}");
    assert_eq!(t["mtu"], 1420, "{rec}");
    assert_eq!(t["netns"].as_u64(), Some(lab.server().inode()), "the tunnel is the server end's: {rec}");
    assert_eq!(t["process"]["comm"], "wireguard-go", "{rec}");
    assert_eq!(t["process"]["pid"].as_u64(), Some(u64::from(lab.server_pid())), "{rec}");
    // wireguard-go binds its socket to the wildcard address.
    let src = t["udp"]["src"].as_str().unwrap_or_default();
    assert!(src == "0.0.0.0" || src == lab.server_underlay_addr().to_string(), "{rec}");
    assert_eq!(t["udp"]["dst"], lab.client_underlay_addr().to_string(), "{rec}");
    assert_eq!((t["udp"]["sport"].as_u64(), t["udp"]["dport"].as_u64()), (Some(51820), Some(51820)), "{rec}");
    assert_eq!(t["udp"]["app_proto"], "wireguard", "{rec}");
    assert!(t["udp"]["tx_bps"].as_u64() > Some(1_000_000), "the underlay carries the flow: {rec}");
    match &s.via {
        None => assert!(t["via"].is_null(), "{rec}"),
        Some((router_addr, masquerade)) => {
            assert_eq!(t["via"]["netns"].as_u64(), Some(lab.server().inode()), "{rec}");
            assert_eq!(t["via"]["addr"], router_addr.as_str(), "{rec}");
            assert_eq!(t["via"]["masquerade"], *masquerade, "{rec}");
        }
    }
    let verdict = rec["verdict"].as_str().unwrap_or_default();
    assert!(verdict.contains("losses are in the tunnel's underlay, outside this host"), "{verdict}");
    assert!(verdict.contains("MSS of 1368 B follows the tunnel's MTU (1420 B)"), "{verdict}");
    assert_eq!(rec["evidence"]["mss"], 1368, "{rec}");
    // The fix goes to the sender's own namespace, never the router's.
    let fix: Vec<&str> = rec["fix"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let set = format!("ip netns exec {} sysctl -w {CC}=bbr", s.ns_name);
    assert!(fix.contains(&set.as_str()), "{fix:?}");
    if s.via.is_some() {
        assert!(!fix.iter().any(|l| l.contains(lab.server().name())), "not the router's namespace: {fix:?}");
    }
}

/// A sender flagged late because cctrace saw queue at its losses that the path cannot have
/// built: its senders together move a third of the bottleneck, so the delay was the host's
/// (wireguard-go, the emulator and the senders sharing two cores), and the run could not check
/// the bound.
#[derive(Debug)]
struct HostDelayed(String);

impl std::fmt::Display for HostDelayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} was flagged late after queue the path cannot build: the host delayed it", self.0)
    }
}

impl std::error::Error for HostDelayed {}

#[test]
fn senders_through_wireguard_go_name_their_tunnel_and_the_fix_speeds_them_up_by_the_truths_factor() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let began = Instant::now();
    // A run the host delayed is run once more on a fresh lab; any other failure fails at once.
    let outcome = match through_the_tunnel() {
        Err(e) if e.downcast_ref::<HostDelayed>().is_some() => {
            eprintln!("{e:#}; once more, on a fresh lab");
            through_the_tunnel()
        }
        other => other,
    };
    println!("tunnel test took {:.0?}", began.elapsed());
    outcome
}

fn through_the_tunnel() -> Result<()> {
    let lab = tunnel_wan(TUNNEL_WAN_LOSS, vec![LanSpec { masquerade: true }, LanSpec { masquerade: false }])?;
    let home = lab.server();
    let _no_state = RemoveOnDrop(PathBuf::from(format!("/run/cctrace/fix-netns-{}.json", home.inode())));
    // The namespaces inherit the host's default (bbr here): give the senders a loss-based one
    // every namespace may choose.
    for ns in std::iter::once(home).chain(lab.lans().iter().map(cctrace_lab::Lan::ns)) {
        ns.sysctl_set(CC, "reno")?;
    }
    let (reno, bbr) = (truth(&lab, "reno")?, truth(&lab, "bbr")?);
    let factor = bbr / reno;
    println!("truth through the tunnel: reno {:.1} Mbit/s, bbr {:.1} Mbit/s ({factor:.1}x)", reno / 1e6, bbr / 1e6);

    let sshd = Sshd::start(home, at(lab.server_inner_addr(), SSH_PORT))?;
    let nginx = Nginx::start(home, at(lab.server_inner_addr(), HTTP_PORT))?;
    let lan_nginx: Vec<Nginx> =
        lab.lans().iter().map(|l| Nginx::start(l.ns(), at(l.host_addr, HTTP_PORT))).collect::<Result<_>>()?;
    let recording = std::env::temp_dir().join(format!("cct-tunnel-{}.cctrace", std::process::id()));
    let _recording_removed = RemoveOnDrop(recording.clone());
    let tracer = Tracer::start(&["--interval", "1000", "--record", &recording.display().to_string()])?;

    let client = lab.client();
    let served = |what: &'static str, netns: &cctrace_lab::Netns, via: Option<(String, bool)>, pull: Pull| Served {
        what,
        netns: netns.inode(),
        via,
        ns_name: netns.name().to_string(),
        pull,
        started: Instant::now(),
    };
    let mut senders = vec![
        served("sshd", home, None, sshd.pull(client, 64 << 30)?),
        served("nginx", home, None, nginx.pull(client)?),
    ];
    for (lan, server) in lab.lans().iter().zip(&lan_nginx) {
        let via = Some((lan.router_addr.to_string(), lan.masquerade));
        senders.push(served("nginx-lan", lan.ns(), via, server.pull(client)?));
    }

    // Each flagged, its tunnel named, within FLAG_WITHIN of its start.
    let mut flagged: HashMap<usize, (Duration, Value)> = HashMap::new();
    let deadline = Instant::now() + FLAG_WITHIN + Duration::from_secs(10);
    while flagged.len() < senders.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let lines = tracer.lines();
        for (i, s) in senders.iter().enumerate() {
            if let (false, Some(rec)) = (flagged.contains_key(&i), flagged_with_tunnel(&lines, s)) {
                flagged.insert(i, (s.started.elapsed(), rec));
            }
        }
    }
    let lines = tracer.lines();
    for (i, s) in senders.iter_mut().enumerate() {
        let late = flagged.get(&i).is_none_or(|(after, _)| *after > FLAG_WITHIN);
        if late {
            let stats = lab.underlay().stats();
            let error = anyhow::anyhow!(
                "{} in {} not flagged with its tunnel within {FLAG_WITHIN:?} ({:?}); its verdicts: {}; the \
                 emulator released {} of {} packets late",
                s.what,
                s.ns_name,
                flagged.get(&i).map(|(after, _)| after),
                history(&lines, s),
                stats.forward.late_releases + stats.reverse.late_releases,
                stats.forward.forwarded + stats.reverse.forwarded
            );
            return Err(if queued_before_flag(&lines, s) { error.context(HostDelayed(s.what.into())) } else { error });
        }
        let Some((after, rec)) = flagged.get(&i) else { unreachable!("checked above") };
        cctrace_tests::print_time_to_flag(
            &format!("{} ({})", s.what, if s.via.is_some() { "LAN" } else { "home" }),
            after.as_secs_f64(),
        );
        let first = lines
            .iter()
            .find(|v| v["netns"].as_u64() == Some(s.netns) && v["sport"] == port_of(s) && v["flagged"] == true)
            .and_then(|v| v["ts_ns"].as_u64());
        let named = rec["ts_ns"].as_u64();
        println!(
            "{} ({}) flagged with its tunnel after {after:.1?} (its tunnel named {:.1} s after its first flag)",
            s.what,
            s.ns_name,
            named.zip(first).map_or(f64::NAN, |(n, f)| n.saturating_sub(f) as f64 / 1e9)
        );
        assert!(s.pull.running() && s.pull.received() > 0, "{}'s client is downloading", s.what);
        check_tunnel(&lab, s, rec);
    }

    // wireguard-go's own flow: WireGuard, carrying every sender's flow, not blamed. The list it
    // carries comes from the tick that names the flows' tunnels, so it must show within
    // CARRIES_WITHIN of wireguard-go's readings after the last flag, however slow the host
    // makes those ticks.
    let cookies: Vec<u64> = flagged.values().filter_map(|(_, r)| r["cookie"].as_u64()).collect();
    let last_flag = flagged.values().filter_map(|(_, r)| r["ts_ns"].as_u64()).max().unwrap_or(0);
    let wg_pid = u64::from(lab.server_pid());
    let readings = |lines: &[Value]| -> Vec<Value> {
        lines
            .iter()
            .filter(|v| v["proto"] == "udp" && v["owner"]["pid"].as_u64() == Some(wg_pid))
            .filter(|v| v["ts_ns"].as_u64() > Some(last_flag))
            .take(CARRIES_WITHIN)
            .cloned()
            .collect()
    };
    let carries_all =
        |v: &Value| cookies.iter().all(|c| v["carries"].as_array().is_some_and(|a| a.contains(&Value::from(*c))));
    let what = format!("wireguard-go's flow carrying every sender, or {CARRIES_WITHIN} readings of it");
    tracer.wait_for(&what, HANG, |lines| {
        let r = readings(lines);
        r.len() == CARRIES_WITHIN || r.iter().any(carries_all)
    })?;
    let after_flag = readings(&tracer.lines());
    let (nth, wg) = after_flag.iter().enumerate().find(|(_, v)| carries_all(v)).with_context(|| {
        format!("none of wireguard-go's {CARRIES_WITHIN} readings after the last flag carries all of {cookies:?}: {after_flag:?}")
    })?;
    println!("wireguard-go's flow carried every sender at its reading {} after the last flag", nth + 1);
    assert_eq!(wg["app_proto"], "wireguard", "{wg}");
    assert_eq!(wg["owner"]["comm"], "wireguard-go", "{wg}");
    assert_eq!(wg["limited_by"], "tunnel", "{wg}");
    let text = wg["verdict"].as_str().unwrap_or_default();
    assert!(text.contains("runs no congestion control of its own") && !text.contains("userspace"), "{text}");
    let advice: Vec<&str> = wg["advice"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    // One line per namespace to fix: sshd and nginx share the tunnel's, so which of them names
    // it follows their sockets' order.
    let home_fix = format!(": ip netns exec {} sysctl -w {CC}=bbr", home.name());
    let home_line = |a: &&str| a.ends_with(&home_fix) && (a.starts_with("for sshd ") || a.starts_with("for nginx "));
    assert!(advice.iter().any(home_line), "{advice:?}");
    let senders_ns: Vec<&str> = senders.iter().map(|s| s.ns_name.as_str()).collect();
    for a in &advice {
        assert!(senders_ns.iter().any(|ns| a.contains(&format!("ip netns exec {ns} "))), "a sender's fix: {a}");
    }

    // The SSH transfer alone, before and after the fix.
    senders.retain(|s| s.what == "sshd");
    let ssh = &senders[0].pull;
    // A second for the stopped pulls' data still queued at the underlay's bottleneck to drain
    // (a quarter of a 30 ms BDP, under 10 ms) and their connections to close, so that the
    // window measures the SSH transfer alone.
    std::thread::sleep(Duration::from_secs(1));
    let before = ssh.rate_over(WINDOW);
    let (code, out, err) = run_cctrace(&["fix", "--netns", home.name(), "--live", "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("from reno to bbr"), "{out}");
    // BBR takes the connection over from Reno's window and finds the path's bandwidth in its
    // start-up, a few 30 ms round trips; two seconds keep that ramp out of the window measured,
    // as it is mostly out of the truth's (WINDOW + 1 s transfers).
    std::thread::sleep(Duration::from_secs(2));
    let after = ssh.rate_over(WINDOW);
    println!(
        "ssh through the tunnel: {:.1} Mbit/s before the fix, {:.1} after ({:.1}x; the truth {factor:.1}x)",
        before / 1e6,
        after / 1e6,
        after / before
    );
    assert!(after / before >= factor / 2.0, "the fix's {:.1}x against the truth's {factor:.1}x", after / before);
    assert!(after >= bbr * 0.6, "{:.1} Mbit/s after the fix, BBR's truth {:.1}", after / 1e6, bbr / 1e6);
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", home.name(), "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");

    drop(senders);
    let (code, _) = tracer.stop()?;
    assert_eq!(code, 0);
    // The recording carries the tunnel facts: its report names the tunnel.
    let page = recording.with_extension("html");
    let _page_removed = RemoveOnDrop(page.clone());
    let out = std::process::Command::new(cctrace_bin())
        .arg("report")
        .arg(&recording)
        .arg("-o")
        .arg(&page)
        .output_within(CHILD_DEADLINE)?;
    assert!(out.status.success(), "cctrace report: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page)?;
    assert!(
        html.contains(&format!("tunnel {} (MTU 1420) of wireguard-go", lab.server_dev())),
        "no tunnel in the report"
    );

    // Clean exit: no wireguard-go, sshd, nginx, UAPI socket or namespace left.
    let pids = [lab.server_pid(), lab.client_pid(), sshd.pid(), nginx.pid()];
    let names: Vec<String> =
        std::iter::once(home.name()).chain(lab.lans().iter().map(|l| l.ns().name())).map(String::from).collect();
    let sockets = [lab.server_dev(), lab.client_dev()].map(|d| format!("/var/run/wireguard/{d}.sock"));
    drop((sshd, nginx, lan_nginx));
    drop(lab);
    for pid in pids {
        assert!(!alive(pid), "process {pid} left running");
    }
    for s in sockets {
        assert!(!std::path::Path::new(&s).exists(), "{s} left behind");
    }
    let left = list_namespaces()?;
    assert!(names.iter().all(|n| !left.contains(n)), "namespaces left: {left:?}");
    Ok(())
}
