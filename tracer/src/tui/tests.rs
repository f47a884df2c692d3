//! State and key handling without a terminal, and the run loop on a `TestBackend`.

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::feed::{self, BBR, CLOSED, CUBIC, RECEIVER, SSH};
use super::state::{AppState, Column, SortDir, View};
use super::update::{handle_key, Action};
use super::{run_with_terminal, TimeBase, TuiOptions};
use crate::source::{FeedSource, SourceCounters};

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn press(state: &mut AppState, code: KeyCode) -> Action {
    handle_key(state, key(code))
}

fn typed(state: &mut AppState, text: &str) {
    for c in text.chars() {
        press(state, KeyCode::Char(c));
    }
}

fn select(state: &mut AppState, cookie: u64) {
    press(state, KeyCode::Home);
    for _ in 0..state.visible.len() {
        if state.selected() == Some(cookie) {
            return;
        }
        press(state, KeyCode::Down);
    }
    assert_eq!(state.selected(), Some(cookie), "cookie {cookie} not listed");
}

fn visible(state: &AppState) -> Vec<u64> {
    state.visible_cookies().collect()
}

#[test]
fn scene_lists_heavy_flows_first_and_flags_the_lossy_cubic_flow() {
    let state = feed::scene();
    // Heavy only by default, by throughput: receiver 50, cubic ~4, bbr 2.5 Mbit/s; the closed
    // upload's last rate was 8 Mbit/s; ssh is light and hidden.
    assert_eq!(visible(&state), vec![RECEIVER, CLOSED, CUBIC, BBR]);
    let flagged: Vec<u64> = state.snapshot.iter().filter(|r| r.flagged).map(|r| r.cookie).collect();
    assert_eq!(flagged, vec![CUBIC]);
    let verdict = state.analysis.diagnoser.verdict(CUBIC).expect("verdict");
    assert!(verdict.fix.iter().any(|c| c == "sysctl -w net.ipv4.tcp_congestion_control=bbr"), "{:?}", verdict.fix);
    let limited = |c: u64| state.snapshot.iter().find(|r| r.cookie == c).map(|r| r.limited_by.name());
    assert_eq!(limited(BBR), Some("application"));
    assert_eq!(limited(RECEIVER), Some("receiving"));
    assert!(state.snapshot.iter().any(|r| r.cookie == CLOSED && r.closed));
    assert_eq!(state.cc_seen, vec![("bbr".to_string(), 1), ("cubic".to_string(), 4)]);
    // 4 flows x 10 samples/s once the upload closed.
    assert!((state.counters.events_per_sec - 40.0).abs() < 1e-9, "{}", state.counters.events_per_sec);
}

#[test]
fn selection_follows_its_flow_across_re_sorts_and_refreshes() {
    let mut state = feed::scene();
    select(&mut state, BBR);
    for _ in 0..Column::ALL.len() {
        press(&mut state, KeyCode::Char('s'));
        assert_eq!(state.selected(), Some(BBR), "sort {:?}", state.sort());
        let pos = visible(&state).iter().position(|&c| c == BBR);
        assert_eq!(pos, Some(state.sel_pos));
        press(&mut state, KeyCode::Char('S'));
        assert_eq!(state.selected(), Some(BBR));
    }
    // New data moves rows; the selection stays on the flow.
    for tick in 121..=160 {
        state.ingest(&feed::batch(tick));
    }
    state.tick(feed::ts_ns(160), SourceCounters::default());
    assert_eq!(state.selected(), Some(BBR));
}

#[test]
fn sort_keys_cycle_columns_and_reverse() {
    let mut state = feed::scene();
    assert_eq!(state.sort(), (Column::Throughput, SortDir::Desc));
    press(&mut state, KeyCode::Char('s'));
    assert_eq!(state.sort(), (Column::Retrans, SortDir::Desc));
    assert_eq!(visible(&state)[0], CUBIC, "most retransmissions first");
    press(&mut state, KeyCode::Char('r'));
    assert_eq!(state.sort(), (Column::Retrans, SortDir::Asc));
    assert_eq!(visible(&state).last(), Some(&CUBIC));
}

