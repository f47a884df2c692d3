//! Rendered screens through ratatui's `TestBackend`, pinned with insta. The feed and the clock
//! are fixed (see [`super::feed`]), so the screens are identical on every run.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};
use ratatui::Terminal;

use super::feed::{self, Scene, BBR, CUBIC, RECEIVER};
use super::state::AppState;
use super::view::draw;
use crate::source::SourceCounters;

fn render(state: &AppState, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal.draw(|f| draw(f, state)).expect("draw");
    terminal
}

fn press(state: &mut Scene, code: KeyCode) {
    state.key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn select(state: &mut Scene, cookie: u64) {
    press(state, KeyCode::Home);
    while state.selected() != Some(cookie) {
        let before = state.selected();
        press(state, KeyCode::Down);
        assert_ne!(state.selected(), before, "cookie {cookie} not listed");
    }
}

#[test]
fn table_80x24_with_a_flagged_row() {
    let state = feed::scene();
    let terminal = render(&state, 80, 24);
    insta::assert_snapshot!("table_80x24", terminal.backend());

    // The flagged row is marked and styled bold red, not only in text.
    let buf = terminal.backend().buffer();
    let row = (3..24).find(|&y| buf[(0, y)].symbol() == "⚑").expect("flagged row on screen");
    let style = buf[(10, row)].style();
    assert_eq!(style.fg, Some(Color::Red));
    assert!(style.add_modifier.contains(Modifier::BOLD));
}

#[test]
fn the_selection_alone_is_drawn_reversed_across_its_row_in_its_own_colours() {
    let mut state = feed::scene();
    for grouped in [false, true] {
        if grouped {
            press(&mut state, KeyCode::Char('g'));
        }
        select(&mut state, CUBIC);
        let terminal = render(&state, 80, 24);
        let buf = terminal.backend().buffer();
        let reversed = |x: u16, y: u16| buf[(x, y)].style().add_modifier.contains(Modifier::REVERSED);
        let lines: Vec<u16> = (0..24).filter(|&y| (0..80).any(|x| reversed(x, y))).collect();
        assert_eq!(lines.len(), 1, "grouped {grouped}: one line reversed, not {lines:?}");
        let y = lines[0];
        assert!((0..80).all(|x| reversed(x, y)), "grouped {grouped}: across the whole row");
        assert_eq!(buf[(0, y)].symbol(), "⚑", "grouped {grouped}: the flagged CUBIC flow's row");
        assert_eq!(buf[(0, y)].style().fg, Some(Color::Red), "grouped {grouped}: in its own colours");
    }
}

#[test]
fn table_120x40_all_flows_recording_lost_events() {
    let mut state = feed::state_with(12, 3, feed::batch);
    state.header.recording = Some("recording to /var/tmp/edge-07.cctrace".into());
    state.header.filters = vec!["port 5201,443".into()];
    state.tick(
        feed::ts_ns(121),
        SourceCounters { received: 560, lost: 3, decode_errors: 1, ..SourceCounters::default() },
    );
    press(&mut state, KeyCode::Char('a'));
    let terminal = render(&state, 120, 40);
    insta::assert_snapshot!("table_all_120x40", terminal.backend());
    let buf = terminal.backend().buffer();
    let cells: Vec<&str> = (0..120).map(|x| buf[(x, 1)].symbol()).collect();
    let lost = (0..114).find(|&x| cells[x..x + 6].concat() == "lost 3").expect("lost events shown");
    let lost = u16::try_from(lost).expect("column");
    assert_eq!(buf[(lost, 1)].style().fg, Some(Color::Red), "lost events highlighted");
}

#[test]
fn table_filtered_and_paused_80x24() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('/'));
    for c in "cgroup=7321".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Char(' '));
    insta::assert_snapshot!("table_filtered_paused_80x24", render(&state, 80, 24).backend());
}

#[test]
fn typing_a_filter_80x24() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('/'));
    for c in "bbr".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    insta::assert_snapshot!("typing_filter_80x24", render(&state, 80, 24).backend());
}

#[test]
fn detail_of_the_flagged_flow_80x24() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("detail_flagged_80x24", render(&state, 80, 24).backend());
    // Scrolling reaches the fix commands.
    press(&mut state, KeyCode::End);
    let _ = render(&state, 80, 24);
    press(&mut state, KeyCode::End);
    insta::assert_snapshot!("detail_flagged_80x24_scrolled", render(&state, 80, 24).backend());
}

/// The flagged flow in a namespace with a hostile, long `ip netns` name, scrolled to its fix.
fn detail_of_a_fix_with_long_lines(width: u16, height: u16) -> Terminal<TestBackend> {
    let mut env = feed::env();
    env.netns_names.insert(feed::CONTAINER_NETNS, "x;id>/tmp/p;#-a-namespace-name-long-enough-to-wrap".into());
    let in_container = |tick| {
        let mut b = feed::batch(tick);
        b.iter_mut().filter(|s| s.cookie == CUBIC).for_each(|s| s.netns = feed::CONTAINER_NETNS);
        b
    };
    let mut state = feed::state_in(env, 12, 0, in_container);
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Enter);
    let _ = render(&state, width, height);
    press(&mut state, KeyCode::End);
    render(&state, width, height)
}

