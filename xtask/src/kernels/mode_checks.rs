//! What one guest showed, checked: each hook mode's output (cctrace's start-up lines, its JSON
//! Lines, bpftool's listings) against the kernel's own counters, and the kernel-wide stages'.

use std::collections::BTreeMap;

use serde_json::Value;

use super::guest_ports::{self, last_by_port};
use super::hook_modes::{self, Hooks};
use super::stage_checks::{Check, Stage};
use super::table::{GuestResult, ModeResult};

/// What the guest wrote, checked: each hook mode of `hooks`, then the kernel-wide `stages` in the
/// row of the first mode.
pub(super) fn check_guest(
    sections: &BTreeMap<String, String>,
    hooks: &[Hooks],
    stages: &[Stage],
    result: &mut GuestResult,
) {
    let get = |name: &str| sections.get(name).map(|s| s.trim().to_string()).unwrap_or_default();
    result.release = get("kernel");
    result.btf = get("btf");
    result.stages = stage_times(&get("stages"));
    let default_cc = get("default_cc");
    let bytes: u64 = get("bytes").parse().unwrap_or(0);
    for &mode in hooks {
        // The checks of the mode without BTF where it ran: forced, or picked on a kernel without.
        let without_btf = mode == Hooks::NoBtf || result.btf == "no";
        result.modes.push(check_mode(sections, mode.name(), &default_cc, bytes, without_btf));
    }
    // What concerns the kernel rather than a hook mode runs with the default hooks.
    if let Some(default_hooks) = result.modes.first_mut() {
        default_hooks.checks.extend(super::stage_checks::kernel_wide(sections, stages, result.btf != "no"));
    }
}

/// `boot 9.1\nauto 40.3\n...` (when each stage ended, in seconds since boot) as how long each
/// took: `boot 9 s, auto 31 s, ...`.
fn stage_times(stages: &str) -> String {
    let mut last = 0.0;
    let mut out = Vec::new();
    for (name, end) in stages.lines().filter_map(|l| l.split_once(' ')) {
        let Ok(end) = end.trim().parse::<f64>() else { continue };
        out.push(format!("{name} {:.0} s", end - last));
        last = end;
    }
    out.join(", ")
}

fn snmp_counter(snmp: &str, table: &str, field: &str) -> Option<u64> {
    let mut lines = snmp.lines().filter(|l| l.starts_with(&format!("{table}:")));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    values.get(names.iter().position(|n| *n == field)?)?.parse().ok()
}

/// One hook mode's sections as the guest wrote them, read once.
struct ModeOutput<'a> {
    sections: &'a BTreeMap<String, String>,
    mode: &'a str,
    stderr: String,
    lines: Vec<Value>,
    /// The loopback sender's last record (samples and flows merged).
    loopback: Option<Value>,
}

impl<'a> ModeOutput<'a> {
    /// The sections of `mode`: its stderr, its JSON Lines parsed, the loopback sender's record.
    fn read(sections: &'a BTreeMap<String, String>, mode: &'a str) -> Self {
        let mut out = ModeOutput { sections, mode, stderr: String::new(), lines: Vec::new(), loopback: None };
        out.stderr = out.get("stderr");
        out.lines = out.get("jsonl").lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        out.loopback = last_by_port(&out.lines, guest_ports::LOOPBACK);
        out
    }

    fn get(&self, name: &str) -> String {
        self.sections.get(&format!("{name} {}", self.mode)).cloned().unwrap_or_default()
    }

    /// A sample of `reason` whose local (or, with `either_end`, remote) port is `port`.
    fn has_sample(&self, reason: &str, port: u16, either_end: bool) -> bool {
        let at = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64) == Some(u64::from(port));
        self.lines.iter().any(|v| {
            v.get("type").and_then(Value::as_str) == Some("sample")
                && v.get("reason").and_then(Value::as_str) == Some(reason)
                && (at(v, "sport") || (either_end && at(v, "dport")))
        })
    }
}

