//! The per-direction link model of the path emulator, free of I/O so its
//! arithmetic is unit-testable: Bernoulli or Gilbert-Elliott (bursty) loss, then an optional
//! token-bucket policer (drops, never queues), then a rate-limited FIFO bottleneck with a
//! byte-bounded queue (tail drop), then a fixed delay plus optional per-packet jitter.
//!
//! The bottleneck is a constant-rate, work-conserving FIFO, so the bytes not
//! yet serialised at time `t` are exactly `(last_departure - t) * rate`; that
//! identity gives the queue depth without tracking packets individually.

use std::time::Duration;

use crate::error::LabError;
use crate::rng::Rng;

/// One direction of an emulated path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Fixed one-way propagation delay added to every packet.
    pub one_way_delay: Duration,
    /// Bernoulli loss probability per packet, in [0, 1].
    pub loss: f64,
    /// Bottleneck rate in bits/s; `None` = no rate cap (and no queue). Then
    /// the forwarder's CPU is the bottleneck for a bulk flow (1–1.5 Gbit/s
    /// on two cores) and its overflow shows up in
    /// [`EmulatedPath::overload_drops`](crate::EmulatedPath::overload_drops).
    pub rate_bps: Option<u64>,
    /// Bottleneck queue limit in bytes (tail drop); only used with a rate.
    pub queue_bytes: usize,
    /// Bursty loss instead of `loss` (which must then be 0).
    pub bursty_loss: Option<GilbertElliott>,
    /// Token-bucket policer in front of the bottleneck: packets that find too few tokens are
    /// dropped (counted in `dropped_policer`), never queued or delayed.
    pub policer: Option<Policer>,
    /// Per-packet extra delay drawn uniformly from [0, jitter] and added to the fixed delay.
    /// Each packet is released at its own due time, so a later packet with a smaller draw
    /// overtakes an earlier one (netem-style reordering, counted in `reordered`). Zero keeps
    /// the default strict FIFO release.
    pub jitter: Duration,
}

/// A token-bucket policer (as ISPs and cloud egress limits apply): tokens accrue at
/// `rate_bps` up to `burst_bytes`; a packet passes if the bucket holds at least its length in
/// bytes (and takes them), otherwise it is dropped. The bucket starts full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policer {
    /// Token rate in bits/s: the policed rate.
    pub rate_bps: u64,
    /// Bucket depth in bytes: the largest burst passed at once after an idle spell.
    pub burst_bytes: u64,
}

impl Policer {
    pub fn new(rate_bps: u64, burst_bytes: u64) -> Self {
        Self { rate_bps, burst_bytes }
    }

    /// A bucket holding `depth` worth of the rate (e.g. 1.5 s, a common router default).
    pub fn with_depth(rate_bps: u64, depth: Duration) -> Self {
        let burst = (u128::from(rate_bps) * depth.as_nanos() / 8_000_000_000) as u64;
        Self { rate_bps, burst_bytes: burst }
    }
}

/// Two-state (Gilbert-Elliott) loss: a Markov chain between a good and a bad state, stepped
/// once per packet, each state losing with its own probability. Losses come in bursts of mean
/// length ~`1 / p_bad_to_good` packets in the bad state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    pub p_good_to_bad: f64,
    pub p_bad_to_good: f64,
    pub loss_in_good: f64,
    pub loss_in_bad: f64,
}

impl GilbertElliott {
    /// A chain losing `mean_loss` of packets on average, in bad spells of `mean_bad_len`
    /// packets on average that lose `loss_in_bad` of their packets (none lost when good).
    pub fn with_mean(mean_loss: f64, mean_bad_len: f64, loss_in_bad: f64) -> Self {
        let p_bad_to_good = 1.0 / mean_bad_len.max(1.0);
        // Stationary share of the bad state: pi = p_gb / (p_gb + p_bg) = mean_loss / loss_in_bad.
        let pi = (mean_loss / loss_in_bad).clamp(0.0, 0.999);
        let p_good_to_bad = pi * p_bad_to_good / (1.0 - pi);
        Self { p_good_to_bad, p_bad_to_good, loss_in_good: 0.0, loss_in_bad }
    }

