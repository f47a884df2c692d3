//! Which flows to trace: `--cgroup`, `--container` and `--netns`, as the user wrote them, and
//! what they resolve to on this host (cgroup ids and namespace inodes the kernel programs check).
//!
//! Pure: resolution reads the host facts from [`Environment`]; the kernel side applies the result.

use std::collections::BTreeSet;

use crate::analysis::container::{Container, Runtime};
use crate::analysis::environment::Environment;

/// The user's filter, as given on the command line or typed in the TUI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// cgroup v2 paths (below the mount or absolute); descendants are included.
    pub cgroups: Vec<String>,
    /// Container names or ids (a prefix of an id is enough).
    pub containers: Vec<String>,
    /// Network namespaces: an `ip netns` name, a path that opens one, or an inode number.
    pub netns: Vec<String>,
}

impl FilterSpec {
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.containers.is_empty() && self.netns.is_empty()
    }

    /// The filter as the header shows it: `container=jellyfin netns=cct-1`, empty for none.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.containers.iter().map(|c| format!("container={c}")));
        out.extend(self.cgroups.iter().map(|c| format!("cgroup={c}")));
        out.extend(self.netns.iter().map(|n| format!("netns={n}")));
        out
    }
}

/// Changes the kernel-side filter while cctrace runs (the TUI's filter prompt). A side effect
/// injected into the front end; tests use a fake.
pub trait FilterControl {
    /// Resolve `spec` against the current host facts and apply it in the kernel; on error the
    /// previous filter stays in force. Returns the filter as the header should show it.
    fn apply(&mut self, spec: &FilterSpec, env: &Environment) -> Result<Vec<String>, String>;
    /// The filter in force.
    fn current(&self) -> FilterSpec;
}

/// What a filter resolves to on this host: the sets the kernel programs check. An empty set
/// leaves that dimension open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedFilter {
    /// cgroup ids whose subtrees are kept (`--cgroup` and `--container`).
    pub cgroup_ids: BTreeSet<u64>,
    /// Network-namespace inodes kept (`--netns`).
    pub netns: BTreeSet<u32>,
}

impl ResolvedFilter {
    pub fn is_open(&self) -> bool {
        self.cgroup_ids.is_empty() && self.netns.is_empty()
    }
}

/// A filter term that names nothing on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("no container {given:?} on this host{}", closest_text(closest))]
    UnknownContainer { given: String, closest: Vec<String> },
    #[error("container {given:?} is ambiguous: it is a prefix of the ids of {}", matches.join(", "))]
    AmbiguousContainer { given: String, matches: Vec<String> },
    #[error("no cgroup {given:?} in the cgroup v2 hierarchy{}", closest_text(closest))]
    UnknownCgroup { given: String, closest: Vec<String> },
    #[error(
        "no network namespace {given:?} (give an ip netns name, a path such as /proc/PID/ns/net, or an inode number){}",
        closest_text(closest)
    )]
    UnknownNetns { given: String, closest: Vec<String> },
}

fn closest_text(closest: &[String]) -> String {
    if closest.is_empty() {
        String::new()
    } else {
        format!("; closest: {}", closest.join(", "))
    }
}

/// How the host answers what pure code cannot: the cgroup id of a cgroup path (the directory's
/// inode) and the namespace a path opens.
pub trait HostLookup {
    fn cgroup_id(&self, path: &str) -> Option<u64>;
    fn netns_inode(&self, path: &str) -> Option<u32>;
}

/// Up to three known names most like `given`: similar spellings first, then names containing it.
fn closest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let given_lower = given.to_lowercase();
    let mut scored: Vec<(f64, &str)> = known
        .into_iter()
        .map(|k| {
            let lower = k.to_lowercase();
            let mut score = strsim::jaro_winkler(&given_lower, &lower);
            if lower.contains(&given_lower) || given_lower.contains(&lower) {
                score += 1.0;
            }
            (score, k)
        })
        .filter(|(score, _)| *score >= 0.7)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, k)| k.to_string()).collect()
}

/// The shortest id prefix a container may be named by (Docker's CLI accepts any unique prefix;
/// a single hex digit would match half the host by accident).
pub const MIN_ID_PREFIX: usize = 3;

/// Whether the user's `given` names `c`: its name, its id or an id prefix, a pod as
/// `namespace/name` or `name`, or a systemd unit with or without its suffix.
fn names_container(given: &str, c: &Container) -> bool {
    if c.name.as_deref() == Some(given) || c.id == given {
        return true;
    }
    if given.len() >= MIN_ID_PREFIX && c.id.starts_with(given) && c.id.chars().all(|ch| ch.is_ascii_hexdigit()) {
        return true;
    }
    if let Some(pod) = &c.pod {
        if pod.name == given || format!("{}/{}", pod.namespace, pod.name) == given {
            return true;
        }
    }
    c.runtime == Runtime::Systemd && c.id.rsplit_once('.').is_some_and(|(stem, _)| stem == given)
}

