//! The fix for a flagged flow, as commands a person can paste as root: switch the flow's network
//! namespace to BBR, make it persistent, roll it back. Pure: the host facts come in as
//! [`Environment`].
//!
//! What gets pasted into a root shell must do exactly what it says: every name that comes from
//! the host (a namespace name, the current algorithm) is shell-quoted, a namespace cctrace
//! cannot enter by a known path gets no command at all (a `sysctl` run elsewhere would change
//! some other namespace), and the roll-back removes only files the fix itself names.

use std::borrow::Cow;

use crate::analysis::diagnosis::Environment;
use crate::analysis::model::Flow;

/// Files the persisted fix writes; cctrace's own names, so rolling back deletes nothing else.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/90-cctrace-bbr.conf";
pub const MODULES_FILE: &str = "/etc/modules-load.d/cctrace-bbr.conf";

const SET_BBR: &str = "sysctl -w net.ipv4.tcp_congestion_control=bbr";

/// `s` as one POSIX shell word: bare when made only of characters no shell treats specially,
/// otherwise in single quotes, with each `'` written as `'\''`.
pub fn shell_quote(s: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("'{}'", s.replace('\'', r"'\''")))
    }
}

/// How a root shell on the host reaches the flow's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reach {
    /// The host's own namespace: no prefix.
    Host,
    /// `ip netns exec NAME` (a namespace made with `ip netns add`).
    Named(String),
    /// `nsenter --net=/proc/PID/ns/net` (a process living in it, e.g. a container's).
    Process(u32),
    /// Nothing cctrace knows of leads into it.
    Unreachable,
}

fn reach(netns: u32, env: &Environment) -> Reach {
    // 0 is "not read" (an unknown namespace), never the host, even when the host's is unknown too.
    if netns == 0 {
        return Reach::Unreachable;
    }
    if env.host_netns != 0 && netns == env.host_netns {
        return Reach::Host;
    }
    // A name with a control character cannot be shown on one line: a newline, even quoted,
    // would end the comment lines that repeat it and start a command.
    if let Some(name) = env.netns_names.get(&netns).filter(|n| !n.chars().any(char::is_control)) {
        return Reach::Named(name.clone());
    }
    match env.netns_pids.get(&netns) {
        Some(&pid) => Reach::Process(pid),
        None => Reach::Unreachable,
    }
}

/// Commands that switch the flow's network namespace to BBR, persist it, and roll it back. For
/// a namespace cctrace cannot reach, one comment saying why and how to find it, and no command.
pub fn fix_commands(flow: &Flow, env: &Environment) -> Vec<String> {
    let s = &flow.latest;
    let target = reach(s.netns, env);
    let prefix = match &target {
        Reach::Host => String::new(),
        Reach::Named(name) => format!("ip netns exec {} ", shell_quote(name)),
        Reach::Process(pid) => format!("nsenter --net=/proc/{pid}/ns/net "),
        Reach::Unreachable => return vec![unreachable_note(s.netns)],
    };
    let mut cmds = Vec::new();
    if !env.bbr_available {
        cmds.push("modprobe tcp_bbr   # bbr is not in net.ipv4.tcp_available_congestion_control".to_string());
    }
    cmds.push(format!("{prefix}{SET_BBR}"));
    // Written only when absent (never over a file that is there), so rolling back may delete them.
    let write_files = format!(
        "test -e {MODULES_FILE} || echo tcp_bbr > {MODULES_FILE}; \
         test -e {SYSCTL_FILE} || echo net.ipv4.tcp_congestion_control=bbr > {SYSCTL_FILE}"
    );
    let remove_files = format!("; rm -f {SYSCTL_FILE} {MODULES_FILE}");
    let (persist, rollback_rm) = match target {
        Reach::Host => (format!("# persist: {write_files}"), remove_files.as_str()),
        Reach::Process(_) => {
            (format!("# persist (inside that container, in its own /etc): {write_files}"), remove_files.as_str())
        }
        // A namespace from `ip netns add` does not survive a reboot, and files in the host's
        // /etc would switch the host instead.
        _ => (
            "# persist: a namespace made by ip netns add does not survive a reboot: set the sysctl where it is created"
                .to_string(),
            "",
        ),
    };
    cmds.push(persist);
    // The kernel's default when the name is missing or unprintable.
    let previous = if s.cc.is_empty() || s.cc.chars().any(char::is_control) { "cubic" } else { s.cc.as_str() };
    let restore = format!("net.ipv4.tcp_congestion_control={previous}");
    cmds.push(format!("# roll back: {prefix}sysctl -w {}{rollback_rm}", shell_quote(&restore)));
    cmds.push("# the default applies to new connections: restart the stream to pick it up".to_string());
    cmds
}