    /// Long-run loss probability.
    pub fn mean_loss(&self) -> f64 {
        let pi = self.p_good_to_bad / (self.p_good_to_bad + self.p_bad_to_good);
        pi * self.loss_in_bad + (1.0 - pi) * self.loss_in_good
    }

    fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("p_good_to_bad", self.p_good_to_bad),
            ("p_bad_to_good", self.p_bad_to_good),
            ("loss_in_good", self.loss_in_good),
            ("loss_in_bad", self.loss_in_bad),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("Gilbert-Elliott {name} {v} not in [0, 1]"));
            }
        }
        if self.p_bad_to_good == 0.0 && self.p_good_to_bad > 0.0 {
            return Err("Gilbert-Elliott chain would stay bad forever".into());
        }
        Ok(())
    }
}

impl Default for PathSpec {
    fn default() -> Self {
        Self {
            one_way_delay: Duration::ZERO,
            loss: 0.0,
            rate_bps: None,
            queue_bytes: 1 << 20,
            bursty_loss: None,
            policer: None,
            jitter: Duration::ZERO,
        }
    }
}

impl PathSpec {
    /// Pure delay, no loss, no rate cap.
    pub fn delay(one_way_delay: Duration) -> Self {
        Self { one_way_delay, ..Self::default() }
    }

    pub fn with_loss(mut self, loss: f64) -> Self {
        self.loss = loss;
        self
    }

    pub fn with_bursty_loss(mut self, ge: GilbertElliott) -> Self {
        self.bursty_loss = Some(ge);
        self
    }

    pub fn with_rate(mut self, rate_bps: u64, queue_bytes: usize) -> Self {
        self.rate_bps = Some(rate_bps);
        self.queue_bytes = queue_bytes;
        self
    }

    pub fn with_policer(mut self, policer: Policer) -> Self {
        self.policer = Some(policer);
        self
    }

    pub fn with_jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), LabError> {
        let bad = |m: String| Err(LabError::InvalidArgument(m));
        if !(0.0..=1.0).contains(&self.loss) {
            return bad(format!("loss {} not in [0, 1]", self.loss));
        }
        if self.one_way_delay > Duration::from_secs(10) {
            return bad(format!("one-way delay {:?} above 10 s", self.one_way_delay));
        }
        if let Some(ge) = &self.bursty_loss {
            ge.validate().map_err(LabError::InvalidArgument)?;
            if self.loss > 0.0 {
                return bad("set either loss or bursty_loss, not both".into());
            }
        }
        if self.rate_bps == Some(0) {
            return bad("rate_bps must be > 0 (use None for no cap)".into());
        }
        if self.rate_bps.is_some() && self.queue_bytes == 0 {
            return bad("queue_bytes must be > 0 with a rate cap".into());
        }
        if let Some(p) = &self.policer {
            if p.rate_bps == 0 {
                return bad("policer rate_bps must be > 0".into());
            }
            // A bucket smaller than one full-size packet would drop every such packet.
            if p.burst_bytes < MAX_PACKET_BYTES {
                return bad(format!("policer burst_bytes {} below one {MAX_PACKET_BYTES}-byte packet", p.burst_bytes));
            }
        }
        if self.jitter > Duration::from_secs(10) {
            return bad(format!("jitter {:?} above 10 s", self.jitter));
        }
        Ok(())
    }
}

/// The largest packet the lab's links carry (their MTU).
const MAX_PACKET_BYTES: u64 = 1500;

/// Token-bucket arithmetic in exact integers: one byte of credit is 8e9 units, and each
/// nanosecond adds `rate_bps` units, so no rounding accumulates however small the steps.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate_bps: u64,
    depth_units: u128,
    units: u128,
    last_ns: u64,
}

const UNITS_PER_BYTE: u128 = 8_000_000_000;

