//! State and key handling without a terminal, on the standard feed; the run loop on a
//! `TestBackend` ([`run_loop`]) and fixing from the UI ([`fixing`]).

mod fixing;
mod run_loop;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::feed::{self, Scene, BBR, CLOSED, CUBIC, RECEIVER, SSH};
use super::state::{AppState, Column, SortDir, TableLine, View};
use super::update::{parse_filter_spec, Action};
use super::{apply_key, Controls};
use crate::analysis::filter::FilterSpec;
use crate::source::SourceCounters;

pub(super) fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

pub(super) fn press(state: &mut Scene, code: KeyCode) -> Action {
    state.key(key(code))
}

pub(super) fn typed(state: &mut Scene, text: &str) {
    for c in text.chars() {
        press(state, KeyCode::Char(c));
    }
}

pub(super) fn select(state: &mut Scene, cookie: u64) {
    press(state, KeyCode::Home);
    for _ in 0..state.visible.len() {
        if state.selected() == Some(cookie) {
            return;
        }
        press(state, KeyCode::Down);
    }
    assert_eq!(state.selected(), Some(cookie), "cookie {cookie} not listed");
}

pub(super) fn visible(state: &AppState) -> Vec<u64> {
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
    assert!(state.is_typing_row_filter());
    typed(&mut state, "nginx");
    // Typing does not filter yet, and q is text, not quit.
    assert_eq!(visible(&state).len(), 4);
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::None);
    press(&mut state, KeyCode::Backspace);
    press(&mut state, KeyCode::Enter);
    assert!(!state.is_typing_row_filter());
    assert_eq!(state.row_filter(), "nginx");
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
        state.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        typed(&mut state, text);
        press(&mut state, KeyCode::Enter);
        assert_eq!(visible(&state), want, "filter {text:?}");
    }

    press(&mut state, KeyCode::Char('/'));
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.row_filter(), "");
    assert_eq!(visible(&state).len(), 4);

    // Esc on the table clears an applied filter too.
    press(&mut state, KeyCode::Char('/'));
    typed(&mut state, "ssh");
    press(&mut state, KeyCode::Enter);
    assert!(visible(&state).is_empty(), "ssh is light: hidden in heavy-only mode");
    press(&mut state, KeyCode::Char('a'));
    assert_eq!(visible(&state), vec![SSH]);
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.row_filter(), "");
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
    state.tick(feed::ts_ns(135), SourceCounters { received: 9_999, ..SourceCounters::default() });
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
    state.row_filter = "curl".into();
    state.refresh();
    assert_eq!(state.detail_flow().map(|(f, _)| f.cookie()), Some(BBR));
}

#[test]
fn quit_keys() {
    let mut state = feed::scene();
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(state.key(ctrl_c), Action::Quit);
    press(&mut state, KeyCode::Char('/'));
    assert_eq!(state.key(ctrl_c), Action::Quit, "Ctrl-C quits while typing");
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('?'));
    assert_eq!(state.key(ctrl_c), Action::Quit, "and from help");
}

#[test]
fn key_releases_are_ignored() {
    let mut state = feed::scene();
    let mut release = key(KeyCode::Char('q'));
    release.kind = KeyEventKind::Release;
    assert_eq!(state.key(release), Action::None);
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
    press(&mut state, KeyCode::Home);
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
    let mut state = Scene::new();
    let counters = |received, lost| SourceCounters { received, lost, ..SourceCounters::default() };
    state.tick(1_000_000_000, counters(100, 0));
    state.tick(1_500_000_000, counters(400, 2));
    assert_eq!(state.counters.events_per_sec, 0.0, "less than a second measured");
    assert_eq!(state.counters.source.lost, 2);
    state.tick(3_000_000_000, counters(700, 2));
    assert!((state.counters.events_per_sec - 300.0).abs() < 1e-9);
    // Time going backwards restarts the measurement instead of freezing it.
    state.tick(500_000_000, counters(800, 2));
    state.tick(1_500_000_000, counters(1_000, 2));
    assert!((state.counters.events_per_sec - 200.0).abs() < 1e-9);
}

