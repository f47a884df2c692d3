use tracer_common::SwitchRecord;

use super::commands::{buffer_sysctl_file, MODULES_FILE, SYSCTL_FILE};
use super::*;
use crate::analysis::environment::{BufferLimits, Environment};
use crate::analysis::sample::Sample;

fn target(host: bool) -> Target {
    Target {
        netns: 4026532000,
        path: "/run/netns/cct-1".into(),
        reached: "ip netns cct-1".into(),
        host,
        ip_netns: !host,
        runtime_sysctl: None,
    }
}

#[test]
fn the_plan_says_each_step_and_only_loads_what_is_missing() {
    let available = vec!["reno".to_string(), "cubic".to_string()];
    let conn = |cookie, cc: &str| Switched {
        cookie,
        old_cc: cc.into(),
        new_cc: cc.into(),
        result: 0,
        sport: 40000,
        dport: 5201,
    };
    let established = [conn(1, "cubic"), conn(2, "bbr"), conn(3, "vegas"), conn(4, "reno")];
    let plan = Plan::new(target(false), "bbr", "cubic", &available, true, &established, false, &|_| false);
    let lines = plan.lines();
    assert_eq!(plan.load_module.as_deref(), Some("tcp_bbr"));
    assert!(lines[1].contains("load the kernel module tcp_bbr"), "{lines:#?}");
    assert!(lines[2].contains("from cubic to bbr"), "{lines:#?}");
    // Loss-based ones only, each named; the others are said to stay.
    assert_eq!(plan.to_switch.iter().map(|c| c.cookie).collect::<Vec<_>>(), [1, 4]);
    assert!(lines[3].contains("switch 2 established connections"), "{lines:#?}");
    assert!(lines[4].contains("(cookie 1) on cubic") && lines[5].contains("(cookie 4) on reno"), "{lines:#?}");
    assert!(lines[6].contains("2 other connections (bbr, vegas) left as they are"), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("persist")), "{lines:#?}");
    let many: Vec<Switched> = (0..20).map(|i| conn(i, "cubic")).collect();
    let plan = Plan::new(target(false), "bbr", "bbr", &available, true, &many, false, &|_| false);
    assert!(plan.lines().iter().any(|l| l == "    and 12 more"), "{:#?}", plan.lines());
    let plan = Plan::new(target(false), "bbr", "bbr", &available, true, &[conn(2, "bbr")], false, &|_| false);
    assert!(plan.lines().iter().any(|l| l.contains("none to switch now")));
    let loaded = vec!["bbr".to_string()];
    let plan = Plan::new(target(false), "bbr", "bbr", &loaded, false, &[], false, &|_| false);
    assert_eq!(plan.load_module, None);
    assert!(plan.lines().iter().any(|l| l.contains("already bbr")));
    assert!(plan.lines().iter().any(|l| l.contains("add --live")));
}

/// One sample of a connection, as the fix's snapshot reads it.
fn socket(cookie: u64, netns: u32, local: &str, remote: &str, f: impl Fn(&mut Sample)) -> Sample {
    let mut s = crate::analysis::flow_table::tests::sample(cookie, 1000);
    s.netns = netns;
    s.local = local.parse().expect("addr");
    s.remote = remote.parse().expect("addr");
    s.min_rtt_us = 200_000;
    s.bytes_acked = 0;
    s.bytes_received = 0;
    f(&mut s);
    s
}

