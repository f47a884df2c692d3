//! The fix's commands for every kind of namespace and container, and their quoting.

use std::collections::HashMap;

use super::*;
use crate::analysis::container::{classify, CgroupInfo};
use crate::analysis::flow_table::tests::sample;
use crate::analysis::flow_table::{FlowTable, TableConfig};

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
    fix_in(netns, 0, cc, env)
}

fn fix_in(netns: u32, cgroup_id: u64, cc: &str, env: &Environment) -> Vec<String> {
    let mut table = FlowTable::new(TableConfig::default());
    let mut s = sample(1, 0);
    s.netns = netns;
    s.cgroup_id = cgroup_id;
    s.cc = cc.into();
    table.ingest(&s);
    fix_commands(table.get(1).expect("flow"), env, &FixNeeds { cc: true, ..FixNeeds::default() })
}

const ID: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
const UID: &str = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
const CG: u64 = 7321;
const SET: &str = "sysctl -w net.ipv4.tcp_congestion_control=bbr";

/// What the host adapter would say of a cgroup at `path`.
fn info(path: &str) -> CgroupInfo {
    CgroupInfo { path: path.to_string(), container: classify(path) }
}

/// An environment where the flow's namespace NETNS has process 31337 and its cgroup CG is
/// `container`.
fn in_container(container: Option<Container>) -> Environment {
    let mut e = env();
    e.netns_pids.insert(NETNS, 31337);
    e.cgroups.insert(CG, CgroupInfo { path: "/x".into(), container });
    e
}

fn docker(name: Option<&str>) -> Container {
    let mut c = classify(&format!("/system.slice/docker-{ID}.scope")).expect("docker");
    c.name = name.map(String::from);
    c
}

fn line<'a>(fix: &'a [String], start: &str) -> &'a str {
    fix.iter().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start:?} in {fix:#?}"))
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
    assert_eq!(commands(&fix), vec!["nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"]);
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
    assert_eq!(commands(&fix), vec!["nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"]);
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
    e.netns_pids.insert(NETNS + 2, 4242);
    e.netns_pids.insert(NETNS + 3, 4343);
    e.cgroups.insert(101, info("/lxc/101/ns"));
    e.cgroups.insert(102, info("/lxc.payload.web"));
    e.cgroups.insert(103, info(&format!("/system.slice/docker-{ID}.scope")));
    for (netns, cgroup) in
        [(4026531840, 0), (NETNS, 0), (NETNS + 1, 0), (NETNS + 2, 101), (NETNS + 3, 102), (NETNS, 103)]
    {
        let fix = fix_in(netns, cgroup, "cubic", &e);
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
                    // (Inside `sh -c '...'`, the closing quote is not part of the path.)
                    let target = target.trim().trim_end_matches('\'');
                    assert!(part.contains(&format!("test -e {target} ||")), "clobbers {target}: {line}");
                    assert!(target.contains("cctrace"), "{target}");
                }
            }
        }
    }
}

#[test]
fn docker_and_podman_are_switched_from_the_host_and_persisted_by_the_runtime() {
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(docker(Some("jellyfin")))));
    assert_eq!(commands(&fix), vec![&format!("nsenter --net=/proc/31337/ns/net {SET}")]);
    assert!(line(&fix, "# from the host").contains("read-only (EROFS)"), "{fix:#?}");
    let persist = line(&fix, "# persist");
    assert!(persist.contains("recreate jellyfin with docker run --sysctl net.ipv4.tcp_congestion_control=bbr"));
    assert!(persist.contains("compose: sysctls:") && persist.contains("/etc/sysctl.d in the image is not applied"));
    let rollback = line(&fix, "# roll back");
    assert_eq!(
        rollback,
        "# roll back: nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=cubic"
    );
    assert!(fix.iter().all(|l| !l.contains("docker exec")), "{fix:#?}");
    // Unnamed: the short id; Podman: podman run.
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(docker(None))));
    assert!(line(&fix, "# persist").contains("recreate 3f4e1b2c5d6a with docker run --sysctl"), "{fix:#?}");
    let mut p = classify(&format!("/machine.slice/libpod-{ID}.scope/container")).expect("podman");
    p.name = Some("nextcloud".into());
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(p)));
    assert_eq!(commands(&fix), vec![&format!("nsenter --net=/proc/31337/ns/net {SET}")]);
    assert!(line(&fix, "# persist").contains("recreate nextcloud with podman run --sysctl"), "{fix:#?}");
}