#[test]
fn the_text_filter_finds_flows_by_container_name_id_prefix_and_cgroup_path() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('a'));
    for (text, want) in [
        ("jellyfin", vec![CLOSED, CUBIC]),
        ("4c1f0e9a", vec![CLOSED, CUBIC]),
        ("docker", vec![CLOSED, CUBIC]),
        ("proxy", vec![RECEIVER]),
        ("/lxc/102", vec![RECEIVER]),
        ("nginx.service", vec![BBR]),
        ("host", vec![SSH]),
        ("jellyfin flagged", vec![CUBIC]),
    ] {
        press(&mut state, KeyCode::Char('/'));
        state.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        typed(&mut state, text);
        press(&mut state, KeyCode::Enter);
        assert_eq!(visible(&state), want, "filter {text:?}");
    }
}

#[test]
fn the_container_column_sorts_by_name() {
    let mut state = feed::scene();
    while state.sort().0 != Column::Container {
        press(&mut state, KeyCode::Char('s'));
    }
    assert_eq!(state.sort(), (Column::Container, SortDir::Asc));
    // jellyfin (two flows, by throughput), nginx.service, proxy.
    assert_eq!(visible(&state), vec![CLOSED, CUBIC, BBR, RECEIVER]);
}

#[test]
fn grouping_lists_each_container_under_a_header_with_totals() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('a'));
    press(&mut state, KeyCode::Char('g'));
    assert!(state.is_grouped());
    // Groups in the order of their fastest flow: proxy (50 Mbit/s), jellyfin, nginx, host.
    let names: Vec<String> = state.groups.iter().map(|g| g.origin.full()).collect();
    assert_eq!(names, ["proxy (proxmox)", "jellyfin (docker)", "nginx.service", "host"]);
    assert_eq!(visible(&state), vec![RECEIVER, CLOSED, CUBIC, BBR, SSH]);
    assert_eq!(
        state.lines,
        vec![
            TableLine::Group(0),
            TableLine::Flow(0),
            TableLine::Group(1),
            TableLine::Flow(1),
            TableLine::Flow(2),
            TableLine::Group(2),
            TableLine::Flow(3),
            TableLine::Group(3),
            TableLine::Flow(4),
        ]
    );
    let jellyfin = &state.groups[1];
    assert_eq!((jellyfin.flows, jellyfin.heavy, jellyfin.flagged), (2, 2, 1));
    let cubic = state.snapshot.iter().find(|r| r.cookie == CUBIC).expect("cubic row");
    // The closed upload moves nothing any more: the group's rates are the CUBIC flow's.
    assert!((jellyfin.retrans_ratio() - cubic.retrans_ratio).abs() < 1e-9, "{}", jellyfin.retrans_ratio());
    assert_eq!(jellyfin.throughput_bps, cubic.throughput_bps);

    // The selection moves over flows only, across group headers.
    press(&mut state, KeyCode::Home);
    assert_eq!(state.selected(), Some(RECEIVER));
    press(&mut state, KeyCode::Down);
    assert_eq!(state.selected(), Some(CLOSED));
    assert_eq!(state.selected_line(), 3);
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.view(), View::Detail);
    press(&mut state, KeyCode::Esc);

    // Heavy only: the light host flow and its group are not listed, but totals count every
    // flow that matches (as the header does).
    press(&mut state, KeyCode::Char('a'));
    assert_eq!(state.groups.len(), 3);
    press(&mut state, KeyCode::Char('g'));
    assert!(!state.is_grouped());
    assert!(state.groups.is_empty());
    assert_eq!(state.lines.len(), visible(&state).len());
}

