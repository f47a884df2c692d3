//! Which container a socket belongs to, from its cgroup v2 path.
//!
//! Pure: the path comes from a host adapter above the core, which walks the cgroup v2
//! hierarchy and reads names from the runtimes' own files and hands both in as [`CgroupInfo`];
//! here the path's shape alone says the runtime and the id, and the names found are carried
//! along. The core never calls the adapter.

use serde::{Deserialize, Serialize};

/// The software that made the cgroup a socket lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Docker,
    Podman,
    /// containerd's CRI plugin (Kubernetes pods) or plain containerd.
    Containerd,
    /// CRI-O (Kubernetes pods).
    Crio,
    /// LXC / LXD / Incus containers, not under Proxmox.
    Lxc,
    /// Proxmox VE containers (`lxc/<vmid>`).
    Proxmox,
    /// A systemd service or scope that is not one of the above.
    Systemd,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Podman => "podman",
            Self::Containerd => "containerd",
            Self::Crio => "crio",
            Self::Lxc => "lxc",
            Self::Proxmox => "proxmox",
            Self::Systemd => "systemd",
        }
    }
}

/// Where LXC keeps containers unless told otherwise (`lxc-* -P`).
pub const LXC_DEFAULT_PATH: &str = "/var/lib/lxc";

/// A Kubernetes pod, named from the kubelet's log directories.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A container (or service) a cgroup belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Container {
    pub runtime: Runtime,
    /// The runtime's id: 64 hex digits for Docker/Podman/containerd/CRI-O, the vmid for Proxmox,
    /// the container name for LXC, the unit name for systemd.
    pub id: String,
    /// The name a user knows it by, when the host's files say it.
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pod: Option<Pod>,
    /// An LXC container's lxcpath (the directory holding `<name>/config`), when its monitor
    /// process says and it is not LXC's default: `lxc-attach` needs `-P` to find it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lxc_path: Option<String>,
}

/// What the host knows about one cgroup v2 id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupInfo {
    /// Path below the cgroup v2 mount, starting with `/` (`/` itself is the root).
    pub path: String,
    pub container: Option<Container>,
}

impl Container {
    /// The id as `docker ps` shows it: the first 12 digits of a 64-digit hex id, else all of it
    /// (a vmid, an LXC name, a unit name).
    pub fn short_id(&self) -> &str {
        if is_hex64(&self.id) {
            &self.id[..12]
        } else {
            &self.id
        }
    }

    /// What a person knows it by: the name when known, else the short id; for a Kubernetes
    /// container whose pod is named, `pod/container`. Control characters (a hostile name from
    /// a host file or a path) are shown escaped, so a label is always one printable line.
    pub fn label(&self) -> String {
        let own = self.name.as_deref().unwrap_or_else(|| self.short_id());
        let label = match &self.pod {
            Some(pod) if !pod.name.is_empty() => format!("{}/{own}", pod.name),
            _ => own.to_string(),
        };
        printable(&label)
    }

    fn new(runtime: Runtime, id: &str) -> Self {
        Self { runtime, id: id.to_string(), name: None, pod: None, lxc_path: None }
    }
}

/// `s` with each control character written as an escape (`\n`, `\u{1b}`): one printable line.
pub fn printable(s: &str) -> String {
    if s.chars().any(char::is_control) {
        s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
    } else {
        s.to_string()
    }
}