/// One hook mode's checks; `without_btf` adds those of the mode without BTF (forced, or picked
/// where the kernel has none).
fn check_mode(
    sections: &BTreeMap<String, String>,
    mode: &str,
    default_cc: &str,
    bytes: u64,
    without_btf: bool,
) -> ModeResult {
    let out = ModeOutput::read(sections, mode);
    let attached = attached_hooks(&out.stderr);
    let disabled = disabled_hooks(&out.stderr);
    let probe_said_off = disabled.iter().any(|d| d.starts_with("tcp_probe:"));
    let mut checks = every_mode_checks(&out, &attached, default_cc, bytes, probe_said_off);
    if without_btf {
        without_btf_checks(&out, bytes, &mut checks);
    } else {
        checks.push(("every emitted sample accounted for".to_string(), summary(&out).and_then(every_sample_accounted)));
        checks.push(("UDP flow counted and classified".to_string(), udp_of(&out)));
    }
    ModeResult { mode: mode.to_string(), attached, disabled, checks }
}

/// The checks every hook mode answers to.
fn every_mode_checks(
    out: &ModeOutput,
    attached: &str,
    default_cc: &str,
    bytes: u64,
    probe_said_off: bool,
) -> Vec<Check> {
    let checks = vec![
        ("exits cleanly", exits_cleanly(out)),
        ("hooks attach", hooks_attach(attached, out)),
        ("bulk flow traced", bulk_flow_traced(out, bytes)),
        ("CA and cwnd sane", ca_and_cwnd_sane(out, default_cc)),
        ("periodic samples (or start-up says they are off)", periodic_samples(out, probe_said_off)),
        ("owner of the accepted connection", owner_of_accepted(out)),
        ("retransmissions match the namespace's counters", retransmissions_match(out)),
        ("idle flow listed at start-up", idle_listed(out)),
        ("clean detach", clean_detach(out)),
    ];
    checks.into_iter().map(|(name, outcome)| (name.to_string(), outcome)).collect()
}

/// The mode without BTF's own checks, added to `checks`, and its bulk flow's in place of the
/// one every mode answers to.
fn without_btf_checks(out: &ModeOutput, bytes: u64, checks: &mut Vec<Check>) {
    let lines = &out.lines;
    let without = [
        ("start-up names the mode without BTF", hook_modes::names_the_mode(&out.stderr)),
        ("only tracepoint programs (bpftool)", hook_modes::only_tracepoint_programs(&out.get("programs during"))),
        (
            "bulk flow recorded at every interval",
            hook_modes::recorded_every_interval(lines, guest_ports::LOOPBACK, bytes),
        ),
        // The mode accounts no UDP: its start-up must say so, or the flow be right.
        (
            "UDP flow counted, or start-up says UDP is not tracked",
            hook_modes::udp_said_off(&out.stderr).or_else(|_| udp_of(out)),
        ),
        // Its samples are made in user space from the records: none of those may be lost.
        ("no record lost or undecodable", summary(out).and_then(hook_modes::no_record_lost)),
    ];
    // Its counters are sock_diag's at each lookup: a socket closed within an interval of
    // its last data ends short by what that interval moved, at most.
    checks.retain(|(name, _)| name != "bulk flow traced");
    checks.push((
        "bulk flow traced (to its last lookup)".to_string(),
        hook_modes::traced_to_its_last_lookup(lines, guest_ports::LOOPBACK, bytes),
    ));
    checks.extend(without.map(|(name, outcome)| (name.to_string(), outcome)));
}

/// The hooks start-up said are disabled, each in a few words.
fn disabled_hooks(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cctrace: "))
        .filter(|l| l.starts_with("tcp:") || l.starts_with("sock:"))
        .filter(|l| l.contains(": disabled"))
        .map(short_disabled)
        .collect()
}

/// `5/6` from the start-up line: "tracing TCP in all network namespaces (live kernel (5/6 hooks))",
/// or "(live kernel without BTF (3/6 tracepoints, sock_diag))".
fn attached_hooks(stderr: &str) -> String {
    stderr
        .split("live kernel")
        .nth(1)
        .and_then(|rest| rest.split_once('(').map(|(_, counts)| counts))
        .and_then(|counts| counts.split_whitespace().next())
        .filter(|n| n.contains('/'))
        .unwrap_or("0/?")
        .to_string()
}

fn exits_cleanly(out: &ModeOutput) -> Result<(), String> {
    let exit = out.get("exit");
    if exit.trim() == "0" {
        Ok(())
    } else {
        Err(format!("exit status {}; stderr: {}", exit.trim(), out.stderr.trim()))
    }
}

fn hooks_attach(attached: &str, out: &ModeOutput) -> Result<(), String> {
    if attached.split('/').next().is_some_and(|n| n.parse().is_ok_and(|n: u32| n > 0)) {
        Ok(())
    } else {
        Err(format!("no hook attached: {}", out.stderr.trim()))
    }
}

