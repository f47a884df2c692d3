//! The fix commands through a real `/bin/sh`: a hostile namespace name must reach the command
//! as one unchanged argument and run nothing, and the comment lines must run nothing at all.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use tracer::analysis::container::{CgroupInfo, Container, Runtime};
use tracer::analysis::environment::BufferLimits;
use tracer::analysis::environment::Environment;
use tracer::analysis::fix_plan::commands::{fix_commands, shell_quote, FixNeeds};
use tracer::analysis::flow_table::{FlowTable, TableConfig};
use tracer::analysis::sample::{decode, DecodeContext};
use tracer::test_support::wire::{raw_bytes, raw_sample_template};

const NETNS: u32 = 4026532561;

/// A fresh directory under the temp dir, for files a mis-quoted word would create.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cctrace-fix-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Run `script` with `/bin/sh -c`; stdout, and whether it succeeded.
fn sh(script: &str) -> (String, bool) {
    let out = Command::new("/bin/sh").arg("-c").arg(script).output_within(CHILD_DEADLINE).expect("running /bin/sh");
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.success())
}

fn hostile_names(dir: &std::path::Path) -> Vec<String> {
    let d = dir.display();
    vec![
        "x;id>/tmp/p;#".to_string(),
        format!("x;touch {d}/semicolon;#"),
        format!("$(touch {d}/subst)"),
        format!("`touch {d}/backtick`"),
        format!("it's'; touch {d}/quote; '"),
        format!("a\ntouch {d}/newline"),
        format!("x > {d}/redirect"),
        "  spaces  and\ttabs ".to_string(),
        "*".to_string(),
        "~root".to_string(),
        "$HOME".to_string(),
        String::new(),
        "cct-14174-0-esnd".to_string(),
    ]
}

