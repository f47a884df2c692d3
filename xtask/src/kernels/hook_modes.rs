//! The hook modes a guest runs its flows under (`hooks=` on its kernel command line), and the
//! checks only the mode without BTF answers to: it must see a bulk flow at every interval, from
//! tracepoint programs alone.

use serde_json::Value;

/// cctrace's flag that makes it run without BTF where the kernel has it (the `nobtf` mode).
pub(crate) const NOBTF_FLAG: &str = "--hooks=no-btf";
/// The report interval every guest run asks for (`--interval`), in milliseconds.
pub(crate) const INTERVAL_MS: u64 = 500;

/// A hook mode of the guest's runs, by the name its init gives the run's sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hooks {
    /// cctrace's own choice (the default, `--hooks auto`): BTF tracepoints where they load, and
    /// on a kernel without BTF the mode without it.
    Auto,
    /// `--hooks classic`: classic tracepoints reading the socket at offsets from BTF.
    Classic,
    /// The mode without BTF, forced ([`NOBTF_FLAG`]) on a kernel that has BTF.
    NoBtf,
}

impl Hooks {
    /// Every mode, as `cargo xtask kernels` runs them on a kernel with BTF.
    pub(crate) const ALL: &'static [Hooks] = &[Hooks::Auto, Hooks::Classic, Hooks::NoBtf];
    /// What a kernel without BTF runs: cctrace's own choice, which must be the mode without BTF
    /// (the classic hooks read the socket at offsets from BTF, and forcing what it picks adds nothing).
    pub(crate) const WITHOUT_BTF: &'static [Hooks] = &[Hooks::Auto];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Hooks::Auto => "auto",
            Hooks::Classic => "classic",
            Hooks::NoBtf => "nobtf",
        }
    }

    /// The kernel command line's words asking the init for `modes`, with the flag of the mode
    /// without BTF and the report interval its runs ask for.
    pub(crate) fn command_line(modes: &[Hooks]) -> String {
        let names: Vec<&str> = modes.iter().map(|m| m.name()).collect();
        format!("hooks={} nobtf={NOBTF_FLAG} interval={INTERVAL_MS}", names.join(","))
    }
}

/// Start-up says, in one line, that the mode without BTF runs (and why, and what it loses).
pub(crate) fn names_the_mode(stderr: &str) -> Result<(), String> {
    match stderr.lines().filter(|l| l.contains("mode without BTF (")).count() {
        1 => Ok(()),
        n => Err(format!("{n} start-up lines name the mode without BTF: {}", stderr.trim())),
    }
}

/// Start-up says heavy UDP flows are not tracked (the mode without BTF accounts none).
pub(crate) fn udp_said_off(stderr: &str) -> Result<(), String> {
    if stderr.lines().any(|l| l.contains("UDP flows not tracked")) {
        Ok(())
    } else {
        Err("start-up does not say UDP is not tracked".into())
    }
}

/// The summary counts no record lost in the ring and none it could not decode. (The mode without
/// BTF makes its samples in user space, so the kernel counts no samples emitted to compare.)
pub(crate) fn no_record_lost(summary: &Value) -> Result<(), String> {
    let n = |k: &str| summary.get(k).and_then(Value::as_u64);
    match (n("events_lost"), n("decode_errors")) {
        (Some(0), Some(0)) => Ok(()),
        (lost, undecoded) => Err(format!("records lost {lost:?}, undecodable {undecoded:?}")),
    }
}

/// Every program cctrace loaded is a classic tracepoint's: none typed by BTF (tp_btf, iter,
/// struct_ops), no cgroup or socket program. `during` is `bpftool prog show` while it ran.
pub(crate) fn only_tracepoint_programs(during: &str) -> Result<(), String> {
    // `42: tracepoint  name cct_probe  tag 0123...  gpl`
    let ours: Vec<(&str, &str)> = during
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let kind = words.nth(1)?;
            let name = words.skip_while(|w| *w != "name").nth(1)?;
            name.starts_with("cct_").then_some((kind, name))
        })
        .collect();
    let other: Vec<String> =
        ours.iter().filter(|(kind, _)| *kind != "tracepoint").map(|(kind, name)| format!("{name} ({kind})")).collect();
    if ours.is_empty() {
        Err(format!("bpftool listed no program of cctrace's: {}", during.trim()))
    } else if !other.is_empty() {
        Err(format!("programs other than tracepoints: {}", other.join(", ")))
    } else {
        Ok(())
    }
}

/// The bulk flow (local port `port`, `bytes` long) is in a flow record at every interval while
/// its data moves: at least three such records, and at least one for every two intervals its
/// records span (a tick the emulator was too busy to serve may fold into the next). A mode that
/// learns of a flow only from retransmissions and state changes shows it once at its start and
/// once at its end.
pub(crate) fn recorded_every_interval(lines: &[Value], port: u16, bytes: u64) -> Result<(), String> {
    let records = flow_records(lines, port);
    let Some(&(first, _)) = records.first() else {
        return Err(format!("no flow record of the bulk sender (local port {port})"));
    };
    let short = last_lookup_step(&records);
    let Some(&(done, _)) = records.iter().find(|(_, acked)| *acked + short >= bytes) else {
        return Err(format!("no flow record with {bytes} bytes acked, or within one lookup's step ({short})"));
    };
    let moving = records.iter().filter(|(_, acked)| *acked > 0 && *acked < bytes).count();
    let span_ms = done.saturating_sub(first) / 1_000_000;
    let wanted = (span_ms / (2 * INTERVAL_MS)).max(3);
    if moving as u64 >= wanted {
        Ok(())
    } else {
        Err(format!(
            "{moving} flow records while its data moved, over {span_ms} ms of {INTERVAL_MS} ms intervals (at least {wanted} wanted)"
        ))
    }
}

