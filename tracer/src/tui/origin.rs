//! Where a flow comes from, in the words the table, the filter, the sort and the grouping use:
//! its container (or systemd unit, or cgroup) from the host facts the resolver found for its
//! cgroup v2 id. Computed once per cgroup per frame, shared by that cgroup's rows.

use std::collections::HashMap;
use std::sync::Arc;

use crate::analysis::container::{CgroupInfo, Runtime};
use crate::analysis::environment::Environment;

/// Leaf cgroups that say nothing alone: their parent is named with them.
const GENERIC_LEAVES: &[&str] = &["init", "init.scope", ".lxc", "payload", "ns"];

/// The last component of a cgroup path, with its parent when the leaf alone says nothing.
fn path_tail(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [] => "host".into(),
        [.., parent, leaf] if GENERIC_LEAVES.contains(leaf) => format!("{parent}/{leaf}"),
        [.., leaf] => (*leaf).to_string(),
    }
}

/// What the UI shows and searches of one cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub cgroup_id: u64,
    /// The container's label, the unit's name, the cgroup path's tail, `host` for the root
    /// cgroup, `cgroup N` when nothing is known.
    pub name: String,
    /// The runtime, shown after the name when there is room (`jellyfin (docker)`); `None` for
    /// systemd units (their name says it) and plain cgroups.
    pub runtime: Option<&'static str>,
    /// Lower-case text the filter searches: name, full id, runtime, pod, cgroup path.
    pub search: String,
    /// What the grouping puts together: one container (its cgroups may be several), else one
    /// cgroup.
    pub group: String,
}

impl Origin {
    pub(crate) fn of(cgroup_id: u64, info: Option<&CgroupInfo>) -> Self {
        let (name, runtime) = match info {
            None => (format!("cgroup {cgroup_id}"), None),
            Some(CgroupInfo { container: Some(c), .. }) if c.runtime == Runtime::Systemd => (c.label(), None),
            Some(CgroupInfo { container: Some(c), .. }) => (c.label(), Some(c.runtime.name())),
            Some(CgroupInfo { path, container: None }) => (path_tail(path), None),
        };
        let group = match info.and_then(|i| i.container.as_ref()) {
            Some(c) => format!("{}:{}", c.runtime.name(), c.id),
            None => format!("cgroup:{cgroup_id}"),
        };
        let mut search = format!("{name} cgroup={cgroup_id}");
        if let Some(info) = info {
            search.push(' ');
            search.push_str(&info.path);
            if let Some(c) = &info.container {
                search.push_str(&format!(" {} {}", c.runtime.name(), c.id));
                if let Some(n) = &c.name {
                    search.push_str(&format!(" {n}"));
                }
                if let Some(p) = &c.pod {
                    search.push_str(&format!(" {}/{}", p.namespace, p.name));
                }
            }
        }
        search.make_ascii_lowercase();
        Self { cgroup_id, name, runtime, search, group }
    }

    /// The name with its runtime: `jellyfin (docker)`.
    pub(crate) fn full(&self) -> String {
        match self.runtime {
            Some(r) => format!("{} ({r})", self.name),
            None => self.name.clone(),
        }
    }
}

/// One frame's origins, one per cgroup, shared by its rows. An origin equal to the previous
/// frame's is that same one, so a row tells at a glance that its origin did not change.
pub(crate) struct Origins<'a> {
    previous: HashMap<u64, Arc<Origin>>,
    current: HashMap<u64, Arc<Origin>>,
    env: &'a Environment,
    /// The last one asked for: a cgroup's flows often come one after another.
    last: Option<Arc<Origin>>,
}

impl<'a> Origins<'a> {
    pub(crate) fn new(previous: HashMap<u64, Arc<Origin>>, env: &'a Environment) -> Self {
        Self { previous, current: HashMap::new(), env, last: None }
    }

    pub(crate) fn of(&mut self, cgroup_id: u64) -> Arc<Origin> {
        if let Some(last) = self.last.as_ref().filter(|o| o.cgroup_id == cgroup_id) {
            return Arc::clone(last);
        }
        let (previous, env) = (&self.previous, self.env);
        let origin = self.current.entry(cgroup_id).or_insert_with(|| {
            let now = Origin::of(cgroup_id, env.cgroups.get(&cgroup_id));
            match previous.get(&cgroup_id) {
                Some(before) if **before == now => Arc::clone(before),
                _ => Arc::new(now),
            }
        });
        self.last = Some(Arc::clone(origin));
        Arc::clone(origin)
    }

    /// This frame's origins, to be the next one's previous.
    pub(crate) fn into_current(self) -> HashMap<u64, Arc<Origin>> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::container::{Container, Pod};

    fn container(runtime: Runtime, id: &str, name: Option<&str>) -> Container {
        Container { runtime, id: id.into(), name: name.map(Into::into), pod: None, lxc_path: None }
    }

    fn info(path: &str, c: Option<Container>) -> CgroupInfo {
        CgroupInfo { path: path.into(), container: c }
    }

    const HEX: &str = "3f2a9c1b7d0e5a4f3f2a9c1b7d0e5a4f3f2a9c1b7d0e5a4f3f2a9c1b7d0e5a4f";

    #[test]
    fn names_come_from_the_container_then_the_unit_then_the_path_then_the_id() {
        let docker = info("/system.slice/docker-x.scope", Some(container(Runtime::Docker, HEX, Some("jellyfin"))));
        assert_eq!(Origin::of(7, Some(&docker)).full(), "jellyfin (docker)");
        let unnamed = info("/system.slice/docker-x.scope", Some(container(Runtime::Docker, HEX, None)));
        assert_eq!(Origin::of(7, Some(&unnamed)).full(), "3f2a9c1b7d0e (docker)");
        let pve = info("/lxc/102/ns", Some(container(Runtime::Proxmox, "102", Some("proxy"))));
        assert_eq!(Origin::of(7, Some(&pve)).full(), "proxy (proxmox)");
        let unit = info("/system.slice/nginx.service", Some(container(Runtime::Systemd, "nginx.service", None)));
        assert_eq!(Origin::of(7, Some(&unit)).full(), "nginx.service");
        let mut pod = container(Runtime::Containerd, HEX, Some("web"));
        pod.pod = Some(Pod { namespace: "shop".into(), name: "web-7d9f".into(), uid: "u".into() });
        let pod = info("/kubepods.slice/x", Some(pod));
        assert_eq!(Origin::of(7, Some(&pod)).full(), "web-7d9f/web (containerd)");
        let session = info("/user.slice/user-1000.slice/session-4.scope", None);
        assert_eq!(Origin::of(7, Some(&session)).full(), "session-4.scope");
        assert_eq!(Origin::of(7, Some(&info("/lxc.payload.web/init", None))).full(), "lxc.payload.web/init");
        assert_eq!(Origin::of(1, Some(&info("/", None))).full(), "host");
        assert_eq!(Origin::of(7321, None).full(), "cgroup 7321");
    }

    #[test]
    fn the_filter_finds_a_container_by_name_id_prefix_path_and_pod() {
        let mut c = container(Runtime::Docker, HEX, Some("Jellyfin"));
        c.pod = Some(Pod { namespace: "media".into(), name: "jf-0".into(), uid: "u".into() });
        let o = Origin::of(7, Some(&info("/system.slice/docker-3f2a.scope", Some(c))));
        for term in ["jellyfin", "3f2a9c", "docker-3f2a", "media/jf-0", "docker", "cgroup=7"] {
            assert!(o.search.contains(term), "{term}: {}", o.search);
        }
    }
}
