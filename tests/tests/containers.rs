//! Containers: flows named after the container their socket belongs to, and the kernel-side
//! filter by container, cgroup and namespace, on real cgroups with runtime-shaped names, real
//! senders in their own network namespaces, and the runtimes' metadata files as fixtures.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::{Cgroup, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use cctrace_tests::{require_kernel, serial, Tracer};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
const DOCKER_ID: &str = "4f1c2a9be0d7c3b5a6e8f9d0c1b2a3948576f5e4d3c2b1a0f9e8d7c6b5a49382";
const PODMAN_ID: &str = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";
const LATE_ID: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

/// A container-like cgroup with one paced sender in a namespace of its own.
struct Tenant {
    name: &'static str,
    cgroup: Cgroup,
    // Drop order: sender, sink, then the namespaces.
    sender: Sender,
    _sink: Sink,
    lab: VethPair,
}

impl Tenant {
    fn start(top: &Cgroup, rel: &str, name: &'static str) -> Result<Tenant> {
        let mut cgroup = top.child(rel)?;
        let lab = VethPair::create(VethOptions::default())?;
        cgroup.spawn_resident(lab.sender())?;
        let sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
        let sender = Sender::start(
            lab.sender(),
            lab.receiver_addr(),
            PORT,
            SenderOptions {
                socket_cgroup: Some(cgroup.path().to_path_buf()),
                name: Some(format!("{name}-send")),
                ..SenderOptions::new(
                    "cubic",
                    SendMode::Paced { rate_bps: 4_000_000, write_size: 16 << 10 },
                    Duration::from_secs(240),
                )
            },
        )
        .with_context(|| format!("starting {name}'s sender"))?;
        Ok(Tenant { name, cgroup, sender, _sink: sink, lab })
    }

    fn netns(&self) -> u64 {
        self.lab.sender().inode()
    }

    fn port(&self) -> u16 {
        self.sender.local_port()
    }

    /// Whether `v` is a record of this tenant's sending socket.
    fn owns(&self, v: &Value) -> bool {
        v["netns"].as_u64() == Some(self.netns()) && v["sport"].as_u64() == Some(u64::from(self.port()))
    }
}

/// The runtimes' own files, as they would be on a host running them.
struct Fixtures {
    dir: PathBuf,
}