#[test]
fn kernel_filter_prompt_applies_through_the_control_and_keeps_the_old_filter_on_error() {
    let mut state = feed::scene();
    press(&mut state, KeyCode::Char('F'));
    typed(&mut state, "container=jellyfin");
    // Typing is text: q does not quit, g does not group.
    assert_eq!(press(&mut state, KeyCode::Char('q')), Action::None);
    press(&mut state, KeyCode::Backspace);
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.kernel.applied, 1);
    let jellyfin = FilterSpec { containers: vec!["jellyfin".into()], ..FilterSpec::default() };
    assert_eq!(state.kernel.spec, jellyfin);
    assert_eq!(state.kernel_filter(), &jellyfin);
    assert_eq!(state.header.filters, ["container=jellyfin"]);
    assert_eq!(state.status(), None);

    // Refused by the control: the error on the status line, the filter as it was.
    press(&mut state, KeyCode::Char('F'));
    assert_eq!(state.kernel_filter_input, "container=jellyfin", "the prompt starts from the filter in force");
    state.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    typed(&mut state, "container=plex");
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.status(), Some("kernel filter unchanged: no container named plex on this host"));
    assert_eq!(state.kernel.spec, jellyfin);
    assert_eq!(state.header.filters, ["container=jellyfin"]);
    // The next key clears the message; the prompt keeps the text to correct.
    press(&mut state, KeyCode::Char('F'));
    assert_eq!(state.status(), None);
    assert_eq!(state.kernel_filter_input, "container=plex");

    // A typo never reaches the control.
    state.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    typed(&mut state, "pod=x");
    press(&mut state, KeyCode::Enter);
    assert!(state.status().is_some_and(|s| s.contains("unknown key \"pod\"")), "{:?}", state.status());
    assert_eq!(state.kernel.applied, 1);

    // Esc cancels; an empty filter clears it.
    press(&mut state, KeyCode::Char('F'));
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.kernel.applied, 1);
    assert_eq!(state.kernel_filter_input, "container=jellyfin");
    press(&mut state, KeyCode::Char('F'));
    state.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.kernel.applied, 2);
    assert!(state.kernel.spec.is_empty());
    assert!(state.header.filters.is_empty());
}

#[test]
fn kernel_filter_without_a_control_says_so() {
    let mut state = feed::scene();
    let Scene { analysis, state: app, .. } = &mut state;
    for c in "Fcontainer=jellyfin".chars() {
        apply_key(app, analysis, Controls::default(), key(KeyCode::Char(c)));
    }
    apply_key(app, analysis, Controls::default(), key(KeyCode::Enter));
    assert_eq!(app.status(), Some("kernel filter unchanged: this source has no kernel filter to change"));
    assert!(app.header.filters.is_empty());
}

#[test]
fn kernel_filter_text_parses_into_a_spec() {
    let spec =
        parse_filter_spec("  container=jellyfin cgroup=/system.slice netns=cct-1 container=3f2a ").expect("parses");
    assert_eq!(spec.containers, ["jellyfin", "3f2a"]);
    assert_eq!(spec.cgroups, ["/system.slice"]);
    assert_eq!(spec.netns, ["cct-1"]);
    assert_eq!(parse_filter_spec(&spec.describe().join(" ")), Ok(spec));
    assert_eq!(parse_filter_spec(""), Ok(FilterSpec::default()));
    assert!(parse_filter_spec("jellyfin").is_err_and(|e| e.contains("KEY=VALUE")));
    assert!(parse_filter_spec("container=").is_err_and(|e| e.contains("needs a value")));
    assert!(parse_filter_spec("image=nginx").is_err_and(|e| e.contains("unknown key")));
}

#[test]
fn seek_times_read_as_people_write_them() {
    use super::parse_seek_time;
    assert_eq!(parse_seek_time("90"), Some(90));
    assert_eq!(parse_seek_time("1:30"), Some(90));
    assert_eq!(parse_seek_time("1:02:03"), Some(3723));
    assert_eq!(parse_seek_time("1m30s"), Some(90));
    assert_eq!(parse_seek_time("2h"), Some(7200));
    assert_eq!(parse_seek_time(" 45s "), Some(45));
    for bad in ["", "1:75", "abc", "1m30", "1:2:3:4", "-5"] {
        assert_eq!(parse_seek_time(bad), None, "{bad:?}");
    }
}

