//! iperf3 transfers over the bench's veth pair: a real bulk sender (128 KiB writes, large TSO
//! segments, so few `tcp_probe` firings per byte), one stream or many, as users run it. The
//! lab turns the pair's segmentation and receive offloads off (its emulated paths need
//! packets the size of a segment); [`offloads_on`] turns them back on, as a host has them.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_lab::VethPair;

const PORT: u16 = 5313;

/// An iperf3 server in the receiver's namespace and a client in the sender's, killed on drop.
pub(crate) struct Iperf3 {
    server: Child,
    client: Child,
}

impl Iperf3 {
    /// `streams` streams (each capped at `rate`, an iperf3 `-b` value, when given) for `secs`.
    pub(crate) fn start(lab: &VethPair, streams: usize, rate: Option<&str>, secs: u64) -> Result<Self> {
        let mut server = lab
            .receiver()
            .command("iperf3")
            .args(["-s", "-1", "-p", &PORT.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s (cargo xtask setup installs iperf3)")?;
        let mut client = lab.sender().command("iperf3");
        client.args(["-c", &lab.receiver_addr().to_string(), "-p", &PORT.to_string(), "-t", &secs.to_string()]);
        client.args(["-P", &streams.to_string()]);
        if let Some(rate) = rate {
            client.args(["-b", rate]);
        }
        let started = wait_listening(lab, PORT).and_then(|()| {
            client
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting iperf3 -c")
        });
        match started {
            Ok(client) => Ok(Self { server, client }),
            Err(e) => {
                let _ = server.kill();
                let _ = server.wait();
                Err(e)
            }
        }
    }

    /// Until the client is done.
    pub(crate) fn wait(mut self) -> Result<()> {
        let status = self.client.wait()?;
        if !status.success() {
            bail!("iperf3 -c failed: {status}");
        }
        let _ = self.server.wait();
        Ok(())
    }
}

impl Drop for Iperf3 {
    fn drop(&mut self) {
        for child in [&mut self.client, &mut self.server] {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// The pair's segmentation and receive offloads on again, both ends.
pub(crate) fn offloads_on(lab: &VethPair) -> Result<()> {
    for (ns, dev) in [(lab.sender(), VethPair::SENDER_DEV), (lab.receiver(), VethPair::RECEIVER_DEV)] {
        let status = ns
            .command("ethtool")
            .args(["-K", dev, "tso", "on", "gso", "on", "gro", "on"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running ethtool")?;
        if !status.success() {
            bail!("ethtool -K {dev} tso on gso on gro on failed");
        }
    }
    Ok(())
}

/// Until something listens on `port` in the receiver's namespace (5 s at most).
fn wait_listening(lab: &VethPair, port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let filter = format!("sport = :{port}");
    loop {
        let out = lab.receiver().command("ss").args(["-Htln", &filter]).output()?;
        if !out.stdout.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("iperf3 -s did not listen on port {port} within 5 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
