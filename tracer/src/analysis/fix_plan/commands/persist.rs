//! How a fix is made to last where the namespace lives (the host's /etc/sysctl.d, a
//! container's own, the runtime's option, the pod spec, LXC's config), and what rolls that back.

use super::{enter, shell_quote, Place, Reach, MODULES_FILE};
use crate::analysis::container::{printable, Container, Runtime, LXC_DEFAULT_PATH};

/// How a setting is made to last where the namespace lives, and what rolls that back.
pub(super) struct Persisted {
    pub(super) lines: Vec<String>,
    /// Appended to the roll-back command (`; rm -f ...`).
    pub(super) rollback_rm: String,
    /// A roll-back step that runs elsewhere (inside a container).
    pub(super) rollback_note: Option<String>,
}

impl Persisted {
    fn lines(lines: Vec<String>) -> Self {
        Self { lines, rollback_rm: String::new(), rollback_note: None }
    }
}

/// Persist `setting` (`key=value`) for `place`: the host's `file` in /etc/sysctl.d, a
/// container's own, the runtime's option, the pod spec, LXC's config; `module`, the kernel
/// module it needs, is the host's to load at boot.
pub(super) fn persist(place: &Place<'_>, setting: &str, file: &str, module: Option<&str>) -> Persisted {
    let (key, value) = setting.split_once('=').unwrap_or((setting, ""));
    // Written only when absent (never over a file that is there), so rolling back may delete them.
    let write_sysctl = format!("test -e {file} || echo {} > {file}", shell_quote(setting));
    let write_module = module.map(|m| format!("test -e {MODULES_FILE} || echo {m} > {MODULES_FILE}"));
    let on_host = write_module.as_ref().map(|w| format!("# and on the host, whose kernel it shares: {w}"));
    match place {
        Place::Plain(Reach::Host, _) => {
            let both = write_module.as_ref().map_or(write_sysctl.clone(), |m| format!("{m}; {write_sysctl}"));
            let modules = module.map_or(String::new(), |_| format!(" {MODULES_FILE}"));
            Persisted {
                rollback_rm: format!("; rm -f {file}{modules}"),
                ..Persisted::lines(vec![format!("# persist: {both}")])
            }
        }
        // A service's private namespace is made each time the unit starts, and its /etc is the
        // host's: files there would switch the host.
        Place::Plain(Reach::Process(_), Some(c)) if c.runtime == Runtime::Systemd => Persisted::lines(vec![format!(
            "# persist: {} gets a new namespace each time it starts: set the sysctl where it is created \
             (an ExecStartPre= in a drop-in for it)",
            printable(&shell_quote(&c.id))
        )]),
        // The file goes in the container's /etc, the module is the host's. The roll back runs
        // on the host, so it must not delete the host's files: it names the container's.
        Place::Plain(Reach::Process(_), _) => {
            let mut lines = vec![format!("# persist (inside that container, in its own /etc): {write_sysctl}")];
            lines.extend(on_host);
            Persisted {
                rollback_note: Some(format!("# and inside that container: rm -f {file}")),
                ..Persisted::lines(lines)
            }
        }
        // A namespace from `ip netns add` does not survive a reboot, and files in the host's
        // /etc would switch the host instead.
        Place::Plain(..) => Persisted::lines(vec![
            "# persist: a namespace made by ip netns add does not survive a reboot: set the sysctl where it is created"
                .to_string(),
        ]),
        Place::Engine(_, c) => Persisted::lines(vec![engine_line(setting, c)]),
        Place::Pod(_, c) => Persisted::lines(pod_lines(key, value, c)),
        Place::Proxmox(_) => {
            // The container's own /etc is applied by its init at boot; the module is the host's.
            let prefix = enter(place);
            let mut lines = vec![format!("# persist (in the container): {prefix}sh -c {}", shell_quote(&write_sysctl))];
            lines.extend(on_host);
            Persisted { rollback_rm: format!("; {prefix}rm -f {file}"), ..Persisted::lines(lines) }
        }
        Place::Lxc { name, lxc_path } => lxc(name, *lxc_path, setting, on_host),
    }
}

/// A Docker/Podman/containerd container: recreate it with the runtime's `--sysctl`.
fn engine_line(setting: &str, c: &Container) -> String {
    // /etc/sysctl.d in an image is not applied when a container starts: only the
    // runtime sets sysctls in a new container's namespace.
    let quoted = shell_quote(setting);
    let (run, also) = match c.runtime {
        Runtime::Podman => ("podman run", format!(" (quadlet: Sysctl={quoted})")),
        Runtime::Docker => ("docker run", format!(" (compose: sysctls: [{quoted}])")),
        _ => ("nerdctl run", String::new()),
    };
    let which = c.name.as_deref().unwrap_or(c.short_id());
    format!(
        "# persist: recreate {} with {run} --sysctl {quoted} …{also}; /etc/sysctl.d in the image is not \
         applied when it starts",
        printable(&shell_quote(which))
    )
}

/// A Kubernetes pod's container: the pod spec's sysctls, which the kubelet must allow.
fn pod_lines(key: &str, value: &str, c: &Container) -> Vec<String> {
    let pod = c.pod.as_ref().filter(|p| !p.name.is_empty());
    let of = pod.map_or(String::new(), |p| {
        let ns = if p.namespace.is_empty() { String::new() } else { format!(" -n {}", shell_quote(&p.namespace)) };
        format!(" of {}{ns}", shell_quote(&p.name))
    });
    let value = if value.contains(' ') { format!("\"{value}\"") } else { value.to_string() };
    vec![
        format!(
            "# persist: in the pod spec{}: securityContext: {{sysctls: [{{name: {key}, value: {value}}}]}} \
             (the change above lasts until the pod is recreated)",
            printable(&of)
        ),
        format!(
            "# the kubelet must allow this unsafe sysctl, or the pod is rejected (SysctlForbidden): \
             --allowed-unsafe-sysctls={key} (allowedUnsafeSysctls in its config)"
        ),
    ]
}

/// An LXC container: `lxc.sysctl.*` in its config, and the LXD/Incus way.
fn lxc(name: &str, lxc_path: Option<&str>, setting: &str, on_host: Option<String>) -> Persisted {
    let (key, value) = setting.split_once('=').unwrap_or((setting, ""));
    // LXC sets `lxc.sysctl.*` in the container's namespace each time it starts, whatever
    // its init is (a busybox container has no /etc/sysctl.d, nor anything to apply it).
    let config = format!("{}/{name}/config", lxc_path.unwrap_or(LXC_DEFAULT_PATH));
    let line = format!("lxc.sysctl.{key} = {value}");
    let mut lines = vec![format!(
        "# persist (LXC sets it at every start): grep -qs '^lxc.sysctl.{key}' {0} || echo {1} >> {0}",
        shell_quote(&config),
        shell_quote(&line)
    )];
    lines.extend(on_host);
    lines.push(format!(
        "# LXD/Incus: lxc config set {0} {1} (incus alike), and lxc exec {0} -- in place of lxc-attach",
        shell_quote(name),
        shell_quote(&format!("linux.sysctl.{setting}"))
    ));
    Persisted {
        rollback_rm: format!("; sed -i '/^lxc.sysctl.{key}/d' {}", shell_quote(&config)),
        ..Persisted::lines(lines)
    }
}
