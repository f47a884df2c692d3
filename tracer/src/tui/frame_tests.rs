//! What the UI keeps from frame to frame (rows refilled in place, verdicts and strings copied
//! only when they changed, the filter's text, the order worked out only where looked at) must
//! show exactly what a state computed from scratch shows, and in the order the columns define.
//! Driven by a random but repeatable churn of flows, verdicts, names and keys, next to the
//! standard feed's flows (one of them flagged, one closing).

use std::cmp::Ordering;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::feed::{self, Scene};
use super::state::{AppState, Column, FlowRow, SortDir};
use super::view::draw;
use crate::analysis::container::{CgroupInfo, Container, Runtime};
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::sample::{CaState, Owner, Sample, SampleReason};
use crate::analysis::Analysis;
use crate::source::SourceCounters;

/// A repeatable pseudo-random sequence (xorshift).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

const CCS: [&str; 3] = ["cubic", "bbr", "reno"];
const COMMS: [&str; 3] = ["iperf3", "curl", "nginx"];

/// One flow's state in the churn: what its next sample says.
struct Feeder {
    cookie: u64,
    bytes_per_tick: u64,
    acked: u64,
    cc: &'static str,
    comm: Option<&'static str>,
    cgroup: u64,
    closed: bool,
}

impl Feeder {
    /// Its sample at 100 ms tick `tick` of the standard feed's clock.
    fn sample(&mut self, tick: u64, dice: &mut Dice) -> Sample {
        let mut s = crate::analysis::flow_table::tests::sample(self.cookie, feed::ts_ns(tick) / 1_000_000);
        self.acked += self.bytes_per_tick;
        s.bytes_acked = self.acked;
        s.bytes_sent = self.acked + self.acked / 50 * (self.cookie % 3);
        s.bytes_retrans = s.bytes_sent - self.acked;
        s.total_retrans = (s.bytes_retrans / 1448) as u32;
        s.busy_us = tick * 100_000;
        s.snd_cwnd = 10 + dice.below(90) as u32;
        s.srtt_us = 20_000 + dice.below(20_000) as u32;
        s.min_rtt_us = 20_000;
        s.delivery_rate_bps = dice.below(100_000_000);
        s.ca_state = if dice.one_in(10) { CaState::Recovery } else { CaState::Open };
        s.cc = self.cc.into();
        s.owner = self.comm.map(|c| Owner { pid: 1000 + self.cookie as u32, comm: c.into() });
        s.cgroup_id = self.cgroup;
        s.local = format!("198.18.{}.{}:{}", self.cookie / 200, self.cookie % 200, 40_000 + self.cookie)
            .parse()
            .expect("addr");
        s.remote = format!("198.19.0.{}:{}", self.cookie % 7, [443, 5201, 22][(self.cookie % 3) as usize])
            .parse()
            .expect("addr");
        if self.closed {
            s.reason = SampleReason::Destroy;
        }
        s
    }
}

/// A scene whose closed flows linger 2 s and idle ones go after 3 s, so flows leave the table.
fn churn_scene() -> Scene {
    let table =
        TableConfig { closed_linger_ns: 2_000_000_000, idle_timeout_ns: 3_000_000_000, ..TableConfig::default() };
    Scene { analysis: Analysis::new(table, DiagnosisConfig::default(), Environment::default()), ..Scene::new() }
}

/// `state` as a state made afresh from the same analysis, with the same view settings and
/// selection, shows it.
fn fresh_copy(state: &AppState, analysis: &Analysis) -> AppState {
    let mut fresh = AppState::new(feed::header()).with_show_all(state.show_all).with_fixing(state.can_fix);
    fresh.sort = state.sort;
    fresh.sort_dir = state.sort_dir;
    fresh.grouped = state.grouped;
    fresh.row_filter = state.row_filter.clone();
    fresh.selected = state.selected;
    fresh.sel_pos = state.sel_pos;
    fresh.table_offset.set(state.table_offset.get());
    fresh.counters = state.counters.clone();
    fresh.heavy_rule = state.heavy_rule.clone();
    fresh.refresh(analysis);
    fresh
}

