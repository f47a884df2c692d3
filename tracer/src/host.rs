//! Facts about the host that verdicts and headers need, read from /proc and /sys.
//! Kept apart from the pure diagnosis so that one stays testable.

use std::collections::HashMap;

use crate::analysis::diagnosis::Environment;

/// Inode of the network namespace a `/proc/.../ns/net` link points to.
pub fn netns_inode(path: &str) -> Option<u32> {
    // readlink gives "net:[4026531840]".
    let link = std::fs::read_link(path).ok()?;
    let s = link.to_string_lossy();
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// One process per network namespace (the lowest pid), for `nsenter --net=/proc/PID/ns/net`.
pub fn netns_pids() -> HashMap<u32, u32> {
    let mut map: HashMap<u32, u32> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return map };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some(ino) = netns_inode(&format!("/proc/{pid}/ns/net")) {
            map.entry(ino).and_modify(|p| *p = (*p).min(pid)).or_insert(pid);
        }
    }
    map
}

/// Namespaces created with `ip netns add`: /run/netns/NAME, keyed by inode.
pub fn named_netns() -> HashMap<u32, String> {
    use std::os::unix::fs::MetadataExt;
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return map };
    for entry in dir.flatten() {
        if let (Ok(meta), Some(name)) = (entry.metadata(), entry.file_name().to_str()) {
            if let Ok(ino) = u32::try_from(meta.ino()) {
                map.insert(ino, name.to_string());
            }
        }
    }
    map
}

/// A sysctl of the calling thread's network namespace holding a space-separated list.
fn sysctl_words(key_path: &str) -> Vec<String> {
    std::fs::read_to_string(key_path).map(|s| s.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

pub fn available_congestion_controls() -> Vec<String> {
    sysctl_words("/proc/sys/net/ipv4/tcp_available_congestion_control")
}

/// What a non-initial network namespace may choose as its default.
pub fn allowed_congestion_controls() -> Vec<String> {
    sysctl_words("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
}

/// Everything [`Environment`] holds, read now.
pub fn environment() -> Environment {
    let available_cc = available_congestion_controls();
    Environment {
        bbr_available: available_cc.iter().any(|c| c == "bbr"),
        available_cc,
        allowed_cc: allowed_congestion_controls(),
        host_netns: netns_inode("/proc/1/ns/net").or_else(|| netns_inode("/proc/self/ns/net")).unwrap_or(0),
        netns_pids: netns_pids(),
        netns_names: named_netns(),
        ..Environment::default()
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A path that opens each network namespace on the host, one per namespace (by inode): a
/// process's `/proc/PID/ns/net`, or `/run/netns/NAME` for namespaces without processes.
pub fn netns_paths() -> Vec<(u32, std::path::PathBuf)> {
    let mut seen: HashMap<u32, std::path::PathBuf> = HashMap::new();
    for (ino, pid) in netns_pids() {
        seen.insert(ino, format!("/proc/{pid}/ns/net").into());
    }
    for (ino, name) in named_netns() {
        seen.entry(ino).or_insert_with(|| std::path::Path::new("/run/netns").join(name));
    }
    let mut all: Vec<_> = seen.into_iter().collect();
    all.sort_unstable();
    all
}
