//! The matrix's checks that concern a kernel rather than a hook mode, run once per guest after
//! both modes (`guest_init.sh`'s `fix_live`, `deep_mode` and `unit_service`) and shown in the
//! row of the default hooks: `cctrace fix --live` and `--undo` as the kernel's `ss` sees them,
//! `--deep` running or refusing in one line while tracing goes on, and the packaged systemd
//! unit's user and capabilities on a host with `kernel.perf_event_paranoid=3` (on a kernel
//! without BTF, whose every hook is a perf event: at the kernel's default 2, and refused in one
//! line at 3).

use std::collections::BTreeMap;

use serde_json::Value;

use super::guest_ports::{self, last_by_port};

/// A check's name and outcome (the reason when it failed).
pub(crate) type Check = (String, Result<(), String>);

/// Flags `ss -i` prints before a socket's congestion control.
const SS_FLAGS: &[&str] = &["ts", "sack", "ecn", "ecnseen", "fastopen"];

/// A kernel-wide stage of the guest's init, by the name `checks=` on its command line gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// `fix --live` and `--undo` on an idle connection.
    Fix,
    /// `--deep` on that connection's namespace (the init opens it when `Fix` is not asked).
    Deep,
    /// `cctrace serve` and the classic hooks as the packaged unit's user.
    Unit,
}

impl Stage {
    pub(crate) const ALL: &'static [Stage] = &[Stage::Fix, Stage::Deep, Stage::Unit];

    fn name(self) -> &'static str {
        match self {
            Stage::Fix => "fix",
            Stage::Deep => "deep",
            Stage::Unit => "unit",
        }
    }

    /// The kernel command line's word asking the init for `stages` (`checks=none` for none).
    pub(crate) fn command_line(stages: &[Stage]) -> String {
        let names: Vec<&str> = stages.iter().map(|s| s.name()).collect();
        format!("checks={}", if names.is_empty() { "none".to_string() } else { names.join(",") })
    }
}

/// The checks of the kernel-wide `stages` the guest was asked to run, from its sections; `btf`:
/// whether its kernel has BTF.
pub(crate) fn kernel_wide(sections: &BTreeMap<String, String>, stages: &[Stage], btf: bool) -> Vec<Check> {
    let get = |name: &str| sections.get(name).map(|s| s.trim().to_string()).unwrap_or_default();
    let check = |name: &str, outcome: Result<(), String>| (name.to_string(), outcome);
    let mut checks = Vec::new();
    for stage in stages {
        let judged = match stage {
            Stage::Fix => vec![check("fix --live switches, --undo switches back (ss)", fix_live(&get))],
            Stage::Deep => vec![check("deep mode runs, or one line says why and tracing goes on", deep_mode(&get))],
            Stage::Unit if btf => vec![
                check("packaged unit's user and caps, perf_event_paranoid=3", unit_service(&get, "3")),
                check("classic hooks as the unit's user: attach or one line why", unit_classic(&get)),
            ],
            Stage::Unit => vec![
                check("packaged unit's user and caps, perf_event_paranoid=2 (no BTF)", unit_service(&get, "2")),
                check("perf_event_paranoid=3 refuses the unit's user in one line (no BTF)", unit_strict(&get)),
            ],
        };
        checks.extend(judged);
    }
    checks
}

/// The congestion control of each connection `ss -tinH` lists with `port` at either end.
fn ss_algorithms(ss: &str, port: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = ss.lines();
    while let Some(line) = lines.next() {
        if !line.split_whitespace().any(|w| w.ends_with(port)) {
            continue;
        }
        // The socket's line, then its details: flags, the algorithm, then `key:value` fields.
        let Some(details) = lines.next() else { break };
        let cc = details.split_whitespace().find(|w| !w.contains(':') && !SS_FLAGS.contains(w));
        out.push(cc.unwrap_or("?").to_string());
    }
    out
}

fn all_on(ss: &str, cc: &str, when: &str) -> Result<(), String> {
    let found = ss_algorithms(ss, &format!(":{}", guest_ports::FIX));
    if found.len() == 2 && found.iter().all(|c| c == cc) {
        Ok(())
    } else {
        Err(format!("{when}: ss shows {found:?} for the two ends of the :{} connection, not {cc}", guest_ports::FIX))
    }
}