#[test]
fn hostile_names_survive_the_shell_unchanged_and_run_nothing() {
    let dir = scratch("quote");
    for name in hostile_names(&dir) {
        let (out, ok) = sh(&format!("printf %s {}", shell_quote(&name)));
        assert!(ok, "{name:?}");
        assert_eq!(out, name, "round trip of {name:?} quoted as {}", shell_quote(&name));
    }
    let created: Vec<_> = std::fs::read_dir(&dir).expect("scratch").flatten().map(|e| e.file_name()).collect();
    assert!(created.is_empty(), "quoted names ran commands: {created:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn fix_for(netns: u32, env: &Environment) -> Vec<String> {
    fix_in(netns, 0, env)
}

fn fix_in(netns: u32, cgroup_id: u64, env: &Environment) -> Vec<String> {
    fix_with(netns, cgroup_id, env, &FixNeeds { cc: true, ..FixNeeds::default() })
}

fn fix_with(netns: u32, cgroup_id: u64, env: &Environment, needs: &FixNeeds) -> Vec<String> {
    let mut raw = raw_sample_template();
    raw.cookie = 1;
    raw.ts_ns = 1_000_000_000;
    raw.netns = netns;
    raw.cgroup_id = cgroup_id;
    raw.cc_name[..5].copy_from_slice(b"cubic");
    let sample = decode(&raw_bytes(&raw), &DecodeContext { hz: 250 }).expect("decode");
    let mut table = FlowTable::new(TableConfig::default());
    table.ingest(&sample);
    fix_commands(table.get(1).expect("flow"), env, needs)
}

/// Shell functions standing in for the commands the fix runs: each prints its arguments, one
/// per bracket, so the test sees the argument vector the shell built.
const STUBS: &str = r#"show() { for a in "$@"; do printf '[%s]' "$a"; done; echo; }
ip() { show ip "$@"; }; sysctl() { show sysctl "$@"; }; nsenter() { show nsenter "$@"; }
rm() { show rm "$@"; }; modprobe() { show modprobe "$@"; }
"#;

#[test]
fn the_fix_for_a_hostile_namespace_name_runs_exactly_the_sysctl() {
    let dir = scratch("fix");
    for name in hostile_names(&dir) {
        let env = Environment {
            bbr_available: false,
            host_netns: 4026531840,
            netns_pids: HashMap::new(),
            netns_names: HashMap::from([(NETNS, name.clone())]),
            ..Environment::default()
        };
        let fix = fix_for(NETNS, &env);
        // Every line is one line, and every comment line is inert.
        for line in &fix {
            assert!(!line.contains('\n'), "{line:?}");
            if line.starts_with('#') {
                assert_eq!(sh(&format!("{STUBS}{line}")), (String::new(), true), "{line}");
            }
        }
        if name.chars().any(char::is_control) {
            // Not shown on a line at all; no process leads in here, so no command either.
            assert!(fix.iter().all(|c| c.starts_with('#') && !c.contains(&name)), "{fix:?}");
            continue;
        }
        let set = fix.iter().find(|c| c.contains("=bbr") && !c.starts_with('#')).expect("the command");
        let (out, ok) = sh(&format!("{STUBS}{set}"));
        assert!(ok, "{set}");
        assert_eq!(out, format!("[ip][netns][exec][{name}][sysctl][-w][net.ipv4.tcp_congestion_control=bbr]\n"));
        // The roll-back, pasted without its "# roll back: " label, does the reverse and deletes
        // only cctrace's own files.
        let rollback = fix.iter().find_map(|c| c.strip_prefix("# roll back: ")).expect("roll back");
        let (out, ok) = sh(&format!("{STUBS}{rollback}"));
        assert!(ok, "{rollback}");
        assert_eq!(out, format!("[ip][netns][exec][{name}][sysctl][-w][net.ipv4.tcp_congestion_control=cubic]\n"));
    }
    let created: Vec<_> = std::fs::read_dir(&dir).expect("scratch").flatten().map(|e| e.file_name()).collect();
    assert!(created.is_empty(), "the fix ran commands hidden in a name: {created:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_host_roll_back_deletes_only_cctrace_files() {
    let env = Environment { bbr_available: true, host_netns: 4026531840, ..Environment::default() };
    let fix = fix_for(4026531840, &env);
    let rollback = fix.iter().find_map(|c| c.strip_prefix("# roll back: ")).expect("roll back");
    let (out, ok) = sh(&format!("{STUBS}{rollback}"));
    assert!(ok, "{rollback}");
    assert_eq!(
        out,
        "[sysctl][-w][net.ipv4.tcp_congestion_control=cubic]\n\
         [rm][-f][/etc/sysctl.d/90-cctrace-bbr.conf][/etc/modules-load.d/cctrace-bbr.conf]\n"
    );
}

#[test]
fn an_unreachable_namespace_gets_only_an_inert_comment() {
    let env = Environment { bbr_available: true, host_netns: 4026531840, ..Environment::default() };
    for netns in [0, NETNS] {
        let fix = fix_for(netns, &env);
        assert_eq!(fix.len(), 1, "{fix:?}");
        assert_eq!(sh(&format!("{STUBS}{}", fix[0])), (String::new(), true), "{fix:?}");
    }
}

/// Stub executables for commands whose names a shell function cannot have (`lxc-attach`), in a
/// directory to put first on PATH; each prints its name and arguments like `show`.
fn stub_bin(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    for cmd in ["lxc-attach", "pct"] {
        let path = bin.join(cmd);
        std::fs::write(&path, format!("#!/bin/sh\nfor a in {cmd} \"$@\"; do printf '[%s]' \"$a\"; done; echo\n"))
            .expect("stub");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    bin
}

const CGROUP: u64 = 7321;
const ID: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";

fn in_container(container: Container) -> Environment {
    Environment {
        bbr_available: true,
        host_netns: 4026531840,
        netns_pids: HashMap::from([(NETNS, 31337)]),
        cgroups: HashMap::from([(CGROUP, CgroupInfo { path: "/x".into(), container: Some(container) })]),
        ..Environment::default()
    }
}

#[test]
fn the_fix_for_a_hostile_container_name_runs_exactly_the_sysctl() {
    let dir = scratch("container");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    let path = format!("PATH={}:$PATH; {STUBS}", stub_bin(&dir).display());
    let run = |script: &str| sh(&format!("{path}{script}"));
    for name in hostile_names(&marks) {
        // LXC: the name is how lxc-attach finds the container.
        // Outside LXC's default lxcpath (as `lxc-create -P` makes it), which lxc-attach needs.
        let lxc_path = dir.join("lxc path");
        let lxc = Container {
            runtime: Runtime::Lxc,
            id: name.clone(),
            name: Some(name.clone()),
            pod: None,
            lxc_path: Some(lxc_path.display().to_string()),
        };
        // Docker: the name only appears in the comment saying how to persist.
        let docker =
            Container { runtime: Runtime::Docker, id: ID.into(), name: Some(name.clone()), pod: None, lxc_path: None };
        for container in [lxc, docker] {
            let runtime = container.runtime;
            let fix = fix_in(NETNS, CGROUP, &in_container(container));
            for line in &fix {
                assert!(!line.contains('\n'), "{line:?}");
                if line.starts_with('#') {
                    assert_eq!(run(line), (String::new(), true), "{line}");
                }
            }
            let set = fix.iter().find(|c| c.contains("=bbr") && !c.starts_with('#')).expect("the command");
            let (out, ok) = run(set);
            assert!(ok, "{set}");
            let config = lxc_path.join(&name).join("config");
            if runtime == Runtime::Lxc {
                std::fs::create_dir_all(config.parent().expect("a directory")).expect("container directory");
                std::fs::write(&config, "lxc.uts.name = web\n").expect("config");
            }
            let usable = runtime == Runtime::Lxc && !name.is_empty() && !name.chars().any(char::is_control);
            let enter = if usable {
                format!("[lxc-attach][-P][{}][-n][{name}][--]", lxc_path.display())
            } else {
                "[nsenter][--net=/proc/31337/ns/net]".into()
            };
            assert_eq!(out, format!("{enter}[sysctl][-w][net.ipv4.tcp_congestion_control=bbr]\n"), "{set}");
            let rollback = fix.iter().find_map(|c| c.strip_prefix("# roll back: ")).expect("roll back");
            let (out, ok) = run(rollback);
            assert!(ok, "{rollback}");
            let want = format!("{enter}[sysctl][-w][net.ipv4.tcp_congestion_control=cubic]\n");
            assert_eq!(out, want, "{rollback}");
            if usable {
                // The persisting command, pasted without its label (twice: it adds its line
                // once), puts the sysctl in the container's config; the roll back takes it out.
                let persist = fix
                    .iter()
                    .find_map(|c| c.strip_prefix("# persist (LXC sets it at every start): "))
                    .expect("persist");
                for _ in 0..2 {
                    assert_eq!(run(persist), (String::new(), true), "{persist}");
                }
                let text = std::fs::read_to_string(&config).expect("config");
                assert_eq!(text, "lxc.uts.name = web\nlxc.sysctl.net.ipv4.tcp_congestion_control = bbr\n", "{persist}");
                assert!(run(rollback).1, "{rollback}");
                assert_eq!(std::fs::read_to_string(&config).expect("config"), "lxc.uts.name = web\n", "{rollback}");
            }
        }
    }
    let created: Vec<_> = std::fs::read_dir(&marks).expect("scratch").flatten().map(|e| e.file_name()).collect();
    assert!(created.is_empty(), "the fix ran commands hidden in a container name: {created:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_fix_for_a_proxmox_container_runs_through_pct() {
    let dir = scratch("pct");
    let path = format!("PATH={}:$PATH; {STUBS}", stub_bin(&dir).display());
    let pve =
        Container { runtime: Runtime::Proxmox, id: "101".into(), name: Some("plex".into()), pod: None, lxc_path: None };
    let fix = fix_in(NETNS, CGROUP, &in_container(pve));
    let set = fix.iter().find(|c| c.contains("=bbr") && !c.starts_with('#')).expect("the command");
    assert_eq!(
        sh(&format!("{path}{set}")),
        ("[pct][exec][101][--][sysctl][-w][net.ipv4.tcp_congestion_control=bbr]\n".to_string(), true)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_buffer_fix_for_a_hostile_name_sets_exactly_the_triple_and_rolls_back_to_the_one_read() {
    let dir = scratch("buffers");
    let before = BufferLimits { min: 4096, default: 16384, max: 4_194_304 };
    let raised = before.with_max(33_554_432);
    let rmem = BufferLimits { min: 4096, default: 131_072, max: 1_048_576 };
    const RECEIVER: u32 = 4026532777;
    for name in hostile_names(&dir).into_iter().filter(|n| !n.chars().any(char::is_control)) {
        let env = Environment {
            host_netns: 4026531840,
            netns_names: HashMap::from([(NETNS, name.clone()), (RECEIVER, format!("r{name}"))]),
            netns_wmem: HashMap::from([(NETNS, before)]),
            netns_rmem: HashMap::from([(RECEIVER, rmem)]),
            ..Environment::default()
        };
        let needs = FixNeeds { cc: false, wmem: Some(raised), rmem: Some((RECEIVER, rmem.with_max(8_388_608))) };
        let fix = fix_with(NETNS, 0, &env, &needs);
        for line in &fix {
            assert!(!line.contains('\n'), "{line:?}");
            if line.starts_with('#') {
                assert_eq!(sh(&format!("{STUBS}{line}")), (String::new(), true), "{line}");
            }
        }
        let run = |line: &str| sh(&format!("{STUBS}{line}"));
        let commands: Vec<&String> = fix.iter().filter(|c| !c.starts_with('#')).collect();
        assert_eq!(commands.len(), 2, "{fix:#?}");
        assert_eq!(
            run(commands[0]),
            (format!("[ip][netns][exec][{name}][sysctl][-w][net.ipv4.tcp_wmem=4096 16384 33554432]\n"), true)
        );
        assert_eq!(
            run(commands[1]),
            (format!("[ip][netns][exec][r{name}][sysctl][-w][net.ipv4.tcp_rmem=4096 131072 8388608]\n"), true)
        );
        let rollbacks: Vec<&str> = fix.iter().filter_map(|c| c.strip_prefix("# roll back: ")).collect();
        assert_eq!(
            run(rollbacks[0]),
            (format!("[ip][netns][exec][{name}][sysctl][-w][net.ipv4.tcp_wmem=4096 16384 4194304]\n"), true)
        );
        assert_eq!(
            run(rollbacks[1]),
            (format!("[ip][netns][exec][r{name}][sysctl][-w][net.ipv4.tcp_rmem=4096 131072 1048576]\n"), true)
        );
    }
    let created: Vec<_> = std::fs::read_dir(&dir).expect("scratch").flatten().map(|e| e.file_name()).collect();
    assert!(created.is_empty(), "the fix ran commands hidden in a name: {created:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_persisted_buffer_fix_on_the_host_writes_its_own_file_once_and_the_roll_back_removes_it() {
    let dir = scratch("persist");
    let before = BufferLimits { min: 4096, default: 16384, max: 4_194_304 };
    let env = Environment {
        host_netns: 4026531840,
        netns_wmem: HashMap::from([(4026531840, before)]),
        ..Environment::default()
    };
    let needs = FixNeeds { wmem: Some(before.with_max(33_554_432)), ..FixNeeds::default() };
    let fix = fix_with(4026531840, 0, &env, &needs);
    // The persisting and roll-back lines name /etc/sysctl.d: run them against the scratch dir.
    let here = |line: &str| line.replace("/etc/sysctl.d", &dir.display().to_string());
    let persist = fix.iter().find_map(|c| c.strip_prefix("# persist: ")).expect("persist");
    for _ in 0..2 {
        assert_eq!(sh(&here(persist)), (String::new(), true), "{persist}");
    }
    let file = dir.join("90-cctrace-tcp_wmem.conf");
    assert_eq!(std::fs::read_to_string(&file).expect("written"), "net.ipv4.tcp_wmem=4096 16384 33554432\n");
    let rollback = fix.iter().find_map(|c| c.strip_prefix("# roll back: ")).expect("roll back");
    let (out, ok) = sh(&format!("{STUBS}{}", here(rollback)).replace("; rm -f", "; command rm -f"));
    assert!(ok, "{rollback}");
    assert_eq!(out, "[sysctl][-w][net.ipv4.tcp_wmem=4096 16384 4194304]\n");
    assert!(!file.exists(), "the roll back removes what the fix wrote");
    let _ = std::fs::remove_dir_all(&dir);
}
