//! A panic unwinding through a deep-mode session (what happens to the one `cctrace --deep`
//! holds when anything in the run panics) puts every flow back on its own algorithm and
//! unregisters the twins, as a clean exit does. The binary's other exit paths are tested in
//! tests/tests/deep.rs.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::process::Command;
use std::time::Duration;

use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use tracer::kernel::deep::session::{DeepNamespace, DeepSession};

/// The algorithm `ss -tni` shows for the established socket from local port `port`.
fn ss_cc(netns: &str, port: u16) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ss", "-tniH", "state", "established"])
        .output_within(CHILD_DEADLINE)
        .expect("ss");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let info = lines.next().unwrap_or_default();
        if line.split_whitespace().any(|f| f.ends_with(&format!(":{port}"))) {
            return info.split_whitespace().next().unwrap_or_default().to_string();
        }
    }
    String::new()
}

#[test]
fn a_panic_through_a_deep_session_puts_flows_back_and_unregisters_the_twins() {
    if let Some(why) = cctrace_lab::skip::missing_root_or_btf() {
        cctrace_lab::skip::skip(&why);
        return;
    }
    let lab = VethPair::create(VethOptions::default()).expect("lab");
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), 5201, SinkOptions::default()).expect("sink");
    let opts = SenderOptions::new(
        "cubic",
        SendMode::Paced { rate_bps: 2_000_000, write_size: 8 << 10 },
        Duration::from_secs(60),
    );
    let sender = Sender::start(lab.sender(), lab.receiver_addr(), 5201, opts).expect("sender");
    let port = sender.local_port();
    let ns_name = lab.sender().name().to_string();
    let ns = DeepNamespace { netns: lab.sender().inode() as u32, path: format!("/run/netns/{ns_name}") };

    let unwound = std::panic::catch_unwind(|| {
        let (_session, moved) = DeepSession::start(vec![ns]).expect("deep session");
        assert_eq!(moved.switched, 1, "{moved:?}");
        assert_eq!(ss_cc(&ns_name, port), "cct_cubic");
        panic!("something in the run panics");
    });
    assert!(unwound.is_err());
    assert_eq!(ss_cc(&ns_name, port), "cubic", "the flow is back on its algorithm");
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").expect("sysctl");
    assert!(!available.contains("cct_"), "{available}");
    assert!(!std::path::Path::new("/run/cctrace/deep.json").exists(), "no state left");
    sender.stop();
    sender.wait().expect("sender");
}