#[test]
fn a_container_on_the_host_network_switches_the_host_and_says_so() {
    let fix = fix_in(4026531840, CG, "cubic", &in_container(Some(docker(Some("jellyfin")))));
    assert_eq!(commands(&fix), vec![SET]);
    assert!(line(&fix, "# docker jellyfin shares the host's network namespace").contains("host's default"));
    assert!(line(&fix, "# roll back").ends_with(&format!("rm -f {SYSCTL_FILE} {MODULES_FILE}")));
}

#[test]
fn a_kubernetes_pod_is_persisted_in_its_spec_with_the_kubelet_allowing_the_sysctl() {
    let mut c = classify(&format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
        UID.replace('-', "_")
    ))
    .expect("k8s");
    c.name = Some("transcoder".into());
    let pod = c.pod.as_mut().expect("pod");
    pod.namespace = "media".into();
    pod.name = "streamer-7d9f".into();
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(c.clone())));
    assert_eq!(commands(&fix), vec![&format!("nsenter --net=/proc/31337/ns/net {SET}")]);
    let persist = line(&fix, "# persist");
    assert!(persist.contains("in the pod spec of streamer-7d9f -n media:"), "{persist}");
    assert!(persist.contains("sysctls: [{name: net.ipv4.tcp_congestion_control, value: bbr}]"), "{persist}");
    assert!(line(&fix, "# the kubelet must allow").contains("--allowed-unsafe-sysctls=net.ipv4.tcp_congestion_control"));
    assert!(line(&fix, "# from the host").contains("EROFS"));
    // A pod not named (no kubelet logs): still the spec and the kubelet.
    c.pod.as_mut().expect("pod").name.clear();
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(c)));
    assert!(line(&fix, "# persist: in the pod spec:").contains("sysctls"), "{fix:#?}");
}

#[test]
fn proxmox_and_lxc_containers_are_entered_by_their_tools_and_persisted_inside() {
    let fix = fix_in(NETNS, CG, "cubic", &in_container(classify("/lxc/101/ns")));
    assert_eq!(commands(&fix), vec![&format!("pct exec 101 -- {SET}")]);
    assert_eq!(
        line(&fix, "# persist"),
        format!(
            "# persist (in the container): pct exec 101 -- sh -c 'test -e {SYSCTL_FILE} || echo \
             net.ipv4.tcp_congestion_control=bbr > {SYSCTL_FILE}'"
        )
    );
    assert!(line(&fix, "# and on the host").contains(&format!("echo tcp_bbr > {MODULES_FILE}")));
    assert_eq!(
        line(&fix, "# roll back"),
        format!("# roll back: pct exec 101 -- sysctl -w net.ipv4.tcp_congestion_control=cubic; pct exec 101 -- rm -f {SYSCTL_FILE}")
    );
    // No process needed: pct finds the container by its vmid.
    let mut e = in_container(classify("/lxc/101/ns"));
    e.netns_pids.clear();
    assert_eq!(commands(&fix_in(NETNS, CG, "cubic", &e)), vec![&format!("pct exec 101 -- {SET}")]);

    // LXC: its own config sets the sysctl at every start, whatever init the container runs.
    let fix = fix_in(NETNS, CG, "cubic", &in_container(classify("/lxc.payload.web")));
    assert_eq!(commands(&fix), vec![&format!("lxc-attach -n web -- {SET}")]);
    assert_eq!(
        line(&fix, "# persist"),
        "# persist (LXC sets it at every start): grep -qs '^lxc.sysctl.net.ipv4.tcp_congestion_control' \
         /var/lib/lxc/web/config || echo 'lxc.sysctl.net.ipv4.tcp_congestion_control = bbr' >> /var/lib/lxc/web/config"
    );
    assert!(line(&fix, "# LXD/Incus").contains("lxc config set web linux.sysctl.net.ipv4.tcp_congestion_control=bbr"));
    assert!(line(&fix, "# roll back")
        .ends_with("; sed -i '/^lxc.sysctl.net.ipv4.tcp_congestion_control/d' /var/lib/lxc/web/config"));
    // Outside the default lxcpath, lxc-attach is told where.
    let mut c = classify("/lxc.payload.web").expect("lxc");
    c.lxc_path = Some("/srv/my lxc".into());
    let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(c)));
    assert_eq!(commands(&fix), vec![&format!("lxc-attach -P '/srv/my lxc' -n web -- {SET}")]);
    assert!(line(&fix, "# persist").contains("'/srv/my lxc/web/config'"));
}