fn bulk_flow_traced(out: &ModeOutput, bytes: u64) -> Result<(), String> {
    let f = out
        .loopback
        .as_ref()
        .ok_or_else(|| format!("no sample of the loopback sender (local port {})", guest_ports::LOOPBACK))?;
    let acked = f.get("bytes_acked").and_then(Value::as_u64).unwrap_or(0);
    if acked >= bytes {
        Ok(())
    } else {
        Err(format!("bytes_acked {acked}, sent {bytes}"))
    }
}

fn ca_and_cwnd_sane(out: &ModeOutput, default_cc: &str) -> Result<(), String> {
    let f = out.loopback.as_ref().ok_or("no sample")?;
    let cc = f.get("cc").and_then(Value::as_str).unwrap_or("");
    let cwnd = f.get("cwnd").and_then(Value::as_u64).unwrap_or(0);
    let mss = f.get("mss").and_then(Value::as_u64).unwrap_or(0);
    if cc != default_cc {
        Err(format!("cc {cc:?}, the kernel's default is {default_cc:?}"))
    } else if cwnd == 0 || cwnd > 1_000_000 || mss == 0 {
        Err(format!("cwnd {cwnd}, mss {mss}"))
    } else {
        Ok(())
    }
}

fn periodic_samples(out: &ModeOutput, probe_said_off: bool) -> Result<(), String> {
    if out.has_sample("periodic", guest_ports::LOOPBACK, false) || probe_said_off {
        Ok(())
    } else {
        Err("no periodic sample and no word of why".into())
    }
}

fn owner_of_accepted(out: &ModeOutput) -> Result<(), String> {
    let pids: BTreeMap<String, String> = out
        .get("pids")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let (Some(f), Some(pid)) = (&out.loopback, pids.get("loopback")) else {
        return Err("no sample or no pid".into());
    };
    let owner = f.get("owner").and_then(|o| o.get("pid")).and_then(Value::as_u64).map(|p| p.to_string());
    if owner.as_deref() == Some(pid.as_str()) {
        Ok(())
    } else {
        Err(format!("owner {owner:?}, the accepting process is {pid}"))
    }
}

fn retransmissions_match(out: &ModeOutput) -> Result<(), String> {
    match (last_by_port(&out.lines, guest_ports::LOSSY), snmp_counter(&out.get("snmp"), "Tcp", "RetransSegs")) {
        (_, None) => Err(format!("lossy path not built: {}", out.get("lossy setup").trim())),
        (None, Some(_)) => Err(format!("no sample of the lossy sender (local port {})", guest_ports::LOSSY)),
        (Some(f), Some(kernel)) => {
            let seen = f.get("retrans").and_then(Value::as_u64).unwrap_or(0);
            if kernel == 0 {
                Err("the lossy path lost nothing".into())
            } else if seen == kernel {
                Ok(())
            } else {
                Err(format!("cctrace counted {seen} retransmissions, RetransSegs is {kernel}"))
            }
        }
    }
}

/// The run's closing summary line.
fn summary<'a>(out: &'a ModeOutput) -> Result<&'a Value, String> {
    out.lines.iter().rev().find(|v| v["type"] == "summary").ok_or_else(|| "no summary line".to_string())
}

fn every_sample_accounted(s: &Value) -> Result<(), String> {
    let n = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (received, lost, emitted) = (n("events_received"), n("events_lost"), n("kernel_emitted"));
    if received + lost == emitted {
        Ok(())
    } else {
        Err(format!("received {received} + lost {lost} != emitted {emitted}"))
    }
}

fn idle_listed(out: &ModeOutput) -> Result<(), String> {
    if out.has_sample("snapshot", guest_ports::IDLE, true) {
        Ok(())
    } else {
        Err(format!("no snapshot sample of the idle connection on port {}", guest_ports::IDLE))
    }
}

/// bpftool must be seen to work (it lists cctrace's programs while it runs) for "none left
/// after" to mean anything.
fn clean_detach(out: &ModeOutput) -> Result<(), String> {
    let (during, after) = (out.get("programs during"), out.get("programs after"));
    if !during.contains("cct_") || !during.contains("status 0") {
        Err(format!("bpftool did not list cctrace's programs while it ran: {}", during.trim()))
    } else if !after.contains("status 0") || after.contains("cct_") {
        Err(format!("after exit: {}", after.trim()))
    } else {
        Ok(())
    }
}