impl TokenBucket {
    /// A full bucket at time 0.
    pub(crate) fn new(p: &Policer) -> Self {
        let depth_units = u128::from(p.burst_bytes) * UNITS_PER_BYTE;
        Self { rate_bps: p.rate_bps, depth_units, units: depth_units, last_ns: 0 }
    }

    /// Whole bytes of credit at `now_ns` (after refilling).
    #[cfg(test)]
    pub(crate) fn tokens_bytes(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        (self.units / UNITS_PER_BYTE) as u64
    }

    fn refill(&mut self, now_ns: u64) {
        // Time never runs backwards for the bucket: a stale timestamp adds nothing.
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.units = (self.units + u128::from(elapsed) * u128::from(self.rate_bps)).min(self.depth_units);
    }

    /// Takes `len` bytes of credit if there is that much; false (taking nothing) otherwise.
    pub(crate) fn conform(&mut self, now_ns: u64, len: usize) -> bool {
        self.refill(now_ns);
        let cost = len as u128 * UNITS_PER_BYTE;
        if self.units >= cost {
            self.units -= cost;
            true
        } else {
            false
        }
    }
}

/// What happens to one arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Lost,
    /// Dropped by the policer: too few tokens.
    Policed,
    QueueFull,
    /// Hand the packet to the far side at this CLOCK_MONOTONIC time.
    Deliver {
        release_ns: u64,
        /// Bottleneck backlog in bytes right after this packet was queued.
        backlog_bytes: u64,
    },
}

#[derive(Debug)]
pub(crate) struct LinkModel {
    delay_ns: u64,
    loss: f64,
    bursty: Option<GilbertElliott>,
    /// Gilbert-Elliott state: in the bad state.
    bad: bool,
    rate_bps: Option<u64>,
    queue_bytes: u64,
    rng: Rng,
    policer: Option<TokenBucket>,
    jitter_ns: u64,
    /// When the last admitted packet finishes serialisation.
    last_departure_ns: u64,
    /// Release time of the last admitted packet; without jitter releases never
    /// go backwards, so the emulator never reorders.
    last_release_ns: u64,
}

impl LinkModel {
    pub(crate) fn new(spec: &PathSpec, seed: u64) -> Self {
        Self {
            delay_ns: u64::try_from(spec.one_way_delay.as_nanos()).unwrap_or(u64::MAX),
            loss: spec.loss,
            bursty: spec.bursty_loss,
            bad: false,
            rate_bps: spec.rate_bps,
            queue_bytes: spec.queue_bytes as u64,
            rng: Rng::new(seed),
            policer: spec.policer.as_ref().map(TokenBucket::new),
            jitter_ns: u64::try_from(spec.jitter.as_nanos()).unwrap_or(u64::MAX),
            last_departure_ns: 0,
            last_release_ns: 0,
        }
    }

    /// Bytes still waiting for (or in) serialisation at `now_ns`.
    pub(crate) fn backlog_bytes(&self, now_ns: u64) -> u64 {
        match self.rate_bps {
            None => 0,
            Some(rate) => {
                let remaining_ns = u128::from(self.last_departure_ns.saturating_sub(now_ns));
                (remaining_ns * u128::from(rate) / 8_000_000_000) as u64
            }
        }
    }

    fn lose(&mut self) -> bool {
        match self.bursty {
            None => self.rng.bernoulli(self.loss),
            Some(ge) => {
                let flip = if self.bad { ge.p_bad_to_good } else { ge.p_good_to_bad };
                if self.rng.bernoulli(flip) {
                    self.bad = !self.bad;
                }
                self.rng.bernoulli(if self.bad { ge.loss_in_bad } else { ge.loss_in_good })
            }
        }
    }

