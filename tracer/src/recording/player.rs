//! A recording played at its own pace in the terminal UI: pause, step, seek and 1x-64x speed.
//!
//! [`PacedRecording`] is the source: it hands out a recording's items, holding each tick back
//! until its recorded time has come at the chosen speed. [`Player`] is the keys' side of it.
//! A seek forwards reads ahead without pacing (and tells the UI not to draw meanwhile); a seek
//! backwards starts the recording and the analysis over and reads ahead to the target, so the
//! verdicts there are the ones the recorded run reached, not a guess.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Result;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::analysis::sample::Sample;
use crate::recording::RecordingSource;
use crate::source::{BoxFuture, EventSource, Playback, SourceCounters, SourceItem};

/// The speeds `+` and `-` step through.
pub const SPEEDS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

#[derive(Debug, Default)]
struct Controls {
    paused: bool,
    speed_index: usize,
    /// Let items through up to the next tick, then stay paused.
    step: bool,
    /// Recorded time to go to, since the recording began.
    seek_to: Option<u64>,
    position_ns: u64,
    catching_up: bool,
    /// Bumped on every change the pacing must start again from (speed, resume, seek).
    generation: u64,
}

#[derive(Debug, Default)]
struct Shared {
    controls: Mutex<Controls>,
    changed: Notify,
}

/// Steers a [`PacedRecording`]: what the replay's keys call.
#[derive(Clone, Debug, Default)]
pub struct Player {
    shared: Arc<Shared>,
}

impl Player {
    fn change(&self, f: impl FnOnce(&mut Controls)) {
        {
            let mut c = self.lock();
            f(&mut c);
            c.generation += 1;
        }
        self.shared.changed.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, Controls> {
        self.shared.controls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn toggle_pause(&self) {
        self.change(|c| c.paused = !c.paused);
    }

    /// While paused: play up to the next tick (one recorded interval), then pause again.
    pub fn step(&self) {
        self.change(|c| {
            c.paused = true;
            c.step = true;
        });
    }

    pub fn faster(&self) {
        self.change(|c| c.speed_index = (c.speed_index + 1).min(SPEEDS.len() - 1));
    }

    pub fn slower(&self) {
        self.change(|c| c.speed_index = c.speed_index.saturating_sub(1));
    }

    /// Go `delta_secs` of recorded time forwards or backwards from where playback is.
    pub fn seek_by(&self, delta_secs: i64) {
        self.change(|c| {
            let delta = delta_secs.unsigned_abs().saturating_mul(1_000_000_000);
            let from = c.seek_to.unwrap_or(c.position_ns);
            c.seek_to = Some(if delta_secs < 0 { from.saturating_sub(delta) } else { from.saturating_add(delta) });
        });
    }

    /// Go to `at` of recorded time since the recording began.
    pub fn seek_to(&self, at: Duration) {
        self.change(|c| c.seek_to = Some(u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)));
    }

    pub fn playback(&self) -> Playback {
        let c = self.lock();
        Playback {
            position_ns: c.position_ns,
            speed: SPEEDS[c.speed_index],
            paused: c.paused,
            catching_up: c.catching_up,
        }
    }
}

/// A recording as a paced source for the pipeline's scripted mode.
pub struct PacedRecording {
    path: PathBuf,
    source: RecordingSource,
    start_ns: u64,
    /// Read but not yet handed out (kept across cancelled futures).
    pending: Option<SourceItem>,
    /// Wall instant and recorded time pacing counts from, and the controls' generation then.
    anchor: Option<(Instant, u64, u64)>,
    catch_up_to: Option<u64>,
    /// Recorded time of the last tick handed out: pacing resumes from there.
    last_tick_ns: Option<u64>,
    player: Player,
}

impl PacedRecording {
    pub fn open(path: &Path) -> Result<Self> {
        let source = RecordingSource::open(path)?;
        let start_ns = source.header().start_monotonic_ns;
        Ok(Self {
            path: path.to_path_buf(),
            source,
            start_ns,
            pending: None,
            anchor: None,
            catch_up_to: None,
            last_tick_ns: None,
            player: Player::default(),
        })
    }

    pub fn player(&self) -> Player {
        self.player.clone()
    }

    pub fn source(&self) -> &RecordingSource {
        &self.source
    }

    /// Take a seek request: `Some(Restart)` when it goes backwards (read from the start again).
    fn take_seek(&mut self) -> Result<Option<SourceItem>> {
        let mut c = self.player.lock();
        let Some(target) = c.seek_to.take() else { return Ok(None) };
        self.anchor = None;
        c.catching_up = true;
        self.catch_up_to = Some(target);
        if target >= c.position_ns {
            return Ok(None);
        }
        c.position_ns = 0;
        drop(c);
        self.source = RecordingSource::open(&self.path)?;
        self.pending = None;
        self.last_tick_ns = None;
        Ok(Some(SourceItem::Restart))
    }

