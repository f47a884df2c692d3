//! The update step: what a key or a frame changes in the state. Above the state and the
//! order (which it drives), beside the views (which it never reads: the few layout facts a key
//! needs, such as a page's height, are in the state). Pure: no terminal, no clock; a side
//! effect a key asks for (a kernel filter, a fix, the playback) is an [`Action`] for the front
//! end, whose outcome comes back through the state's methods.

mod keys;
mod parse;
mod tick;

use crate::analysis::filter::FilterSpec;
#[cfg(doc)]
use crate::tui::state::AppState;

pub use keys::handle_key;
pub use parse::{parse_filter_spec, parse_seek_time};

/// What the loop should do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Apply this kernel filter (a side effect the front end owns); the state learns the
    /// outcome through [`AppState::kernel_filter_applied`].
    SetKernelFilter(FilterSpec),
    /// Move the playback of a recording (the front end's player does it).
    Playback(PlaybackCommand),
    /// Ask the host side what fixing flow `cookie`'s namespace would do; the state learns it
    /// through [`AppState::fix_planned`].
    PlanFix {
        cookie: u64,
        netns: u32,
        flagged: bool,
    },
    /// The confirmation panel's plan was confirmed: carry it out ([`AppState::fix_done`]).
    ApplyFix,
    /// Undo the fix of the namespace `netns` ([`AppState::fix_done`]).
    UndoFix {
        netns: u32,
    },
}

/// What the replay's keys ask of the player.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaybackCommand {
    TogglePause,
    Step,
    /// Seconds of recorded time, backwards when negative.
    SeekBy(i64),
    /// Seconds since the recording began.
    SeekTo(u64),
    Faster,
    Slower,
}