#[test]
fn all_flows_toggle_and_heavy_first() {
    let mut state = feed::scene();
    assert!(!state.shows_all());
    press(&mut state, KeyCode::Char('a'));
    assert!(state.shows_all());
    assert_eq!(visible(&state), vec![RECEIVER, CLOSED, CUBIC, BBR, SSH]);
    // Sorted by name, light flows still come after heavy ones.
    press(&mut state, KeyCode::Char('s')); // retrans
    press(&mut state, KeyCode::Char('s')); // limited_by
    assert_eq!(state.sort().0, Column::LimitedBy);
    assert_eq!(visible(&state).last(), Some(&SSH));
}

#[test]
fn filter_is_typed_then_applied_and_esc_clears_it() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('/'));
    assert!(state.is_typing_filter());
    typed(&mut state, "nginx");
    // Typing does not filter yet, and q is text, not quit.
    assert_eq!(visible(&state).len(), 4);
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::None);
    press(&mut state, KeyCode::Backspace);
    press(&mut state, KeyCode::Enter);
    assert!(!state.is_typing_filter());
    assert_eq!(state.filter(), "nginx");
    assert_eq!(visible(&state), vec![BBR]);
    assert_eq!(state.selected(), Some(BBR));
    assert!(state.active_filters().contains(&"/nginx".to_string()));

    // Each kind of field matches: port, cc, address, limited_by, cgroup; terms are ANDed.
    for (text, want) in [
        ("5201", vec![CUBIC]),
        ("BBR", vec![BBR]),
        ("10.88.0.5", vec![RECEIVER]),
        ("receiving", vec![RECEIVER]),
        ("cgroup=7321", vec![CLOSED, CUBIC]),
        ("cubic cwnd", vec![CLOSED, CUBIC]),
        ("iperf3 cwnd", vec![CUBIC]),
        ("flagged", vec![CUBIC]),
    ] {
        press(&mut state, KeyCode::Char('/'));
        // The prompt starts from the applied filter; Ctrl-U clears it.
        handle_key(&mut state, KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        typed(&mut state, text);
        press(&mut state, KeyCode::Enter);
        assert_eq!(visible(&state), want, "filter {text:?}");
    }

    press(&mut state, KeyCode::Char('/'));
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.filter(), "");
    assert_eq!(visible(&state).len(), 4);

    // Esc on the table clears an applied filter too.
    press(&mut state, KeyCode::Char('/'));
    typed(&mut state, "ssh");
    press(&mut state, KeyCode::Enter);
    assert!(visible(&state).is_empty(), "ssh is light: hidden in heavy-only mode");
    press(&mut state, KeyCode::Char('a'));
    assert_eq!(visible(&state), vec![SSH]);
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.filter(), "");
}

#[test]
fn pause_freezes_rows_while_intake_continues() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char(' '));
    assert!(state.is_paused());
    let before = visible(&state);
    let cwnd_before: Vec<u32> = state.snapshot.iter().map(|r| r.cwnd).collect();
    for tick in 121..=135 {
        let mut b = feed::batch(tick);
        let mut new_flow = b[0].clone();
        new_flow.cookie = 999;
        b.push(new_flow);
        state.ingest(&b);
    }
    state.tick(feed::ts_ns(135), SourceCounters { received: 9_999, lost: 0, ..Default::default() });
    assert!(state.analysis.table.get(999).is_some(), "intake continued");
    assert_eq!(visible(&state), before, "display frozen");
    assert_eq!(state.snapshot.iter().map(|r| r.cwnd).collect::<Vec<_>>(), cwnd_before);
    // Keys still work on the frozen rows.
    press(&mut state, KeyCode::Char('a'));
    assert_eq!(visible(&state).len(), 5);
    press(&mut state, KeyCode::Char(' '));
    assert!(!state.is_paused());
    assert!(visible(&state).contains(&999));
}

#[test]
fn pause_freezes_the_detail_view_too() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Char(' '));
    let frozen_len = state.detail_flow().map(|(f, _)| f.history().len());
    for tick in 121..=200 {
        state.ingest(&feed::batch(tick));
    }
    state.tick(feed::ts_ns(200), SourceCounters::default());
    assert_eq!(state.detail_flow().map(|(f, _)| f.history().len()), frozen_len);
    press(&mut state, KeyCode::Char(' '));
    assert!(state.detail_flow().map(|(f, _)| f.history().len()) > frozen_len);
}