#[test]
fn the_plan_raises_the_maxima_that_bind_and_names_the_applications_it_leaves_alone() {
    let wmem = BufferLimits { min: 4096, default: 16384, max: 4_194_304 };
    let rmem = BufferLimits { min: 4096, default: 131_072, max: 1_048_576 };
    let (us, them) = (4026532000, 4026532111);
    let mut env = Environment::default();
    env.netns_wmem.insert(us, wmem);
    env.netns_rmem.insert(them, rmem);
    env.netns_names.insert(them, "rcv".into());
    let bulk = |s: &mut Sample| {
        s.bytes_acked = 50 << 20;
        s.busy_us = 10_000_000;
        s.delivery_rate_bps = 100_000_000;
    };
    let samples = vec![
        // Held by its send buffer at the namespace's max: raise it.
        socket(1, us, "198.18.0.1:40000", "198.19.0.2:5201", |s| {
            bulk(s);
            s.sndbuf = wmem.max;
        }),
        // Below the max: the max is not what holds it.
        socket(2, us, "198.18.0.1:40001", "198.19.0.2:5201", |s| {
            bulk(s);
            s.sndbuf = 1 << 20;
        }),
        // Its own SO_SNDBUF, waiting for room: named, left alone.
        socket(3, us, "198.18.0.1:40002", "198.19.0.2:5201", |s| {
            bulk(s);
            s.sndbuf = 425_984;
            s.sndbuf_locked = true;
            s.writer_blocked = true;
        }),
        // Held by the window of a receiver in another namespace of this host...
        socket(4, us, "198.18.0.1:40003", "198.18.0.2:5202", |s| {
            bulk(s);
            s.sndbuf = 1 << 20;
            s.rwnd_limited_us = 8_000_000;
            s.delivery_rate_bps = 40_000_000;
        }),
        // ...whose autotuned buffer reached its namespace's tcp_rmem max.
        socket(5, them, "198.18.0.2:5202", "198.18.0.1:40003", |s| {
            s.bytes_received = 50 << 20;
            s.rcvbuf = rmem.max;
        }),
    ];
    let other = |netns: u32| {
        (netns == them).then(|| Target {
            netns,
            path: "/run/netns/rcv".into(),
            reached: "ip netns rcv".into(),
            host: false,
            ip_netns: true,
            runtime_sysctl: None,
        })
    };
    let t = Target { netns: us, ..target(false) };
    let (steps, notes) = buffer_steps(&t, &samples, &env, &other);
    assert_eq!(steps.len(), 2, "{steps:#?}");
    assert_eq!((steps[0].key.as_str(), steps[0].target.netns), ("tcp_wmem", us));
    // It reached the max: sized for four times what the max allows at 200 ms, 16 MiB.
    assert_eq!((steps[0].from, steps[0].to), (wmem, wmem.with_max(16 << 20)), "{:#?}", steps[0]);
    assert!(steps[0].why.contains("for 1 connection (:40000 -> :5201 (cookie 1))"), "{}", steps[0].why);
    assert_eq!((steps[1].key.as_str(), steps[1].target.reached.as_str()), ("tcp_rmem", "ip netns rcv"));
    // 40 Mbit/s needed at 200 ms, half of a receive buffer offered: 4x -> 8 MiB.
    assert_eq!(steps[1].to, rmem.with_max(8 << 20), "{:#?}", steps[1]);
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(notes[0].contains("(cookie 3) set its own send buffer (416.0 KiB, SO_SNDBUF): left alone"), "{notes:#?}");
    let plan = Plan::new(t, "bbr", "bbr", &[], false, &[], false, &|_| false).with_buffers(steps, notes, &|_| false);
    let lines = plan.lines();
    assert!(
        lines.iter().any(|l| l.starts_with("  raise net.ipv4.tcp_wmem's max from 4.0 MiB to 16.0 MiB (4096 16384 4194304 -> 4096 16384 16777216): sized 4x")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("tcp_rmem's max in ip netns rcv (the receiving end) from 1.0 MiB to 8.0 MiB")),
        "{lines:#?}"
    );
    // Autotuning short of the max (a buffer that never needed more): nothing to raise.
    let roomy: Vec<Sample> = samples[..2]
        .iter()
        .cloned()
        .map(|mut s| {
            s.sndbuf = 1 << 20;
            s
        })
        .collect();
    assert!(buffer_steps(&Target { netns: us, ..target(false) }, &roomy, &env, &other).0.is_empty());
}

#[test]
fn the_plan_says_in_one_line_how_connections_are_reached_and_which_cannot_be() {
    let why = "this kernel's iter/tcp cannot call bpf_setsockopt (Linux 5.15)";
    assert_eq!(
        held_switch_line(why, &[]),
        format!("connections are switched through the processes holding them (pidfd_getfd), as {why}")
    );
    let unreached = |sport| Unreached { sport, dport: 80, why: "held by no process".into() };
    let one = held_switch_line(why, &[unreached(5011)]);
    assert!(one.starts_with("1 established connection cannot be switched (:5011 -> :80 held by no process): "));
    let many: Vec<Unreached> = (1..=6).map(unreached).collect();
    let line = held_switch_line(why, &many);
    assert!(line.contains("6 established connections") && line.contains(":4 -> :80 held by no process, 2 more)"));
    assert!(!line.contains(":5 -> ") && !line.contains('\n'), "{line}");
    let mut plan = Plan::new(target(false), "bbr", "cubic", &[], true, &[], false, &|_| false);
    plan.switch_note = Some(one.clone());
    assert!(plan.lines().contains(&format!("  {one}")), "{:#?}", plan.lines());
    plan.live = false;
    assert!(!plan.lines().contains(&format!("  {one}")), "said only when switching live");
}