fn fix_live(get: &dyn Fn(&str) -> String) -> Result<(), String> {
    let (fix, undo) = (get("fix"), get("fix undo"));
    if fix.is_empty() {
        return Err(format!("fix did not run: {} {}", get("fx setup"), get("fix setup")));
    }
    all_on(&get("ss before fix"), "cubic", "before the fix")?;
    if !fix.ends_with("exit 0") {
        return Err(format!("fix failed: {fix}"));
    }
    all_on(&get("ss after fix"), "bbr", "after fix --live").map_err(|e| format!("{e}; fix said: {fix}"))?;
    if !undo.ends_with("exit 0") {
        return Err(format!("undo failed: {undo}"));
    }
    all_on(&get("ss after undo"), "cubic", "after --undo").map_err(|e| format!("{e}; undo said: {undo}"))
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn no_programs_left(after: &str) -> Result<(), String> {
    if after.contains("status 0") && !after.contains("cct_") {
        Ok(())
    } else {
        Err(format!("programs left loaded: {after}"))
    }
}

fn deep_mode(get: &dyn Fn(&str) -> String) -> Result<(), String> {
    let (exit, stderr) = (get("deep exit"), get("deep stderr"));
    if exit != "0" {
        return Err(format!("exit status {exit}: {stderr}"));
    }
    // Its start says one of these, once.
    let said = stderr
        .lines()
        .filter(|l| l.contains("deep mode off") || (l.contains("deep mode:") && l.contains("registered")))
        .count();
    if said != 1 {
        return Err(format!("not one line saying deep mode runs or why not: {stderr}"));
    }
    if !stderr.contains("tracing TCP") {
        return Err(format!("tracing did not start: {stderr}"));
    }
    let lines = json_lines(&get("deep jsonl"));
    if last_by_port(&lines, guest_ports::FIX).is_none()
        && !lines.iter().any(|v| v.get("dport").and_then(Value::as_u64) == Some(u64::from(guest_ports::FIX)))
    {
        return Err("fx's idle connection was not listed: tracing did not go on".into());
    }
    no_programs_left(&get("programs after deep"))
}

/// The sum of a metric's series in a Prometheus exposition.
fn metric_sum(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn unit_service(get: &dyn Fn(&str) -> String, paranoid_set: &str) -> Result<(), String> {
    let paranoid = get("perf_event_paranoid");
    if paranoid != paranoid_set {
        return Err(format!("kernel.perf_event_paranoid is {paranoid:?}, not {paranoid_set}"));
    }
    let stderr = get("unit stderr");
    if !stderr.contains("tracing TCP") {
        return Err(format!("did not start: {stderr}"));
    }
    let bytes: f64 = get("unit bytes").parse().unwrap_or(f64::INFINITY);
    let sent = metric_sum(&get("unit metrics"), "cctrace_sent_bytes_total");
    if sent < bytes {
        return Err(format!("the metrics count {sent} bytes sent, the flow sent {bytes}: {stderr}"));
    }
    let exit = get("unit exit");
    if exit != "0" {
        return Err(format!("SIGTERM: exit status {exit}: {stderr}"));
    }
    no_programs_left(&get("programs after unit"))
}

/// Without BTF at `perf_event_paranoid=3`: nothing can attach, and one line says which setting
/// to change; nothing left loaded.
fn unit_strict(get: &dyn Fn(&str) -> String) -> Result<(), String> {
    let stderr = get("unit strict stderr");
    if get("unit strict exit") == "0" {
        return Err(format!("it ran where no perf event may be opened: {stderr}"));
    }
    if stderr.lines().count() != 1 || !stderr.contains("perf_event_paranoid") {
        return Err(format!("refused, but not in one line naming perf_event_paranoid: {stderr}"));
    }
    no_programs_left(&get("programs after unit strict"))
}

fn unit_classic(get: &dyn Fn(&str) -> String) -> Result<(), String> {
    let stderr = get("unit classic stderr");
    if get("unit classic exit") == "0" {
        return if stderr.contains("tracing TCP") { Ok(()) } else { Err(format!("exit 0 without tracing: {stderr}")) };
    }
    if stderr.lines().count() == 1
        && stderr.contains("perf_event_open refused")
        && stderr.contains("perf_event_paranoid")
    {
        Ok(())
    } else {
        Err(format!("refused, but not in one line naming perf_event_open and the sysctl: {stderr}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "0 0 127.0.0.1:5010 127.0.0.1:40112\n\t ts sack cubic wscale:7,7 rto:204 rtt:0.05/0.025\n0 0 127.0.0.1:40112 127.0.0.1:5010\n\t ts sack bbr wscale:7,7 rto:204 bbr:(bw:1Mbps)\n0 0 127.0.0.1:22 127.0.0.1:4000\n\t cubic\n";

    #[test]
    fn ss_tells_each_connections_algorithm() {
        assert_eq!(ss_algorithms(SS, &format!(":{}", guest_ports::FIX)), ["cubic", "bbr"]);
        assert!(all_on(SS, "cubic", "x").is_err(), "one end is on bbr");
        assert!(all_on(&SS.replace("bbr", "cubic"), "cubic", "x").is_ok());
        assert!(all_on("", "cubic", "x").is_err(), "no connection at all");
    }

    #[test]
    fn metrics_are_summed_over_their_series_only() {
        let text = "# TYPE cctrace_sent_bytes counter\ncctrace_sent_bytes_total{netns=\"1\"} 3000\ncctrace_sent_bytes_total{netns=\"2\"} 2000\ncctrace_sent_bytes_total_other 9\n";
        assert_eq!(metric_sum(text, "cctrace_sent_bytes_total"), 5000.0);
    }

    #[test]
    fn the_command_line_names_the_stages_asked_or_none() {
        assert_eq!(Stage::command_line(Stage::ALL), "checks=fix,deep,unit");
        assert_eq!(Stage::command_line(&[Stage::Unit]), "checks=unit");
        assert_eq!(Stage::command_line(&[]), "checks=none");
    }

    #[test]
    fn only_the_stages_asked_are_judged() {
        let checks = kernel_wide(&BTreeMap::new(), &[Stage::Unit], true);
        assert_eq!(checks.len(), 2);
        assert!(checks.iter().all(|(name, outcome)| name.contains("unit") && outcome.is_err()), "{checks:?}");
    }

    fn sections(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn deep_mode_must_say_one_thing_and_keep_tracing() {
        let good = sections(&[
            ("deep exit", "0"),
            ("deep stderr", "cctrace: deep mode off, tracing goes on: --deep registers its twins through struct_ops links (Linux 6.4), which this kernel lacks\ncctrace: tracing TCP in all network namespaces"),
            ("deep jsonl", "{\"type\":\"sample\",\"sport\":5010,\"reason\":\"snapshot\"}"),
            ("programs after deep", "status 0"),
        ]);
        let check = |s: &BTreeMap<String, String>| {
            let get = |name: &str| s.get(name).map(|v| v.trim().to_string()).unwrap_or_default();
            deep_mode(&get)
        };
        assert_eq!(check(&good), Ok(()));
        let mut exited = good.clone();
        exited.insert("deep exit".into(), "1".into());
        assert!(check(&exited).is_err());
        let mut blind = good.clone();
        blind.insert("deep jsonl".into(), String::new());
        assert!(check(&blind).is_err(), "no flow listed: tracing did not go on");
        let mut silent = good.clone();
        silent.insert("deep stderr".into(), "cctrace: tracing TCP in all network namespaces".into());
        assert!(check(&silent).is_err(), "nothing said about deep mode");
        let mut ran = good;
        ran.insert(
            "deep stderr".into(),
            "cctrace: deep mode: cct_cubic, cct_reno and cct_bbr registered; 2 flows moved onto them\ncctrace: tracing TCP flows of netns=fx\ncctrace: deep mode: 2 decision events received, 0 lost".into(),
        );
        assert_eq!(check(&ran), Ok(()));
    }

    #[test]
    fn without_btf_the_unit_runs_at_2_and_is_refused_in_one_line_at_3() {
        let checks = kernel_wide(&BTreeMap::new(), &[Stage::Unit], false);
        assert!(checks[0].0.contains("perf_event_paranoid=2") && checks[1].0.contains("=3 refuses"), "{checks:?}");
        let check = |exit: &str, stderr: &str, after: &str| {
            let s = sections(&[
                ("unit strict exit", exit),
                ("unit strict stderr", stderr),
                ("programs after unit strict", after),
            ]);
            let get = |name: &str| s.get(name).map(|v| v.trim().to_string()).unwrap_or_default();
            unit_strict(&get)
        };
        let one = "cctrace: no TCP tracepoint could be attached: classic tracepoints: attach: perf_event_open refused: Permission denied: kernel.perf_event_paranoid=3 lets only CAP_SYS_ADMIN open perf events (set it to 2, or give cctrace CAP_SYS_ADMIN)";
        assert_eq!(check("1", one, "status 0"), Ok(()));
        assert!(check("1", &format!("{one}\n  tcp:tcp_probe: disabled"), "status 0").is_err(), "two lines");
        assert!(check("0", "cctrace: tracing TCP", "status 0").is_err(), "it may not run");
        assert!(check("1", one, "9: tracepoint  name cct_nb_probe\nstatus 0").is_err(), "left loaded");
    }

    #[test]
    fn a_classic_refusal_must_be_one_line_naming_the_setting() {
        let check = |exit: &str, stderr: &str| {
            let s = sections(&[("unit classic exit", exit), ("unit classic stderr", stderr)]);
            let get = |name: &str| s.get(name).map(|v| v.trim().to_string()).unwrap_or_default();
            unit_classic(&get)
        };
        let one = "cctrace: no TCP tracepoint could be attached: classic tracepoints: attach: perf_event_open refused: Permission denied: kernel.perf_event_paranoid=3 lets only CAP_SYS_ADMIN open perf events (set it to 2, or give cctrace CAP_SYS_ADMIN)";
        assert_eq!(check("1", one), Ok(()));
        assert!(check("1", &format!("{one}\n  tcp:tcp_probe: disabled")).is_err());
        assert!(check("1", "cctrace: no TCP tracepoint could be attached:\n  tcp:tcp_probe: ...").is_err());
        assert_eq!(check("0", "cctrace: tracing TCP in all network namespaces"), Ok(()));
    }
}