#[test]
fn help_opens_with_question_mark_and_any_key_closes_it() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('?'));
    assert_eq!(state.view(), View::Help);
    assert_eq!(press(&mut state, KeyCode::Char('x')), Action::None);
    assert_eq!(state.view(), View::Table);
    press(&mut state, KeyCode::Char('?'));
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.view(), View::Table);
    // q closes help rather than quitting from behind it.
    press(&mut state, KeyCode::Char('?'));
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::None);
    assert_eq!(state.view(), View::Table);
}

#[test]
fn enter_opens_detail_and_esc_or_backspace_go_back() {
    let mut state = feed::scene();
    select(&mut state, CUBIC);
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.view(), View::Detail);
    assert_eq!(state.detail_flow().map(|(f, _)| f.cookie()), Some(CUBIC));
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.view(), View::Table);
    assert_eq!(state.selected(), Some(CUBIC));
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Backspace);
    assert_eq!(state.view(), View::Table);
    // Help over the detail returns to the detail.
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Char('?'));
    press(&mut state, KeyCode::Char('z'));
    assert_eq!(state.view(), View::Detail);
}

#[test]
fn detail_keeps_its_flow_when_the_table_filter_drops_it() {
    let mut state = feed::scene();
    select(&mut state, BBR);
    press(&mut state, KeyCode::Enter);
    state.filter = "curl".into();
    state.refresh();
    assert_eq!(state.detail_flow().map(|(f, _)| f.cookie()), Some(BBR));
}

#[test]
fn quit_keys() {
    let mut state = feed::scene();
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(handle_key(&mut state, ctrl_c), Action::Quit);
    press(&mut state, KeyCode::Char('/'));
    assert_eq!(handle_key(&mut state, ctrl_c), Action::Quit, "Ctrl-C quits while typing");
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('?'));
    assert_eq!(handle_key(&mut state, ctrl_c), Action::Quit, "and from help");
}

#[test]
fn key_releases_are_ignored() {
    let mut state = feed::scene();
    let mut release = key(KeyCode::Char('q'));
    release.kind = KeyEventKind::Release;
    assert_eq!(handle_key(&mut state, release), Action::None);
}

#[test]
fn navigation_stays_in_bounds() {
    let mut state = feed::scene();
    let rows = visible(&state);
    press(&mut state, KeyCode::Up);
    assert_eq!(state.selected(), Some(rows[0]));
    press(&mut state, KeyCode::Char('j'));
    assert_eq!(state.selected(), Some(rows[1]));
    press(&mut state, KeyCode::Char('k'));
    assert_eq!(state.selected(), Some(rows[0]));
    press(&mut state, KeyCode::PageDown);
    assert_eq!(state.selected(), rows.last().copied());
    press(&mut state, KeyCode::Down);
    assert_eq!(state.selected(), rows.last().copied());
    press(&mut state, KeyCode::Char('g'));
    assert_eq!(state.selected(), Some(rows[0]));
    press(&mut state, KeyCode::Char('G'));
    assert_eq!(state.selected(), rows.last().copied());
    press(&mut state, KeyCode::PageUp);
    assert_eq!(state.selected(), Some(rows[0]));
}

#[test]
fn a_vanished_selection_moves_to_its_neighbour() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('a'));
    select(&mut state, SSH);
    let pos = state.sel_pos;
    press(&mut state, KeyCode::Char('a')); // ssh hidden again
    assert_eq!(state.selected(), visible(&state).get(pos.min(3)).copied());
}

