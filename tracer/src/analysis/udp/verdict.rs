//! The verdict on a heavy UDP flow, `limited_by: userspace`: whose congestion control meets
//! the path, and advice that fits the process owning it (tailscaled in userspace mode, a
//! kernel WireGuard tunnel, QUIC).

use serde::{Deserialize, Serialize};

use crate::analysis::container::{Container, Runtime};
use crate::analysis::environment::Environment;
use crate::analysis::fix_plan::commands::shell_quote;
use crate::analysis::udp::flows::{Process, UdpFlow};
use crate::analysis::udp::shape::AppProto;
use crate::analysis::units::rate;

/// The verdict on a heavy UDP flow: who runs its congestion control and what to do about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpVerdict {
    pub text: String,
    /// Commands or configuration lines, in the order to apply them.
    pub advice: Vec<String>,
    /// A tunnel engine's flow (a process holding a TUN device): the kernel's TCP flows inside
    /// decide its rate, not a congestion control of the process's own.
    #[serde(default)]
    pub tunnel: bool,
    /// The TCP flows (cookies) a tunnel's flow carries.
    #[serde(default)]
    pub carries: Vec<u64>,
}

impl UdpVerdict {
    /// The owning process's congestion control decides.
    fn userspace(text: String, advice: Vec<String>) -> Self {
        Self { text, advice, tunnel: false, carries: Vec::new() }
    }
}

/// Name a process for a sentence: `tailscaled (pid 812)`.
pub fn process_label(owner: Option<&Process>) -> String {
    match owner {
        Some(p) if !p.comm.is_empty() => format!("{} (pid {})", p.comm, p.pid),
        Some(p) => format!("pid {}", p.pid),
        None => "an unknown process".to_string(),
    }
}

/// Judge a heavy UDP flow. Its congestion control, if any, runs in the owning process: the
/// kernel's choice (and cctrace's fix) does not reach it, whatever the path does.
pub fn judge(flow: &UdpFlow, env: &Environment) -> UdpVerdict {
    let owner = flow.latest.owner.as_ref();
    let who = process_label(owner);
    let rates = format!("{} out, {} in", rate(flow.tx_bps), rate(flow.rx_bps));
    let container = env.cgroups.get(&flow.latest.cgroup_id).and_then(|c| c.container.as_ref());
    if owner.is_some_and(Process::is_tailscaled_userspace) {
        return tailscaled_userspace(&who, &rates, container);
    }
    // A socket without a file is the kernel's own: kernel WireGuard (wg0, tailscale0 in kernel
    // mode) carries the kernel's TCP, which cctrace sees on the tunnel device and can fix.
    if owner.is_none() && flow.latest.inode == 0 && flow.app_proto == Some(AppProto::WireGuard) {
        return UdpVerdict::userspace(
            format!(
                "kernel WireGuard ({rates}): the tunnel's own UDP. The TCP flows inside it are the kernel's: \
                 they are listed with the tunnel as their device, and their verdicts and fixes apply."
            ),
            vec!["look at the TCP flows whose device is the WireGuard interface".to_string()],
        );
    }
    // A WireGuard engine with a TUN device (wireguard-go, tailscaled in TUN mode): what it
    // carries is the kernel's TCP. (Once such flows are traced it gets the tunnel's verdict.)
    if flow.app_proto == Some(AppProto::WireGuard) && owner.is_some_and(|o| o.tun_open) {
        let text = format!(
            "tunnel: WireGuard ({rates}) owned by {who}, which holds a TUN device: the TCP flows inside the \
             tunnel are the kernel's, on that device, and their verdicts and fixes apply; WireGuard itself runs \
             no congestion control. None of them is traced now."
        );
        let advice = vec![format!("look at the TCP flows whose device is {who}'s TUN device")];
        return UdpVerdict { tunnel: true, ..UdpVerdict::userspace(text, advice) };
    }
    match flow.app_proto {
        Some(AppProto::Quic) => UdpVerdict::userspace(
            format!(
                "userspace congestion control: QUIC ({rates}) owned by {who}. QUIC runs its congestion \
                 control inside {who}, not in the kernel: net.ipv4.tcp_congestion_control and BBR on this \
                 host do not apply to it. On a lossy path a loss-based QUIC sender (quic-go's, used by \
                 Caddy, is NewReno-like) is held back just as CUBIC is."
            ),
            vec![
                format!(
                    "set the QUIC congestion control in {who}'s configuration if it offers one (BBR where available)"
                ),
                "or serve the site without HTTP/3 so clients fetch over TCP, where the kernel's BBR applies \
                 (Caddy: `servers { protocols h1 h2 }` in the global options; nginx: drop `listen ... quic`)"
                    .to_string(),
            ],
        ),
        Some(AppProto::WireGuard) => UdpVerdict::userspace(
            format!(
                "userspace congestion control: WireGuard ({rates}) owned by {who}. The TCP flows inside the \
                 tunnel keep their own congestion control: look for them on this host's tunnel device or at \
                 the other end; WireGuard itself does none."
            ),
            vec![format!(
                "if {who} terminates TCP itself (a userspace VPN stack), give it a kernel TUN device so the \
                 kernel's TCP, and its BBR, carry the traffic"
            )],
        ),
        None => UdpVerdict::userspace(
            format!(
                "userspace congestion control: plain UDP ({rates}) owned by {who}. Whatever paces or backs \
                 off this flow runs inside {who}; the kernel's TCP settings do not apply to it."
            ),
            vec![format!("see {who}'s own rate or congestion-control settings")],
        ),
    }
}

fn tailscaled_userspace(who: &str, rates: &str, container: Option<&Container>) -> UdpVerdict {
    let text = format!(
        "userspace congestion control: {who} runs in userspace-networking mode (no TUN device) and \
         carries the tailnet over this UDP flow ({rates}). It terminates the tailnet's TCP connections \
         in its own TCP stack (gVisor netstack, loss-based) and reaches local services over loopback, \
         so the leg that crosses the lossy path is not the kernel's TCP: no sysctl, and not BBR, \
         changes it. With a TUN device the kernel's TCP carries those connections end to end and \
         cctrace's fix applies."
    );
    let mut advice = Vec::new();
    match container.map(|c| (c.runtime, c)) {
        Some((Runtime::Proxmox, c)) => {
            let conf = format!("/etc/pve/lxc/{}.conf", c.id);
            advice.push(format!("on the Proxmox host, add to {}:", shell_quote(&conf)));
            advice.extend(tun_lxc_lines());
        }
        Some((Runtime::Docker | Runtime::Podman, c)) => {
            let name = c.name.clone().unwrap_or_else(|| c.short_id().to_string());
            advice.push(format!(
                "recreate container {} with `--device /dev/net/tun --cap-add NET_ADMIN` (compose: \
                 `devices: [/dev/net/tun]`, `cap_add: [NET_ADMIN]`)",
                shell_quote(&name)
            ));
        }
        _ => {
            advice.push("Proxmox LXC (/etc/pve/lxc/<vmid>.conf):".to_string());
            advice.extend(tun_lxc_lines());
            advice.push("Docker: `--device /dev/net/tun --cap-add NET_ADMIN`".to_string());
        }
    }
    advice.push("then start tailscaled without --tun=userspace-networking".to_string());
    UdpVerdict::userspace(text, advice)
}

fn tun_lxc_lines() -> [String; 2] {
    [
        "lxc.cgroup2.devices.allow: c 10:200 rwm".to_string(),
        "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file".to_string(),
    ]
}
