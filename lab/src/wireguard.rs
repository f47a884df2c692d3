//! A WireGuard tunnel run by wireguard-go (the userspace engine Tailscale is built on) across an
//! [`EmulatedPath`]: the path's loss and delay apply to the tunnel's UDP (the underlay) only,
//! and TCP inside the tunnel is the kernel's, on the TUN device wireguard-go holds.
//!
//! The path's sender namespace is the `server` end (the home host with the services), its
//! receiver the `client` end. Each [`LanSpec`] adds a namespace behind the server end on a veth
//! "bridge": the server end forwards between it and the tunnel (a subnet router), masquerading
//! what it forwards to the LAN when asked, as tailscaled does by default.
//!
//! Both ends are configured with `wg` through wireguard-go's UAPI socket in
//! `/var/run/wireguard/`, which every namespace shares: each end gets its own interface name.
//! Every address is in the lab's range; the processes die with the lab (and with this process,
//! by `PR_SET_PDEATHSIG`), which takes their TUN devices along.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::addr::{self, net24};
use crate::cmd;
use crate::netns::Netns;
use crate::topology::{disable_offloads, EmulatedPath, EmulatedPathSpec};

/// wireguard-go refuses to run where the kernel has WireGuard unless told otherwise.
const PREFER_USERSPACE: (&str, &str) = ("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1");
/// Where wireguard-go puts its UAPI socket (`/var/run/wireguard/IFNAME.sock`).
const UAPI_DIR: &str = "/var/run/wireguard";
const LISTEN_PORT: u16 = 51820;
/// wireguard-go's default MTU (1500 less 80 bytes of IPv6, UDP and WireGuard headers).
pub const WIREGUARD_MTU: u32 = 1420;

/// A namespace behind the server end of the tunnel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LanSpec {
    /// The server end rewrites the source of what it forwards to this LAN to its own LAN
    /// address (nftables `masquerade`), so LAN hosts see the router as their peer.
    pub masquerade: bool,
}

/// What to build: the underlay path and the LANs behind the server end.
#[derive(Clone, Debug, PartialEq)]
pub struct WireGuardSpec {
    pub underlay: EmulatedPathSpec,
    pub lans: Vec<LanSpec>,
    /// The tunnel devices' MTU: [`WIREGUARD_MTU`] (wireguard-go's own) unless set; Tailscale
    /// sets 1280, the least IPv6 allows.
    pub mtu: Option<u32>,
    /// Give both tunnel ends an IPv6 address too (see [`WireGuardLab::server_inner_addr_v6`]),
    /// so TCP runs over IPv6 inside the tunnel while the underlay stays IPv4.
    pub ipv6: bool,
}

impl WireGuardSpec {
    /// A tunnel across `underlay` with wireguard-go's own MTU, IPv4 inside and no LANs.
    pub fn new(underlay: EmulatedPathSpec) -> Self {
        Self { underlay, lans: Vec::new(), mtu: None, ipv6: false }
    }
}

/// One end: the wireguard-go process, its interface and tunnel addresses.
#[derive(Debug)]
struct End {
    child: Child,
    dev: String,
    inner: Ipv4Addr,
    inner_v6: Option<Ipv6Addr>,
}

impl Drop for End {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // wireguard-go removes its socket on a clean exit only.
        let _ = std::fs::remove_file(uapi_socket(&self.dev));
    }
}

/// A LAN namespace behind the server end.
#[derive(Debug)]
pub struct Lan {
    /// The LAN host's address and the router's (the server end's) on the veth.
    pub host_addr: Ipv4Addr,
    pub router_addr: Ipv4Addr,
    pub masquerade: bool,
    /// The veth's name in the server end's namespace.
    pub router_dev: String,
    ns: Netns,
}

impl Lan {
    pub fn ns(&self) -> &Netns {
        &self.ns
    }
}

/// The built tunnel. Dropping it stops both wireguard-go processes (their TUN devices go with
/// them), then deletes the LANs and the underlay.
#[derive(Debug)]
pub struct WireGuardLab {
    lans: Vec<Lan>,
    server: End,
    client: End,
    keys: KeyDir,
    underlay: EmulatedPath,
}

