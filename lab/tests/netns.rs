//! Namespace guard behaviour: naming, inode, sysctl isolation, thread entry
//! and exit, deletion on drop and stale-namespace cleanup.

mod common;

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use cctrace_lab::{cleanup_stale, list_namespaces, Netns};
use common::lab;

fn thread_netns_inode() -> Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

#[test]
fn namespace_identity_and_lifecycle() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let ns = Netns::create("unit")?;
    let name = ns.name().to_owned();
    let prefix = format!("cct-{}-", std::process::id());
    ensure!(name.starts_with(&prefix) && name.ends_with("-unit"), "name {name}");
    ensure!(ns.path() == std::path::Path::new("/run/netns").join(&name));
    ensure!(std::fs::metadata(ns.path())?.ino() == ns.inode());

    // A process started through command() lives in the namespace.
    let out = ns.command("readlink").arg("/proc/self/ns/net").output_within(CHILD_DEADLINE)?;
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(link == format!("net:[{}]", ns.inode()), "{link} vs {}", ns.inode());
    let out = ns.command("ip").args(["-o", "link", "show", "lo"]).output_within(CHILD_DEADLINE)?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains("UP"), "lo not up");

    ensure!(list_namespaces()?.contains(&name));
    drop(ns);
    ensure!(!list_namespaces()?.contains(&name), "{name} survived drop");
    Ok(())
}

#[test]
fn sysctl_is_per_namespace() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let key = "net.ipv4.tcp_congestion_control";
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")?;
    let ns = Netns::create("sysctl")?;
    ns.sysctl_set(key, "bbr")?;
    ensure!(ns.sysctl_get(key)? == "bbr");
    let out = ns.command("cat").arg("/proc/sys/net/ipv4/tcp_congestion_control").output_within(CHILD_DEADLINE)?;
    ensure!(String::from_utf8_lossy(&out.stdout).trim() == "bbr");
    let host_after = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")?;
    ensure!(host_before == host_after, "host sysctl changed");
    ensure!(ns.sysctl_set("../../etc/hostname", "x").is_err());
    Ok(())
}

#[test]
fn threads_enter_and_leave() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let ns = Netns::create("thread")?;
    let home = thread_netns_inode()?;
    ensure!(home != ns.inode());
    {
        let _guard = ns.enter_current_thread()?;
        ensure!(thread_netns_inode()? == ns.inode());
        // A socket made here belongs to the namespace even after we leave.
    }
    ensure!(thread_netns_inode()? == home, "guard did not restore");

    let t = ns.spawn_thread("cct-test", thread_netns_inode)?;
    match t.join() {
        Ok(inode) => ensure!(inode? == ns.inode()),
        Err(_) => bail!("thread panicked"),
    }
    ensure!(thread_netns_inode()? == home);
    Ok(())
}

#[test]
fn stale_namespaces_of_dead_processes_are_removed() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    // First, so the once-per-process automatic cleanup inside create() has
    // already run and cannot take our fixture away before we look.
    let live = Netns::create("live")?;
    // A pid that certainly existed and has exited: a reaped child.
    let mut child = Command::new("true").spawn()?;
    let dead = child.id();
    child.wait()?;
    let stale = format!("cct-{dead}-0-stale");
    let status = Command::new("ip").args(["netns", "add", &stale]).status_within(CHILD_DEADLINE)?;
    ensure!(status.success(), "could not create {stale}");

    let removed = cleanup_stale().context("cleanup_stale")?;
    let listed = list_namespaces()?;
    if listed.contains(&stale) {
        // Do not leave our fixture behind even when failing.
        let _ = Command::new("ip").args(["netns", "del", &stale]).status_within(CHILD_DEADLINE);
        bail!("{stale} not removed (removed: {removed:?})");
    }
    ensure!(removed.contains(&stale));
    ensure!(listed.contains(&live.name().to_owned()), "live namespace removed");
    Ok(())
}
