//! How a congestion control answers loss, in numbers: which algorithms back off on loss alone,
//! and the rate their loss response allows at a loss rate and RTT (Mathis for Reno-like
//! senders, CUBIC's cubic region). A flow whose goodput is what this allows is held back by its
//! loss response; new loss-response models go here.

use serde::{Deserialize, Serialize};

use crate::analysis::deep_decisions::algorithm_of;

/// Congestion controls that back off on packet loss alone.
pub const LOSS_BASED: &[&str] =
    &["reno", "cubic", "bic", "htcp", "highspeed", "scalable", "hybla", "westwood", "illinois", "veno", "yeah", "lp"];

/// `cc`, or the algorithm a deep-mode twin (`cct_cubic`) stands for, is one of [`LOSS_BASED`].
pub fn is_loss_based(cc: &str) -> bool {
    LOSS_BASED.contains(&algorithm_of(cc))
}

/// Mathis et al. (1997) steady-state bound for a Reno-like flow, bits/s.
pub fn mathis_bps(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if rtt_s <= 0.0 || loss <= 0.0 {
        return f64::INFINITY;
    }
    f64::from(mss) * 8.0 / rtt_s * 1.22 / loss.sqrt()
}

/// CUBIC's average window in its cubic region (RFC 8312 §5.1, C = 0.4, β = 0.7), bits/s. Linux
/// CUBIC takes the larger of this and its Reno-friendly window (the Mathis bound).
pub fn cubic_bps(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if rtt_s <= 0.0 || loss <= 0.0 {
        return f64::INFINITY;
    }
    let (c, beta) = (0.4_f64, 0.7_f64);
    let w = (c * (3.0 + beta) / (4.0 * (1.0 - beta))).powf(0.25) * rtt_s.powf(0.75) / loss.powf(0.75);
    w * f64::from(mss) * 8.0 / rtt_s
}

/// Which loss-response model predicts a flow's rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseModel {
    /// Reno-like: Mathis et al.
    #[default]
    Mathis,
    /// CUBIC's cubic region, where it predicts more than Reno's.
    Cubic,
}

/// The response function of `cc` at loss-event rate `p`: (bits/s, model).
pub(super) fn response_of(cc: &str, mss: u32, rtt_s: f64, p: f64) -> (f64, ResponseModel) {
    let mathis = mathis_bps(mss, rtt_s, p);
    if algorithm_of(cc) == "cubic" {
        let cubic = cubic_bps(mss, rtt_s, p);
        if cubic > mathis {
            return (cubic, ResponseModel::Cubic);
        }
    }
    (mathis, ResponseModel::Mathis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::test_feed::{bulk, run};

    #[test]
    fn mathis_bound() {
        // 1448 B, 30 ms, 2 %: 386 kbit/s * 8.63 = 3.33 Mbit/s.
        let b = mathis_bps(1448, 0.030, 0.02);
        assert!((b - 3.331e6).abs() < 5e3, "{b}");
        assert!(mathis_bps(1448, 0.03, 0.0).is_infinite());
    }

    #[test]
    fn a_flow_on_a_deep_mode_twin_is_judged_as_its_original() {
        let (plain, _) = run("cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let (twin, _) = run("cct_cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let (p, t) = (plain.verdict(1).expect("verdict"), twin.verdict(1).expect("verdict"));
        assert!(t.flagged, "{t:?}");
        assert_eq!((t.limited_by, t.flagged), (p.limited_by, p.flagged));
        let (pe, te) = (p.evidence.as_ref().expect("evidence"), t.evidence.as_ref().expect("evidence"));
        assert_eq!((te.response_bps, te.response_model), (pe.response_bps, pe.response_model));
    }
}
