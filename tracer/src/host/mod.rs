//! Facts about the host that verdicts, headers and owners need, read from `/proc`, `/sys` and
//! rtnetlink: kept apart from the pure diagnosis so that one stays testable. One file a job:
//! the network namespaces and the way into one (`netns`), processes and the sockets they hold
//! (`procs`, with the owner lookups `owners` for TCP and `udp_owner` for UDP), which file
//! system a path lies on (`fs_kind`), the host's mounts seen from cctrace's image (`mounts`),
//! rtnetlink (`netlink`), the kernel's view of TCP sockets (`sock_diag`) and tunnels
//! (`tunnels`); here, the
//! sysctls and [`environment`], which reads each namespace once per refresh.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::analysis::environment::{BufferLimits, Environment};

pub mod fs_kind;
pub mod mounts;
mod netlink;
mod netns;
pub mod owners;
pub(crate) mod procs;
pub mod sock_diag;
pub mod tunnels;
pub mod udp_owner;

pub(crate) use netns::{enter_netns, in_each_netns, setns_net};
pub use netns::{host_netns, named_netns, netns_inode, netns_paths, netns_pids, path_into_netns};

/// Creates `dir` (cctrace's state directory, [`crate::analysis::state_dir::STATE_DIR`], or a
/// test's stand-in) and its parents, for root only: the fix's and deep mode's state and the
/// action journal live there.
pub fn create_state_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// A sysctl of the calling thread's network namespace holding a space-separated list.
fn sysctl_words(key_path: &str) -> Vec<String> {
    std::fs::read_to_string(key_path).map(|s| s.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

pub fn available_congestion_controls() -> Vec<String> {
    sysctl_words("/proc/sys/net/ipv4/tcp_available_congestion_control")
}

/// How congestion control `name` can be had here: already available (built in or loaded), or
/// as a module of the running kernel that loads on first use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CcAvailability {
    Available,
    Module(PathBuf),
    Absent,
}

pub fn congestion_control(name: &str) -> CcAvailability {
    if available_congestion_controls().iter().any(|c| c == name) {
        return CcAvailability::Available;
    }
    let dir = PathBuf::from(format!("/lib/modules/{}/kernel/net/ipv4", kernel_release()));
    let module = format!("tcp_{name}.ko");
    let found = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with(&module)));
    found.map_or(CcAvailability::Absent, CcAvailability::Module)
}

/// The root qdisc of each device of the calling thread's namespace, by device name.
pub fn root_qdiscs_here() -> std::io::Result<Vec<(String, String)>> {
    let mut rtnl = netlink::Rtnl::open()?;
    let qdiscs = rtnl.root_qdiscs()?;
    let mut out: Vec<(String, String)> = rtnl
        .links()?
        .into_iter()
        .map(|l| (l.name, qdiscs.get(&l.ifindex).cloned().unwrap_or_else(|| "none".into())))
        .collect();
    out.sort();
    Ok(out)
}

/// What a non-initial network namespace may choose as its default.
pub fn allowed_congestion_controls() -> Vec<String> {
    sysctl_words("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
}

/// What cctrace reads inside each network namespace: its default congestion control
/// (`net.ipv4.tcp_congestion_control`, what new connections there get), its buffer limits
/// (`tcp_wmem`, `tcp_rmem`) and the root qdisc of each of its devices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetnsFacts {
    pub cc: Option<String>,
    pub wmem: Option<BufferLimits>,
    pub rmem: Option<BufferLimits>,
    pub qdiscs: HashMap<u32, String>,
}

impl NetnsFacts {
    /// The facts of the calling thread's namespace; the qdiscs asked of `rtnl`, a socket of it.
    fn read_here(rtnl: Option<&mut netlink::Rtnl>) -> Self {
        let read = |key: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}")).ok();
        Self {
            cc: read("tcp_congestion_control").map(|c| c.trim().to_string()).filter(|c| !c.is_empty()),
            wmem: read("tcp_wmem").as_deref().and_then(BufferLimits::parse),
            rmem: read("tcp_rmem").as_deref().and_then(BufferLimits::parse),
            qdiscs: rtnl.and_then(|r| r.root_qdiscs().ok()).unwrap_or_default(),
        }
    }
}

/// What one visit of a namespace read: its [`NetnsFacts`] and its tunnels' view (`None` when
/// its links could not be listed).
struct NetnsReading {
    ino: u32,
    facts: NetnsFacts,
    tunnels: Option<tunnels::NetnsView>,
}