#[test]
fn hostile_container_names_are_quoted_or_never_used() {
    let fix = fix_in(NETNS, CG, "cubic", &in_container(classify("/lxc.payload.a;$(reboot) 'x'")));
    assert_eq!(commands(&fix), vec![&format!(r"lxc-attach -n 'a;$(reboot) '\''x'\''' -- {SET}")]);
    // A newline in the name: never on a line; nsenter through its process instead.
    let fix = fix_in(NETNS, CG, "cubic", &in_container(classify("/lxc.payload.a\nreboot")));
    assert!(fix.iter().all(|l| !l.contains('\n') && !l.contains("lxc-attach")), "{fix:#?}");
    assert_eq!(commands(&fix), vec![&format!("nsenter --net=/proc/31337/ns/net {SET}")]);
    for name in ["x;id>/tmp/p;#", "$(id)", "a b", "it's", "a\nrm -rf /"] {
        let fix = fix_in(NETNS, CG, "cubic", &in_container(Some(docker(Some(name)))));
        assert!(fix.iter().all(|l| !l.contains('\n')), "{fix:#?}");
        let persist = line(&fix, "# persist");
        if !name.contains('\n') {
            assert!(persist.contains(&format!("recreate {} with", shell_quote(name))), "{persist}");
        }
    }
    // Unreachable, named: the name is shown escaped, on the one comment line.
    let mut e = in_container(classify("/lxc.payload.a\nreboot"));
    e.netns_pids.clear();
    let fix = fix_in(NETNS, CG, "cubic", &e);
    assert_eq!(fix.len(), 1, "{fix:#?}");
    assert!(fix[0].starts_with("# no command") && fix[0].contains(r"(lxc a\nreboot)"), "{fix:#?}");
}

#[test]
fn what_the_kernel_would_refuse_comes_first_with_why() {
    let mut e = in_container(Some(docker(Some("jellyfin"))));
    e.bbr_available = false;
    e.available_cc = vec!["reno".into(), "cubic".into()];
    e.allowed_cc = vec!["reno".into(), "cubic".into()];
    let fix = fix_in(NETNS, CG, "cubic", &e);
    assert_eq!(
        commands(&fix).iter().map(|c| c.split("   #").next().unwrap_or_default()).collect::<Vec<_>>(),
        vec![
            "modprobe tcp_bbr",
            "sysctl -w 'net.ipv4.tcp_allowed_congestion_control=reno cubic bbr'",
            &format!("nsenter --net=/proc/31337/ns/net {SET}"),
        ]
    );
    assert!(line(&fix, "modprobe").contains("ENOENT"));
    assert!(line(&fix, "sysctl -w 'net.ipv4.tcp_allowed").contains("EPERM"));
    // The host's own namespace may choose any loaded algorithm: no allowed list; and an
    // allowed list already with bbr, or unknown, needs nothing.
    let fix = fix_in(4026531840, 0, "cubic", &e);
    assert!(fix.iter().all(|l| !l.contains("allowed_congestion")), "{fix:#?}");
    for allowed in [vec!["reno".to_string(), "bbr".to_string()], Vec::new()] {
        let e = Environment { allowed_cc: allowed, ..in_container(Some(docker(None))) };
        assert!(fix_in(NETNS, CG, "cubic", &e).iter().all(|l| !l.contains("allowed_congestion")));
    }
    // A hostile entry in the list is not repeated into the command.
    let e = Environment { allowed_cc: vec!["reno".into(), "x;reboot".into()], ..in_container(Some(docker(None))) };
    assert!(line(&fix_in(NETNS, CG, "cubic", &e), "sysctl -w 'net.ipv4.tcp_allowed")
        .starts_with("sysctl -w 'net.ipv4.tcp_allowed_congestion_control=reno bbr'   #"));
}

#[test]
fn the_namespace_default_is_restored_and_a_bbr_default_explains_itself() {
    let mut e = in_container(None);
    e.netns_cc.insert(NETNS, "reno".into());
    let fix = fix_in(NETNS, 0, "cubic", &e);
    assert!(line(&fix, "# roll back").contains("tcp_congestion_control=reno"), "{fix:#?}");
    e.netns_cc.insert(NETNS, "bbr".into());
    let fix = fix_in(NETNS, 0, "cubic", &e);
    assert!(line(&fix, "# this namespace's default is already bbr").contains("setsockopt"), "{fix:#?}");
    assert!(line(&fix, "# roll back").contains("tcp_congestion_control=cubic"), "{fix:#?}");
}

#[test]
fn a_service_with_its_own_namespace_is_not_persisted_in_the_hosts_etc() {
    let fix = fix_in(NETNS, CG, "cubic", &in_container(classify("/system.slice/media.service")));
    assert_eq!(commands(&fix), vec![&format!("nsenter --net=/proc/31337/ns/net {SET}")]);
    assert!(line(&fix, "# persist").contains("media.service gets a new namespace"), "{fix:#?}");
    assert!(fix.iter().all(|l| !l.contains(SYSCTL_FILE)), "{fix:#?}");
}
