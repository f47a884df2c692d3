//! Keys to state changes, one screen and prompt at a time. Pure: no terminal, no clock, so
//! every binding is unit-tested.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::parse::{parse_filter_spec, parse_seek_time};
use super::{Action, PlaybackCommand};
use crate::tui::state::{AppState, Screen};

/// Apply one key to the state.
pub fn handle_key(state: &mut AppState, key: KeyEvent) -> Action {
    // Terminals with the kitty protocol also report releases; act on presses (and repeats) only.
    if key.kind == KeyEventKind::Release {
        return Action::None;
    }
    // Raw mode turns Ctrl-C into a key: it must quit from anywhere, even while typing.
    if key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c' | 'C')) {
        return Action::Quit;
    }
    // A status message is read by the time the next key comes.
    state.status = None;
    if state.help {
        state.help = false;
        return Action::None;
    }
    if state.typing_row_filter {
        row_filter_key(state, key);
        return Action::None;
    }
    if state.typing_kernel_filter {
        return kernel_filter_key(state, key);
    }
    if state.typing_seek {
        return seek_key(state, key);
    }
    if state.fix_panel.is_some() {
        return panel_key(state, key);
    }
    if state.replay {
        let command = match key.code {
            // In a replay, space pauses the playback itself (the display follows it).
            KeyCode::Char(' ') => Some(PlaybackCommand::TogglePause),
            KeyCode::Char('n' | '.') => Some(PlaybackCommand::Step),
            KeyCode::Char('+' | '=') => Some(PlaybackCommand::Faster),
            KeyCode::Char('-') => Some(PlaybackCommand::Slower),
            KeyCode::Right if state.screen == Screen::Table => Some(PlaybackCommand::SeekBy(10)),
            KeyCode::Left if state.screen == Screen::Table => Some(PlaybackCommand::SeekBy(-10)),
            KeyCode::Char('t') => {
                state.typing_seek = true;
                state.seek_input.clear();
                None
            }
            _ => None,
        };
        if let Some(command) = command {
            return Action::Playback(command);
        }
        if state.typing_seek {
            return Action::None;
        }
    }
    match key.code {
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Char('?') => state.help = true,
        KeyCode::Char(' ') => state.toggle_pause(),
        KeyCode::Char('F') => state.typing_kernel_filter = true,
        KeyCode::Char('f' | 'u') => return fix_key(state, key.code == KeyCode::Char('u')),
        _ => match state.screen {
            Screen::Table => table_key(state, key),
            Screen::Detail => detail_key(state, key),
        },
    }
    Action::None
}

/// `f` (fix) or `u` (undo) on the flow in the detail view, or the selected one.
fn fix_key(state: &mut AppState, undo: bool) -> Action {
    if !state.can_fix {
        state.status = Some(if state.replay {
            "a replay shows what was done; it changes nothing on this host".into()
        } else {
            "fixing needs the live kernel source (run cctrace as root, without a recording)".into()
        });
        return Action::None;
    }
    let row = match state.screen {
        Screen::Detail => state.detail_cookie.and_then(|c| state.snapshot.iter().find(|r| r.cookie == c)),
        Screen::Table => state.selected_row(),
    };
    let Some(row) = row else {
        state.status = Some("select a flow first".into());
        return Action::None;
    };
    if undo {
        Action::UndoFix { netns: row.netns }
    } else if row.finding.is_some_and(|f| f.remote) {
        state.status = Some("its sender is on another host: the detail view (⏎) lists what to run there".into());
        Action::None
    } else {
        Action::PlanFix { cookie: row.cookie, netns: row.netns, flagged: row.flagged }
    }
}

fn table_key(state: &mut AppState, key: KeyEvent) {
    let page = state.page_rows.get().max(1) as isize;
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => state.move_selection(-1),
        KeyCode::Down | KeyCode::Char('j') => state.move_selection(1),
        KeyCode::PageUp => state.move_selection(-page),
        KeyCode::PageDown => state.move_selection(page),
        KeyCode::Home => state.select_pos(0),
        KeyCode::End | KeyCode::Char('G') => state.select_pos(usize::MAX),
        KeyCode::Char('g') => state.toggle_grouping(),
        KeyCode::Enter => state.open_detail(),
        KeyCode::Char('/') => {
            state.typing_row_filter = true;
            state.row_filter_input = state.row_filter.clone();
        }
        KeyCode::Esc if !state.row_filter.is_empty() => {
            state.row_filter.clear();
            state.apply_view();
        }
        KeyCode::Char('s') => {
            state.sort = state.sort.next();
            state.sort_dir = state.sort.natural_dir();
            state.apply_view();
        }
        KeyCode::Char('S' | 'r') => {
            state.sort_dir = state.sort_dir.reversed();
            state.apply_view();
        }
        KeyCode::Char('a') => {
            state.show_all = !state.show_all;
            state.apply_view();
        }
        KeyCode::Char('U') => state.show_udp = !state.show_udp,
        _ => {}
    }
}