/// One visit of each namespace that `paths` open (see [`netns_paths`] and [`in_each_netns`]):
/// its sysctls read and one rtnetlink socket of it asked for everything the facts and the
/// tunnels need. A namespace that cannot be entered (gone, no privilege) is left out.
fn read_each_netns(paths: &[(u32, PathBuf)]) -> Vec<NetnsReading> {
    in_each_netns(paths, |ino| {
        let mut rtnl = netlink::Rtnl::open().ok();
        let facts = NetnsFacts::read_here(rtnl.as_mut());
        let tunnels = rtnl.as_mut().and_then(|r| tunnels::NetnsView::read_here(ino, r));
        Some(NetnsReading { ino, facts, tunnels })
    })
}

/// The host-wide sysctl at `key_path` as a number (0 when unreadable).
fn sysctl_number<T: std::str::FromStr + Default>(key_path: &str) -> T {
    std::fs::read_to_string(key_path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or_default()
}

/// Everything [`Environment`] holds, read now. Cgroups come from the process-wide resolver
/// ([`crate::cgroups::with_system_resolver`]): this is called through a plain `fn`, and the
/// resolver's cache (names already read, when it last walked) must outlive the call.
pub fn environment() -> Environment {
    let available_cc = available_congestion_controls();
    // One walk of /proc and of /run/netns for both the paths and the maps (a readlink a
    // process: most of a refresh's cost).
    let (pids, names) = (netns_pids(), named_netns());
    let paths = netns::paths_into(&pids, &names);
    let cgroups = crate::cgroups::with_system_resolver(|r| {
        r.refresh(std::time::Instant::now());
        r.all().clone()
    });
    let (mut facts, mut views) = (HashMap::new(), Vec::new());
    for reading in read_each_netns(&paths) {
        facts.insert(reading.ino, reading.facts);
        views.extend(reading.tunnels);
    }
    let each = |f: fn(&NetnsFacts) -> Option<BufferLimits>| -> HashMap<u32, BufferLimits> {
        facts.iter().filter_map(|(ino, n)| Some((*ino, f(n)?))).collect()
    };
    let tcp_mem = sysctl_words("/proc/sys/net/ipv4/tcp_mem");
    let page = |i: usize| tcp_mem.get(i).and_then(|w| w.parse().ok()).unwrap_or(0);
    Environment {
        bbr_available: available_cc.iter().any(|c| c == "bbr"),
        available_cc,
        allowed_cc: allowed_congestion_controls(),
        host_netns: host_netns().unwrap_or(0),
        netns_pids: pids,
        netns_names: names,
        netns_wmem: each(|n| n.wmem),
        netns_rmem: each(|n| n.rmem),
        core_wmem_max: sysctl_number("/proc/sys/net/core/wmem_max"),
        core_rmem_max: sysctl_number("/proc/sys/net/core/rmem_max"),
        tcp_mem_pages: [page(0), page(1), page(2)],
        qdiscs: facts.iter().map(|(ino, n)| (*ino, n.qdiscs.clone())).collect(),
        netns_cc: facts.into_iter().filter_map(|(ino, n)| Some((ino, n.cc?))).collect(),
        cgroups,
        tunnels: tunnels::tunnel_facts(views),
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The kernel's page size in bytes: 4 KiB on x86-64, 4, 16 or 64 KiB on arm64 (a Raspberry Pi 5
/// kernel uses 16 KiB). A BPF ring buffer must be a whole number of pages.
pub fn page_size() -> u32 {
    // SAFETY: sysconf reads a value and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Each namespace's facts, by inode, from one visit of each.
    fn netns_facts(paths: &[(u32, PathBuf)]) -> HashMap<u32, NetnsFacts> {
        read_each_netns(paths).into_iter().map(|r| (r.ino, r.facts)).collect()
    }

    /// Each namespace's default congestion control, by inode.
    fn netns_default_cc(paths: &[(u32, PathBuf)]) -> HashMap<u32, String> {
        netns_facts(paths).into_iter().filter_map(|(ino, f)| Some((ino, f.cc?))).collect()
    }

    #[test]
    fn the_page_size_is_the_kernels() {
        let getconf = Command::new("getconf").arg("PAGESIZE").output().expect("getconf (libc-bin)");
        let said: u32 = String::from_utf8_lossy(&getconf.stdout).trim().parse().expect("a number");
        assert_eq!(page_size(), said);
    }

    /// A namespace made with `ip netns add`, deleted on drop (also when the test fails).
    struct TestNetns(String);

    impl TestNetns {
        fn add(name: String) -> Option<Self> {
            let ok = Command::new("ip").args(["netns", "add", &name]).status().is_ok_and(|s| s.success());
            ok.then_some(Self(name))
        }

        fn exec(&self, args: &[&str]) -> bool {
            Command::new("ip").args(["netns", "exec", &self.0]).args(args).status().is_ok_and(|s| s.success())
        }
    }

    impl Drop for TestNetns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "delete", &self.0]).status();
        }
    }

    #[test]
    fn each_namespace_default_is_read_inside_it() {
        let Some(ns) = TestNetns::add(format!("cct-test-{}", std::process::id())) else {
            crate::test_support::skip("cannot create a network namespace (not root?)");
            return;
        };
        assert!(ns.exec(&["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno"]), "reno is always allowed");
        let ino = named_netns().into_iter().find(|(_, n)| *n == ns.0).map(|(i, _)| i).expect("listed");
        let host = netns_inode("/proc/self/ns/net").expect("own namespace");
        let paths = netns_paths();
        assert!(paths.iter().any(|(i, _)| *i == ino), "{paths:?}");
        let cc = netns_default_cc(&paths);
        assert_eq!(cc.get(&ino).map(String::as_str), Some("reno"));
        let own = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").expect("sysctl");
        assert_eq!(cc.get(&host).map(String::as_str), Some(own.trim()), "the host's own");
        assert_ne!(own.trim(), "reno", "this thread stayed in its own namespace");
        // A path that now leads to another namespace than its inode says is not read.
        let wrong = netns_default_cc(&[(host, std::path::Path::new("/run/netns").join(&ns.0))]);
        assert!(wrong.is_empty(), "{wrong:?}");
    }

    #[test]
    fn each_namespace_buffers_and_root_qdiscs_are_read_inside_it() {
        let Some(ns) = TestNetns::add(format!("cct-test-b{}", std::process::id())) else {
            crate::test_support::skip("cannot create a network namespace (not root?)");
            return;
        };
        assert!(ns.exec(&["sysctl", "-q", "-w", "net.ipv4.tcp_wmem=4096 16384 8388608"]));
        assert!(ns.exec(&["ip", "link", "add", "cct-d0", "type", "veth", "peer", "name", "cct-d1"]));
        // (fq is not built into every kernel, this machine's among them; tbf is.)
        let tbf =
            ["tc", "qdisc", "add", "dev", "cct-d0", "root", "tbf", "rate", "1mbit", "burst", "10k", "latency", "10ms"];
        assert!(ns.exec(&tbf));
        let ino = named_netns().into_iter().find(|(_, n)| *n == ns.0).map(|(i, _)| i).expect("listed");
        let facts = netns_facts(&[(ino, std::path::Path::new("/run/netns").join(&ns.0))]);
        let f = facts.get(&ino).expect("read");
        assert_eq!(f.wmem, Some(BufferLimits { min: 4096, default: 16384, max: 8388608 }));
        assert!(f.rmem.is_some_and(|r| r.max > 0), "{f:?}");
        // The device's index, as the kernel numbers it there.
        let out = Command::new("ip").args(["netns", "exec", &ns.0, "cat", "/sys/class/net/cct-d0/ifindex"]).output();
        let index: u32 =
            out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).expect("ifindex");
        assert_eq!(f.qdiscs.get(&index).map(String::as_str), Some("tbf"), "{f:?}");
        let here = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").expect("sysctl");
        assert_ne!(BufferLimits::parse(&here), f.wmem, "this thread stayed in its own namespace");
    }

    #[test]
    fn the_environment_names_cgroups_and_congestion_controls() {
        let env = environment();
        assert!(env.available_cc.iter().any(|c| c == "reno"), "{:?}", env.available_cc);
        assert!(!env.allowed_cc.is_empty());
        if crate::cgroups::cgroup2_mount().is_some() {
            assert_eq!(env.cgroups.get(&1).map(|i| i.path.as_str()), Some("/"), "the root cgroup is id 1");
        }
        if env.host_netns != 0 && netns_inode("/proc/self/ns/net") == Some(env.host_netns) {
            assert!(env.netns_cc.contains_key(&env.host_netns), "{:?}", env.netns_cc);
        }
    }
}