#[test]
fn replay_keys_move_the_playback_and_live_keys_do_not() {
    use super::{handle_key, PlaybackCommand};
    let key = |c: KeyCode| KeyEvent::from(c);
    let mut live = feed::scene();
    assert_eq!(handle_key(&mut live, key(KeyCode::Char(' '))), Action::None, "live: space pauses the display");
    assert!(live.is_paused());
    let mut replay = feed::scene();
    replay.replay = true;
    for (code, want) in [
        (KeyCode::Char(' '), PlaybackCommand::TogglePause),
        (KeyCode::Char('n'), PlaybackCommand::Step),
        (KeyCode::Char('+'), PlaybackCommand::Faster),
        (KeyCode::Char('-'), PlaybackCommand::Slower),
        (KeyCode::Right, PlaybackCommand::SeekBy(10)),
        (KeyCode::Left, PlaybackCommand::SeekBy(-10)),
    ] {
        assert_eq!(handle_key(&mut replay, key(code)), Action::Playback(want), "{code:?}");
    }
    assert!(!replay.is_paused(), "the playback pauses, not the display");
    assert_eq!(handle_key(&mut replay, key(KeyCode::Char('t'))), Action::None);
    for c in "1:30".chars() {
        handle_key(&mut replay, key(KeyCode::Char(c)));
    }
    assert_eq!(handle_key(&mut replay, key(KeyCode::Enter)), Action::Playback(PlaybackCommand::SeekTo(90)));
}

