//! Random TCP loss on a veth link with nftables.
//!
//! The rule lives in the *receiver's* namespace at prerouting, not at the
//! sender's output/postrouting:
//! - At output/postrouting TCP packets are still GSO super-packets (TCP always
//!   builds them; they are only segmented at the device), so one `drop` would
//!   remove up to 64 KiB worth of segments and the per-packet probability is
//!   meaningless.
//! - A netfilter drop on the sending host returns -EPERM into
//!   tcp_transmit_skb, which TCP treats as a local send failure to retry, not
//!   as loss on the network.
//!
//! On the receiver's ingress each packet is a wire-sized segment the sender
//! already considers transmitted, i.e. genuine network loss.
//!
//! Named counters survive rule rewrites, so `drops`/`seen` are cumulative
//! across [`NftLoss::set_loss`] calls.

use std::net::Ipv4Addr;

use anyhow::{Context, Result};

use crate::cmd;
use crate::error::LabError;
use crate::netns::Netns;

const TABLE: &str = "inet cct_loss";
const CHAIN: &str = "ingress";
/// numgen granularity: loss probabilities are quantised to 1e-4.
const SCALE: u32 = 10_000;

/// Loss probability as the `numgen random mod 10000 < N` threshold.
pub(crate) fn threshold(p: f64) -> Result<u32, LabError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(LabError::InvalidArgument(format!("loss {p} not in [0, 1]")));
    }
    Ok((p * f64::from(SCALE)).round() as u32)
}

#[derive(Debug)]
pub(crate) struct NftLoss {
    daddr: Ipv4Addr,
}

impl NftLoss {
    /// Creates the table, counters and chain in `ns` and sets loss `p` for
    /// TCP packets to `daddr`.
    pub(crate) fn install(ns: &Netns, daddr: Ipv4Addr, p: f64) -> Result<Self> {
        let me = Self { daddr };
        let setup = format!(
            "add table {TABLE}\n\
             add counter {TABLE} seen\n\
             add counter {TABLE} drops\n\
             add chain {TABLE} {CHAIN} {{ type filter hook prerouting priority -300; policy accept; }}\n"
        );
        me.apply(ns, &(setup + &me.rules(p)?)).context("installing nftables loss table")?;
        Ok(me)
    }

    /// Replaces the loss rule atomically (one nft transaction).
    pub(crate) fn set_loss(&self, ns: &Netns, p: f64) -> Result<()> {
        self.apply(ns, &self.rules(p)?).with_context(|| format!("setting loss {p}"))
    }

    fn rules(&self, p: f64) -> Result<String> {
        let n = threshold(p)?;
        let m = format!("meta l4proto tcp ip daddr {}", self.daddr);
        let mut s = format!(
            "flush chain {TABLE} {CHAIN}\n\
             add rule {TABLE} {CHAIN} {m} counter name \"seen\"\n"
        );
        if n > 0 {
            s += &format!("add rule {TABLE} {CHAIN} {m} numgen random mod {SCALE} < {n} counter name \"drops\" drop\n");
        }
        Ok(s)
    }

    fn apply(&self, ns: &Netns, script: &str) -> Result<()> {
        cmd::run_with_stdin(ns.command("nft").args(["-f", "-"]), Some(script)).map(drop)
    }

    /// Packets counted by the named counter `name` (`seen` or `drops`).
    pub(crate) fn counter(&self, ns: &Netns, name: &str) -> Result<u64> {
        let out = cmd::run(ns.command("nft").args(["list", "counter", "inet", "cct_loss", name]))?;
        parse_packets(&out).with_context(|| format!("no packet count in nft output: {out}"))
    }
}

/// Extracts N from "... packets N bytes M ...".
fn parse_packets(out: &str) -> Option<u64> {
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" {
            return words.next()?.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds() {
        assert_eq!(threshold(0.02).ok(), Some(200));
        assert_eq!(threshold(0.0).ok(), Some(0));
        assert_eq!(threshold(1.0).ok(), Some(10_000));
        assert!(threshold(-0.1).is_err());
        assert!(threshold(f64::NAN).is_err());
    }

    #[test]
    fn parses_counter_listing() {
        let out = "table inet cct_loss {\n\tcounter drops {\n\t\tpackets 502 bytes 24874944\n\t}\n}\n";
        assert_eq!(parse_packets(out), Some(502));
        assert_eq!(parse_packets("nothing"), None);
    }

    #[test]
    fn rules_text() {
        let l = NftLoss { daddr: Ipv4Addr::new(198, 18, 3, 2) };
        let r = l.rules(0.02).unwrap_or_default();
        assert!(r.contains(
            "meta l4proto tcp ip daddr 198.18.3.2 numgen random mod 10000 < 200 counter name \"drops\" drop"
        ));
        assert!(!l.rules(0.0).unwrap_or_default().contains("drop\n"));
    }
}