    async fn next_paced(&mut self) -> Result<Option<SourceItem>> {
        loop {
            if let Some(restart) = self.take_seek()? {
                return Ok(Some(restart));
            }
            if self.pending.is_none() {
                self.pending = self.source.read_item()?;
            }
            let now_ns = match &self.pending {
                None => {
                    let mut c = self.player.lock();
                    c.catching_up = false;
                    self.catch_up_to = None;
                    return Ok(None);
                }
                Some(SourceItem::Tick { now_ns, .. }) => *now_ns,
                // Samples and host facts go out at once: only ticks are held to their time.
                Some(_) => return Ok(self.pending.take()),
            };
            let at = now_ns.saturating_sub(self.start_ns);
            if let Some(target) = self.catch_up_to {
                let mut c = self.player.lock();
                c.position_ns = at;
                if at >= target {
                    // The target: shown at once, paused or not, and paced from here on.
                    c.catching_up = false;
                    self.catch_up_to = None;
                    self.anchor = None;
                }
                drop(c);
                self.last_tick_ns = Some(now_ns);
                return Ok(self.pending.take());
            }
            // Paused: wait for a change (a resume, a step, a seek), then look again.
            let (paused, step, speed, generation) = {
                let c = self.player.lock();
                (c.paused, c.step, SPEEDS[c.speed_index], c.generation)
            };
            if paused && !step {
                self.player.shared.changed.notified().await;
                continue;
            }
            let anchor = match self.anchor {
                Some(a) if a.2 == generation => a,
                _ => {
                    // From the last tick shown: after a resume or a new speed, the next one is
                    // one recorded interval (at the new speed) away.
                    let a = (Instant::now(), self.last_tick_ns.unwrap_or(now_ns).min(now_ns), generation);
                    self.anchor = Some(a);
                    a
                }
            };
            let due = anchor.0 + Duration::from_nanos(((now_ns.saturating_sub(anchor.1)) as f64 / speed) as u64);
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                // A key changed something: pace again from the new settings.
                () = self.player.shared.changed.notified() => continue,
            }
            {
                let mut c = self.player.lock();
                c.position_ns = at;
                if c.step {
                    c.step = false;
                }
            }
            self.last_tick_ns = Some(now_ns);
            return Ok(self.pending.take());
        }
    }
}

impl EventSource for PacedRecording {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        self.source.next_batch()
    }

    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(self.next_paced())
    }

    fn counters(&self) -> SourceCounters {
        self.source.counters()
    }

    fn playback(&self) -> Option<Playback> {
        Some(self.player.playback())
    }

    fn describe(&self) -> String {
        self.source.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::tests::{entries, record};

    /// A 10-tick recording (one tick a recorded second) in a file of its own.
    fn recording(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("cctrace-player-{}-{name}.cctrace", std::process::id()));
        std::fs::write(&path, record(&entries(10))).expect("write");
        path
    }

    /// The next tick's recorded offset in seconds, and the virtual time it took; other items skipped.
    async fn next_tick(p: &mut PacedRecording) -> Option<(u64, Duration)> {
        let t0 = Instant::now();
        loop {
            if let SourceItem::Tick { now_ns, .. } = p.next_item().await.expect("item")? {
                return Some(((now_ns - p.start_ns) / 1_000_000_000, t0.elapsed()));
            }
        }
    }

    /// Tokio's clock paused: sleeps end as soon as nothing else can run, so pacing is exact.
    fn on_paused_clock(f: impl std::future::Future<Output = ()>) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("rt");
        rt.block_on(f);
    }

    #[test]
    fn ticks_come_at_the_recorded_pace_times_the_speed() {
        let path = recording("pace");
        on_paused_clock(pace(&path));
        std::fs::remove_file(&path).expect("cleanup");
    }

    async fn pace(path: &Path) {
        let mut p = PacedRecording::open(path).expect("open");
        let player = p.player();
        assert_eq!(next_tick(&mut p).await.map(|t| t.0), Some(0));
        let (at, took) = next_tick(&mut p).await.expect("tick");
        assert_eq!((at, took.as_millis()), (1, 1000));
        player.faster();
        player.faster();
        let (at, took) = next_tick(&mut p).await.expect("tick");
        assert_eq!((at, took.as_millis()), (2, 250), "4x: a recorded second in a quarter");
    }

    #[test]
    fn pause_holds_step_gives_one_tick_and_seeks_go_both_ways() {
        let path = recording("seek");
        on_paused_clock(seek(&path));
        std::fs::remove_file(&path).expect("cleanup");
    }

    async fn seek(path: &Path) {
        let mut p = PacedRecording::open(path).expect("open");
        let player = p.player();
        next_tick(&mut p).await.expect("tick 0");
        player.toggle_pause();
        assert!(tokio::time::timeout(Duration::from_secs(30), next_tick(&mut p)).await.is_err(), "paused");
        player.step();
        assert_eq!(next_tick(&mut p).await.map(|t| t.0), Some(1), "one step");
        assert!(player.playback().paused, "and paused again");
        // Forwards: read ahead without pacing or drawing, the target shown though paused.
        player.seek_to(Duration::from_secs(6));
        let mut catching_up = Vec::new();
        loop {
            let (at, took) = next_tick(&mut p).await.expect("tick");
            assert_eq!(took, Duration::ZERO, "no pacing while seeking");
            catching_up.push(player.playback().catching_up);
            if at == 6 {
                break;
            }
        }
        assert_eq!(catching_up.last(), Some(&false), "done at the target");
        assert!(catching_up[..catching_up.len() - 1].iter().all(|c| *c));
        // Backwards: the source starts over (the analysis with it) and reads ahead again.
        player.seek_by(-4);
        assert_eq!(p.next_item().await.expect("item"), Some(SourceItem::Restart));
        let mut last = 0;
        while last < 2 {
            last = next_tick(&mut p).await.expect("tick").0;
        }
        assert_eq!(last, 2);
        assert_eq!(player.playback().position_ns, 2_000_000_000);
    }
}
