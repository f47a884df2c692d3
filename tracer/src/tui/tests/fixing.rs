//! Fixing from the UI: the plan, the confirmation panel's keys, applying and undoing through
//! the (fake) host side, and what is said where fixing is not possible.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::{press, select};
use crate::tui::feed::{self, BBR, CUBIC};
use crate::tui::state::View;
use crate::tui::update::Action;

#[test]
fn f_opens_the_plan_and_nothing_changes_before_enter() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    assert_eq!(press(&mut state, KeyCode::Char('f')), Action::None);
    let panel = state.fix_panel.as_ref().expect("the panel opens on f");
    assert_eq!(panel.cookie, CUBIC);
    assert!(panel.plan.live, "a flagged flow's checkbox starts on");
    assert_eq!(panel.plan.to_switch.iter().map(|c| c.cookie).collect::<Vec<_>>(), [CUBIC], "bbr is left alone");
    assert!(panel.plan.target.host, "the feed's jellyfin shares the host's namespace");
    // The host's namespace needs its own confirmation: Enter alone changes nothing.
    press(&mut state, KeyCode::Enter);
    assert!(state.fixer.applied.is_empty());
    assert!(state.status().is_some_and(|s| s.contains("press h")), "{:?}", state.status());
    assert!(state.fix_panel.is_some(), "still open");
    // Other keys belong to the panel while it is open: no quitting, no moving the selection.
    assert_eq!(press(&mut state, KeyCode::Down), Action::None);
    assert_eq!(state.selected(), Some(CUBIC));
    // Esc then Enter typed fast reaches the UI as Alt-Enter: never a confirmation.
    press(&mut state, KeyCode::Char('h'));
    state.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    assert!(state.fixer.applied.is_empty() && state.fix_panel.is_some());
    press(&mut state, KeyCode::Char('h'));
    press(&mut state, KeyCode::Esc);
    assert!(state.fix_panel.is_none());
    assert!(state.fixer.applied.is_empty(), "Esc changes nothing");
    assert_eq!(state.status(), Some("fix cancelled: nothing changed"));

    press(&mut state, KeyCode::Char('f'));
    press(&mut state, KeyCode::Char('h'));
    press(&mut state, KeyCode::Char(' '));
    assert!(!state.fix_panel.as_ref().expect("open").plan.live, "space unticks the switch");
    press(&mut state, KeyCode::Char(' '));
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.fixer.applied.len(), 1);
    assert!(state.fixer.applied[0].live);
    assert!(state.fix_panel.is_none());
    assert_eq!(state.view(), View::Detail, "the switched flow's detail shows what it did");
    assert_eq!(state.detail_cookie(), Some(CUBIC));
    let taken = state.take_actions();
    assert_eq!(taken.len(), 1, "one action for the recorder");
    assert_eq!(taken[0].switched[0].cookie, CUBIC);
    assert!(state.take_actions().is_empty(), "taken once");
    assert!(state.status().is_some_and(|s| s.contains("1 connection switched to bbr")), "{:?}", state.status());

    // u undoes it; a second u says there is nothing to undo.
    press(&mut state, KeyCode::Char('u'));
    assert_eq!(state.fixer.undone, [feed::HOST_NETNS]);
    assert_eq!(state.actions.len(), 2);
    assert!(state.status().is_some_and(|s| s.starts_with("undo of the fix")), "{:?}", state.status());
    press(&mut state, KeyCode::Char('u'));
    assert_eq!(state.fixer.undone.len(), 1);
    assert!(state.status().is_some_and(|s| s.contains("nothing to undo")), "{:?}", state.status());
}

#[test]
fn an_unflagged_flow_is_not_switched_unless_ticked() {
    let mut state = feed::scene();
    select(&mut state, BBR);
    press(&mut state, KeyCode::Char('f'));
    assert!(!state.fix_panel.as_ref().expect("open").plan.live);
}

#[test]
fn f_without_a_host_side_or_in_a_replay_says_why() {
    let mut state = feed::scene();
    state.state.can_fix = false;
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Char('f'));
    assert!(state.fix_panel.is_none());
    assert!(state.status().is_some_and(|s| s.contains("needs the live kernel source")), "{:?}", state.status());
    state.replay = true;
    press(&mut state, KeyCode::Char('u'));
    assert!(state.status().is_some_and(|s| s.contains("a replay")), "{:?}", state.status());
    assert!(state.fixer.applied.is_empty() && state.fixer.undone.is_empty());
}