fn screen(state: &AppState, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal.draw(|f| draw(f, state)).expect("draw");
    terminal.backend().to_string()
}

/// What a row shows, every field but the caches.
fn shown(r: &FlowRow) -> String {
    format!(
        "{} {} {:?} {} {} {} {} {:?} {} {} {} {} {} {} {} {} {} {} {:?} {} {} {:?} {:?}",
        r.cookie,
        r.origin.full(),
        r.comm,
        r.local,
        r.remote,
        r.netns,
        r.cc,
        r.ca_state,
        r.closed,
        r.cwnd,
        r.ssthresh,
        r.srtt_us,
        r.min_rtt_us,
        r.delivery_bps,
        r.throughput_bps,
        r.send_bps,
        r.retrans_ratio,
        r.limited_by.name(),
        r.flagged,
        r.heavy,
        r.finding.is_some(),
        r.relayed_by,
        r.origin.group,
    )
}

fn assert_same_as_fresh(scene: &Scene, step: &str) {
    let (state, fresh) = (&scene.state, fresh_copy(&scene.state, &scene.analysis));
    let rows = |s: &AppState| s.snapshot.iter().map(shown).collect::<Vec<_>>();
    assert_eq!(rows(state), rows(&fresh), "{step}: rows");
    assert_eq!(state.visible_cookies().collect::<Vec<_>>(), fresh.visible_cookies().collect::<Vec<_>>(), "{step}");
    assert_eq!(state.lines, fresh.lines, "{step}: lines");
    assert_eq!(format!("{:?}", state.groups), format!("{:?}", fresh.groups), "{step}: groups");
    assert_eq!((state.heavy_count, state.flagged_count), (fresh.heavy_count, fresh.flagged_count), "{step}");
    assert_eq!(state.cc_seen, fresh.cc_seen, "{step}: cc counts");
    assert_eq!((state.selected, state.sel_pos), (fresh.selected, fresh.sel_pos), "{step}: selection");
    assert_eq!(screen(state, 200, 30), screen(&fresh, 200, 30), "{step}: screen");
}

fn key(scene: &mut Scene, code: KeyCode) {
    scene.key(KeyEvent::new(code, KeyModifiers::NONE));
}

/// Type `/text` Enter.
fn filter(scene: &mut Scene, text: &str) {
    key(scene, KeyCode::Char('/'));
    scene.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    for c in text.chars() {
        key(scene, KeyCode::Char(c));
    }
    key(scene, KeyCode::Enter);
}

/// The host learns that cgroup 2 is the docker container `web`.
fn cgroup_2_is_found_to_be_a_container(analysis: &mut Analysis) {
    let mut env = analysis.env.clone();
    let web = Container {
        runtime: Runtime::Docker,
        id: "9a8b7c6d5e4f".into(),
        name: Some("web".into()),
        pod: None,
        lxc_path: None,
    };
    env.cgroups.insert(2, CgroupInfo { path: "/system.slice/docker-9a8b7c6d5e4f.scope".into(), container: Some(web) });
    analysis.set_env(env);
}

/// One of the keys that change what the table lists or where it stands.
fn random_key(scene: &mut Scene, dice: &mut Dice) -> String {
    const FILTERS: [&str; 7] = ["bbr", "iperf", "cgroup=2", ":443", "198.18.0.1", "cubic curl", "web"];
    let code = match dice.below(12) {
        0 => KeyCode::Char('s'),
        1 => KeyCode::Char('S'),
        2 => KeyCode::Char('a'),
        3 => KeyCode::Char('g'),
        4 => {
            let text = FILTERS[dice.below(FILTERS.len() as u64) as usize];
            filter(scene, text);
            return format!("/{text}");
        }
        5 => KeyCode::Esc,
        6 => KeyCode::Down,
        7 => KeyCode::PageDown,
        8 => KeyCode::End,
        9 => KeyCode::Home,
        10 => KeyCode::Up,
        _ => KeyCode::Char(' '),
    };
    key(scene, code);
    format!("{code:?}")
}