#[test]
fn long_fix_lines_wrap_into_comments_or_continued_commands_only() {
    // Tall enough for a container's whole fix (command, EROFS note, run-time persistence).
    let terminal = detail_of_a_fix_with_long_lines(72, 44);
    insta::assert_snapshot!("detail_fix_long_lines_72x44", terminal.backend());
    let buf = terminal.backend().buffer();
    let rows: Vec<String> =
        (0..44).map(|y| (1..71).map(|x| buf[(x, y)].symbol()).collect::<String>().trim_end().to_string()).collect();
    let fix = rows.iter().position(|r| r == "fix (as root):").expect("the fix is on screen");
    let fix_rows: Vec<&String> = rows[fix + 1..].iter().take_while(|r| r.starts_with("  ")).collect();
    assert!(fix_rows.len() >= 6, "{rows:#?}");
    for (i, row) in fix_rows.iter().enumerate() {
        let text = row.trim_start();
        let continues = i > 0 && fix_rows[i - 1].ends_with(" \\");
        let command = ["ip ", "nsenter ", "sysctl ", "modprobe "].iter().any(|c| text.starts_with(c));
        assert!(text.starts_with('#') || continues || command, "row {i} looks like a command of its own: {row:?}");
    }
}

#[test]
fn detail_of_the_flagged_flow_120x40() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("detail_flagged_120x40", render(&state, 120, 40).backend());
}

#[test]
fn detail_of_an_app_limited_flow_120x40() {
    let mut state = feed::scene();
    select(&mut state, BBR);
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("detail_bbr_120x40", render(&state, 120, 40).backend());
}

#[test]
fn help_80x24() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('?'));
    insta::assert_snapshot!("help_80x24", render(&state, 80, 24).backend());
}

#[test]
fn empty_80x24() {
    let state = feed::state_with(0, 0, |_| Vec::new());
    insta::assert_snapshot!("empty_80x24", render(&state, 80, 24).backend());
}

#[test]
fn no_heavy_flows_80x24() {
    let state = feed::state_with(5, 0, feed::light_batch);
    insta::assert_snapshot!("heavy_only_empty_80x24", render(&state, 80, 24).backend());
}

#[test]
fn tiny_20x5() {
    let state = feed::scene();
    insta::assert_snapshot!("tiny_20x5", render(&state, 20, 5).backend());
}

#[test]
fn no_size_panics_in_any_view() {
    let mut states = Vec::new();
    states.push(feed::state_with(0, 0, |_| Vec::new()));
    let mut table = feed::scene();
    press(&mut table, KeyCode::Char('a'));
    states.push(table);
    let mut detail = feed::scene();
    select(&mut detail, CUBIC);
    press(&mut detail, KeyCode::Enter);
    states.push(detail);
    let mut help = feed::scene();
    press(&mut help, KeyCode::Char('?'));
    states.push(help);
    let mut young = feed::state_with(0, 0, feed::batch); // detail with one history point
    press(&mut young, KeyCode::Enter);
    states.push(young);
    for state in &states {
        for w in [0, 1, 2, 5, 10, 20, 39, 40, 41, 55, 80, 99, 100, 101, 160] {
            for h in [0, 1, 2, 3, 5, 7, 8, 9, 12, 16, 24, 31, 32, 33, 50] {
                let _ = render(state, w, h);
            }
        }
    }
}

#[test]
fn ten_thousand_flows_render() {
    let mut state = feed::state_with(0, 0, |_| Vec::new());
    for round in 0..3u64 {
        let batch: Vec<_> = (0..10_000u64)
            .map(|cookie| {
                let mut s = crate::analysis::flow_table::tests::sample(cookie, 2_000_000 + round * 500);
                s.local.set_port(10_000 + (cookie % 50_000) as u16);
                s.bytes_acked = round * cookie * 40;
                s.bytes_sent = s.bytes_acked;
                s
            })
            .collect();
        state.ingest(&batch);
    }
    state.tick(2_001_000_000_000, SourceCounters { received: 30_000, ..SourceCounters::default() });
    press(&mut state, KeyCode::Char('a'));
    assert_eq!(state.visible_cookies().count(), 10_000);
    let screen = render(&state, 120, 40).backend().to_string();
    assert!(screen.contains("all 10000 flows"), "{screen}");
    press(&mut state, KeyCode::End);
    let screen = render(&state, 120, 40).backend().to_string();
    assert!(screen.contains("10000"), "{screen}");
}

