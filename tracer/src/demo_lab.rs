//! `cctrace demo`'s lab: the motivating story on a local emulated WAN path, so a newcomer sees
//! within seconds which flows are flagged and why.
//!
//! The default path is the story's own: 30 ms RTT, 0.1 % random loss, a 200 Mbit/s bottleneck,
//! where CUBIC held a 4K stream at 17-22 Mbit/s and BBR reached 110-340 Mbit/s (`--loss-pct 2.5`
//! gives the starker version). Two copies of that path, each a pair of namespaces joined by a
//! userspace path emulator: the CUBIC flows on one and the BBR flows on the other, as in the
//! story, where the sender switched from one to the other. (Sharing one path, the BBR bulk
//! transfer would fill the bottleneck and the CUBIC flows would rightly be path-limited.) On each:
//! a 40 Mbit/s video-like stream (CUBIC cannot keep up: at 0.1 % its loss response is ~15 Mbit/s;
//! BBR keeps up, application-limited) and a bulk transfer. Everything is removed on drop.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::args::{DemoOptions, Scenario};
use cctrace_lab::{
    Cgroup, EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions,
};

/// What tailscaled's userspace TCP stack carries across the demo's lossy path: about what a
/// loss-based sender gets there (CUBIC's Mathis bound at 0.1 % loss and 30 ms is ~15 Mbit/s).
const RELAY_MBPS: f64 = 15.0;
/// The tailnet peer's WireGuard port.
const TAILNET_PORT: u16 = 41641;

impl DemoOptions {
    fn validate(&self) -> Result<()> {
        anyhow::ensure!(self.rtt_ms > 0.0 && self.rtt_ms <= 2000.0, "--rtt-ms must be in (0, 2000]");
        anyhow::ensure!((0.0..50.0).contains(&self.loss_pct), "--loss-pct must be in [0, 50)");
        anyhow::ensure!(self.rate_mbps >= 1.0 && self.rate_mbps <= 10_000.0, "--rate-mbps must be in [1, 10000]");
        anyhow::ensure!(
            self.stream_mbps > 0.0 && self.stream_mbps < self.rate_mbps,
            "--stream-mbps must be below --rate-mbps"
        );
        Ok(())
    }
}

/// The demo's container id for "jellyfin" (Docker ids are 64 hex digits).
pub const JELLYFIN_ID: &str = "de3051a5c0ffee0123456789abcdef0123456789abcdef0123456789abcdef01";

/// Where the demo's senders live: a Docker-shaped cgroup "jellyfin" for the CUBIC flows and a
/// Proxmox-shaped LXC "proxy" (vmid 102) for the BBR flows, with the runtimes' metadata files
/// in a directory of its own, so the names come from files as they would on a real host.
pub struct DemoContainers {
    pub jellyfin: Cgroup,
    pub proxy: Cgroup,
    /// The userspace-vpn scenario's tailscaled: a Proxmox LXC "tailscale" (vmid 105).
    pub tailscale: Cgroup,
    /// Holds `docker/containers/<id>/config.v2.json` and `pve/102.conf`.
    pub files: std::path::PathBuf,
    // Dropped last: the tree the two above live in.
    _top: Cgroup,
}

impl DemoContainers {
    pub fn create() -> Result<Self> {
        let top = Cgroup::top().context("creating the demo's cgroups")?;
        let jellyfin = top.child(&format!("system.slice/docker-{JELLYFIN_ID}.scope"))?;
        let proxy = top.child("lxc/102/ns")?;
        let tailscale = top.child("lxc/105/ns")?;
        let files = std::env::temp_dir().join(format!("cctrace-demo-{}", std::process::id()));
        let docker = files.join("docker/containers").join(JELLYFIN_ID);
        std::fs::create_dir_all(&docker).context("creating the demo's container files")?;
        std::fs::write(docker.join("config.v2.json"), format!(r#"{{"ID":"{JELLYFIN_ID}","Name":"/jellyfin"}}"#))?;
        std::fs::create_dir_all(files.join("pve"))?;
        std::fs::write(files.join("pve/102.conf"), "arch: amd64\nhostname: proxy\nostype: debian\n")?;
        std::fs::write(
            files.join("pve/105.conf"),
            "arch: amd64\nhostname: tailscale\nostype: debian\nunprivileged: 1\n",
        )?;
        Ok(Self { jellyfin, proxy, tailscale, files, _top: top })
    }

    pub fn docker_root(&self) -> std::path::PathBuf {
        self.files.join("docker")
    }

    pub fn pve_lxc_dir(&self) -> std::path::PathBuf {
        self.files.join("pve")
    }
}

impl Drop for DemoContainers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.files);
    }
}

