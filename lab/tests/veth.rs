//! The veth topology: configured nftables loss is realised per packet and
//! seen by TCP as real loss; nothing is left behind after drop.

mod common;

use std::time::Duration;

use anyhow::{ensure, Result};
use cctrace_lab::{list_namespaces, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use common::{binomial_halfwidth, lab, mbps};

fn bulk(pair: &VethPair, sink: &Sink, secs: f64) -> Result<cctrace_lab::SenderReport> {
    Sender::start(
        pair.sender(),
        pair.receiver_addr(),
        sink.port(),
        SenderOptions {
            congestion: Some("cubic".into()),
            mode: SendMode::Bulk,
            duration: Duration::from_secs_f64(secs),
            ..SenderOptions::default()
        },
    )?
    .wait()
}

#[test]
fn veth_loss_drops_configured_fraction_and_cleans_up() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const P: f64 = 0.02;
    let pair = VethPair::create(VethOptions { loss: P })?;
    let names = [pair.sender().name().to_owned(), pair.receiver().name().to_owned()];
    ensure!(names.iter().all(|n| list_namespaces().unwrap_or_default().contains(n)));

    let sink = Sink::start(pair.receiver(), pair.receiver_addr(), 0, SinkOptions::default())?;
    let report = bulk(&pair, &sink, 1.5)?;
    let (seen, drops) = (pair.loss_seen()?, pair.loss_drops()?);
    // nft's numgen is not seeded, so allow 4 standard deviations (a false
    // alarm about once in 16 000 runs) rather than the 99 % interval.
    let hw = binomial_halfwidth(seen, P, 4.0);
    println!(
        "veth loss p={P}: {drops} of {seen} TCP packets dropped ({:.4}; 4-sigma band {:.0}..{:.0}); \
         sender retransmitted {} at {:.0} Mbit/s",
        drops as f64 / seen as f64,
        seen as f64 * P - hw,
        seen as f64 * P + hw,
        report.total_retrans,
        mbps(report.goodput_bps)
    );
    ensure!(seen > 20_000, "too few packets ({seen}) for a meaningful rate");
    ensure!((drops as f64 - seen as f64 * P).abs() <= hw, "realised loss off");
    // Loss on the receiver's ingress is real network loss for the sender.
    ensure!(
        f64::from(report.total_retrans) >= 0.5 * drops as f64,
        "TCP retransmitted {} segments for {drops} drops",
        report.total_retrans
    );
    ensure!(sink.total_bytes() == report.bytes_written);

    // Turning loss off stops the drops; counters keep their totals.
    pair.set_loss(0.0)?;
    // (Retransmissions need not be zero now: at multi-Gbit/s a veth flow can
    // still overflow the receiver's backlog queue.)
    bulk(&pair, &sink, 0.3)?;
    ensure!(pair.loss_drops()? == drops, "drops continued after set_loss(0)");
    ensure!(pair.loss_seen()? > seen);

    drop(sink);
    drop(pair);
    let listed = list_namespaces()?;
    ensure!(names.iter().all(|n| !listed.contains(n)), "namespaces left after drop: {listed:?}");
    Ok(())
}

#[test]
fn invalid_loss_is_rejected_before_anything_is_created() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    // Only ours: other processes may create namespaces meanwhile.
    let own = format!("cct-{}-", std::process::id());
    let ours =
        || -> Result<Vec<String>> { Ok(list_namespaces()?.into_iter().filter(|n| n.starts_with(&own)).collect()) };
    let before = ours()?;
    let err = VethPair::create(VethOptions { loss: 1.5 }).err();
    ensure!(
        matches!(
            err.as_ref().and_then(|e| e.downcast_ref::<cctrace_lab::LabError>()),
            Some(cctrace_lab::LabError::InvalidArgument(_))
        ),
        "expected InvalidArgument, got {err:?}"
    );
    ensure!(ours()? == before);
    Ok(())
}