/// The bulk sender's flow records: (time, bytes acked).
fn flow_records(lines: &[Value], port: u16) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter(|v| v["type"] == "flow" && v["sport"].as_u64() == Some(u64::from(port)))
        .map(|v| (v["ts_ns"].as_u64().unwrap_or(0), v["bytes_acked"].as_u64().unwrap_or(0)))
        .collect()
}

/// The most the flow's count moved between two of its records before its last: what one sock_diag lookup
/// interval carried. Without BTF the counters are read by those lookups, and a socket closed
/// within an interval of its last data is a TIME_WAIT minisock by the next one, which sock_diag
/// gives no tcp_info: its count may end short by up to one such step (docs/json.md).
fn last_lookup_step(records: &[(u64, u64)]) -> u64 {
    // The steps before the last record only: a flow seen at its ends alone shows none, and must
    // have its whole count.
    let before_last = &records[..records.len().saturating_sub(1)];
    before_last.windows(2).map(|w| w[1].1.saturating_sub(w[0].1)).max().unwrap_or(0)
}

/// The bulk flow's count without BTF: all `bytes`, or short of them by at most one lookup's step.
pub(crate) fn traced_to_its_last_lookup(lines: &[Value], port: u16, bytes: u64) -> Result<(), String> {
    let records = flow_records(lines, port);
    let acked = records.iter().map(|r| r.1).max().unwrap_or(0);
    let short = last_lookup_step(&records);
    if acked + short >= bytes && acked > 0 {
        Ok(())
    } else {
        Err(format!("bytes_acked {acked}, sent {bytes}, the largest step between lookups {short}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_btf_a_count_may_end_one_lookup_short_and_no_more() {
        let line =
            |ts: u64, acked: u64| serde_json::json!({"type": "flow", "sport": 5201, "ts_ns": ts, "bytes_acked": acked});
        let lines: Vec<Value> = [(0, 0), (1, 8_000_000), (2, 16_000_000), (3, 24_000_000), (4, 28_000_000)]
            .iter()
            .map(|&(s, a)| line(s * 500_000_000, a))
            .collect();
        assert_eq!(traced_to_its_last_lookup(&lines, 5201, 30_000_000), Ok(()));
        assert!(traced_to_its_last_lookup(&lines, 5201, 40_000_000).is_err());
    }

    #[test]
    fn the_command_line_names_the_modes_and_the_flag() {
        assert_eq!(Hooks::command_line(Hooks::WITHOUT_BTF), format!("hooks=auto nobtf={NOBTF_FLAG} interval=500"));
        assert!(Hooks::command_line(Hooks::ALL).starts_with("hooks=auto,classic,nobtf "));
    }

    #[test]
    fn only_classic_tracepoints_pass() {
        let good = "12: tracepoint  name cct_probe_classic  tag 0a  gpl\n\tloaded_at 2026\n13: tracepoint  name cct_state  tag 0b  gpl\n7: cgroup_skb  name sd_fw_egress  tag 0c\nstatus 0\n";
        assert_eq!(only_tracepoint_programs(good), Ok(()));
        let btf =
            format!("{good}14: tracing  name cct_probe  tag 0d  gpl\n15: cgroup_skb  name cct_udp_egress  tag 0e\n");
        assert_eq!(
            only_tracepoint_programs(&btf),
            Err("programs other than tracepoints: cct_probe (tracing), cct_udp_egress (cgroup_skb)".into())
        );
        assert!(only_tracepoint_programs("7: cgroup_skb  name sd_fw_egress  tag 0c\nstatus 0\n").is_err());
    }

    fn records(points: &[(u64, u64)]) -> Vec<Value> {
        points
            .iter()
            .map(|&(ms, acked)| {
                serde_json::json!({"type": "flow", "sport": 5001, "ts_ns": ms * 1_000_000, "bytes_acked": acked})
            })
            .collect()
    }

    #[test]
    fn a_flow_seen_at_every_interval_passes_and_one_seen_at_its_ends_fails() {
        // 5.10's BTF tracepoints: a record each 500 ms while 30 MB moved.
        let every = records(&[(0, 0), (500, 5), (1000, 12), (1500, 23), (1900, 30), (7000, 30)]);
        assert_eq!(recorded_every_interval(&every, 5001, 30), Ok(()));
        // 5.10's classic tracepoints: its start, then its end 7 s on.
        let ends = records(&[(0, 0), (7000, 30)]);
        assert!(recorded_every_interval(&ends, 5001, 30).is_err());
        // A record every third interval over a long flow.
        let sparse: Vec<(u64, u64)> = (0..=20).map(|i| (i * 1500, i)).collect();
        assert!(recorded_every_interval(&records(&sparse), 5001, 20).is_err());
        assert!(recorded_every_interval(&records(&[(0, 1), (500, 2)]), 5001, 30).is_err(), "never done");
        assert!(recorded_every_interval(&[], 5001, 30).is_err());
    }
}