/// [`udp_flow`] of the mode's records and what the guest said of the flow it sent.
fn udp_of(out: &ModeOutput) -> Result<(), String> {
    udp_flow(&out.lines, &out.get("udp"))
}

/// The guest's UDP flow, from its sender's last record: the datagrams the kernel counted as sent
/// (Udp OutDatagrams), each with 28 bytes of IPv4 and UDP header, socat as its owner, and QUIC
/// as what it carries (its datagrams' first bytes, read from the sender's own buffer where UDP
/// is counted per syscall, from the packets before Linux 6.3). `said` is the guest's
/// `sent=N datagram=BYTES client=PID`.
fn udp_flow(lines: &[Value], said: &str) -> Result<(), String> {
    let facts: BTreeMap<&str, u64> = said
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    let (Some(&sent), Some(&datagram), Some(&client)) = (facts.get("sent"), facts.get("datagram"), facts.get("client"))
    else {
        return Err(format!("the guest ran no UDP flow: {:?}", said.trim()));
    };
    let Some(record) = lines.iter().rev().find(|v| {
        v["type"] == "flow"
            && v["proto"] == "udp"
            && v["dport"] == guest_ports::UDP
            && v["tx_packets"].as_u64() > Some(0)
    }) else {
        return Err(format!("no UDP record of the sender (to port {})", guest_ports::UDP));
    };
    let n = |k: &str| record.get(k).and_then(Value::as_u64).unwrap_or(0);
    if n("tx_packets") != sent {
        Err(format!("tx_packets {}, the kernel sent {sent} datagrams", n("tx_packets")))
    } else if n("tx_bytes") != sent * (datagram + 28) {
        Err(format!("tx_bytes {}, {sent} datagrams of {datagram} bytes are {}", n("tx_bytes"), sent * (datagram + 28)))
    } else if record["app_proto"] != "quic" {
        Err(format!("app_proto {}, the datagrams are QUIC long headers", record["app_proto"]))
    } else if record["owner"]["pid"].as_u64() != Some(client) || record["owner"]["comm"] != "socat" {
        Err(format!("owner {}, the sender is socat {client}", record["owner"]))
    } else {
        Ok(())
    }
}

