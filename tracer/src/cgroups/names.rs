//! The names the container runtimes gave their containers, read from their own files (Docker's
//! `config.v2.json`, Podman's `containers.json`, Proxmox's configs, the kubelet's log
//! directories) and from the command lines of their running daemons and monitors (`dockerd
//! --data-root`, conmon's `--bundle`, `[lxc monitor] LXCPATH NAME`), with no runtime API.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::analysis::container::{Container, Pod, Runtime};

use super::{MAX_FILE, MAX_NAME};

/// Where the container runtimes keep what names their containers. `Default` reads the real
/// locations; tests and the demo point the fields at fixtures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerFiles {
    /// Docker's data root: `<root>/containers/<id>/config.v2.json` has `.Name`.
    pub docker_root: PathBuf,
    /// Podman storage roots: `<store>/overlay-containers/containers.json` lists `id` and `names`.
    pub podman_stores: Vec<PathBuf>,
    /// The kubelet's pod log directories, `<dir>/<namespace>_<pod>_<uid>/`.
    pub kubelet_pod_logs: PathBuf,
    /// The kubelet's container log links, `<dir>/<pod>_<namespace>_<container>-<id>.log`.
    pub kubelet_container_logs: PathBuf,
    /// Proxmox container configs, `<dir>/<vmid>.conf` with `hostname: NAME`.
    pub pve_lxc: PathBuf,
    /// Where the running runtimes are looked for when a name is not under the roots above
    /// (`/proc`; `None`: never, for fixtures): a `dockerd` started with `--data-root` keeps its
    /// containers there, and Podman's `--root` store shows in its `conmon`s' `--bundle`.
    pub proc_root: Option<PathBuf>,
}

impl Default for ContainerFiles {
    fn default() -> Self {
        let mut podman_stores = vec![PathBuf::from("/var/lib/containers/storage")];
        // Rootless Podman keeps a store per user.
        if let Ok(homes) = std::fs::read_dir("/home") {
            let mut users: Vec<PathBuf> = homes
                .flatten()
                .map(|h| h.path().join(".local/share/containers/storage"))
                .filter(|p| p.is_dir())
                .collect();
            users.sort();
            podman_stores.extend(users);
        }
        Self {
            docker_root: docker_data_root(Path::new("/etc/docker/daemon.json")),
            podman_stores,
            kubelet_pod_logs: PathBuf::from("/var/log/pods"),
            kubelet_container_logs: PathBuf::from("/var/log/containers"),
            pve_lxc: PathBuf::from("/etc/pve/lxc"),
            proc_root: Some(PathBuf::from("/proc")),
        }
    }
}

/// Docker's `data-root` from its daemon.json, else `/var/lib/docker`.
pub fn docker_data_root(daemon_json: &Path) -> PathBuf {
    read_json(daemon_json)
        .and_then(|v| v.get("data-root")?.as_str().filter(|s| s.starts_with('/')).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/docker"))
}

/// A file's text, when it exists, is no larger than [`MAX_FILE`] and is UTF-8.
pub(super) fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_FILE {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

pub(super) fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&read_small(path)?).ok()
}

/// A name fit to show and to quote into a command: non-empty, bounded, no control characters.
pub(super) fn usable_name(s: &str) -> Option<String> {
    (!s.is_empty() && s.len() <= MAX_NAME && !s.chars().any(char::is_control)).then(|| s.to_string())
}

/// What the runtimes' files say about a batch of containers; each index is read at most once.
#[derive(Default)]
pub(super) struct NameIndex {
    /// The stores and data roots of the runtimes running now, read from their command lines.
    running: Option<RunningRoots>,
    podman: Option<HashMap<String, String>>,
    /// Pod uid → (namespace, name).
    pods: Option<HashMap<String, (String, String)>>,
    /// Container id → (pod name, pod namespace, container name).
    k8s_containers: Option<HashMap<String, (String, String, String)>>,
}

impl ContainerFiles {
    /// The name of `c` (and its pod's namespace and name) from the runtime's files; what is not
    /// found stays `None` / empty.
    pub fn describe(&self, c: &Container) -> Container {
        self.describe_with(c, &mut NameIndex::default())
    }