impl WireGuardLab {
    pub fn create(spec: WireGuardSpec) -> Result<Self> {
        let underlay = EmulatedPath::create(spec.underlay).context("building the underlay")?;
        let keys = KeyDir::create()?;
        let (server_inner, client_inner) = addr::next_veth_pair();
        let tag = next_tag();
        let (server_key, client_key) = (keys.generate("server")?, keys.generate("client")?);
        let mtu = spec.mtu.unwrap_or(WIREGUARD_MTU);
        let v6 = |a: Ipv4Addr| spec.ipv6.then(|| addr::tunnel_v6(a));
        let server = start_end(underlay.sender(), &format!("wg{tag}s"), mtu, server_inner, v6(server_inner))?;
        let client = start_end(underlay.receiver(), &format!("wg{tag}c"), mtu, client_inner, v6(client_inner))?;
        let mut lans = Vec::new();
        for (i, lan) in spec.lans.iter().enumerate() {
            lans.push(add_lan(underlay.sender(), &format!("lan{tag}{i}"), lan, client_inner)?);
        }
        // The client reaches the server's tunnel address and every LAN through the tunnel;
        // the server reaches the client's tunnel address.
        let mut client_allowed = vec![format!("{server_inner}/32")];
        client_allowed.extend(server.inner_v6.map(|a| format!("{a}/128")));
        client_allowed.extend(lans.iter().map(|l| format!("{}/24", net24(l.host_addr))));
        let mut server_allowed = vec![format!("{client_inner}/32")];
        server_allowed.extend(client.inner_v6.map(|a| format!("{a}/128")));
        configure(underlay.sender(), &server.dev, &server_key, &client_key, &server_allowed, underlay.receiver_addr())?;
        configure(underlay.receiver(), &client.dev, &client_key, &server_key, &client_allowed, underlay.sender_addr())?;
        for lan in &lans {
            underlay.receiver().ip(&["route", "add", &format!("{}/24", net24(lan.host_addr)), "dev", &client.dev])?;
        }
        Ok(Self { lans, server, client, keys, underlay })
    }

    /// The home end: the namespace the services run in (and the router for the LANs).
    pub fn server(&self) -> &Netns {
        self.underlay.sender()
    }

    /// The remote end: the namespace the clients run in.
    pub fn client(&self) -> &Netns {
        self.underlay.receiver()
    }

    pub fn server_inner_addr(&self) -> Ipv4Addr {
        self.server.inner
    }

    pub fn client_inner_addr(&self) -> Ipv4Addr {
        self.client.inner
    }

    /// The tunnel ends' IPv6 addresses, when the spec asked for them.
    pub fn server_inner_addr_v6(&self) -> Option<Ipv6Addr> {
        self.server.inner_v6
    }

    pub fn client_inner_addr_v6(&self) -> Option<Ipv6Addr> {
        self.client.inner_v6
    }

    /// The server end's WireGuard interface.
    pub fn server_dev(&self) -> &str {
        &self.server.dev
    }

    pub fn client_dev(&self) -> &str {
        &self.client.dev
    }

    /// The server end's wireguard-go process.
    pub fn server_pid(&self) -> u32 {
        self.server.child.id()
    }

    pub fn client_pid(&self) -> u32 {
        self.client.child.id()
    }

    /// The underlay's addresses: where the tunnel's UDP goes between.
    pub fn server_underlay_addr(&self) -> Ipv4Addr {
        self.underlay.sender_addr()
    }

    pub fn client_underlay_addr(&self) -> Ipv4Addr {
        self.underlay.receiver_addr()
    }

    pub fn underlay(&self) -> &EmulatedPath {
        &self.underlay
    }

    pub fn lans(&self) -> &[Lan] {
        &self.lans
    }

    /// The UDP port both ends listen on.
    pub fn listen_port(&self) -> u16 {
        LISTEN_PORT
    }

    /// A directory that lives as long as the lab (for a test's own configuration files).
    pub fn scratch_dir(&self) -> &Path {
        &self.keys.0
    }
}

/// A per-lab tag for interface names: the UAPI socket of an interface is
/// `/var/run/wireguard/NAME.sock` whatever its namespace, so names must differ across every
/// lab on the machine (`wg<pid><n>s` fits IFNAMSIZ).
fn next_tag() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!("{}x{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed) % 100)
}

fn uapi_socket(dev: &str) -> PathBuf {
    Path::new(UAPI_DIR).join(format!("{dev}.sock"))
}

