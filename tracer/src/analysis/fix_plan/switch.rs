//! The live switch's records and names: a congestion control's name as the kernel takes it,
//! the records the switch program writes, which connections a live fix switches, and the line
//! that says which it cannot reach.

use tracer_common::{SwitchRecord, CC_NAME_LEN, SWITCH_RECORD_SIZE};

use crate::analysis::diagnosis::is_loss_based;

/// A congestion-control name as the kernel writes them (`tcp_` module suffixes): lower-case
/// letters, digits and `_`, at most 15 bytes. Anything else is refused before it reaches a
/// module name or the kernel.
pub fn valid_cc_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() < CC_NAME_LEN
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `name` NUL-padded to the kernel's `TCP_CA_NAME_MAX` (longer names are cut, never sent:
/// callers check [`valid_cc_name`] first).
pub fn cc_bytes(name: &str) -> [u8; CC_NAME_LEN] {
    let mut out = [0u8; CC_NAME_LEN];
    for (o, b) in out.iter_mut().zip(name.bytes().take(CC_NAME_LEN - 1)) {
        *o = b;
    }
    out
}

fn cc_str(bytes: &[u8; CC_NAME_LEN]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(CC_NAME_LEN);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// One socket the live switch tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switched {
    pub cookie: u64,
    pub old_cc: String,
    pub new_cc: String,
    /// 0, or the negative errno `bpf_setsockopt` (or `setsockopt`) returned.
    pub result: i32,
    pub sport: u16,
    pub dport: u16,
}

/// An established connection the live switch could not reach where it switches through the
/// processes holding the sockets (`iter/tcp` without `bpf_setsockopt`), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreached {
    pub sport: u16,
    pub dport: u16,
    pub why: String,
}

/// How many unreached connections the line names before counting the rest.
const LISTED_UNREACHED: usize = 4;

/// The one line a plan says where connections are switched through the processes holding them:
/// why (`iter/tcp` could not be used) and which connections that way cannot reach.
pub fn held_switch_line(why: &str, unreached: &[Unreached]) -> String {
    let way = format!("connections are switched through the processes holding them (pidfd_getfd), as {why}");
    if unreached.is_empty() {
        return way;
    }
    let mut named: Vec<String> =
        unreached.iter().take(LISTED_UNREACHED).map(|u| format!(":{} -> :{} {}", u.sport, u.dport, u.why)).collect();
    if unreached.len() > LISTED_UNREACHED {
        named.push(format!("{} more", unreached.len() - LISTED_UNREACHED));
    }
    format!(
        "{} established connection{} cannot be switched ({}): {way}",
        unreached.len(),
        if unreached.len() == 1 { "" } else { "s" },
        named.join(", ")
    )
}

/// The records `cct_iter_switch` wrote, back to back; a cut-off tail is ignored.
pub fn decode_switch_records(bytes: &[u8]) -> Vec<Switched> {
    bytes
        .chunks_exact(SWITCH_RECORD_SIZE)
        .map(|chunk| {
            let r: SwitchRecord = bytemuck::pod_read_unaligned(chunk);
            Switched {
                cookie: r.cookie,
                old_cc: cc_str(&r.old_cc),
                new_cc: cc_str(&r.new_cc),
                result: r.result,
                sport: r.sport,
                dport: r.dport,
            }
        })
        .collect()
}

/// Whether a live fix to `target` switches an established connection on `cc` now: those
/// under a loss-based algorithm only (a delay- or model-based one was chosen for a reason).
pub fn switches_now(cc: &str, target: &str) -> bool {
    cc != target && is_loss_based(cc)
}