/// One traffic flow of the demo.
pub struct DemoFlow {
    pub label: &'static str,
    pub sender: Sender,
}

/// The userspace-vpn scenario's processes: the relay, and the ends it joins.
struct UserspaceVpn {
    relay: std::process::Child,
    _service: cctrace_lab::relay::LoopbackService,
    _peer: cctrace_lab::relay::UdpSink,
}

impl Drop for UserspaceVpn {
    fn drop(&mut self) {
        let _ = self.relay.kill();
        let _ = self.relay.wait();
    }
}

/// The running demo; dropping it stops the traffic and removes the namespaces.
pub struct DemoLab {
    // Drop order: the relay and senders, then the sinks, then the paths (their namespaces).
    _vpn: Option<UserspaceVpn>,
    pub flows: Vec<DemoFlow>,
    _sinks: Vec<Sink>,
    /// The CUBIC flows' copy of the path, then the BBR flows'.
    pub paths: Vec<EmulatedPath>,
    pub description: String,
}

const PORT: u16 = cctrace_lab::SINK_PORT;

impl DemoLab {
    pub fn start(opts: &DemoOptions, duration: Duration, containers: &mut DemoContainers) -> Result<Self> {
        opts.validate()?;
        cctrace_lab::check_privileges().context("the demo builds network namespaces")?;
        // A crashed earlier demo may have left namespaces behind.
        let _ = cctrace_lab::cleanup_stale();
        if opts.scenario == Scenario::UserspaceVpn {
            return Self::start_userspace_vpn(opts, containers);
        }
        let spec = path_spec(opts);
        let mut paths = Vec::new();
        let mut sinks = Vec::new();
        for seed in [1, 2] {
            let path = EmulatedPath::create(EmulatedPathSpec { seed, ..spec.clone() })
                .context("building the emulated path")?;
            sinks.push(
                Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())
                    .context("starting the receiver")?,
            );
            paths.push(path);
        }
        let stream = SendMode::Paced { rate_bps: (opts.stream_mbps * 1e6) as u64, write_size: 64 * 1024 };
        // The thread names become the flows' process names in the UI.
        let plan: [(&'static str, &str, &str, SendMode); 4] = [
            ("CUBIC video stream", "cubic-video", "cubic", stream.clone()),
            ("BBR video stream", "bbr-video", "bbr", stream),
            ("CUBIC bulk transfer", "cubic-bulk", "cubic", SendMode::Bulk),
            ("BBR bulk transfer", "bbr-bulk", "bbr", SendMode::Bulk),
        ];
        // Each container gets a resident process in its namespace, as a real one has its init.
        containers.jellyfin.spawn_resident(paths[0].sender()).context("starting jellyfin's resident")?;
        containers.proxy.spawn_resident(paths[1].sender()).context("starting proxy's resident")?;
        let mut flows = Vec::new();
        for (label, name, cc, mode) in plan {
            let path = &paths[usize::from(cc == "bbr")];
            let cgroup = if cc == "bbr" { &containers.proxy } else { &containers.jellyfin };
            let sender = Sender::start(
                path.sender(),
                path.receiver_addr(),
                PORT,
                SenderOptions {
                    name: Some(name.into()),
                    socket_cgroup: Some(cgroup.path().to_path_buf()),
                    ..SenderOptions::new(cc, mode, duration)
                },
            )
            .with_context(|| format!("starting the {label}"))?;
            flows.push(DemoFlow { label, sender });
        }
        let description = format!(
            "demo path {:.0} ms RTT, {}% loss, {:.0} Mbit/s (a copy per algorithm; CUBIC in docker jellyfin, BBR in lxc proxy): {}",
            opts.rtt_ms,
            opts.loss_pct,
            opts.rate_mbps,
            flows.iter().map(|f| format!("{} :{}", f.label, f.sender.local_port())).collect::<Vec<_>>().join(", ")
        );
        Ok(Self { _vpn: None, flows, _sinks: sinks, paths, description })
    }