    pub(super) fn describe_with(&self, c: &Container, index: &mut NameIndex) -> Container {
        let mut out = c.clone();
        match c.runtime {
            Runtime::Docker => {
                out.name = docker_name(&self.docker_root, &c.id).or_else(|| {
                    let running = index.running.get_or_insert_with(|| self.running_roots());
                    running.docker.iter().filter(|r| **r != self.docker_root).find_map(|r| docker_name(r, &c.id))
                });
            }
            Runtime::Podman => {
                out.name = index.podman.get_or_insert_with(|| self.podman_names(&[])).get(&c.id).cloned();
                if out.name.is_none() {
                    let running = index.running.get_or_insert_with(|| self.running_roots());
                    let extra: Vec<PathBuf> =
                        running.podman.iter().filter(|s| !self.podman_stores.contains(s)).cloned().collect();
                    if !extra.is_empty() {
                        let names = self.podman_names(&extra);
                        out.name = names.get(&c.id).cloned();
                        index.podman = Some(names);
                    }
                }
            }
            Runtime::Proxmox => out.name = self.pve_hostname(&c.id),
            Runtime::Lxc => {
                out.name = c.name.clone().or_else(|| Some(c.id.clone()));
                let running = index.running.get_or_insert_with(|| self.running_roots());
                out.lxc_path = running
                    .lxc
                    .iter()
                    .find(|(name, _)| *name == c.id)
                    .map(|(_, path)| path.to_string_lossy().into_owned())
                    .filter(|p| p != crate::analysis::container::LXC_DEFAULT_PATH);
            }
            Runtime::Systemd => out.name = c.name.clone().or_else(|| Some(c.id.clone())),
            Runtime::Containerd | Runtime::Crio => {}
        }
        // Kubernetes names, whatever the runtime: the kubelet's logs are keyed by pod uid and
        // container id.
        if let Some(pod) = out.pod.as_mut() {
            if let Some((ns, name)) = index.pods.get_or_insert_with(|| self.kubelet_pods()).get(&pod.uid) {
                pod.namespace.clone_from(ns);
                pod.name.clone_from(name);
            }
        }
        if out.name.is_none() && matches!(c.runtime, Runtime::Containerd | Runtime::Crio | Runtime::Docker) {
            let k8s = index.k8s_containers.get_or_insert_with(|| self.kubelet_containers());
            if let Some((pod_name, ns, name)) = k8s.get(&c.id) {
                out.name = Some(name.clone());
                // No pod in the path (a layout classify does not know): the log link names it.
                if out.pod.is_none() {
                    out.pod = Some(Pod { namespace: ns.clone(), name: pod_name.clone(), uid: String::new() });
                }
            }
        }
        out
    }

    /// Every Podman store's containers (the configured ones, then `extra`), id → first name.
    pub(super) fn podman_names(&self, extra: &[PathBuf]) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for store in self.podman_stores.iter().chain(extra) {
            let Some(serde_json::Value::Array(list)) = read_json(&store.join("overlay-containers/containers.json"))
            else {
                continue;
            };
            for c in &list {
                let id = c.get("id").and_then(serde_json::Value::as_str);
                let name = c.get("names").and_then(|n| n.get(0)).and_then(serde_json::Value::as_str);
                if let (Some(id), Some(name)) = (id, name.and_then(usable_name)) {
                    out.entry(id.to_string()).or_insert(name);
                }
            }
        }
        out
    }

    /// The data roots of the running `dockerd`s and the stores of the running Podman
    /// containers, from their command lines under [`ContainerFiles::proc_root`].
    pub(super) fn running_roots(&self) -> RunningRoots {
        let mut roots = RunningRoots::default();
        let Some(proc_root) = &self.proc_root else { return roots };
        let Ok(dir) = std::fs::read_dir(proc_root) else { return roots };
        for entry in dir.flatten() {
            if !entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
                continue;
            }
            // Command lines are small; a process gone meanwhile reads as nothing.
            let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            roots.add_process(&argv);
        }
        roots.docker.sort();
        roots.docker.dedup();
        roots.podman.sort();
        roots.podman.dedup();
        roots
    }

    /// `hostname:` of a Proxmox container's config, before its first snapshot section.
    pub(super) fn pve_hostname(&self, vmid: &str) -> Option<String> {
        if !vmid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let text = read_small(&self.pve_lxc.join(format!("{vmid}.conf")))?;
        text.lines()
            .take_while(|l| !l.starts_with('['))
            .find_map(|l| l.strip_prefix("hostname:"))
            .and_then(|n| usable_name(n.trim()))
    }

    /// `/var/log/pods/<namespace>_<pod>_<uid>`: uid → (namespace, pod). Kubernetes names and
    /// uids never contain `_`, so three parts or it is not a pod's directory.
    pub(super) fn kubelet_pods(&self) -> HashMap<String, (String, String)> {
        let mut out = HashMap::new();
        let Ok(dir) = std::fs::read_dir(&self.kubelet_pod_logs) else { return out };
        for entry in dir.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let parts: Vec<&str> = name.split('_').collect();
            if let [ns, pod, uid] = parts[..] {
                if let (Some(ns), Some(pod)) = (usable_name(ns), usable_name(pod)) {
                    out.insert(uid.to_string(), (ns, pod));
                }
            }
        }
        out
    }

    /// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`: id → (pod, namespace, container).
    pub(super) fn kubelet_containers(&self) -> HashMap<String, (String, String, String)> {
        let mut out = HashMap::new();
        let Ok(dir) = std::fs::read_dir(&self.kubelet_container_logs) else { return out };
        for entry in dir.flatten() {
            let Some(file) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Some(stem) = file.strip_suffix(".log") else { continue };
            let Some((rest, id)) = stem.rsplit_once('-') else { continue };
            if !crate::analysis::container::is_hex64(id) {
                continue;
            }
            let parts: Vec<&str> = rest.split('_').collect();
            if let [pod, ns, container] = parts[..] {
                if let (Some(pod), Some(ns), Some(c)) = (usable_name(pod), usable_name(ns), usable_name(container)) {
                    out.insert(id.to_string(), (pod, ns, c));
                }
            }
        }
        out
    }
}

