//! A network namespace the lab did not create (a container's, reached through one of its
//! processes) joined to an [`EmulatedPath`]'s sender side: a veth pair from the sender
//! namespace into it, routed, so its traffic to the receiver crosses the same emulated delay,
//! loss and queue as the sender namespace's own. Several namespaces can share one path, each
//! with an address of its own in the sender's /24.

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt as _;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::addr::net24;
use crate::cmd;
use crate::topology::{disable_offloads, EmulatedPath};

/// A namespace joined to a path by [`EmulatedPath::attach`]; the veth pair is deleted on drop
/// (with it the addresses and routes), the namespace itself is left as it was found.
#[derive(Debug)]
pub struct AttachedNetns {
    sender_ns: String,
    host_dev: String,
    dev: String,
    pid: u32,
    inode: u64,
    addr: Ipv4Addr,
}

impl AttachedNetns {
    /// The namespace's address on the path (in the sender's /24).
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// Its inode (what cctrace reports as the flow's `netns`).
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// The device inside the namespace.
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// `program` run in the namespace (`nsenter --net`: only the network namespace changes,
    /// the mounts stay the host's, so host tools and /sys work as usual).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/proc/{}/ns/net", self.pid)).arg(program);
        c
    }

    fn ip(&self, args: &[&str]) -> Result<String> {
        cmd::run(self.command("ip").args(args)).with_context(|| format!("in the network namespace of pid {}", self.pid))
    }
}

impl Drop for AttachedNetns {
    fn drop(&mut self) {
        // Deleting one end deletes the pair; gone already when the namespace went first.
        let _ = cmd::run(Command::new("ip").args(["-n", &self.sender_ns, "link", "del", &self.host_dev]));
    }
}

impl EmulatedPath {
    /// Join the network namespace of process `pid` to this path's sender side as `slot`
    /// (0 to 99; one slot per attached namespace): a veth `lab<slot>` inside it with address
    /// `<sender /24>.<10 + slot>`, routed to the receiver through the sender namespace.
    pub fn attach(&self, pid: u32, slot: u8) -> Result<AttachedNetns> {
        if slot >= 100 {
            bail!("slot {slot} out of range (0 to 99)");
        }
        let ns_path = format!("/proc/{pid}/ns/net");
        let inode = std::fs::metadata(&ns_path).with_context(|| format!("stat {ns_path}"))?.ino();
        let sender = self.sender();
        if inode == sender.inode() {
            bail!("process {pid} lives in the path's own sender namespace");
        }
        let gateway = self.sender_addr();
        let [a, b, c, _] = gateway.octets();
        let addr = Ipv4Addr::new(a, b, c, 10 + slot);
        let host_dev = format!("att{slot}");
        let dev = format!("lab{slot}");
        sender
            .ip(&["link", "add", &host_dev, "type", "veth", "peer", "name", &dev, "netns", &pid.to_string()])
            .with_context(|| format!("creating a veth pair into the network namespace of pid {pid}"))?;
        let attached = AttachedNetns { sender_ns: sender.name().to_string(), host_dev, dev, pid, inode, addr };
        sender.ip(&["link", "set", "dev", &attached.host_dev, "mtu", "1500", "up"])?;
        disable_offloads(sender, &attached.host_dev)?;
        sender.sysctl_set("net.ipv4.ip_forward", "1")?;
        sender.ip(&["route", "add", &format!("{addr}/32"), "dev", &attached.host_dev])?;
        let gw = gateway.to_string();
        attached.ip(&["link", "set", "dev", "lo", "up"])?;
        attached.ip(&["addr", "add", &format!("{addr}/32"), "dev", &attached.dev])?;
        attached.ip(&["link", "set", "dev", &attached.dev, "mtu", "1500", "up"])?;
        let mut offloads = attached.command("ethtool");
        offloads.args(["-K", &attached.dev, "tso", "off", "gso", "off", "gro", "off"]);
        cmd::run(&mut offloads).context("turning offloads off in the attached namespace")?;
        attached.ip(&["route", "add", &format!("{gw}/32"), "dev", &attached.dev])?;
        attached.ip(&[
            "route",
            "add",
            &format!("{}/24", net24(self.receiver_addr())),
            "via",
            &gw,
            "dev",
            &attached.dev,
        ])?;
        Ok(attached)
    }
}