    /// Jellyfin (a 40 Mbit/s stream) -> loopback -> tailscaled in userspace-networking mode ->
    /// WireGuard in UDP over the lossy path -> the tailnet peer.
    fn start_userspace_vpn(opts: &DemoOptions, containers: &mut DemoContainers) -> Result<Self> {
        let path = EmulatedPath::create(path_spec(opts)).context("building the emulated path")?;
        containers.jellyfin.spawn_resident(path.sender()).context("starting jellyfin's resident")?;
        let peer = cctrace_lab::relay::UdpSink::start(
            path.receiver(),
            std::net::SocketAddr::from((path.receiver_addr(), TAILNET_PORT)),
        )
        .context("starting the tailnet peer")?;
        let service = cctrace_lab::relay::LoopbackService::start(
            path.sender(),
            "jellyfin",
            Some(opts.stream_mbps * 1e6),
            Some(containers.jellyfin.path()),
        )
        .context("starting the jellyfin stream")?;
        let exe = std::env::current_exe().context("finding this program to start the relay")?;
        let args: Vec<String> = vec![
            "demo-relay".into(),
            cctrace_lab::relay::USERSPACE_FLAG.into(),
            "--local".into(),
            format!("127.0.0.1:{}", service.port()),
            "--peer".into(),
            peer.addr().to_string(),
            "--rate-mbps".into(),
            RELAY_MBPS.min(opts.stream_mbps).to_string(),
        ];
        let relay = cctrace_lab::relay::spawn_relay(&exe, &args, path.sender(), Some(containers.tailscale.path()))
            .context("starting tailscaled")?;
        let description = format!(
            "demo path {:.0} ms RTT, {}% loss, {:.0} Mbit/s: jellyfin (docker) streams {:.0} Mbit/s over loopback :{} \
             to tailscaled --tun=userspace-networking (lxc 105), which carries it as WireGuard over UDP to {}",
            opts.rtt_ms,
            opts.loss_pct,
            opts.rate_mbps,
            opts.stream_mbps,
            service.port(),
            peer.addr()
        );
        Ok(Self {
            _vpn: Some(UserspaceVpn { relay, _service: service, _peer: peer }),
            flows: Vec::new(),
            _sinks: Vec::new(),
            paths: vec![path],
            description,
        })
    }
}

/// The demo's path: `rtt_ms`, `loss_pct` on the data direction, a `rate_mbps` bottleneck with a
/// quarter-BDP queue.
fn path_spec(opts: &DemoOptions) -> EmulatedPathSpec {
    let one_way = Duration::from_secs_f64(opts.rtt_ms / 2000.0);
    let rate = (opts.rate_mbps * 1e6) as u64;
    // A quarter of a bandwidth-delay product: enough to absorb bursts, too little for the
    // BBR bulk flow to inflate everybody's RTT with a standing queue.
    let queue = ((rate as f64 / 8.0) * opts.rtt_ms / 1000.0 / 4.0).max(64.0 * 1024.0) as usize;
    let forward = PathSpec::delay(one_way).with_loss(opts.loss_pct / 100.0).with_rate(rate, queue);
    let mut spec = EmulatedPathSpec::new(forward);
    spec.reverse = PathSpec::delay(one_way).with_rate(rate, queue);
    spec
}