#[test]
fn rows_kept_between_frames_show_what_a_fresh_state_computes() {
    let mut dice = Dice(0x2545_F491_4F6C_DD1D);
    let mut scene = churn_scene();
    // Wide enough to list a few hundred rows, so the order is read deep down too.
    scene.state.page_rows.set(25);
    let mut feeders: Vec<Feeder> = Vec::new();
    let mut next_cookie = 1_000;
    let mut received = 0;
    for tick in 0..=240u64 {
        // Flows come (a few per frame), some go quiet, some close; names and ccs change.
        for _ in 0..dice.below(6) {
            feeders.push(Feeder {
                cookie: next_cookie,
                bytes_per_tick: [0, 1_000, 400_000, 4_000_000][dice.below(4) as usize],
                acked: 0,
                cc: CCS[dice.below(3) as usize],
                comm: [None, Some(COMMS[dice.below(3) as usize])][dice.below(2) as usize],
                cgroup: 1 + dice.below(4),
                closed: false,
            });
            next_cookie += 1;
        }
        let mut batch = feed::batch(tick);
        for f in &mut feeders {
            if dice.one_in(40) {
                f.cc = CCS[dice.below(3) as usize];
            }
            if dice.one_in(60) {
                f.comm = Some(COMMS[dice.below(3) as usize]);
            }
            if dice.one_in(80) {
                f.closed = true;
            }
            // Most flows send every frame; some skip (and time out if they skip long enough).
            if f.cookie % 5 != 0 || dice.one_in(8) {
                batch.push(f.sample(tick, &mut dice));
            }
        }
        feeders.retain(|f| !f.closed || dice.below(4) > 0);
        if tick == 120 {
            // Every row's filter text written, then a container named: the rows of its cgroup
            // are found by its name.
            if scene.is_paused() {
                key(&mut scene, KeyCode::Char(' '));
            }
            filter(&mut scene, "198.");
            cgroup_2_is_found_to_be_a_container(&mut scene.analysis);
            scene.refresh();
            filter(&mut scene, "web");
            assert!(scene.visible_cookies().count() > 0, "web's flows listed");
            assert_same_as_fresh(&scene, "a container named");
        }
        received += batch.len() as u64;
        scene.ingest(&batch);
        scene.tick(feed::ts_ns(tick), SourceCounters { received, ..SourceCounters::default() });
        if !scene.is_paused() {
            assert_same_as_fresh(&scene, &format!("frame {tick}"));
        }
        // Draw, as the front end does: the view works out the order it shows.
        screen(&scene.state, 120, 40);
        if dice.one_in(2) {
            let pressed = random_key(&mut scene, &mut dice);
            if !scene.is_paused() {
                assert_same_as_fresh(&scene, &format!("frame {tick}, key {pressed}"));
            }
        }
    }
    // It churned: many flows listed and gone, one flagged, verdicts given.
    assert!(scene.analysis.table.len() > 100, "{} flows", scene.analysis.table.len());
    assert!(next_cookie > 1_500 && scene.analysis.table.len() < 1_000, "flows left the table");
    assert_eq!(scene.state.flagged_count, 1);
}