/// Resolve `spec` against the host facts in `env` and `host`.
pub fn resolve(spec: &FilterSpec, env: &Environment, host: &dyn HostLookup) -> Result<ResolvedFilter, FilterError> {
    let mut out = ResolvedFilter::default();
    for given in &spec.containers {
        let hits: Vec<(u64, &Container)> = env
            .cgroups
            .iter()
            .filter_map(|(id, info)| info.container.as_ref().map(|c| (*id, c)))
            .filter(|(_, c)| names_container(given, c))
            .collect();
        let distinct: BTreeSet<&str> = hits.iter().map(|(_, c)| c.id.as_str()).collect();
        if distinct.len() > 1 && hits.iter().all(|(_, c)| c.name.as_deref() != Some(given.as_str())) {
            let matches = hits.iter().map(|(_, c)| c.label()).collect::<BTreeSet<_>>().into_iter().collect();
            return Err(FilterError::AmbiguousContainer { given: given.clone(), matches });
        }
        if hits.is_empty() {
            let known: BTreeSet<String> = env
                .cgroups
                .values()
                .filter_map(|i| i.container.as_ref())
                .flat_map(|c| [c.name.clone(), Some(c.id.clone())])
                .flatten()
                .collect();
            let closest = closest(given, known.iter().map(String::as_str));
            return Err(FilterError::UnknownContainer { given: given.clone(), closest });
        }
        // A name given exactly wins over id prefixes that happen to match too.
        let exact = hits.iter().any(|(_, c)| c.name.as_deref() == Some(given.as_str()));
        out.cgroup_ids.extend(
            hits.iter().filter(|(_, c)| !exact || c.name.as_deref() == Some(given.as_str())).map(|(id, _)| *id),
        );
    }
    for given in &spec.cgroups {
        match host.cgroup_id(given) {
            Some(id) => {
                out.cgroup_ids.insert(id);
            }
            None => {
                let closest = closest(given, env.cgroups.values().map(|i| i.path.as_str()));
                return Err(FilterError::UnknownCgroup { given: given.clone(), closest });
            }
        }
    }
    for given in &spec.netns {
        let by_name = env.netns_names.iter().find(|(_, name)| *name == given).map(|(ino, _)| *ino);
        let by_inode = given.parse::<u32>().ok().filter(|ino| {
            *ino == env.host_netns
                || env.netns_names.contains_key(ino)
                || env.netns_pids.contains_key(ino)
                || env.netns_cc.contains_key(ino)
        });
        let by_path = || given.contains('/').then(|| host.netns_inode(given)).flatten();
        match by_name.or(by_inode).or_else(by_path) {
            Some(ino) => {
                out.netns.insert(ino);
            }
            None => {
                let closest = closest(given, env.netns_names.values().map(String::as_str));
                return Err(FilterError::UnknownNetns { given: given.clone(), closest });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::analysis::container::{CgroupInfo, Pod};

    const JELLYFIN: &str = "4f1c2a9be0d7c3b5a6e8f9d0c1b2a3948576f5e4d3c2b1a0f9e8d7c6b5a49382";
    const OTHER: &str = "4f1c99999999999999999999999999999999999999999999999999999999aaaa";

    struct FakeHost;

    impl HostLookup for FakeHost {
        fn cgroup_id(&self, path: &str) -> Option<u64> {
            (path == "/system.slice" || path == "system.slice").then_some(10)
        }
        fn netns_inode(&self, path: &str) -> Option<u32> {
            (path == "/proc/4242/ns/net").then_some(4_026_532_999)
        }
    }

    fn container(runtime: Runtime, id: &str, name: Option<&str>) -> Container {
        Container { runtime, id: id.into(), name: name.map(Into::into), pod: None, lxc_path: None }
    }

    fn env() -> Environment {
        let mut cgroups = HashMap::new();
        let mut add = |id: u64, path: &str, c: Option<Container>| {
            cgroups.insert(id, CgroupInfo { path: path.into(), container: c });
        };
        add(10, "/system.slice", None);
        add(
            11,
            &format!("/system.slice/docker-{JELLYFIN}.scope"),
            Some(container(Runtime::Docker, JELLYFIN, Some("jellyfin"))),
        );
        add(
            12,
            &format!("/system.slice/docker-{OTHER}.scope"),
            Some(container(Runtime::Docker, OTHER, Some("sonarr"))),
        );
        add(13, "/lxc/102/ns", Some(container(Runtime::Proxmox, "102", Some("proxy"))));
        add(14, "/system.slice/nginx.service", Some(container(Runtime::Systemd, "nginx.service", None)));
        let mut pod = container(
            Runtime::Containerd,
            "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12",
            Some("web"),
        );
        pod.pod = Some(Pod { namespace: "media".into(), name: "stream-7d9f".into(), uid: "u".into() });
        add(15, "/kubepods/pod-u/ab12", Some(pod));
        Environment {
            cgroups,
            host_netns: 4_026_531_840,
            netns_names: HashMap::from([(4_026_532_100, "cct-edge".to_string())]),
            ..Environment::default()
        }
    }

    fn containers(names: &[&str]) -> FilterSpec {
        FilterSpec { containers: names.iter().map(|s| (*s).to_string()).collect(), ..FilterSpec::default() }
    }

    fn ids(r: &ResolvedFilter) -> Vec<u64> {
        r.cgroup_ids.iter().copied().collect()
    }

    #[test]
    fn containers_resolve_by_name_id_prefix_unit_and_pod() {
        let r = |names: &[&str]| resolve(&containers(names), &env(), &FakeHost);
        assert_eq!(ids(&r(&["jellyfin"]).unwrap()), [11]);
        assert_eq!(ids(&r(&["4f1c2a9"]).unwrap()), [11]);
        assert_eq!(ids(&r(&["proxy"]).unwrap()), [13]);
        assert_eq!(ids(&r(&["102"]).unwrap()), [13]);
        assert_eq!(ids(&r(&["nginx"]).unwrap()), [14]);
        assert_eq!(ids(&r(&["nginx.service"]).unwrap()), [14]);
        assert_eq!(ids(&r(&["media/stream-7d9f"]).unwrap()), [15]);
        assert_eq!(ids(&r(&["jellyfin", "proxy"]).unwrap()), [11, 13], "repeated terms add up");
    }

    #[test]
    fn an_ambiguous_or_too_short_prefix_and_an_unknown_name_are_errors() {
        let err = resolve(&containers(&["4f1c"]), &env(), &FakeHost).unwrap_err();
        assert!(matches!(err, FilterError::AmbiguousContainer { .. }), "{err}");
        assert!(err.to_string().contains("jellyfin") && err.to_string().contains("sonarr"), "{err}");
        let err = resolve(&containers(&["4f"]), &env(), &FakeHost).unwrap_err();
        assert!(matches!(err, FilterError::UnknownContainer { .. }), "two digits name nothing: {err}");
        let err = resolve(&containers(&["jellyfn"]), &env(), &FakeHost).unwrap_err();
        assert_eq!(err.to_string(), "no container \"jellyfn\" on this host; closest: jellyfin");
        assert!(!err.to_string().contains('\n'));
    }

    #[test]
    fn cgroups_and_namespaces_resolve_through_the_host() {
        let spec = FilterSpec {
            cgroups: vec!["/system.slice".into()],
            netns: vec!["cct-edge".into(), "/proc/4242/ns/net".into(), "4026531840".into()],
            ..FilterSpec::default()
        };
        let r = resolve(&spec, &env(), &FakeHost).unwrap();
        assert_eq!(ids(&r), [10]);
        assert_eq!(r.netns.iter().copied().collect::<Vec<_>>(), [4_026_531_840, 4_026_532_100, 4_026_532_999]);
        let err =
            resolve(&FilterSpec { cgroups: vec!["/system.slic".into()], ..FilterSpec::default() }, &env(), &FakeHost)
                .unwrap_err();
        assert!(err.to_string().contains("closest: /system.slice"), "{err}");
        let err = resolve(&FilterSpec { netns: vec!["cct-edg".into()], ..FilterSpec::default() }, &env(), &FakeHost)
            .unwrap_err();
        assert!(err.to_string().contains("closest: cct-edge"), "{err}");
        let err = resolve(&FilterSpec { netns: vec!["12345".into()], ..FilterSpec::default() }, &env(), &FakeHost)
            .unwrap_err();
        assert!(matches!(err, FilterError::UnknownNetns { .. }), "an inode nobody has: {err}");
    }

    #[test]
    fn an_empty_spec_is_open() {
        assert!(resolve(&FilterSpec::default(), &env(), &FakeHost).unwrap().is_open());
        assert_eq!(containers(&["a"]).describe(), ["container=a"]);
    }
}