    pub(crate) fn admit(&mut self, now_ns: u64, len: usize) -> Verdict {
        // Loss is applied on arrival, before the bottleneck: a lost packet
        // consumes no link capacity, like corruption on the access link.
        if self.lose() {
            return Verdict::Lost;
        }
        // The policer sits before the bottleneck, as an ISP's does before its access link:
        // it only ever drops, so a policed packet costs neither queue space nor time.
        if let Some(bucket) = &mut self.policer {
            if !bucket.conform(now_ns, len) {
                return Verdict::Policed;
            }
        }
        let mut backlog = 0;
        let departure_ns = match self.rate_bps {
            None => now_ns,
            Some(rate) => {
                backlog = self.backlog_bytes(now_ns);
                // An empty queue always accepts one packet, whatever the limit.
                if backlog > 0 && backlog + len as u64 > self.queue_bytes {
                    return Verdict::QueueFull;
                }
                let tx_ns = (len as u128 * 8_000_000_000 / u128::from(rate)) as u64;
                let dep = self.last_departure_ns.max(now_ns).saturating_add(tx_ns);
                self.last_departure_ns = dep;
                dep
            }
        };
        let release_ns = if self.jitter_ns == 0 {
            departure_ns.saturating_add(self.delay_ns).max(self.last_release_ns)
        } else {
            // Uniform in [0, jitter]; each packet keeps its own due time, so reordering follows.
            let extra = (self.rng.next_f64() * (self.jitter_ns as f64 + 1.0)) as u64;
            departure_ns.saturating_add(self.delay_ns).saturating_add(extra.min(self.jitter_ns))
        };
        self.last_release_ns = self.last_release_ns.max(release_ns);
        Verdict::Deliver {
            release_ns,
            // Without a rate cap there is no bottleneck queue at all.
            backlog_bytes: if self.rate_bps.is_some() { backlog + len as u64 } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn pure_delay() {
        let mut m = LinkModel::new(&PathSpec::delay(Duration::from_millis(15)), 1);
        assert_eq!(m.admit(100 * MS, 1500), Verdict::Deliver { release_ns: 115 * MS, backlog_bytes: 0 });
        assert!(matches!(
            m.admit(101 * MS, 60),
            Verdict::Deliver { release_ns, .. } if release_ns == 116 * MS
        ));
    }

    #[test]
    fn rate_serialises_back_to_back_packets() {
        // 12 Mbit/s: a 1500-byte packet takes exactly 1 ms.
        let spec = PathSpec::delay(Duration::from_millis(10)).with_rate(12_000_000, 4500);
        let mut m = LinkModel::new(&spec, 1);
        let releases: Vec<Option<u64>> = (0..3)
            .map(|_| match m.admit(0, 1500) {
                Verdict::Deliver { release_ns, .. } => Some(release_ns),
                _ => None,
            })
            .collect();
        // Three fit (backlog 1500, 3000, 4500 bytes); a fourth would make
        // 4500 + 1500 > 4500 and is tail-dropped.
        assert_eq!(releases, [Some(11 * MS), Some(12 * MS), Some(13 * MS)]);
        assert_eq!(m.admit(0, 1500), Verdict::QueueFull);
        // Half a millisecond in, 3.5 packets' worth remain queued.
        assert_eq!(m.backlog_bytes(MS / 2), 3750);
        // After the queue drains the link is idle again: no extra delay.
        assert!(matches!(
            m.admit(50 * MS, 1500),
            Verdict::Deliver { release_ns, .. } if release_ns == 61 * MS
        ));
    }

    #[test]
    fn loss_is_seeded_and_near_p() {
        let spec = PathSpec::delay(Duration::ZERO).with_loss(0.1);
        let run = |seed| {
            let mut m = LinkModel::new(&spec, seed);
            (0..10_000).filter(|&i| m.admit(i, 100) == Verdict::Lost).count()
        };
        assert_eq!(run(5), run(5));
        let lost = run(5) as f64;
        assert!((lost - 1000.0).abs() < 4.0 * 30.0, "lost {lost}");
    }

    #[test]
    fn gilbert_elliott_is_seeded_bursty_and_averages_its_mean() {
        // 0.2 % on average, in bad spells of 5 packets losing half of theirs.
        let ge = GilbertElliott::with_mean(0.002, 5.0, 0.5);
        assert!((ge.mean_loss() - 0.002).abs() < 1e-12);
        let spec = PathSpec::delay(Duration::ZERO).with_bursty_loss(ge);
        spec.validate().expect("valid");
        let n = 2_000_000u64;
        let run = |seed| {
            let mut m = LinkModel::new(&spec, seed);
            (0..n).map(|i| m.admit(i, 100) == Verdict::Lost).collect::<Vec<bool>>()
        };
        let lost = run(9);
        assert_eq!(lost, run(9), "same seed, same pattern");
        let count = lost.iter().filter(|l| **l).count() as f64;
        // Bursts inflate the variance: a loss count's sd is ~sqrt(n p (1 + 2 x mean burst)),
        // here ~sqrt(4000 * 6) = 155; allow 4 sd.
        assert!((count - 4000.0).abs() < 620.0, "lost {count}");
        // Burstiness: after a loss the next packet is lost far more often than on average
        // (in the bad state: ~0.8 x 0.5 = 0.4, against 0.002 for independent loss).
        let after_loss = lost.windows(2).filter(|w| w[0]).count() as f64;
        let pairs = lost.windows(2).filter(|w| w[0] && w[1]).count() as f64;
        let conditional = pairs / after_loss;
        assert!((0.3..0.5).contains(&conditional), "P(loss | loss) = {conditional}");
    }

    #[test]
    fn validation() {
        let ge = GilbertElliott::with_mean(0.002, 5.0, 0.5);
        assert!(PathSpec::delay(Duration::ZERO).with_loss(0.01).with_bursty_loss(ge).validate().is_err());
        let stuck = GilbertElliott { p_bad_to_good: 0.0, ..ge };
        assert!(PathSpec::delay(Duration::ZERO).with_bursty_loss(stuck).validate().is_err());
        assert!(PathSpec::delay(Duration::ZERO).with_loss(1.5).validate().is_err());
        assert!(PathSpec::delay(Duration::ZERO).with_rate(0, 10).validate().is_err());
        assert!(PathSpec::delay(Duration::ZERO).with_rate(10, 0).validate().is_err());
        assert!(PathSpec::default().validate().is_ok());
        assert!(PathSpec::default().with_policer(Policer::new(0, 15_000)).validate().is_err());
        assert!(PathSpec::default().with_policer(Policer::new(1_000_000, 1499)).validate().is_err());
        assert!(PathSpec::default().with_policer(Policer::new(1_000_000, 1500)).validate().is_ok());
        assert!(PathSpec::default().with_jitter(Duration::from_secs(11)).validate().is_err());
    }

    #[test]
    fn token_bucket_starts_full_refills_at_rate_and_caps_at_depth() {
        // 8 Mbit/s = 1 byte per microsecond; a 3000-byte bucket.
        let mut b = TokenBucket::new(&Policer::new(8_000_000, 3000));
        assert_eq!(b.tokens_bytes(0), 3000);
        assert!(b.conform(0, 1500));
        assert!(b.conform(0, 1500));
        // Empty: a packet arriving at once is dropped and takes nothing.
        assert!(!b.conform(0, 1500));
        assert_eq!(b.tokens_bytes(0), 0);
        // 1499 us later the bucket holds 1499 bytes: one short.
        assert!(!b.conform(1_499_000, 1500));
        assert!(b.conform(1_500_000, 1500));
        assert_eq!(b.tokens_bytes(1_500_000), 0);
        // Idle for a second: refilled to the depth, not beyond.
        assert_eq!(b.tokens_bytes(1_001_500_000), 3000);
        // A small packet passes where a big one would not.
        let mut b = TokenBucket::new(&Policer::new(8_000_000, 1500));
        assert!(b.conform(0, 1500));
        assert!(!b.conform(100_000, 1500));
        assert!(b.conform(100_000, 60));
        // Exact at fractional rates: 1 bit/s earns one byte in 8 s, not before.
        let mut b = TokenBucket::new(&Policer::new(1, 1500));
        assert!(b.conform(0, 1500));
        assert!(!b.conform(7_999_999_999, 1));
        assert!(b.conform(8_000_000_000, 1));
    }

    #[test]
    fn policer_passes_its_rate_plus_bucket_and_drops_the_rest() {
        // Offered 100 Mbit/s of 1500-byte packets for 2 s into a 20 Mbit/s policer with a
        // 15 kB bucket: what passes is rate x time + bucket, to within one packet.
        let spec = PathSpec::delay(Duration::from_millis(5)).with_policer(Policer::new(20_000_000, 15_000));
        let mut m = LinkModel::new(&spec, 1);
        let gap_ns = 120_000; // 1500 B at 100 Mbit/s
        let n = 2_000_000_000 / gap_ns;
        let mut passed = 0u64;
        let mut policed = 0u64;
        for i in 0..n {
            match m.admit(i * gap_ns, 1500) {
                Verdict::Deliver { release_ns, backlog_bytes } => {
                    // No queue and no added delay: exactly the fixed delay.
                    assert_eq!(release_ns, i * gap_ns + 5_000_000);
                    assert_eq!(backlog_bytes, 0);
                    passed += 1500;
                }
                Verdict::Policed => policed += 1,
                v => panic!("unexpected {v:?}"),
            }
        }
        let last = (n - 1) * gap_ns;
        let allowed = 20_000_000 * last / 8_000_000_000 + 15_000;
        assert!(passed <= allowed && passed + 1500 > allowed, "passed {passed}, allowed {allowed}");
        assert_eq!(policed + passed / 1500, n);
    }

    #[test]
    fn policer_before_bottleneck_leaves_queue_for_conforming_packets() {
        // Policer at 20 Mbit/s, then a 10 Mbit/s bottleneck: dropped packets never reach the queue.
        let spec =
            PathSpec::delay(Duration::ZERO).with_policer(Policer::new(20_000_000, 3000)).with_rate(10_000_000, 100_000);
        let mut m = LinkModel::new(&spec, 1);
        assert!(matches!(m.admit(0, 1500), Verdict::Deliver { backlog_bytes: 1500, .. }));
        assert!(matches!(m.admit(0, 1500), Verdict::Deliver { backlog_bytes: 3000, .. }));
        assert_eq!(m.admit(0, 1500), Verdict::Policed);
        assert_eq!(m.backlog_bytes(0), 3000);
    }

    /// Release times of `n` back-to-back packets through a jittery path, in arrival order.
    fn jittered_releases(jitter: Duration, n: u64, gap_ns: u64, seed: u64) -> Vec<u64> {
        let spec = PathSpec::delay(Duration::from_millis(10)).with_jitter(jitter);
        let mut m = LinkModel::new(&spec, seed);
        (0..n)
            .map(|i| match m.admit(i * gap_ns, 1500) {
                Verdict::Deliver { release_ns, .. } => release_ns,
                v => panic!("unexpected {v:?}"),
            })
            .collect()
    }

    #[test]
    fn jitter_is_uniform_within_its_bound_and_seeded() {
        let j = Duration::from_millis(4);
        let rel = jittered_releases(j, 20_000, 100_000, 3);
        assert_eq!(rel, jittered_releases(j, 20_000, 100_000, 3));
        let extras: Vec<u64> = rel.iter().enumerate().map(|(i, r)| r - i as u64 * 100_000 - 10 * MS).collect();
        assert!(extras.iter().all(|&e| e <= 4 * MS));
        // Uniform on [0, 4 ms]: mean 2 ms (sd of the mean ~8 us), a quarter in each quarter.
        let mean = extras.iter().sum::<u64>() as f64 / extras.len() as f64;
        assert!((mean - 2e6).abs() < 40_000.0, "mean extra delay {mean} ns");
        let first_quarter = extras.iter().filter(|&&e| e < MS).count() as f64 / extras.len() as f64;
        assert!((first_quarter - 0.25).abs() < 0.02, "share below 1 ms {first_quarter}");
        // Zero jitter keeps the fixed delay exactly.
        let flat = jittered_releases(Duration::ZERO, 100, 100_000, 3);
        assert!(flat.iter().enumerate().all(|(i, r)| *r == i as u64 * 100_000 + 10 * MS));
    }
}
