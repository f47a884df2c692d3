//! Where cctrace keeps what must outlive the process that wrote it: `cctrace fix`'s state per
//! network namespace (for `--undo`), the journal of actions every running cctrace reads, and a
//! deep session's state (so a killed session's namespaces can be put back). Root only.

/// The one directory for all of it (a tmpfs: nothing in it survives a reboot, as nothing it
/// describes does).
pub const STATE_DIR: &str = "/run/cctrace";
