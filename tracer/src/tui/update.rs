//! Keys to state changes. Pure: no terminal, no clock, so every binding is unit-tested.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::state::{AppState, Screen};
use crate::analysis::filter::FilterSpec;

/// What the loop should do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Apply this kernel filter (a side effect the front end owns); the state learns the
    /// outcome through [`AppState::kernel_filter_applied`].
    SetKernelFilter(FilterSpec),
}

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
    if state.typing_filter {
        filter_key(state, key);
        return Action::None;
    }
    if state.typing_kernel_filter {
        return kernel_filter_key(state, key);
    }
    match key.code {
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Char('?') => state.help = true,
        KeyCode::Char(' ') => state.toggle_pause(),
        KeyCode::Char('F') => state.typing_kernel_filter = true,
        _ => match state.screen {
            Screen::Table => table_key(state, key),
            Screen::Detail => detail_key(state, key),
        },
    }
    Action::None
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
            state.typing_filter = true;
            state.filter_input = state.filter.clone();
        }
        KeyCode::Esc if !state.filter.is_empty() => {
            state.filter.clear();
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

fn filter_key(state: &mut AppState, key: KeyEvent) {
    match key.code {
        KeyCode::Enter => {
            state.typing_filter = false;
            state.filter = state.filter_input.trim().to_string();
            state.apply_view();
        }
        KeyCode::Esc => {
            state.typing_filter = false;
            state.filter_input.clear();
            state.filter.clear();
            state.apply_view();
        }
        KeyCode::Backspace => {
            state.filter_input.pop();
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => state.filter_input.clear(),
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => state.filter_input.push(c),
        _ => {}
    }
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

/// `container=NAME cgroup=PATH netns=NAME`, space separated, each key as often as wanted; empty
/// is no filter. The first mistake is the error, in one line.
pub fn parse_filter_spec(text: &str) -> Result<FilterSpec, String> {
    let mut spec = FilterSpec::default();
    for term in text.split_whitespace() {
        let Some((key, value)) = term.split_once('=') else {
            return Err(format!("{term:?} is not KEY=VALUE (container=, cgroup= or netns=)"));
        };
        if value.is_empty() {
            return Err(format!("{key}= needs a value"));
        }
        let list = match key {
            "container" => &mut spec.containers,
            "cgroup" => &mut spec.cgroups,
            "netns" => &mut spec.netns,
            _ => return Err(format!("unknown key {key:?}: use container=, cgroup= or netns=")),
        };
        list.push(value.to_string());
    }
    Ok(spec)
}