#[test]
fn persisting_writes_only_absent_host_files_and_explains_the_rest() {
    let plan = Plan::new(target(true), "bbr", "cubic", &[], false, &[], true, &|p| p == SYSCTL_FILE);
    assert_eq!(plan.persist, Persist::HostFiles(vec![(MODULES_FILE.to_string(), "tcp_bbr\n".to_string())]));
    assert!(plan.lines().iter().any(|l| l.contains("host's own namespace")));
    let plan = Plan::new(target(false), "bbr", "cubic", &[], false, &[], true, &|_| false);
    assert!(matches!(&plan.persist, Persist::Nothing(why) if why.contains("ip netns add")), "{:?}", plan.persist);
    let mut container = target(false);
    container.runtime_sysctl = Some("docker run --sysctl net.ipv4.tcp_congestion_control=bbr".into());
    let plan = Plan::new(container, "bbr", "cubic", &[], false, &[], true, &|_| false);
    assert!(matches!(&plan.persist, Persist::Nothing(why) if why.contains("docker run --sysctl")));
}

#[test]
fn state_round_trips_and_refuses_foreign_files() {
    let state = State {
        version: STATE_VERSION,
        target: target(false),
        cc: "bbr".into(),
        previous_default: "reno".into(),
        default_changed: true,
        switched: vec![SwitchedCookie { cookie: 42, old_cc: "cubic".into() }],
        files: vec![SYSCTL_FILE.into(), buffer_sysctl_file("tcp_wmem")],
        sysctls: vec![SysctlStep {
            target: target(false),
            key: "tcp_wmem".into(),
            from: BufferLimits { min: 4096, default: 16384, max: 4_194_304 },
            to: BufferLimits { min: 4096, default: 16384, max: 33_554_432 },
            why: String::new(),
        }],
    };
    assert_eq!(State::from_json(&state.to_json()), Ok(state.clone()));
    let mut bad = state.clone();
    bad.files = vec!["/etc/passwd".into()];
    assert!(State::from_json(&bad.to_json()).unwrap_err().contains("/etc/passwd"));
    let mut bad = state.clone();
    bad.sysctls[0].key = "../../kernel/core_pattern".into();
    assert!(State::from_json(&bad.to_json()).unwrap_err().contains("does not set"));
    let mut bad = state;
    bad.switched[0].old_cc = "x; rm".into();
    assert!(State::from_json(&bad.to_json()).is_err());
    // A state written before buffers were fixed reads back with none.
    let old = r#"{"version":1,"target":{"netns":1,"path":"/x","reached":"x","host":false,"ip_netns":true,"runtime_sysctl":null},"cc":"bbr","previous_default":"reno","default_changed":true,"switched":[],"files":[]}"#;
    assert!(State::from_json(old).expect("reads").sysctls.is_empty());
}

#[test]
fn each_refusal_has_its_own_line() {
    let t = target(false);
    let allowed = vec!["reno".to_string()];
    let eperm = refusal(Step::SetDefault, errno::EPERM, "bbr", &t, &allowed);
    assert!(eperm.contains("restricted for non-initial") && eperm.contains("\"reno bbr\""), "{eperm}");
    assert!(
        refusal(Step::SetDefault, errno::ENOENT, "nosuchcc", &t, &allowed).contains("tcp_nosuchcc could not be loaded")
    );
    assert!(refusal(Step::SetDefault, errno::EROFS, "bbr", &t, &allowed).contains("read-only"));
    assert!(refusal(Step::Enter, errno::ENOENT, "bbr", &t, &allowed).contains("is gone"));
    assert!(refusal(Step::SetDefault, errno::EINVAL, "bbr", &t, &allowed).contains("Invalid argument"));
    assert!(!refusal(Step::SetDefault, errno::EINVAL, "bbr", &t, &allowed).contains('\n'));
}

#[test]
fn names_and_records() {
    assert!(valid_cc_name("bbr") && valid_cc_name("tcp_x1"));
    assert!(!valid_cc_name("") && !valid_cc_name("BBR") && !valid_cc_name("a b") && !valid_cc_name(&"a".repeat(16)));
    assert_eq!(&cc_bytes("bbr")[..4], b"bbr\0");
    let rec = SwitchRecord {
        cookie: 7,
        old_cc: cc_bytes("cubic"),
        new_cc: cc_bytes("bbr"),
        result: -errno::ENOENT,
        sport: 40000,
        dport: 5201,
    };
    let bytes = bytemuck::bytes_of(&rec);
    let mut two = bytes.to_vec();
    two.extend_from_slice(bytes);
    two.extend_from_slice(&bytes[..5]);
    let out = decode_switch_records(&two);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0],
        Switched { cookie: 7, old_cc: "cubic".into(), new_cc: "bbr".into(), result: -2, sport: 40000, dport: 5201 }
    );
    assert_eq!(socket_refusal(out[0].result), "algorithm not loaded");
}