#[test]
fn grouped_by_container_120x40_and_80x24() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('a'));
    press(&mut state, KeyCode::Char('g'));
    select(&mut state, CUBIC);
    insta::assert_snapshot!("grouped_all_120x40", render(&state, 120, 40).backend());
    press(&mut state, KeyCode::Char('a'));
    let terminal = render(&state, 80, 24);
    insta::assert_snapshot!("grouped_80x24", terminal.backend());
    // A group's header reads as one, in its own colour, the whole width.
    let buf = terminal.backend().buffer();
    let header = (3..24).find(|&y| buf[(0, y)].symbol() == "▾").expect("a group header");
    assert_eq!(buf[(2, header)].style().fg, Some(Color::Cyan));
}

#[test]
fn detail_of_a_flow_in_a_container_namespace_120x40_and_80x24() {
    let mut state = feed::scene();
    select(&mut state, RECEIVER);
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("detail_container_120x40", render(&state, 120, 40).backend());
    // Small: the same account in the panel, below the verdict's text.
    let screen = render(&state, 80, 24).backend().to_string();
    assert!(screen.contains("proxy (proxmox)"), "{screen}");
    press(&mut state, KeyCode::End);
    let _ = render(&state, 80, 24);
    press(&mut state, KeyCode::End);
    insta::assert_snapshot!("detail_container_80x24_scrolled", render(&state, 80, 24).backend());
}

#[test]
fn kernel_filter_prompt_error_and_header_80x24() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('F'));
    for c in "container=jellyfin".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    insta::assert_snapshot!("kernel_filter_prompt_80x24", render(&state, 80, 24).backend());
    press(&mut state, KeyCode::Enter);
    // Both filters in the header. (The fake kernel filter stops nothing: flows already traced
    // stay listed until they expire, as they would live.)
    press(&mut state, KeyCode::Char('/'));
    for c in "cubic".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("kernel_filter_applied_80x24", render(&state, 80, 24).backend());
    press(&mut state, KeyCode::Char('F'));
    for c in " netns=nowhere".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    press(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("kernel_filter_error_80x24", render(&state, 80, 24).backend());
}

#[test]
fn header_never_cuts_a_word() {
    let mut state = feed::scene();
    state.header.source = "live kernel (6/6 hooks) · demo path 30 ms RTT, 0.1% loss, 200 Mbit/s (cubic and bbr)".into();
    state.header.filters =
        vec!["container=jellyfin".into(), "container=proxy".into(), "cgroup=/system.slice/nginx.service".into()];
    for width in [40, 60, 80, 100, 120] {
        let terminal = render(&state, width, 24);
        let buf = terminal.backend().buffer();
        for y in 0..2 {
            let row: String = (0..width).map(|x| buf[(x, y)].symbol()).collect();
            let row = row.trim_end();
            // What is shown ends at a word (or an ellipsis marking one left out).
            let last = row.split([' ', ',']).next_back().unwrap_or("");
            let whole = ["filter:", "…"].iter().any(|w| last.ends_with(w))
                || last.starts_with('+')
                || row.ends_with(')')
                || state.header.filters.iter().any(|f| f == last)
                || ["cubic", "4", "bbr)", "ev/s", "0"].contains(&last);
            assert!(whole, "width {width}, line {y} ends mid-word: {row:?}");
        }
    }
}

#[test]
fn fix_panel_100x30() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Char('f'));
    press(&mut state, KeyCode::Char('h'));
    insta::assert_snapshot!("fix_panel_100x30", render(&state, 100, 30).backend());
}

/// 12 s of the feed, the fix at 12.5 s switching the CUBIC flow, 12 s more on bbr.
fn after_a_fix() -> Scene {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    state.fixer.now_ns = feed::ts_ns(125);
    press(&mut state, KeyCode::Char('f'));
    press(&mut state, KeyCode::Char('h'));
    press(&mut state, KeyCode::Enter);
    let mut received = 0;
    for tick in 121..=245 {
        let mut batch = feed::batch(tick);
        if tick > 125 {
            batch[0] = feed::switched_to_bbr(tick, 125);
        }
        received += batch.len() as u64;
        state.ingest(&batch);
        if tick % 10 == 0 {
            state.tick(feed::ts_ns(tick), SourceCounters { received, ..SourceCounters::default() });
        }
    }
    state
}

#[test]
fn detail_after_a_fix_120x40() {
    let state = after_a_fix();
    let terminal = render(&state, 120, 40);
    let text: String = terminal.backend().buffer().content().iter().map(ratatui::buffer::Cell::symbol).collect();
    assert!(text.contains("switched cubic → bbr"), "{text}");
    assert!(text.contains("before (9 s)") && text.contains("after (9 s)"), "{text}");
    assert!(!state.detail_flow().expect("detail").1.is_some_and(|v| v.flagged), "the flag cleared on bbr");
    insta::assert_snapshot!("detail_after_fix_120x40", terminal.backend());
    insta::assert_snapshot!("detail_after_fix_80x24", render(&state, 80, 24).backend());
}
