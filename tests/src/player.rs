//! A real video player: Debian's ffmpeg playing an HLS stream (made by ffmpeg, served by nginx)
//! at the video's own rate (`-re`), its speed read from its own progress report (`-progress`):
//! the media time it has played (`out_time_us`) and its `speed=`, media time over the wall time
//! since it started. A player that keeps up plays at 1.0x; one whose download cannot keep up
//! with the stream's bitrate stalls below it.

use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use cctrace_lab::Netns;

use crate::services::{tied, Reaped, ScratchDir};

/// An HLS stream on disk: a playlist (`index.m3u8`) and its segments, at a constant bitrate.
#[derive(Debug)]
pub struct HlsStream {
    dir: ScratchDir,
    pub bitrate_bps: u64,
    pub secs: u32,
}

/// The playlist's name in the stream's directory.
pub const PLAYLIST: &str = "index.m3u8";

impl HlsStream {
    /// `secs` of 720p test video at a constant `bitrate_bps` (MPEG-2, padded to the rate as a
    /// broadcast encoder pads), cut into segments of `segment_secs`. Two segments' worth is
    /// encoded and then looped without re-encoding: a second of CPU, not a minute.
    pub fn make(bitrate_bps: u64, secs: u32, segment_secs: u32) -> Result<Self> {
        let dir = ScratchDir::create("hls")?;
        let unit = dir.path().join("unit.ts");
        let rate = bitrate_bps.to_string();
        let buffer = (bitrate_bps / 2).to_string();
        let mut encode = Command::new("ffmpeg");
        ffmpeg(&mut encode).args(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25", "-t"]).args([
            (2 * segment_secs).to_string().as_str(),
            "-c:v",
            "mpeg2video",
            "-b:v",
            &rate,
            "-minrate",
            &rate,
            "-maxrate",
            &rate,
            "-bufsize",
            &buffer,
            "-g",
            "25",
            "-f",
            "mpegts",
        ]);
        encode
            .arg(&unit)
            .output_within(CHILD_DEADLINE)
            .context("ffmpeg encoding the stream (apt-get install ffmpeg)")
            .and_then(ok)?;
        let loops = secs.div_ceil(2 * segment_secs).saturating_sub(1).to_string();
        let segment = dir.path().join("seg%03d.ts");
        let mut segment_it = Command::new("ffmpeg");
        ffmpeg(&mut segment_it).args(["-stream_loop", &loops, "-i"]).arg(&unit).args([
            "-c",
            "copy",
            "-f",
            "hls",
            "-hls_time",
            &segment_secs.to_string(),
            "-hls_list_size",
            "0",
            "-hls_playlist_type",
            "vod",
            "-hls_segment_filename",
        ]);
        segment_it
            .arg(&segment)
            .arg(dir.path().join(PLAYLIST))
            .output_within(CHILD_DEADLINE)
            .context("ffmpeg segmenting the stream")
            .and_then(ok)?;
        std::fs::remove_file(&unit)?;
        Ok(Self { dir, bitrate_bps, secs })
    }

    /// The directory to serve.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// ffmpeg's own options for a quiet run.
fn ffmpeg(cmd: &mut Command) -> &mut Command {
    cmd.args(["-nostdin", "-hide_banner", "-loglevel", "error", "-y"])
}

fn ok(out: std::process::Output) -> Result<()> {
    if !out.status.success() {
        bail!("ffmpeg failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// One progress report of the player.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// When the report arrived.
    pub at: Instant,
    /// Media time played, µs.
    pub out_time_us: i64,
    /// ffmpeg's `speed=`: media time over the wall time since it started.
    pub speed: Option<f64>,
}

/// ffmpeg playing an HLS URL at the video's rate, reporting its progress twice a second.
#[derive(Debug)]
pub struct Player {
    process: Reaped,
    reports: Arc<Mutex<Vec<Progress>>>,
    pub started: Instant,
}

impl Player {
    /// Play `url` from namespace `ns`: read at the video's own rate (`-re`), the packets copied
    /// to nowhere (decoding would only cost CPU: the download is what stalls).
    pub fn start(ns: &Netns, url: &str) -> Result<Self> {
        let mut cmd = ns.command("ffmpeg");
        ffmpeg(&mut cmd)
            .args(["-nostats", "-progress", "pipe:1", "-stats_period", "0.5", "-re", "-i", url])
            .args(["-c", "copy", "-f", "null", "-"]);
        let mut cmd = tied(cmd);
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn().context("starting ffmpeg (apt-get install ffmpeg)")?;
        let out = child.stdout.take().context("no stdout")?;
        let reports = Arc::new(Mutex::new(Vec::new()));
        let sink = reports.clone();
        std::thread::spawn(move || read_progress(BufReader::new(out), &sink));
        Ok(Self { process: Reaped(child), reports, started: Instant::now() })
    }

    /// Every report so far.
    pub fn reports(&self) -> Vec<Progress> {
        self.reports.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// ffmpeg's own latest `speed=`.
    pub fn speed(&self) -> Option<f64> {
        self.reports().iter().rev().find_map(|p| p.speed)
    }

    /// Media seconds played per wall second between the reports nearest `from` and `to`, from
    /// ffmpeg's own `out_time`: what the player got over that span, its start-up excluded.
    pub fn speed_between(&self, from: Instant, to: Instant) -> Option<f64> {
        let reports = self.reports();
        let near = |t: Instant| reports.iter().min_by_key(|p| if p.at > t { p.at - t } else { t - p.at }).copied();
        let (a, b) = (near(from)?, near(to)?);
        let wall = b.at.checked_duration_since(a.at)?.as_secs_f64();
        (wall > 0.0).then(|| (b.out_time_us - a.out_time_us) as f64 / 1e6 / wall)
    }

    /// [`Player::speed_between`] over the next `window`.
    pub fn speed_over(&self, window: Duration) -> Option<f64> {
        let from = Instant::now();
        std::thread::sleep(window);
        self.speed_between(from, Instant::now())
    }

    /// Whether ffmpeg is still playing.
    pub fn playing(&mut self) -> bool {
        matches!(self.process.0.try_wait(), Ok(None))
    }

    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }
}

/// Read `-progress` blocks (`key=value` lines, each block ended by `progress=...`).
fn read_progress(out: impl std::io::BufRead, sink: &Mutex<Vec<Progress>>) {
    let (mut out_time_us, mut speed) = (None, None);
    for line in out.lines().map_while(Result::ok) {
        let Some((key, value)) = line.split_once('=') else { continue };
        match key {
            "out_time_us" => out_time_us = value.trim().parse::<i64>().ok(),
            "speed" => speed = value.trim().trim_end_matches('x').parse::<f64>().ok(),
            "progress" => {
                if let Some(us) = out_time_us.take() {
                    let p = Progress { at: Instant::now(), out_time_us: us, speed: speed.take() };
                    sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(p);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ffmpegs_progress_blocks() {
        let text = "frame=0\nout_time_us=1500000\nout_time=00:00:01.500000\nspeed=0.998x\nprogress=continue\n\
                    out_time_us=N/A\nspeed=N/A\nprogress=continue\nout_time_us=2000000\nspeed=1.01x\nprogress=end\n";
        let sink = Mutex::new(Vec::new());
        read_progress(BufReader::new(text.as_bytes()), &sink);
        let got: Vec<(i64, Option<f64>)> =
            sink.into_inner().expect("lock").iter().map(|p| (p.out_time_us, p.speed)).collect();
        assert_eq!(got, vec![(1_500_000, Some(0.998)), (2_000_000, Some(1.01))]);
    }
}
