//! Recordings: a session's samples, ticks and host facts in one self-describing, compressed,
//! crash-tolerant file, replayed through the same pipeline and analysis as a live run.
//!
//! The file is a sequence of zstd frames (so `zstdcat FILE` shows it), each holding whole
//! JSON Lines of [`Entry`]; the first line is the [`Header`]. The writer closes a frame at least
//! once a second, so a file cut anywhere still replays every complete entry.

pub mod entry;