/// Start wireguard-go for `dev` in `ns` (in the foreground, so it is this process's child), wait
/// for its UAPI socket, and give its device `mtu` and its addresses.
fn start_end(ns: &Netns, dev: &str, mtu: u32, inner: Ipv4Addr, inner_v6: Option<Ipv6Addr>) -> Result<End> {
    let mut command = ns.command("wireguard-go");
    command.args(["-f", dev]).env(PREFER_USERSPACE.0, PREFER_USERSPACE.1).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: prctl (a raw system call in rustix) is async-signal-safe; it only sets a flag of
    // the child about to exec.
    unsafe {
        command.pre_exec(|| {
            let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
            Ok(())
        });
    }
    let child = command.spawn().context("starting wireguard-go (apt-get install wireguard-go)")?;
    // The child's pid is wireguard-go's: `ip netns exec` execs it in place.
    let mut end = End { child, dev: dev.to_string(), inner, inner_v6 };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !uapi_socket(dev).exists() {
        if let Some(status) = end.child.try_wait()? {
            bail!("wireguard-go {dev} exited at start ({status})");
        }
        if Instant::now() > deadline {
            bail!("wireguard-go {dev} made no UAPI socket within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ns.ip(&["link", "set", "dev", dev, "mtu", &mtu.to_string()])?;
    ns.ip(&["addr", "add", &format!("{inner}/24"), "dev", dev])?;
    if let Some(v6) = inner_v6 {
        add_ipv6(ns, dev, v6)?;
    }
    ns.ip(&["link", "set", "dev", dev, "up"])?;
    disable_offloads(ns, dev)?;
    Ok(end)
}

/// IPv6 on the tunnel device only (the lab's namespaces keep it off elsewhere), with nothing
/// that sends on its own: no link-local address, no duplicate address detection, no router
/// advertisements. The peer's address is reached through the device, as its /64.
fn add_ipv6(ns: &Netns, dev: &str, local: Ipv6Addr) -> Result<()> {
    for (key, value) in [("addr_gen_mode", "1"), ("accept_ra", "0"), ("dad_transmits", "0"), ("disable_ipv6", "0")] {
        ns.sysctl_set(&format!("net.ipv6.conf.{dev}.{key}"), value)?;
    }
    ns.ip(&["-6", "addr", "add", &format!("{local}/64"), "dev", dev, "nodad"])?;
    Ok(())
}

/// `wg set` the end's key, port and its one peer.
fn configure(ns: &Netns, dev: &str, own: &Key, peer: &Key, allowed: &[String], endpoint: Ipv4Addr) -> Result<()> {
    let port = LISTEN_PORT.to_string();
    let key_path = own.private.to_string_lossy().into_owned();
    let allowed = allowed.join(",");
    let endpoint = format!("{endpoint}:{LISTEN_PORT}");
    let args = [
        "set",
        dev,
        "listen-port",
        &port,
        "private-key",
        &key_path,
        "peer",
        &peer.public,
        "allowed-ips",
        &allowed,
        "endpoint",
        &endpoint,
    ];
    cmd::run(ns.command("wg").args(args)).with_context(|| format!("configuring {dev} with wg"))?;
    Ok(())
}

/// A LAN namespace on a veth to `router`, which forwards between it and the tunnel.
fn add_lan(router: &Netns, name: &str, spec: &LanSpec, client_inner: Ipv4Addr) -> Result<Lan> {
    let (router_addr, host_addr) = addr::next_veth_pair();
    let ns = Netns::create("wglan")?;
    let host_dev = "lan0";
    router
        .ip(&["link", "add", name, "type", "veth", "peer", "name", host_dev, "netns", ns.name()])
        .context("creating the LAN's veth")?;
    for (n, dev, a) in [(router, name, router_addr), (&ns, host_dev, host_addr)] {
        n.ip(&["addr", "add", &format!("{a}/24"), "dev", dev])?;
        n.ip(&["link", "set", "dev", dev, "up"])?;
        disable_offloads(n, dev)?;
    }
    for key in ["net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"] {
        if ns.sysctl_get(key).is_ok() {
            ns.sysctl_set(key, "1")?;
        }
    }
    ns.sysctl_set("net.ipv4.tcp_no_metrics_save", "1")?;
    ns.sysctl_set("net.ipv4.tcp_rmem", "4096 131072 33554432")?;
    ns.sysctl_set("net.ipv4.tcp_wmem", "4096 16384 33554432")?;
    // Replies to the tunnel's clients go back through the router (without masquerading they
    // are addressed to the client's tunnel address).
    ns.ip(&["route", "add", &format!("{}/24", net24(client_inner)), "via", &router_addr.to_string()])?;
    router.sysctl_set("net.ipv4.ip_forward", "1")?;
    if spec.masquerade {
        let table = format!("cct_masq_{name}");
        let script = format!(
            "add table ip {table}\n\
             add chain ip {table} post {{ type nat hook postrouting priority srcnat; policy accept; }}\n\
             add rule ip {table} post oifname \"{name}\" masquerade\n"
        );
        cmd::run_with_stdin(router.command("nft").args(["-f", "-"]), Some(&script))
            .context("masquerading the LAN with nftables")?;
    }
    Ok(Lan { host_addr, router_addr, masquerade: spec.masquerade, router_dev: name.to_string(), ns })
}

/// A key pair: the private key's file and the public key.
#[derive(Debug)]
struct Key {
    private: PathBuf,
    public: String,
}

/// A private directory for the keys (and a test's own files), removed on drop.
#[derive(Debug)]
struct KeyDir(PathBuf);

impl KeyDir {
    fn create() -> Result<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cct-wg-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self(dir))
    }

    /// `wg genkey` into NAME.key, and its public key.
    fn generate(&self, name: &str) -> Result<Key> {
        let private = cmd::run(std::process::Command::new("wg").arg("genkey"))
            .context("wg genkey (apt-get install wireguard-tools)")?;
        let path = self.0.join(format!("{name}.key"));
        std::fs::write(&path, &private)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let public = cmd::run_with_stdin(std::process::Command::new("wg").arg("pubkey"), Some(&private))?;
        Ok(Key { private: path, public: public.trim().to_string() })
    }
}

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
