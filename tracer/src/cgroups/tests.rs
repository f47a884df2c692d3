use std::fs;
use std::os::unix::fs::MetadataExt as _;

use super::names::{RunningRoots, *};
use super::*;
use crate::analysis::container::Pod;

const ID: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
const ID2: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const ID3: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const ID4: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const UID: &str = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";

/// A fresh directory under the temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cctrace-cgroups-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn file(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    fn dir(&self, rel: &str) -> PathBuf {
        let path = self.0.join(rel);
        fs::create_dir_all(&path).expect("mkdir");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn ino(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").ino()
}

fn files(s: &Scratch) -> ContainerFiles {
    ContainerFiles {
        docker_root: s.0.join("docker"),
        podman_stores: vec![s.0.join("podman"), s.0.join("home/alice/podman")],
        kubelet_pod_logs: s.0.join("log/pods"),
        kubelet_container_logs: s.0.join("log/containers"),
        pve_lxc: s.0.join("pve/lxc"),
        proc_root: None,
    }
}

#[test]
fn the_v2_mount_is_found_on_unified_and_hybrid_hosts() {
    let hybrid = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                  40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount_in(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    let unified =
        "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_eq!(cgroup2_mount_in(unified), Some(PathBuf::from("/sys/fs/cgroup")));
    // v1 only; a bind mount of a subtree first (its paths would be relative to the subtree).
    assert_eq!(cgroup2_mount_in("40 31 0:37 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), None);
    let bind =
        "50 1 0:38 /system.slice /mnt/x rw - cgroup2 cgroup2 rw\n51 1 0:38 / /my\\040cg rw - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount_in(bind), Some(PathBuf::from("/my cg")));
    assert_eq!(cgroup2_mount_in("garbage\n - \n\n"), None);
    // This host: hybrid. The lab (its cgroups for tests and the demo) finds it by the same rule.
    assert!(cgroup2_mount().is_some_and(|m| m.join("cgroup.procs").exists()));
    assert_eq!(cgroup2_mount(), cctrace_lab::cgroup2_mount().ok());
}

#[test]
fn user_paths_are_normalized_below_the_mount() {
    let m = Some(Path::new("/sys/fs/cgroup/unified"));
    for user in ["/sys/fs/cgroup/unified/system.slice/x", "/system.slice/x", "system.slice/x", "system.slice//x/"] {
        assert_eq!(normalize_cgroup_path(user, m).as_deref(), Some("/system.slice/x"), "{user}");
    }
    assert_eq!(normalize_cgroup_path("/sys/fs/cgroup/unified", m).as_deref(), Some("/"));
    assert_eq!(normalize_cgroup_path("/", m).as_deref(), Some("/"));
    // Not under the mount: taken as below it (unified hosts have no other way to name it).
    assert_eq!(normalize_cgroup_path("/sys/fs/cgroup/unifiedx/a", m).as_deref(), Some("/sys/fs/cgroup/unifiedx/a"));
    assert_eq!(normalize_cgroup_path("/system.slice/../x", m), None);
}

/// A hierarchy of every runtime's shape, with each runtime's files naming them.
fn fake_host(s: &Scratch) -> PathBuf {
    let root = s.dir("cg");
    for d in [
        format!("system.slice/docker-{ID}.scope"),
        "system.slice/nginx.service".to_string(),
        format!("machine.slice/libpod-{ID2}.scope/container"),
        format!("user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID4}.scope"),
        format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID3}.scope",
            UID.replace('-', "_")
        ),
        "lxc/101/ns/init.scope".to_string(),
        "lxc.payload.web".to_string(),
        "user.slice/user-0.slice/session-3.scope".to_string(),
    ] {
        s.dir(&format!("cg/{d}"));
    }
    // A loop through a symlink must not be followed.
    std::os::unix::fs::symlink(&root, root.join("system.slice/loop")).expect("symlink");
    s.file(&format!("docker/containers/{ID}/config.v2.json"), r#"{"ID":"x","Name":"/jellyfin","State":{}}"#);
    s.file("podman/overlay-containers/containers.json", &format!(r#"[{{"id":"{ID2}","names":["nextcloud"]}}]"#));
    s.file(
        "home/alice/podman/overlay-containers/containers.json",
        &format!(r#"[{{"id":"{ID4}","names":["alices"]}}]"#),
    );
    s.dir(&format!("log/pods/media_streamer-7d9f_{UID}/transcoder"));
    s.file(&format!("log/containers/streamer-7d9f_media_transcoder-{ID3}.log"), "");
    s.file("pve/lxc/101.conf", "arch: amd64\nhostname: plex\nmemory: 2048\n[vzdump]\nhostname: old\n");
    root
}

#[test]
fn every_runtime_is_named_from_its_files() {
    let s = Scratch::new("names");
    let root = fake_host(&s);
    let mut r = CgroupResolver::new(Some(root.clone()), files(&s));
    let now = Instant::now();
    assert!(r.refresh(now));
    let at = |rel: &str| r.all().get(&ino(&root.join(rel))).cloned().unwrap_or_else(|| panic!("{rel} not walked"));
    assert_eq!(at("").path, "/");
    let d = at(&format!("system.slice/docker-{ID}.scope"));
    assert_eq!(d.path, format!("/system.slice/docker-{ID}.scope"));
    let d = d.container.expect("docker");
    assert_eq!((d.runtime, d.name.as_deref()), (Runtime::Docker, Some("jellyfin")));
    let p = at(&format!("machine.slice/libpod-{ID2}.scope/container")).container.expect("podman");
    assert_eq!((p.runtime, p.name.as_deref()), (Runtime::Podman, Some("nextcloud")));
    let p = at(&format!("user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID4}.scope"));
    assert_eq!(p.container.expect("rootless").name.as_deref(), Some("alices"));
    let k = at(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID3}.scope",
        UID.replace('-', "_")
    ))
    .container
    .expect("k8s");
    assert_eq!(k.name.as_deref(), Some("transcoder"));
    assert_eq!(k.pod, Some(Pod { namespace: "media".into(), name: "streamer-7d9f".into(), uid: UID.into() }));
    assert_eq!(k.label(), "streamer-7d9f/transcoder");
    let x = at("lxc/101/ns/init.scope").container.expect("pve");
    assert_eq!((x.runtime, x.id.as_str(), x.name.as_deref()), (Runtime::Proxmox, "101", Some("plex")));
    assert_eq!(at("lxc.payload.web").container.expect("lxc").name.as_deref(), Some("web"));
    assert_eq!(at("system.slice/nginx.service").container.expect("unit").label(), "nginx.service");
    assert_eq!(at("user.slice/user-0.slice/session-3.scope").container, None);
    assert!(r.all().values().all(|i| !i.path.contains("loop")), "followed a symlink");

    // Filters: paths and containers to cgroup ids.
    let docker_ino = ino(&root.join(format!("system.slice/docker-{ID}.scope")));
    assert_eq!(r.id_of(&format!("{}/system.slice/docker-{ID}.scope", root.display())), Some(docker_ino));
    assert_eq!(r.id_of(&format!("system.slice/docker-{ID}.scope")), Some(docker_ino));
    assert_eq!(r.id_of("/nope"), None);
    let mut lxc101 =
        vec![ino(&root.join("lxc/101")), ino(&root.join("lxc/101/ns")), ino(&root.join("lxc/101/ns/init.scope"))];
    lxc101.sort_unstable();
    assert_eq!(r.ids_under("/lxc/101"), lxc101);
    assert_eq!(r.ids_under("/lxc/10"), Vec::<u64>::new(), "a prefix of a name is not a parent");
    assert_eq!(r.ids_under("/").len(), r.all().len());
    let jf = r.find_containers("jellyfin");
    assert_eq!(jf.len(), 1);
    assert_eq!(jf[0].cgroup_ids, vec![docker_ino]);
    assert_eq!(r.find_containers("plex")[0].cgroup_ids, lxc101);
    assert_eq!(r.find_containers("3f4e1b")[0].container.name.as_deref(), Some("jellyfin"));
    assert_eq!(r.find_containers("streamer-7d9f/transcoder").len(), 1);
    assert_eq!(r.find_containers("nginx.service").len(), 1);
    assert!(r.find_containers("").is_empty());
    assert!(r.find_containers("zzz").is_empty());
    let all = r.containers();
    assert_eq!(all.len(), 7, "{all:#?}");
}

#[test]
fn bad_files_leave_names_unknown() {
    let s = Scratch::new("bad");
    let root = fake_host(&s);
    s.file(&format!("docker/containers/{ID}/config.v2.json"), "{\"Name\": \"/jelly");
    s.file("podman/overlay-containers/containers.json", r#"{"id": "not an array"}"#);
    s.file(
        "home/alice/podman/overlay-containers/containers.json",
        &format!(r#"[{{"id":"{ID4}","names":["a\nreboot"]}}, 7, null]"#),
    );
    fs::remove_file(s.0.join(format!("log/containers/streamer-7d9f_media_transcoder-{ID3}.log"))).expect("rm");
    s.file(&format!("log/containers/x_y-{ID3}.log"), "");
    s.file("pve/lxc/101.conf", "\u{0}\u{ff}garbage");
    let mut r = CgroupResolver::new(Some(root), files(&s));
    r.refresh(Instant::now());
    let names: Vec<_> = r.containers().into_iter().map(|h| (h.container.runtime, h.container.name)).collect();
    for (rt, name) in &names {
        match rt {
            Runtime::Lxc | Runtime::Systemd => assert!(name.is_some()),
            _ => assert_eq!(name, &None, "{rt:?}"),
        }
    }
    // No hierarchy at all: nothing, and no panic.
    let mut none = CgroupResolver::new(None, files(&s));
    assert!(none.lookup(1, Instant::now()).is_none());
    let mut gone = CgroupResolver::new(Some(s.0.join("no-such-dir")), files(&s));
    assert!(gone.resolve([1, 2], Instant::now()).is_empty());
}

#[test]
fn unknown_ids_re_walk_at_most_once_a_second_and_gone_cgroups_are_dropped() {
    let s = Scratch::new("rewalk");
    let root = s.dir("cg");
    let a = s.dir("cg/a.service");
    let mut r = CgroupResolver::new(Some(root.clone()), files(&s));
    let t0 = Instant::now();
    assert_eq!(r.lookup(ino(&a), t0).map(|i| i.path.as_str()), Some("/a.service"));
    let b = s.dir(&format!("cg/docker/{ID}"));
    s.file(&format!("docker/containers/{ID}/config.v2.json"), r#"{"Name":"/late"}"#);
    // Unknown, but walked 0.5 s ago: not yet.
    assert!(r.lookup(ino(&b), t0 + Duration::from_millis(500)).is_none());
    let found = r.resolve([ino(&a), ino(&b)], t0 + Duration::from_millis(1100));
    assert_eq!(found.len(), 2);
    assert_eq!(found[&ino(&b)].container.as_ref().and_then(|c| c.name.as_deref()), Some("late"));
    assert_eq!(r.path_of(ino(&b)), Some(format!("/docker/{ID}").as_str()));
    // Known ids do not walk.
    assert!(!r.refresh(t0 + Duration::from_millis(1500)));
    let a_ino = ino(&a);
    fs::remove_dir(&a).expect("rmdir");
    r.lookup(123_456_789_012, t0 + Duration::from_secs(3));
    assert!(r.path_of(a_ino).is_none(), "a cgroup that disappeared is dropped");
    // A name is read once: changing the file does not change it.
    s.file(&format!("docker/containers/{ID}/config.v2.json"), r#"{"Name":"/renamed"}"#);
    r.refresh(t0 + Duration::from_secs(60));
    assert_eq!(r.all()[&ino(&b)].container.as_ref().and_then(|c| c.name.as_deref()), Some("late"));
}

#[test]
fn names_not_found_are_retried_later() {
    let s = Scratch::new("retry");
    let root = s.dir("cg");
    let b = s.dir(&format!("cg/system.slice/docker-{ID}.scope"));
    let mut r = CgroupResolver::new(Some(root), files(&s));
    let t0 = Instant::now();
    r.refresh(t0);
    assert_eq!(r.all()[&ino(&b)].container.as_ref().map(|c| c.name.clone()), Some(None));
    s.file(&format!("docker/containers/{ID}/config.v2.json"), r#"{"Name":"/db"}"#);
    r.refresh(t0 + Duration::from_secs(2));
    assert_eq!(r.all()[&ino(&b)].container.as_ref().and_then(|c| c.name.as_deref()), None, "not re-read every walk");
    r.refresh(t0 + Duration::from_secs(11));
    assert_eq!(r.all()[&ino(&b)].container.as_ref().and_then(|c| c.name.as_deref()), Some("db"));
}

/// `argv` as `/proc/<pid>/cmdline` holds it.
fn cmdline(s: &Scratch, pid: u32, argv: &[&str]) {
    let mut raw = argv.join("\0");
    raw.push('\0');
    s.file(&format!("proc/{pid}/cmdline"), &raw);
}

/// What dockerd 20.10, Podman 4.3 (runc, cgroupfs manager) and LXC 5.0 made on a hybrid host
/// (cgroup v1 controllers, cgroup2 at /sys/fs/cgroup/unified, no systemd): plain directories in
/// the v2 tree, no `.scope` units; dockerd and Podman with state of their own (`--data-root`,
/// `--root`), found only from their processes' command lines; LXC's attached processes one
/// level down in `.lxc`, its monitor and its pivot beside the payload.
#[test]
fn real_runtimes_on_a_hybrid_host_are_named_from_their_running_processes() {
    let s = Scratch::new("hybrid");
    let root = s.dir("cg");
    for d in [
        format!("docker/{ID}"),
        format!("libpod_parent/libpod-{ID2}"),
        "lxc.payload.web/.lxc".to_string(),
        "lxc.monitor.web".to_string(),
        "lxc.pivot".to_string(),
    ] {
        s.dir(&format!("cg/{d}"));
    }
    s.file(&format!("state/docker/containers/{ID}/config.v2.json"), r#"{"ID":"x","Name":"/web-docker"}"#);
    s.file(
        "state/podman/overlay-containers/containers.json",
        &format!(r#"[{{"id":"{ID2}","names":["web-podman"],"layer":"l"}}]"#),
    );
    let docker_root = s.0.join("state/docker").display().to_string();
    let store = s.0.join("state/podman").display().to_string();
    cmdline(&s, 100, &["dockerd", "--iptables=false", "--data-root", &docker_root, "-H", "unix:///x/sock"]);
    let bundle = format!("{store}/overlay-containers/{ID2}/userdata");
    cmdline(&s, 200, &["/usr/bin/conmon", "--api-version", "1", "-c", ID2, "-b", &bundle, "-n", "web-podman"]);
    cmdline(&s, 300, &["[lxc monitor] /srv/lxc web"]);
    s.dir("proc/self");

    // Without looking at the processes the default roots have nothing.
    let mut blind = CgroupResolver::new(Some(root.clone()), files(&s));
    blind.refresh(Instant::now());
    let unnamed: Vec<_> = blind.containers().into_iter().filter(|h| h.container.name.is_none()).collect();
    assert_eq!(unnamed.len(), 2, "{unnamed:#?}");

    let mut r =
        CgroupResolver::new(Some(root.clone()), ContainerFiles { proc_root: Some(s.0.join("proc")), ..files(&s) });
    r.refresh(Instant::now());
    let at = |rel: &str| r.all()[&ino(&root.join(rel))].container.clone();
    let d = at(&format!("docker/{ID}")).expect("docker");
    assert_eq!((d.runtime, d.name.as_deref()), (Runtime::Docker, Some("web-docker")));
    let p = at(&format!("libpod_parent/libpod-{ID2}")).expect("podman");
    assert_eq!((p.runtime, p.name.as_deref()), (Runtime::Podman, Some("web-podman")));
    // lxc-attach's processes live in `.lxc` below the payload: the same container.
    let l = at("lxc.payload.web/.lxc").expect("lxc");
    assert_eq!((l.runtime, l.id.as_str(), l.name.as_deref()), (Runtime::Lxc, "web", Some("web")));
    // Its monitor names the lxcpath `lxc-attach -P` needs to find it there.
    assert_eq!(l.lxc_path.as_deref(), Some("/srv/lxc"));
    assert_eq!(at("lxc.payload.web"), Some(l));
    // The monitor, the pivot and the runtimes' parents are no containers.
    for rel in ["lxc.monitor.web", "lxc.pivot", "docker", "libpod_parent"] {
        assert_eq!(at(rel), None, "{rel}");
    }
    let web = r.find_containers("web");
    assert_eq!(web.len(), 1);
    let mut ids = vec![ino(&root.join("lxc.payload.web")), ino(&root.join("lxc.payload.web/.lxc"))];
    ids.sort_unstable();
    assert_eq!(web[0].cgroup_ids, ids, "the container's cgroups, not its monitor's");
    assert_eq!(r.find_containers(&ID2[..12])[0].container.name.as_deref(), Some("web-podman"));
}

#[test]
fn runtime_state_roots_come_from_dockerd_conmon_and_lxc_monitor_command_lines() {
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    let mut r = RunningRoots::default();
    r.add_process(&argv(&["/usr/sbin/dockerd", "--data-root=/srv/d", "-H", "fd://"]));
    r.add_process(&argv(&["dockerd", "-g", "/old/d"]));
    r.add_process(&argv(&["dockerd"]));
    r.add_process(&argv(&["dockerd", "--data-root", "relative"]));
    r.add_process(&argv(&["conmon", "--bundle", &format!("/s/p/overlay-containers/{ID}/userdata"), "-n", "x"]));
    // A bundle outside a store (another conmon user) and look-alikes of the programs say nothing.
    r.add_process(&argv(&["conmon", "-b", "/run/crio/abc/userdata"]));
    r.add_process(&argv(&["conmon", "-b", "/s/q/overlay-containers/short/userdata"]));
    r.add_process(&argv(&["dockerd-rootless.sh", "--data-root", "/x"]));
    r.add_process(&argv(&["sh", "-c", "dockerd --data-root /y"]));
    r.add_process(&argv(&["[lxc monitor] /srv/my lxc/ web"]));
    r.add_process(&argv(&["[lxc monitor] relative web2"]));
    r.add_process(&argv(&["[lxc monitor]  "]));
    r.add_process(&[]);
    assert_eq!(r.docker, vec![PathBuf::from("/srv/d"), PathBuf::from("/old/d")]);
    assert_eq!(r.podman, vec![PathBuf::from("/s/p")]);
    assert_eq!(r.lxc, vec![("web".to_string(), PathBuf::from("/srv/my lxc/"))]);
}

#[test]
fn docker_data_root_comes_from_daemon_json() {
    let s = Scratch::new("daemon");
    s.file("daemon.json", r#"{"data-root": "/srv/docker", "log-driver": "json-file"}"#);
    assert_eq!(docker_data_root(&s.0.join("daemon.json")), PathBuf::from("/srv/docker"));
    s.file("daemon.json", r#"{"data-root": 5}"#);
    assert_eq!(docker_data_root(&s.0.join("daemon.json")), PathBuf::from("/var/lib/docker"));
    assert_eq!(docker_data_root(&s.0.join("missing.json")), PathBuf::from("/var/lib/docker"));
}

/// The cgroup id the kernel uses for a cgroup directory, from its file handle (what
/// `name_to_handle_at` gives on cgroup2 is the kernfs node id: the id BPF's
/// `bpf_get_current_cgroup_id` and `sk_cgrp_data` report).
fn kernel_cgroup_id(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        id: [u8; 8],
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut h = Handle { bytes: 8, kind: 0, id: [0; 8] };
    let mut mount_id = 0;
    // SAFETY: `h` is a file_handle with room for the 8 bytes it says; c is NUL-terminated.
    let rc = unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), (&raw mut h).cast(), &raw mut mount_id, 0) };
    (rc == 0 && h.bytes == 8).then(|| u64::from_ne_bytes(h.id))
}

/// Removes the test's cgroups, leaves first, even when the test fails.
struct CgroupDirs(Vec<PathBuf>);

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

#[test]
fn the_real_hierarchy_maps_inodes_to_the_kernels_cgroup_ids() {
    let Some(mount) = cgroup2_mount() else {
        crate::test_support::skip("no cgroup v2 mount");
        return;
    };
    let top = mount.join(format!("cct-test-{}", std::process::id()));
    let leaf = top.join(format!("docker-{ID}.scope"));
    let dirs = CgroupDirs(vec![top.clone(), leaf.clone()]);
    if let Err(e) = fs::create_dir(&top).and_then(|()| fs::create_dir(&leaf)) {
        crate::test_support::skip(&format!("cannot create a cgroup under {} ({e}): not root?", mount.display()));
        return;
    }
    let id = ino(&leaf);
    assert_eq!(kernel_cgroup_id(&leaf), Some(id), "the inode is the kernel's cgroup id");
    assert_eq!(kernel_cgroup_id(&mount), Some(ino(&mount)));
    let mut r = CgroupResolver::new(Some(mount.clone()), ContainerFiles::default());
    let info = r.lookup(id, Instant::now()).expect("found").clone();
    assert_eq!(info.path, format!("/cct-test-{}/docker-{ID}.scope", std::process::id()));
    assert_eq!(info.container.map(|c| c.runtime), Some(Runtime::Docker));
    assert_eq!(r.id_of(&leaf.to_string_lossy()), Some(id));
    // This process's own cgroup (from /proc/self/cgroup) is in the map under the kernel's id.
    let own = fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).expect("a v2 line");
    let own_id = kernel_cgroup_id(&mount.join(own.trim_start_matches('/'))).expect("handle");
    assert_eq!(r.path_of(own_id), Some(own));
    drop(dirs);
    assert!(!top.exists(), "cleaned up");
}