/// `.Name` of Docker container `id`'s `config.v2.json` under data root `root`.
pub(super) fn docker_name(root: &Path, id: &str) -> Option<String> {
    let config = root.join("containers").join(id).join("config.v2.json");
    read_json(&config)
        .and_then(|v| v.get("Name")?.as_str().map(|n| n.trim_start_matches('/').to_string()))
        .and_then(|n| usable_name(&n))
}

/// Where the runtimes that run now keep their containers, when that is not where they
/// usually do: `dockerd --data-root DIR`, and the store a Podman container's `conmon` is given
/// its bundle in (`--bundle <store>/overlay-containers/<id>/userdata`, `podman --root`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct RunningRoots {
    pub(super) docker: Vec<PathBuf>,
    pub(super) podman: Vec<PathBuf>,
    /// (container name, lxcpath) of each running LXC container's monitor.
    pub(super) lxc: Vec<(String, PathBuf)>,
}

impl RunningRoots {
    /// What one process's argv says, if it is a `dockerd`, a `conmon` or an LXC monitor.
    pub(super) fn add_process(&mut self, argv: &[String]) {
        // An LXC monitor retitles itself `[lxc monitor] <lxcpath> <name>` in one argument.
        if let Some(rest) = argv.first().and_then(|a| a.strip_prefix("[lxc monitor] ")) {
            if let Some((path, name)) = rest.trim_end().rsplit_once(' ') {
                if path.starts_with('/') && !name.is_empty() {
                    self.lxc.push((name.to_string(), PathBuf::from(path)));
                }
            }
            return;
        }
        let Some(program) = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a)) else { return };
        let (flags, found): (&[&str], &mut Vec<PathBuf>) = match program {
            "dockerd" => (&["--data-root", "-g", "--graph"], &mut self.docker),
            "conmon" => (&["--bundle", "-b"], &mut self.podman),
            _ => return,
        };
        let Some(value) = flag_value(&argv[1..], flags) else { return };
        if !value.starts_with('/') {
            return;
        }
        let root = if program == "conmon" {
            // `<store>/overlay-containers/<id>/userdata`: the store is what holds containers.json.
            let Some((store, rest)) = value.rsplit_once("/overlay-containers/") else { return };
            if !rest.split('/').next().is_some_and(crate::analysis::container::is_hex64) {
                return;
            }
            store.to_string()
        } else {
            value
        };
        found.push(PathBuf::from(root));
    }
}

/// The value of the first of `flags` in `args`, as `--flag VALUE` or `--flag=VALUE`.
pub(super) fn flag_value(args: &[String], flags: &[&str]) -> Option<String> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        for flag in flags {
            if arg == flag {
                return it.next().cloned();
            }
            if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_string());
            }
        }
    }
    None
}
