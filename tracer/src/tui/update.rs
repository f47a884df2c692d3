//! Keys to state changes. Pure: no terminal, no clock, so every binding is unit-tested.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::state::{AppState, Screen};

/// What the loop should do after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
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
    if state.help {
        state.help = false;
        return Action::None;
    }
    if state.typing_filter {
        filter_key(state, key);
        return Action::None;
    }
    match key.code {
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Char('?') => state.help = true,
        KeyCode::Char(' ') => state.toggle_pause(),
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
        KeyCode::Home | KeyCode::Char('g') => state.select_pos(0),
        KeyCode::End | KeyCode::Char('G') => state.select_pos(usize::MAX),
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
        KeyCode::Up | KeyCode::Char('k') => *scroll = scroll.saturating_sub(1),
        KeyCode::PageDown => *scroll = scroll.saturating_add(page).min(max),
        KeyCode::PageUp => *scroll = scroll.saturating_sub(page),
        KeyCode::Home | KeyCode::Char('g') => *scroll = 0,
        KeyCode::End | KeyCode::Char('G') => *scroll = max,
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