/// Why there is no command for a namespace cctrace cannot reach, as a comment (nothing in it
/// runs if pasted).
fn unreachable_note(netns: u32) -> String {
    if netns == 0 {
        "# no command: the flow's network namespace is unknown (the kernel reported none), and a \
         sysctl run in another namespace would not change this flow"
            .to_string()
    } else {
        format!(
            "# no command: network namespace {netns} has no ip netns name and no process cctrace can see, \
             so there is no path to enter it by; find a process in it with lsns -t net, then set \
             net.ipv4.tcp_congestion_control=bbr inside it with nsenter"
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::analysis::model::tests::sample;
    use crate::analysis::model::{FlowTable, TableConfig};

    const NETNS: u32 = 4026532561;

    fn env() -> Environment {
        Environment {
            bbr_available: true,
            host_netns: 4026531840,
            netns_pids: HashMap::new(),
            netns_names: HashMap::new(),
            ..Environment::default()
        }
    }

    fn fix_for(netns: u32, cc: &str, env: &Environment) -> Vec<String> {
        let mut table = FlowTable::new(TableConfig::default());
        let mut s = sample(1, 0);
        s.netns = netns;
        s.cc = cc.into();
        table.ingest(&s);
        fix_commands(table.get(1).expect("flow"), env)
    }

    fn commands(fix: &[String]) -> Vec<&String> {
        fix.iter().filter(|c| !c.starts_with('#')).collect()
    }

    #[test]
    fn quoting_leaves_safe_words_bare_and_quotes_the_rest() {
        assert_eq!(shell_quote("cct-14174-0-esnd"), "cct-14174-0-esnd");
        assert_eq!(shell_quote("a_b.c:d@e%f+g=h,i/j"), "a_b.c:d@e%f+g=h,i/j");
        assert_eq!(shell_quote("x;id>/tmp/p;#"), "'x;id>/tmp/p;#'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("$(id)"), "'$(id)'");
    }

    #[test]
    fn the_host_namespace_gets_a_bare_sysctl() {
        let fix = fix_for(4026531840, "cubic", &env());
        assert_eq!(commands(&fix), vec!["sysctl -w net.ipv4.tcp_congestion_control=bbr"]);
    }

    #[test]
    fn an_unknown_namespace_gets_no_command() {
        // Inode 0: never read. The host's inode unknown as well must not make it "the host".
        for host in [0, 4026531840] {
            let fix = fix_for(0, "cubic", &Environment { host_netns: host, ..env() });
            assert_eq!(fix.len(), 1, "{fix:?}");
            assert!(fix[0].starts_with("# no command"), "{fix:?}");
            assert!(!fix[0].contains("sysctl -w"), "nothing to paste by mistake: {fix:?}");
        }
        // A namespace with no name and no process: no command, and a hint how to find it.
        let fix = fix_for(NETNS, "cubic", &env());
        assert_eq!(fix.len(), 1, "{fix:?}");
        assert!(fix[0].starts_with("# no command") && fix[0].contains(&NETNS.to_string()), "{fix:?}");
        assert!(!fix[0].contains('<') && !fix[0].contains('>'), "no placeholder: {fix:?}");
    }

    #[test]
    fn a_container_namespace_is_entered_through_its_process() {
        let mut e = env();
        e.netns_pids.insert(NETNS, 31337);
        let fix = fix_for(NETNS, "cubic", &e);
        assert_eq!(
            commands(&fix),
            vec!["nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"]
        );
    }

    #[test]
    fn a_hostile_namespace_name_is_quoted_everywhere_it_appears() {
        let mut e = env();
        e.netns_names.insert(NETNS, "x;id>/tmp/p;#".into());
        let fix = fix_for(NETNS, "cubic", &e);
        assert_eq!(commands(&fix), vec!["ip netns exec 'x;id>/tmp/p;#' sysctl -w net.ipv4.tcp_congestion_control=bbr"]);
        let rollback = fix.iter().find(|c| c.starts_with("# roll back")).expect("roll back");
        assert!(rollback.contains("ip netns exec 'x;id>/tmp/p;#' sysctl"), "{rollback}");
    }

    #[test]
    fn a_name_with_a_control_character_is_not_used() {
        let mut e = env();
        e.netns_names.insert(NETNS, "a\nreboot".into());
        let fix = fix_for(NETNS, "cubic", &e);
        assert!(fix.iter().all(|c| !c.contains('\n') && !c.contains("reboot")), "{fix:?}");
        assert!(commands(&fix).is_empty(), "{fix:?}");
        // A process in it still leads in.
        e.netns_pids.insert(NETNS, 31337);
        let fix = fix_for(NETNS, "cubic", &e);
        assert_eq!(
            commands(&fix),
            vec!["nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"]
        );
    }

    #[test]
    fn the_algorithm_to_restore_is_quoted() {
        let fix = fix_for(4026531840, "we'ird;cc", &env());
        let rollback = fix.iter().find(|c| c.starts_with("# roll back")).expect("roll back");
        assert!(rollback.contains(r"sysctl -w 'net.ipv4.tcp_congestion_control=we'\''ird;cc'"), "{rollback}");
    }

    #[test]
    fn roll_back_removes_only_the_files_cctrace_wrote_and_persisting_never_overwrites() {
        let mut e = env();
        e.netns_pids.insert(NETNS, 31337);
        e.netns_names.insert(NETNS + 1, "video".into());
        for netns in [4026531840, NETNS, NETNS + 1] {
            let fix = fix_for(netns, "cubic", &e);
            for line in &fix {
                // Every path an `rm` gets is one of cctrace's own files.
                for part in line.split(';') {
                    let mut words = part.split_whitespace().skip_while(|w| *w != "rm");
                    if words.next().is_none() {
                        continue;
                    }
                    for path in words.filter(|w| !w.starts_with('-')) {
                        assert!(path == SYSCTL_FILE || path == MODULES_FILE, "rm of {path} in {line}");
                        assert!(path.contains("cctrace"), "{path}");
                    }
                }
                // Every file written is written only when absent.
                for part in line.split(';') {
                    if let Some((_, target)) = part.split_once(" > ") {
                        let target = target.trim();
                        assert!(part.contains(&format!("test -e {target} ||")), "clobbers {target}: {line}");
                        assert!(target.contains("cctrace"), "{target}");
                    }
                }
            }
        }
    }
}
