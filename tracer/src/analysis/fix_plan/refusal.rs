//! What each refusal of the kernel means, in one line that says what to do about it.

use super::target::Target;

/// The Linux errno values the kernel answers with (the pure core does not link libc).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EIO: i32 = 5;
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
    pub const EROFS: i32 = 30;
    pub const EOPNOTSUPP: i32 = 95;
    /// The kernel-internal ENOTSUPP, which BPF helpers return as is.
    pub const ENOTSUPP: i32 = 524;
}

/// What failed, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Loading the algorithm's module on the host.
    LoadModule,
    /// Writing the namespace's default.
    SetDefault,
    /// Entering the namespace.
    Enter,
}

/// One line saying why the kernel refused `step` with errno `code`, and what to do about it.
pub fn refusal(step: Step, code: i32, cc: &str, target: &Target, allowed: &[String]) -> String {
    match (step, code) {
        (Step::LoadModule, _) | (Step::SetDefault, errno::ENOENT) => format!(
            "congestion control {cc} is not available and its module tcp_{cc} could not be loaded (ENOENT): see \
             /proc/sys/net/ipv4/tcp_available_congestion_control for the algorithms this kernel has"
        ),
        (Step::SetDefault, errno::EPERM) => {
            let mut list = allowed.to_vec();
            list.push(cc.to_string());
            format!(
                "{cc} is restricted for non-initial network namespaces (EPERM): allow it on the host with \
                 sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{}\"",
                list.join(" ")
            )
        }
        // cctrace writes the namespace's sysctl through its own /proc/sys after entering only
        // the network namespace: read-only means where cctrace runs (a container, systemd's
        // ProtectKernelTunables), not the target container's own read-only /proc/sys.
        (Step::SetDefault, errno::EROFS) => format!(
            "/proc/sys is read-only where cctrace runs (EROFS: inside a container, or a service with \
             ProtectKernelTunables): run cctrace fix on the host, or set it when the container is created ({})",
            target
                .runtime_sysctl
                .clone()
                .unwrap_or_else(|| format!("e.g. docker run --sysctl net.ipv4.tcp_congestion_control={cc}"))
        ),
        (Step::Enter, errno::ENOENT | errno::ESRCH) => {
            format!("network namespace {} is gone ({} no longer opens it)", target.reached, target.path)
        }
        (Step::Enter, errno::EPERM) => {
            format!("entering network namespace {} needs CAP_SYS_ADMIN (EPERM)", target.reached)
        }
        (step, code) => {
            let words = std::io::Error::from_raw_os_error(code).to_string();
            let what = match step {
                Step::LoadModule => "loading the module",
                Step::SetDefault => "setting the default congestion control",
                Step::Enter => "entering the namespace",
            };
            format!("{what} of network namespace {} failed: {words}", target.reached)
        }
    }
}

/// Why one socket could not be switched (`bpf_setsockopt`'s negative errno).
pub fn socket_refusal(result: i32) -> &'static str {
    match -result {
        errno::ENOENT => "algorithm not loaded",
        errno::EPERM => "not permitted",
        errno::EBUSY => "busy",
        errno::EOPNOTSUPP | errno::ENOTSUPP => "not supported for this socket",
        _ => "refused",
    }
}