/// 64 lower-case hex digits: the ids Docker, Podman, containerd and CRI-O give containers.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The container a cgroup v2 path (below the mount, e.g. `/system.slice/docker-<id>.scope`)
/// belongs to, from the path's shape alone; `None` for cgroups that are no container or
/// service worth naming (the root, `init.scope`, user sessions), when the caller shows the path.
///
/// Recognised, under both cgroup drivers (systemd: `.scope`/`.slice` units; cgroupfs: plain
/// directories):
/// - Docker: `docker-<id>.scope`, `/docker/<id>`;
/// - Podman: `libpod-<id>.scope` (also rootless, below `user.slice`), `/libpod_parent/libpod-<id>`
///   (`libpod-conmon-<id>.scope` is the monitor, not the container);
/// - Kubernetes: `cri-containerd-<id>.scope`, `crio-<id>.scope` (not `crio-conmon-`), a bare
///   `<id>` below `pod<uid>` (cgroupfs driver, containerd's layout; taken as containerd), with the
///   pod's uid from `pod<uid>` or `kubepods-<qos>-pod<uid_with_underscores>.slice`;
/// - Proxmox: `/lxc/<vmid>` (numeric), with the container's own tree below (`/lxc/101/ns/...`);
/// - LXC/LXD/Incus: `lxc.payload.<name>`, `lxc.payload/<name>`, `/lxc/<name>` (not numeric);
///   `lxc.monitor*` is the monitor, not the container;
/// - systemd: the outermost `.service`/`.scope` unit of a path outside `user.slice`, when no
///   container encloses it (`init.scope` is none).
///
/// Nested containers (Docker inside an LXC container, LXC inside Docker): the innermost wins.
/// It is the one whose processes own the sockets, whose network namespace the fix must change
/// (an inner container usually has its own), and the name its user knows. Units of a systemd
/// running inside a container are that container's, never a host service.
pub fn classify(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut found: Option<Container> = None;
    let mut pod: Option<Pod> = None;
    for (i, part) in parts.iter().enumerate() {
        let prev = if i > 0 { Some(parts[i - 1]) } else { None };
        if let Some(uid) = pod_uid(part) {
            pod = Some(Pod { namespace: String::new(), name: String::new(), uid });
            continue;
        }
        let Some(mut c) = container_component(part, prev) else { continue };
        if matches!(c.runtime, Runtime::Docker | Runtime::Podman | Runtime::Containerd | Runtime::Crio) {
            // A pod's containers sit right below its slice / directory.
            if prev.is_some_and(|p| pod_uid(p).is_some()) {
                c.pod = pod.clone();
            }
        }
        found = Some(c);
    }
    if found.is_some() {
        return found;
    }
    systemd_unit(&parts)
}

/// One path component that names a container by itself or with the component before it.
fn container_component(part: &str, prev: Option<&str>) -> Option<Container> {
    let unscoped = part.strip_suffix(".scope").unwrap_or(part);
    if let Some(id) = unscoped.strip_prefix("docker-").filter(|id| is_hex64(id)) {
        return Some(Container::new(Runtime::Docker, id));
    }
    if let Some(id) = unscoped.strip_prefix("libpod-").filter(|id| is_hex64(id)) {
        return Some(Container::new(Runtime::Podman, id));
    }
    if let Some(id) = unscoped.strip_prefix("cri-containerd-").filter(|id| is_hex64(id)) {
        return Some(Container::new(Runtime::Containerd, id));
    }
    if let Some(id) = unscoped.strip_prefix("crio-").filter(|id| is_hex64(id)) {
        return Some(Container::new(Runtime::Crio, id));
    }
    if is_hex64(part) {
        match prev {
            Some("docker") => return Some(Container::new(Runtime::Docker, part)),
            Some(p) if pod_uid(p).is_some() => return Some(Container::new(Runtime::Containerd, part)),
            _ => {}
        }
    }
    if let Some(name) = part.strip_prefix("lxc.payload.").filter(|n| !n.is_empty()) {
        return Some(lxc_named(name));
    }
    match prev {
        Some("lxc.payload") => return Some(lxc_named(part)),
        Some("lxc") if is_vmid(part) => return Some(Container::new(Runtime::Proxmox, part)),
        Some("lxc") => return Some(lxc_named(part)),
        _ => {}
    }
    None
}

fn lxc_named(name: &str) -> Container {
    Container { name: Some(name.to_string()), ..Container::new(Runtime::Lxc, name) }
}

/// A Proxmox vmid: 100 to 999999999, digits only.
fn is_vmid(s: &str) -> bool {
    !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0')
}