impl Fixtures {
    fn new() -> Result<Fixtures> {
        let dir = std::env::temp_dir().join(format!("cct-containers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let f = Fixtures { dir };
        f.docker(DOCKER_ID, "jellyfin")?;
        let store = f.dir.join("podman/overlay-containers");
        std::fs::create_dir_all(&store)?;
        std::fs::write(
            store.join("containers.json"),
            format!(r#"[{{"id":"{PODMAN_ID}","names":["transcoder"],"image":"x","layer":"y"}}]"#),
        )?;
        std::fs::create_dir_all(f.dir.join("pve"))?;
        std::fs::write(f.dir.join("pve/102.conf"), "arch: amd64\nhostname: proxy\nmemory: 512\n")?;
        Ok(f)
    }

    fn docker(&self, id: &str, name: &str) -> Result<()> {
        let d = self.dir.join("docker/containers").join(id);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("config.v2.json"), format!(r#"{{"ID":"{id}","Name":"/{name}","State":{{"Pid":1}}}}"#))?;
        Ok(())
    }

    fn args(&self) -> Vec<String> {
        let p = |rel: &str| self.dir.join(rel).display().to_string();
        vec![
            "--docker-root".into(),
            p("docker"),
            "--podman-store".into(),
            p("podman"),
            "--pve-lxc-dir".into(),
            p("pve"),
        ]
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_tracer(fixtures: &Fixtures, extra: &[&str]) -> Result<Tracer> {
    let mut args: Vec<String> = vec!["--interval".into(), "300".into()];
    args.extend(fixtures.args());
    args.extend(extra.iter().map(|s| (*s).to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Tracer::start(&refs)
}

fn flows(lines: &[Value]) -> impl Iterator<Item = &Value> {
    lines.iter().filter(|v| v["type"] == "flow")
}

fn summary(lines: &[Value]) -> Result<&Value> {
    lines.iter().rev().find(|v| v["type"] == "summary").context("no summary line")
}

/// The last flow record of `t`'s socket, once it names a container.
fn named_flow<'a>(lines: &'a [Value], t: &Tenant) -> Option<&'a Value> {
    flows(lines).filter(|v| t.owns(v)).filter(|v| !v["container"].is_null()).last()
}

fn wait_named(tracer: &Tracer, tenants: &[&Tenant]) -> Result<()> {
    tracer.wait_for("every tenant's flow with its container", Duration::from_secs(20), |lines| {
        tenants.iter().all(|t| named_flow(lines, t).is_some())
    })
}

/// Run cctrace with a filter for a few seconds and check that only `kept`'s flows arrived,
/// that the others were dropped in the kernel (counted as filtered, never in the ring).
fn check_filter(fixtures: &Fixtures, filter: &[&str], kept: &Tenant, all: &[&Tenant]) -> Result<()> {
    let tracer = start_tracer(fixtures, filter)?;
    tracer.wait_for(&format!("{}'s flow under {filter:?}", kept.name), Duration::from_secs(20), |lines| {
        flows(lines).any(|v| kept.owns(v))
    })?;
    // Every other tenant sends all the time: two more of the kept tenant's interval lines (the
    // tracer's own clock) give each of the others two intervals' chances to leak.
    let seen = tracer.count(|v| v["type"] == "flow" && kept.owns(v));
    tracer.wait_for("two more intervals of the kept flow", Duration::from_secs(20), |lines| {
        flows(lines).filter(|v| kept.owns(v)).count() >= seen + 2
    })?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let kept_cgroup = kept.cgroup.id()?;
    for v in lines.iter().filter(|v| v["type"] == "flow" || v["type"] == "sample") {
        assert_eq!(v["cgroup_id"].as_u64(), Some(kept_cgroup), "{filter:?} let through a flow of another cgroup: {v}");
    }
    for other in all.iter().filter(|t| t.name != kept.name) {
        assert!(!lines.iter().any(|v| other.owns(v)), "{filter:?} let {}'s flow through", other.name);
    }
    let s = summary(&lines)?;
    assert!(s["events_filtered"].as_u64() > Some(0), "the kernel filtered nothing: {s}");
    assert_eq!(s["events_lost"], 0, "{s}");
    assert_eq!(
        s["kernel_emitted"], s["events_received"],
        "everything the kernel wrote into the ring was read, and all of it was {}'s: {s}",
        kept.name
    );
    Ok(())
}

fn host_default_cc() -> Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")?.trim().to_string())
}

#[test]
fn flows_are_named_after_their_container_and_filtered_in_the_kernel() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let fixtures = Fixtures::new()?;
    let top = Cgroup::top()?;
    let jellyfin = Tenant::start(&top, &format!("system.slice/docker-{DOCKER_ID}.scope"), "jellyfin")?;
    let transcoder = Tenant::start(&top, &format!("machine.slice/libpod-{PODMAN_ID}.scope/container"), "transcoder")?;
    let proxy = Tenant::start(&top, "lxc/102/ns", "proxy")?;
    let nginx = Tenant::start(&top, "system.slice/nginx.service", "nginx")?;
    let all = [&jellyfin, &transcoder, &proxy, &nginx];
    // Only the nginx tenant's namespace changes its default: the others keep the host's.
    nginx.lab.sender().sysctl_set("net.ipv4.tcp_congestion_control", "reno")?;

    // Unfiltered: every flow is named after the container its socket lives in.
    let tracer = start_tracer(&fixtures, &[])?;
    wait_named(&tracer, &all)?;
    let lines = tracer.lines();
    let expect = [
        (&jellyfin, "docker", Some("jellyfin"), DOCKER_ID),
        (&transcoder, "podman", Some("transcoder"), PODMAN_ID),
        (&proxy, "proxmox", Some("proxy"), "102"),
        (&nginx, "systemd", None, "nginx.service"),
    ];
    let host_cc = host_default_cc()?;
    for (t, runtime, name, id) in expect {
        let v = named_flow(&lines, t).context("named")?;
        let c = &v["container"];
        assert_eq!(c["runtime"], runtime, "{}: {v}", t.name);
        assert_eq!(c["id"], id, "{}: {v}", t.name);
        if let Some(name) = name {
            assert_eq!(c["name"], name, "{}: {v}", t.name);
        }
        assert_eq!(v["cgroup"].as_str(), Some(t.cgroup.rel_path().as_str()), "{}: {v}", t.name);
        assert_eq!(v["cgroup_id"].as_u64(), Some(t.cgroup.id()?), "{}: {v}", t.name);
        let want_cc = if t.name == "nginx" { "reno" } else { host_cc.as_str() };
        assert_eq!(v["netns_cc"], want_cc, "{}'s namespace default: {v}", t.name);
    }

    // A container that starts while cctrace runs is named without a restart.
    fixtures.docker(LATE_ID, "latecomer")?;
    let late = Tenant::start(&top, &format!("system.slice/docker-{LATE_ID}.scope"), "latecomer")?;
    tracer.wait_for("the late container's flow, named", Duration::from_secs(20), |lines| {
        named_flow(lines, &late).is_some_and(|v| v["container"]["name"] == "latecomer")
    })?;
    let (code, _) = tracer.stop()?;
    assert_eq!(code, 0);
    drop(late);

    // Filters, applied in the kernel.
    check_filter(&fixtures, &["--container", "jellyfin"], &jellyfin, &all)?;
    check_filter(&fixtures, &["--container", &PODMAN_ID[..10]], &transcoder, &all)?;
    let lxc = format!("{}/lxc", top.rel_path());
    check_filter(&fixtures, &["--cgroup", &lxc], &proxy, &all)?;
    check_filter(&fixtures, &["--netns", nginx.lab.sender().name()], &nginx, &all)?;
    Ok(())
}

#[test]
fn an_unknown_container_is_one_line_with_the_closest_names() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let fixtures = Fixtures::new()?;
    let top = Cgroup::top()?;
    let _jellyfin = top.child(&format!("system.slice/docker-{DOCKER_ID}.scope"))?;
    let out = std::process::Command::new(cctrace_tests::cctrace_bin())
        .args(["--json", "--duration", "1"])
        .args(fixtures.args())
        .args(["--container", "jellyfn"])
        .output_within(CHILD_DEADLINE)?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains("\"jellyfn\"") && lines[0].contains("closest: jellyfin"), "{err}");
    // Nothing was attached for a filter that names nothing.
    assert!(out.stdout.is_empty());
    Ok(())
}