/// `tcp:tcp_probe: disabled (classic tracepoint: ...; what is lost)` in a few words for the table:
/// the hook, why each flavour failed, what is lost.
fn short_disabled(line: &str) -> String {
    let (hook, rest) = line.split_once(": disabled (").unwrap_or((line, ""));
    let rest = rest.strip_suffix(')').unwrap_or(rest);
    let parts: Vec<String> = rest
        .split("; ")
        .map(|p| {
            if p.contains("unknown BTF type") {
                "no tp_btf".to_string()
            } else if p.contains("skaddr field") {
                "tracefs record lacks skaddr".to_string()
            } else if p.contains("no classic twin") {
                "BTF only".to_string()
            } else if p.contains(" tracepoint") && p.contains("this kernel has no") {
                "no such tracepoint".to_string()
            } else {
                p.to_string()
            }
        })
        .collect();
    format!("{}: {}", hook.trim_start_matches("tcp:").trim_start_matches("sock:"), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_whose_sections_show_every_check_passes_them_and_each_missing_part_is_named() {
        let jsonl = [
            r#"{"type":"sample","reason":"snapshot","sport":40000,"dport":5003}"#,
            r#"{"type":"sample","reason":"periodic","sport":5001,"cc":"bbr","cwnd":10,"mss":1448,"bytes_acked":1000,"owner":{"pid":7}}"#,
            r#"{"type":"sample","reason":"retransmit","sport":5002,"retrans":9}"#,
            r#"{"type":"summary","events_received":3,"events_lost":0,"kernel_emitted":3}"#,
        ]
        .join("\n");
        let mut sections: BTreeMap<String, String> = [
            ("stderr", "cctrace: tracing TCP in all network namespaces (live kernel (6/6 hooks))\n"),
            ("jsonl", jsonl.as_str()),
            ("exit", "0\n"),
            ("pids", "loopback=7\n"),
            ("snmp", "Tcp: RtoAlgorithm RetransSegs\nTcp: 1 9\n"),
            ("programs during", "42: tracepoint name cct_probe\nstatus 0\n"),
            ("programs after", "status 0\n"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{k} auto"), v.to_string()))
        .collect();
        let r = check_mode(&sections, "auto", "bbr", 1000, false);
        assert_eq!(r.attached, "6/6");
        let failed: Vec<&str> = r.checks.iter().filter(|(_, o)| o.is_err()).map(|(n, _)| n.as_str()).collect();
        // The UDP flow is the one part these sections leave out.
        assert_eq!(failed, ["UDP flow counted and classified"], "{:?}", r.checks);
        sections.insert("snmp auto".into(), "Tcp: RetransSegs\nTcp: 8\n".into());
        sections.remove("exit auto");
        let r = check_mode(&sections, "auto", "cubic", 1001, false);
        let failed: Vec<&str> = r.checks.iter().filter(|(_, o)| o.is_err()).map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            failed,
            [
                "exits cleanly",
                "bulk flow traced",
                "CA and cwnd sane",
                "retransmissions match the namespace's counters",
                "UDP flow counted and classified"
            ]
        );
    }

    #[test]
    fn the_mode_without_btf_swaps_the_bulk_check_for_its_own_and_adds_its_checks() {
        let sections = BTreeMap::new();
        let names = |without_btf| -> Vec<String> {
            check_mode(&sections, "nobtf", "bbr", 1000, without_btf).checks.into_iter().map(|(n, _)| n).collect()
        };
        let with_btf = names(false);
        let without = names(true);
        assert!(with_btf.iter().any(|n| n == "bulk flow traced"), "{with_btf:?}");
        assert!(!without.iter().any(|n| n == "bulk flow traced"), "{without:?}");
        assert_eq!(
            without[8..],
            [
                "bulk flow traced (to its last lookup)",
                "start-up names the mode without BTF",
                "only tracepoint programs (bpftool)",
                "bulk flow recorded at every interval",
                "UDP flow counted, or start-up says UDP is not tracked",
                "no record lost or undecodable",
            ]
        );
        // Nothing was written: every check fails, each with its reason.
        assert!(check_mode(&sections, "nobtf", "bbr", 1000, true).checks.iter().all(|(_, o)| o.is_err()));
    }

    #[test]
    fn the_attached_count_is_read_from_either_start_up_line() {
        let btf = "cctrace: tracing TCP in all network namespaces (live kernel (5/6 hooks))";
        assert_eq!(attached_hooks(btf), "5/6");
        let without =
            "cctrace: tracing TCP in all network namespaces (live kernel without BTF (3/6 tracepoints, sock_diag))";
        assert_eq!(attached_hooks(without), "3/6");
        assert_eq!(attached_hooks("cctrace: cannot read kernel BTF"), "0/?");
    }

    #[test]
    fn stage_ends_become_durations() {
        assert_eq!(stage_times("boot 9.4\nauto 40.1\nclassic 70.9\n"), "boot 9 s, auto 31 s, classic 31 s");
        assert_eq!(stage_times(""), "");
    }

    #[test]
    fn snmp_counters_are_read_by_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 37 0\n";
        assert_eq!(snmp_counter(snmp, "Tcp", "RetransSegs"), Some(37));
        assert_eq!(snmp_counter(snmp, "Tcp", "Nope"), None);
    }

    #[test]
    fn the_udp_flow_must_count_what_the_kernel_sent_and_be_quic_owned_by_its_sender() {
        let record = |packets: u64, bytes: u64, proto: &str, pid: u64| -> Vec<Value> {
            vec![serde_json::json!({"type": "flow", "proto": "udp", "dport": 5004, "tx_packets": packets,
                "tx_bytes": bytes, "app_proto": proto, "owner": {"comm": "socat", "pid": pid}})]
        };
        let said = "sent=2048 datagram=1024 client=77";
        assert_eq!(udp_flow(&record(2048, 2048 * 1052, "quic", 77), said), Ok(()));
        assert!(udp_flow(&record(2047, 2047 * 1052, "quic", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1024, "quic", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "null", 77), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "quic", 78), said).is_err());
        assert!(udp_flow(&record(2048, 2048 * 1052, "quic", 77), "").is_err());
        assert!(udp_flow(&[], said).is_err());
    }

    #[test]
    fn disabled_hooks_shrink_to_what_failed_and_what_is_lost() {
        let line = "tcp:tcp_sendmsg_locked: disabled (BTF tracepoint: load: unknown BTF type `x`; classic tracepoint: this kernel has no tcp:tcp_sendmsg_locked tracepoint; owners found in /proc)";
        assert_eq!(short_disabled(line), "tcp_sendmsg_locked: no tp_btf, no such tracepoint, owners found in /proc");
    }
}