fn detail_key(state: &mut AppState, key: KeyEvent) {
    let max = state.detail_max_scroll.get();
    let page = state.page_rows.get().clamp(1, usize::from(u16::MAX)) as u16;
    let scroll = &mut state.detail_scroll;
    match key.code {
        KeyCode::Esc | KeyCode::Backspace | KeyCode::Left | KeyCode::Char('h') => state.close_detail(),
        KeyCode::Down | KeyCode::Char('j') => *scroll = scroll.saturating_add(1).min(max),
        KeyCode::Up | KeyCode::Char('k') => *scroll = (*scroll).min(max).saturating_sub(1),
        KeyCode::PageDown => *scroll = scroll.saturating_add(page).min(max),
        KeyCode::PageUp => *scroll = (*scroll).min(max).saturating_sub(page),
        KeyCode::Home | KeyCode::Char('g') => *scroll = 0,
        // Pinned to the end, as the verdict's text grows or shrinks with each evaluation (the
        // view clamps it to what the text has).
        KeyCode::End | KeyCode::Char('G') => *scroll = u16::MAX,
        _ => {}
    }
}

fn row_filter_key(state: &mut AppState, key: KeyEvent) {
    match key.code {
        KeyCode::Enter => {
            state.typing_row_filter = false;
            state.row_filter = state.row_filter_input.trim().to_string();
            state.apply_view();
        }
        KeyCode::Esc => {
            state.typing_row_filter = false;
            state.row_filter_input.clear();
            state.row_filter.clear();
            state.apply_view();
        }
        KeyCode::Backspace => {
            state.row_filter_input.pop();
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => state.row_filter_input.clear(),
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => state.row_filter_input.push(c),
        _ => {}
    }
}

/// The `t` prompt (a replay): Enter asks the player to go to the time typed (a typo is
/// reported without asking); Esc leaves the playback where it is.
fn seek_key(state: &mut AppState, key: KeyEvent) -> Action {
    match key.code {
        KeyCode::Enter => {
            state.typing_seek = false;
            match parse_seek_time(&state.seek_input) {
                Some(secs) => return Action::Playback(PlaybackCommand::SeekTo(secs)),
                None => state.status = Some(format!("not a time: {:?} (90, 1:30, 1m30s)", state.seek_input)),
            }
        }
        KeyCode::Esc => state.typing_seek = false,
        KeyCode::Backspace => {
            state.seek_input.pop();
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => state.seek_input.push(c),
        _ => {}
    }
    Action::None
}

/// The kernel filter prompt: Enter parses what was typed and asks the front end to apply it
/// (a typo is reported without asking); Esc leaves the filter as it is.
fn kernel_filter_key(state: &mut AppState, key: KeyEvent) -> Action {
    match key.code {
        KeyCode::Enter => {
            state.typing_kernel_filter = false;
            match parse_filter_spec(&state.kernel_filter_input) {
                Ok(spec) => return Action::SetKernelFilter(spec),
                Err(e) => state.status = Some(format!("kernel filter unchanged: {e}")),
            }
        }
        KeyCode::Esc => {
            state.typing_kernel_filter = false;
            state.kernel_filter_input = state.kernel_filter.describe().join(" ");
        }
        KeyCode::Backspace => {
            state.kernel_filter_input.pop();
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => state.kernel_filter_input.clear(),
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => state.kernel_filter_input.push(c),
        _ => {}
    }
    Action::None
}

/// A key while the panel is open: it takes every key (but Ctrl-C, handled before).
fn panel_key(state: &mut AppState, key: KeyEvent) -> Action {
    let Some(panel) = state.fix_panel.as_mut() else { return Action::None };
    // Only a plain Enter confirms: a terminal reads Esc followed quickly by Enter as Alt-Enter,
    // and a cancel must never turn into a confirmation.
    if key.modifiers != KeyModifiers::NONE && key.code == KeyCode::Enter {
        return Action::None;
    }
    match key.code {
        KeyCode::Enter => match panel.blocked() {
            Some(why) => state.status = Some(why.into()),
            None => return Action::ApplyFix,
        },
        KeyCode::Esc | KeyCode::Char('q' | 'n') => {
            state.fix_panel = None;
            state.status = Some("fix cancelled: nothing changed".into());
        }
        KeyCode::Char(' ' | 'x') => panel.plan.live = !panel.plan.live,
        KeyCode::Char('h') if panel.plan.target.host => panel.host_confirmed = !panel.host_confirmed,
        _ => {}
    }
    Action::None
}