#[test]
fn events_per_second_come_from_counter_deltas() {
    let analysis = crate::analysis::Analysis::new(Default::default(), Default::default(), feed::env());
    let mut state = AppState::new(analysis, feed::header());
    state.tick(1_000_000_000, SourceCounters { received: 100, lost: 0, ..Default::default() });
    state.tick(1_500_000_000, SourceCounters { received: 400, lost: 2, ..Default::default() });
    assert_eq!(state.counters.events_per_sec, 0.0, "less than a second measured");
    assert_eq!(state.counters.lost, 2);
    state.tick(3_000_000_000, SourceCounters { received: 700, lost: 2, ..Default::default() });
    assert!((state.counters.events_per_sec - 300.0).abs() < 1e-9);
    // Time going backwards restarts the measurement instead of freezing it.
    state.tick(500_000_000, SourceCounters { received: 800, lost: 2, ..Default::default() });
    state.tick(1_500_000_000, SourceCounters { received: 1_000, lost: 2, ..Default::default() });
    assert!((state.counters.events_per_sec - 200.0).abs() < 1e-9);
}

fn key_event(c: char) -> std::io::Result<Event> {
    Ok(Event::Key(key(KeyCode::Char(c))))
}

/// Keys arriving at given times (tokio time), then silence.
fn scripted(
    script: Vec<(u64, std::io::Result<Event>)>,
) -> impl futures_util::Stream<Item = std::io::Result<Event>> + Unpin {
    let stream = futures_util::stream::unfold((script.into_iter(), 0u64), |(mut it, at)| async move {
        match it.next() {
            Some((ms, ev)) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms.saturating_sub(at))).await;
                Some((ev, (it, ms)))
            }
            None => std::future::pending().await,
        }
    });
    Box::pin(stream)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_loop_ingests_draws_and_quits_on_q() {
    let batches: Vec<_> = (0..=120).map(feed::batch).collect();
    let mut source = FeedSource::new(batches).with_lost(3);
    let mut state = AppState::new(
        crate::analysis::Analysis::new(Default::default(), Default::default(), feed::env()),
        feed::header(),
    );
    let mut terminal = Terminal::new(TestBackend::new(100, 20)).expect("terminal");
    let opts = TuiOptions { time_base: TimeBase::Samples, max_samples_per_turn: 3, ..Default::default() };
    let keys = scripted(vec![(1_000, key_event('a')), (2_000, key_event('q'))]);
    run_with_terminal(&mut terminal, keys, &mut source, &mut state, &opts, std::future::pending()).await.expect("runs");
    assert!(state.source_ended());
    assert_eq!(state.analysis.table.len(), 5);
    assert!(state.shows_all());
    let screen = terminal.backend().to_string();
    assert!(screen.contains("lost 3"), "{screen}");
    assert!(screen.contains("(ended)"), "{screen}");
    assert!(screen.contains("iperf3"), "{screen}");
}

// Real time: a source that is always ready never lets a paused clock auto-advance.
#[tokio::test(flavor = "current_thread")]
async fn the_loop_stops_on_the_stop_future_even_with_endless_input() {
    // A source that never ends and keys that never come: only `stop` ends the loop.
    struct Endless(u64);
    impl crate::source::EventSource for Endless {
        fn next_batch(
            &mut self,
        ) -> crate::source::BoxFuture<'_, anyhow::Result<Option<Vec<crate::analysis::event::Sample>>>> {
            self.0 += 1;
            let b = feed::batch(self.0 % 100);
            Box::pin(async move { Ok(Some(b)) })
        }
        fn counters(&self) -> SourceCounters {
            SourceCounters { received: self.0, lost: 0, ..Default::default() }
        }
        fn describe(&self) -> String {
            "endless".into()
        }
    }
    let mut source = Endless(0);
    let mut state = AppState::new(
        crate::analysis::Analysis::new(Default::default(), Default::default(), feed::env()),
        feed::header(),
    );
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
    let opts = TuiOptions { time_base: TimeBase::Samples, ..Default::default() };
    let keys = scripted(Vec::new());
    let stop = tokio::time::sleep(std::time::Duration::from_millis(600));
    let run = run_with_terminal(&mut terminal, keys, &mut source, &mut state, &opts, stop);
    tokio::time::timeout(std::time::Duration::from_secs(20), run).await.expect("stopped in time").expect("runs");
    // Frames were drawn while the source flooded the loop.
    assert!(terminal.backend().to_string().contains("cctrace"));
    assert!(source.0 > 10);
}