/// The order as the table has always defined it: heavy first, the column in its direction,
/// then throughput (largest first) and cookie.
fn reference_order(rows: &[&FlowRow], col: Column, dir: SortDir) -> Vec<u64> {
    let column = |a: &FlowRow, b: &FlowRow| match col {
        Column::Flag => (a.flagged, !a.closed).cmp(&(b.flagged, !b.closed)),
        Column::Container => (&a.origin.name, a.origin.runtime).cmp(&(&b.origin.name, b.origin.runtime)),
        Column::Process => a.comm.cmp(&b.comm),
        Column::Local => a.local.cmp(&b.local),
        Column::Remote => a.remote.cmp(&b.remote),
        Column::Cc => a.cc.cmp(&b.cc),
        Column::CaState => a.ca_state.index().cmp(&b.ca_state.index()),
        Column::Cwnd => a.cwnd.cmp(&b.cwnd),
        Column::Ssthresh => a.ssthresh.cmp(&b.ssthresh),
        Column::Rtt => a.srtt_us.cmp(&b.srtt_us),
        Column::MinRtt => a.min_rtt_us.cmp(&b.min_rtt_us),
        Column::Delivery => a.delivery_bps.cmp(&b.delivery_bps),
        Column::Throughput => a.throughput_bps.total_cmp(&b.throughput_bps),
        Column::Retrans => a.retrans_ratio.total_cmp(&b.retrans_ratio),
        Column::LimitedBy => a.limited_by.name().cmp(b.limited_by.name()),
    };
    let mut sorted = rows.to_vec();
    sorted.sort_by(|a, b| {
        let o: Ordering = column(a, b);
        b.heavy
            .cmp(&a.heavy)
            .then(if dir == SortDir::Desc { o.reverse() } else { o })
            .then_with(|| b.throughput_bps.total_cmp(&a.throughput_bps))
            .then_with(|| a.cookie.cmp(&b.cookie))
    });
    sorted.iter().map(|r| r.cookie).collect()
}

#[test]
fn every_column_orders_as_its_values_compare_both_ways() {
    let mut dice = Dice(0x9E37_79B9_7F4A_7C15);
    let mut scene = churn_scene();
    let mut feeders: Vec<Feeder> = (1_000..1_400)
        .map(|cookie| Feeder {
            cookie,
            bytes_per_tick: [0, 1_000, 400_000, 4_000_000][dice.below(4) as usize],
            acked: 0,
            cc: CCS[dice.below(3) as usize],
            comm: [None, Some(COMMS[dice.below(3) as usize])][dice.below(2) as usize],
            cgroup: 1 + dice.below(4),
            closed: cookie % 23 == 0,
        })
        .collect();
    for tick in 0..=120u64 {
        let mut batch = feed::batch(tick);
        batch.extend(feeders.iter_mut().map(|f| f.sample(tick, &mut dice)));
        scene.ingest(&batch);
        scene.tick(feed::ts_ns(tick), SourceCounters::default());
    }
    // The flagged flow closes, and keeps its verdict.
    let mut last = feed::batch(121).into_iter().find(|s| s.cookie == feed::CUBIC).expect("cubic's sample");
    last.reason = SampleReason::Destroy;
    scene.ingest(&[last]);
    scene.tick(feed::ts_ns(121), SourceCounters::default());
    key(&mut scene, KeyCode::Char('a'));
    // Every kind of row is there: flagged and closed, closed, open, light.
    let rows = &scene.state.snapshot;
    assert!(rows.iter().any(|r| r.flagged && r.closed) && rows.iter().any(|r| !r.flagged && r.closed));
    assert!(rows.iter().any(|r| !r.closed) && rows.iter().any(|r| !r.heavy));
    for col in Column::ALL {
        for dir in [SortDir::Asc, SortDir::Desc] {
            scene.state.sort = col;
            scene.state.sort_dir = dir;
            scene.state.apply_view();
            let rows: Vec<&FlowRow> = scene.state.snapshot.iter().collect();
            let want = reference_order(&rows, col, dir);
            assert_eq!(scene.visible_cookies().collect::<Vec<_>>(), want, "{col:?} {dir:?}");
            // Read piecemeal, from the middle out, it is the same order.
            scene.state.apply_view();
            let n = want.len();
            for pos in [n / 2, n / 2 - 1, n - 1, 0, n / 3] {
                assert_eq!(
                    scene.state.snapshot[scene.state.visible.get(pos)].cookie,
                    want[pos],
                    "{col:?} {dir:?} {pos}"
                );
            }
        }
    }
}
