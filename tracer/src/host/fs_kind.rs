//! Which kernel file system a path lies on (its `statfs` magic): how a network namespace file
//! (`/proc/PID/ns/net`, a `/run/netns/NAME` bind mount) and a cgroup v2 directory are told
//! apart from ordinary files, for deep mode and for the filter's host lookups alike.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const NSFS_MAGIC: i64 = 0x6e73_6673;

fn fs_magic(path: &Path) -> Option<i64> {
    rustix::fs::statfs(path).ok().map(|s| s.f_type)
}

/// The network namespace a path opens (`/proc/PID/ns/net`, `/run/netns/NAME`, any bind mount
/// of one): its inode, or `None` when the path is no namespace file.
pub fn netns_file_inode(path: &Path) -> Option<u32> {
    if fs_magic(path) != Some(NSFS_MAGIC) {
        return None;
    }
    u32::try_from(std::fs::metadata(path).ok()?.ino()).ok()
}

/// The cgroup id of a directory on a cgroup v2 file system (its inode), or `None` when the path
/// is no such directory.
pub fn cgroup2_dir_id(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_dir() && fs_magic(path) == Some(CGROUP2_SUPER_MAGIC)).then(|| meta.ino())
}