/// What a terminal of `width` x `height` shows of `state`, a line of text per row.
fn screen_text(state: &AppState, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    terminal.draw(|f| super::view::draw(f, state)).expect("draw");
    let buf = terminal.backend().buffer().clone();
    (0..height).map(|y| (0..width).map(|x| buf[(x, y)].symbol()).collect::<String>()).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_relay_and_its_loopback_hop_are_shown_together_and_shift_u_hides_the_udp_strip() {
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::sample::Owner;
    use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
    let mut scene = super::feed::Scene::new();
    let wg = Head { bytes: [4, 0, 0, 0, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0], len: 1440 };
    let relay = Process {
        pid: 812,
        comm: "tailscaled".into(),
        cmdline: vec!["tailscaled".into(), "--tun=userspace-networking".into()],
        tun_open: false,
        tcp: Vec::new(),
    };
    for tick in 0..=50u64 {
        let mut service = sample(1, feed::ts_ns(tick) / 1_000_000);
        service.local = "127.0.0.1:8096".parse().expect("addr");
        service.remote = "127.0.0.1:51000".parse().expect("addr");
        service.owner = Some(Owner { pid: 100, comm: "jellyfin".into() });
        service.bytes_acked = tick * 200_000;
        let mut hop = sample(2, feed::ts_ns(tick) / 1_000_000);
        hop.local = service.remote;
        hop.remote = service.local;
        hop.owner = Some(Owner { pid: 812, comm: "tailscaled".into() });
        hop.bytes_received = tick * 200_000;
        scene.ingest(&[service, hop]);
        if tick % 10 == 0 {
            let reading = UdpSample {
                cgroup_id: 1,
                first_tx: wg,
                last_tx: wg,
                owner: Some(relay.clone()),
                ..UdpSample::fixture(77, feed::ts_ns(tick), tick * 200_000)
            };
            scene.analysis.ingest_sockets(&SocketReadings { udp: vec![reading] });
            scene.tick(feed::ts_ns(tick), SourceCounters::default());
        }
    }
    assert_eq!(scene.udp_rows.len(), 1);
    assert_eq!(scene.udp_rows[0].carries, "wireguard");
    assert!(scene.udp_rows[0].userspace_vpn);
    assert_eq!(scene.udp_rows[0].relays.len(), 2, "both ends of the hop: {:?}", scene.udp_rows[0].relays);
    for cookie in [1, 2] {
        let row = scene.snapshot.iter().find(|r| r.cookie == cookie).expect("row");
        assert_eq!(row.relayed_by.as_deref(), Some("tailscaled"));
    }
    press(&mut scene, KeyCode::Char('a'));
    let screen = |state: &AppState| screen_text(state, 140, 30);
    let text = screen(&scene);
    assert!(text.contains("UDP: 1 heavy"), "{text}");
    assert!(text.contains("wireguard tailscaled (pid 812)") && text.contains("give it a TUN device"), "{text}");
    assert!(text.contains("↪ relays TCP 127.0.0.1:8096 → 127.0.0.1:51000 (jellyfin)"), "{text}");
    assert!(text.contains("↪tailscaled"), "the hop's limited column names its relay: {text}");
    press(&mut scene, KeyCode::Char('U'));
    assert!(!screen(&scene).contains("UDP: 1 heavy"), "U hides the strip");
}

#[test]
fn a_tunnel_flow_shows_its_tunnel_in_the_detail_view_and_its_engine_is_not_blamed_in_the_udp_strip() {
    use crate::analysis::environment::Environment;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::route::{DeviceName, Route};
    use crate::analysis::sample::Owner;
    use crate::analysis::tunnel::{TunDevice, TunHolder, TunnelFacts};
    use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
    let netns = sample(1, 0).netns;
    let holder = TunHolder { pid: 812, comm: "wireguard-go".into() };
    let device = TunDevice { netns, ifindex: 7, name: "wg0".into(), mtu: 1420, holders: vec![holder] };
    let env = Environment { tunnels: TunnelFacts { devices: vec![device], ..TunnelFacts::default() }, ..feed::env() };
    let mut scene = super::feed::Scene::on_host(env);
    let wg = Head { bytes: [4, 0, 0, 0, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0], len: 1440 };
    let engine = Process {
        pid: 812,
        comm: "wireguard-go".into(),
        cmdline: vec!["wireguard-go".into(), "wg0".into()],
        tun_open: true,
        tcp: Vec::new(),
    };
    for tick in 0..=50u64 {
        let mut s = sample(1, feed::ts_ns(tick) / 1_000_000);
        s.owner = Some(Owner { pid: 90, comm: "sshd".into() });
        s.bytes_acked = tick * 400_000;
        s.route = Some(Route { dev: DeviceName::new("wg0"), ifindex: 7, dev_mtu: 1420, pmtu: 1420 });
        scene.ingest(&[s]);
        if tick % 10 == 0 {
            let reading = UdpSample {
                first_tx: wg,
                last_tx: wg,
                owner: Some(engine.clone()),
                ..UdpSample::fixture(77, feed::ts_ns(tick), tick * 420_000)
            };
            scene.analysis.ingest_sockets(&SocketReadings { udp: vec![reading] });
            scene.tick(feed::ts_ns(tick), SourceCounters::default());
        }
    }
    assert_eq!(scene.udp_rows.len(), 1);
    assert_eq!(scene.udp_rows[0].carried, Some(1));
    let screen = |state: &AppState| screen_text(state, 160, 40);
    press(&mut scene, KeyCode::Char('a'));
    let table = screen(&scene);
    assert!(table.contains("a tunnel: the 1 TCP flow it carries decides, and its fix applies"), "{table}");
    assert!(!table.contains("its own congestion control decides"), "{table}");
    press(&mut scene, KeyCode::Enter);
    scene.refresh();
    let detail = screen(&scene);
    assert!(detail.contains("tunnel wg0 (MTU 1420) of wireguard-go (pid 812), over UDP 198.18.0.1:41641"), "{detail}");
}
