//! The fix for a flagged flow, as commands a person can paste: switch the flow's network
//! namespace to BBR, make it persistent, roll it back. Pure: the host facts come in as
//! [`Environment`].

use crate::analysis::diagnosis::Environment;
use crate::analysis::model::Flow;

/// Commands that switch the flow's network namespace to BBR, persist it, and roll it back.
pub fn fix_commands(flow: &Flow, env: &Environment) -> Vec<String> {
    let s = &flow.latest;
    let current = &s.cc;
    let prefix = if s.netns == env.host_netns || s.netns == 0 {
        String::new()
    } else if let Some(name) = env.netns_names.get(&s.netns) {
        format!("ip netns exec {name} ")
    } else {
        match env.netns_pids.get(&s.netns) {
            Some(pid) => format!("nsenter --net=/proc/{pid}/ns/net "),
            None => format!("nsenter --net=/proc/<PID in netns {}>/ns/net ", s.netns),
        }
    };
    let mut cmds = Vec::new();
    if !env.bbr_available {
        cmds.push("modprobe tcp_bbr   # bbr is not in net.ipv4.tcp_available_congestion_control".to_string());
    }
    cmds.push(format!("{prefix}sysctl -w net.ipv4.tcp_congestion_control=bbr"));
    cmds.push("# persist (inside that container/host): echo tcp_bbr > /etc/modules-load.d/bbr.conf; echo net.ipv4.tcp_congestion_control=bbr > /etc/sysctl.d/90-cctrace-bbr.conf".to_string());
    cmds.push(format!(
        "# roll back: {prefix}sysctl -w net.ipv4.tcp_congestion_control={current}; rm /etc/sysctl.d/90-cctrace-bbr.conf /etc/modules-load.d/bbr.conf"
    ));
    cmds.push("# the default applies to new connections: restart the stream to pick it up".to_string());
    cmds
}