/// The pod uid (with dashes) a pod's cgroup carries: `pod<uid>` (cgroupfs driver) or
/// `kubepods[-<qos>]-pod<uid with _ for ->.slice` (systemd driver).
fn pod_uid(part: &str) -> Option<String> {
    let raw = if let Some(slice) = part.strip_suffix(".slice").filter(|s| s.starts_with("kubepods-")) {
        &slice[slice.rfind("-pod")? + 4..]
    } else {
        part.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    let ok =
        uid.len() == 36
            && uid.bytes().enumerate().all(|(i, b)| {
                if matches!(i, 8 | 13 | 18 | 23) {
                    b == b'-'
                } else {
                    b.is_ascii_hexdigit()
                }
            });
    ok.then_some(uid)
}

/// A host systemd service or scope: the outermost unit below `system.slice`-like slices, none in
/// users' sessions (`user.slice`) or for `init.scope`.
fn systemd_unit(parts: &[&str]) -> Option<Container> {
    if parts.first().is_none_or(|p| *p == "user.slice" || *p == "init.scope") {
        return None;
    }
    let unit = parts.iter().find(|p| p.ends_with(".service") || p.ends_with(".scope"))?;
    if *unit == "init.scope" || unit.len() <= ".scope".len() {
        return None;
    }
    Some(Container::new(Runtime::Systemd, unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
    const ID2: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";

    fn c(path: &str) -> (Runtime, String, Option<String>) {
        let c = classify(path).unwrap_or_else(|| panic!("{path}: no container"));
        (c.runtime, c.id, c.name)
    }

    #[test]
    fn docker_under_both_drivers() {
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
            format!("/system.slice/docker-{ID}.scope/init.scope"),
            format!("/system.slice/docker-{ID}.scope/system.slice/nginx.service"),
        ] {
            assert_eq!(c(&path), (Runtime::Docker, ID.to_string(), None), "{path}");
        }
        // dockerd itself is a service; a short or upper-case id is not a container id.
        assert_eq!(c("/system.slice/docker.service").0, Runtime::Systemd);
        assert_eq!(classify("/docker/3f4e1b2c5d6a"), None);
        assert_eq!(classify(&format!("/docker/{}", ID.to_uppercase())), None);
        assert_eq!(c(&format!("/system.slice/docker-{ID}x.scope")).0, Runtime::Systemd);
    }

    #[test]
    fn podman_rootful_rootless_and_cgroupfs_but_not_conmon() {
        for path in [
            format!("/machine.slice/libpod-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope/container"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"),
            format!("/libpod_parent/libpod-{ID}"),
        ] {
            assert_eq!(c(&path), (Runtime::Podman, ID.to_string(), None), "{path}");
        }
        assert_eq!(c(&format!("/machine.slice/libpod-conmon-{ID}.scope")).0, Runtime::Systemd);
        assert_eq!(
            classify(&format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-{ID}.scope")),
            None
        );
    }

    #[test]
    fn kubernetes_under_both_drivers_keeps_the_pod_uid() {
        let sd_uid = UID.replace('-', "_");
        for (path, runtime) in [
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd_uid}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
            ),
            (format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{sd_uid}.slice/crio-{ID}.scope"), Runtime::Crio),
            (format!("/kubepods.slice/kubepods-pod{sd_uid}.slice/cri-containerd-{ID}.scope"), Runtime::Containerd),
            (format!("/kubepods/burstable/pod{UID}/{ID}"), Runtime::Containerd),
            (format!("/kubepods/pod{UID}/{ID}"), Runtime::Containerd),
            (format!("/kubepods/besteffort/pod{UID}/crio-{ID}"), Runtime::Crio),
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd_uid}.slice/docker-{ID}.scope"), Runtime::Docker),
        ] {
            let got = classify(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!((got.runtime, got.id.as_str()), (runtime, ID), "{path}");
            assert_eq!(got.pod.as_ref().map(|p| p.uid.as_str()), Some(UID), "{path}");
        }
        assert_eq!(
            c(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd_uid}.slice/crio-conmon-{ID}.scope"
            ))
            .0,
            Runtime::Systemd
        );
        // The pod's own slice is no container.
        assert_eq!(classify(&format!("/kubepods/burstable/pod{UID}")), None);
        assert_eq!(
            classify(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd_uid}.slice")),
            None
        );
        // A hex directory below something that is not a pod is nothing.
        assert_eq!(classify(&format!("/kubepods/burstable/{ID}")), None);
        // A malformed uid is no pod.
        assert_eq!(classify(&format!("/kubepods/burstable/podxyz/{ID}")), None);
    }

    #[test]
    fn proxmox_by_vmid_and_lxc_by_name() {
        for path in ["/lxc/101", "/lxc/101/ns", "/lxc/101/ns/init.scope", "/lxc/101/ns/system.slice/nginx.service"] {
            assert_eq!(c(path), (Runtime::Proxmox, "101".to_string(), None), "{path}");
        }
        for path in ["/lxc.payload.web", "/lxc.payload.web/init.scope", "/lxc.payload/web", "/lxc/web", "/lxc/web/ns"] {
            assert_eq!(c(path), (Runtime::Lxc, "web".to_string(), Some("web".to_string())), "{path}");
        }
        assert_eq!(classify("/lxc.monitor.web"), None);
        assert_eq!(classify("/lxc.monitor/101"), None);
        assert_eq!(classify("/lxc"), None);
        assert_eq!(classify("/lxc.payload."), None);
    }

    #[test]
    fn systemd_services_but_not_sessions_or_init() {
        assert_eq!(c("/system.slice/nginx.service"), (Runtime::Systemd, "nginx.service".to_string(), None));
        assert_eq!(c("/system.slice/system-getty.slice/getty@tty1.service").1, "getty@tty1.service");
        assert_eq!(c("/system.slice/containerd.service/delegated/sub").1, "containerd.service");
        assert_eq!(c("/system.slice/run-u42.scope").1, "run-u42.scope");
        for path in [
            "/",
            "",
            "/init.scope",
            "/user.slice/user-1000.slice/session-3.scope",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service",
            "/system.slice",
            "/process_api/3c69e6f10bfa39b8b4b36135b6908dfa",
        ] {
            assert_eq!(classify(path), None, "{path}");
        }
    }

    #[test]
    fn the_innermost_container_wins() {
        assert_eq!(c(&format!("/lxc/101/ns/system.slice/docker-{ID}.scope")).0, Runtime::Docker);
        assert_eq!(c(&format!("/lxc.payload.web/system.slice/docker-{ID}.scope/init.scope")).0, Runtime::Docker);
        assert_eq!(c(&format!("/system.slice/docker-{ID}.scope/lxc.payload.inner")).1, "inner");
        assert_eq!(c(&format!("/docker/{ID}/docker/{ID2}")).1, ID2);
    }

    #[test]
    fn hostile_names_stay_data() {
        let (rt, id, name) = c("/lxc.payload.a;$(reboot) 'x'");
        assert_eq!((rt, id.as_str(), name.as_deref()), (Runtime::Lxc, "a;$(reboot) 'x'", Some("a;$(reboot) 'x'")));
        let nl = classify("/lxc.payload.a\nreboot").expect("lxc");
        assert_eq!(nl.label(), "a\\nreboot", "one printable line");
        // Look-alikes of ids are not ids.
        assert_eq!(c(&format!("/system.slice/docker-{ID};x.scope")).0, Runtime::Systemd);
        assert_eq!(classify(&format!("/docker/{ID}\n")), None);
        assert_eq!(classify("/lxc/0101"), Some(lxc_named("0101")));
        assert_eq!(classify("/lxc/1234567890"), Some(lxc_named("1234567890")));
    }

    #[test]
    fn labels_and_short_ids() {
        let mut d = classify(&format!("/docker/{ID}")).expect("docker");
        assert_eq!(d.short_id(), "3f4e1b2c5d6a");
        assert_eq!(d.label(), "3f4e1b2c5d6a");
        d.name = Some("jellyfin".into());
        assert_eq!(d.label(), "jellyfin");
        let p = classify("/lxc/101").expect("pve");
        assert_eq!((p.short_id(), p.label().as_str()), ("101", "101"));
        let mut k = classify(&format!("/kubepods/pod{UID}/{ID}")).expect("k8s");
        assert_eq!(k.label(), "3f4e1b2c5d6a", "pod not named yet");
        k.pod.as_mut().expect("pod").name = "web-7d9f".into();
        k.name = Some("nginx".into());
        assert_eq!(k.label(), "web-7d9f/nginx");
        k.name = None;
        assert_eq!(k.label(), "web-7d9f/3f4e1b2c5d6a");
    }
}
