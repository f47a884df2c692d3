//! One figure, one way of writing it: the verdict's text, the TUI's detail view and the HTML
//! report of the same recording write a flagged flow's goodput, Mathis bound, retransmitted
//! share and bytes sent identically, through the core's `analysis::units`. It lives with the
//! commands, the one layer that sees both the terminal UI and the exports.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::units::{bytes, pct, rate};
use crate::export::report;
use crate::recording::entry::Entry;
use crate::recording::fixture;
use crate::tui::feed::Scene;
use crate::tui::view::draw;

/// The TUI fed the recording's entries as the pipeline would.
fn scene_of(entries: &[Entry]) -> Scene {
    let mut scene = Scene::new();
    for entry in entries {
        match entry {
            Entry::Host { env } => scene.analysis.set_env(env.clone()),
            Entry::Samples { samples } => scene.ingest(samples),
            Entry::Tick { now_ns, counters } => scene.tick(*now_ns, *counters),
            _ => {}
        }
    }
    scene
}

/// Every cell of a screen wide enough that no figure wraps, row by row.
fn screen(scene: &Scene) -> String {
    let mut terminal = Terminal::new(TestBackend::new(400, 60)).expect("test terminal");
    terminal.draw(|f| draw(f, scene)).expect("draw");
    let buf = terminal.backend().buffer();
    (0..60).map(|y| (0..400).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n").collect()
}

#[test]
fn the_verdict_the_tui_and_the_report_write_a_figure_the_same_way() {
    let entries = fixture::entries();
    let html = report::render(entries.clone(), DiagnosisConfig::default());
    let mut scene = scene_of(&entries);
    let (cookie, verdict, sent) = scene
        .analysis
        .table
        .flows()
        .find_map(|f| {
            scene.analysis.verdict(f).filter(|v| v.flagged).map(|v| (f.cookie(), v.clone(), f.latest.bytes_sent))
        })
        .expect("the recording has a flagged flow");
    let e = verdict.evidence.as_ref().expect("a flagged verdict has evidence");

    // Open the flagged flow's detail.
    let press = |scene: &mut Scene, code| scene.key(KeyEvent::new(code, KeyModifiers::NONE));
    press(&mut scene, KeyCode::Home);
    while scene.selected() != Some(cookie) {
        let before = scene.selected();
        press(&mut scene, KeyCode::Down);
        assert_ne!(scene.selected(), before, "flow {cookie} not listed");
    }
    press(&mut scene, KeyCode::Enter);
    let tui = screen(&scene);

    let goodput = rate(e.goodput_bps).to_string();
    let mathis = rate(e.mathis_bps).to_string();
    let retransmitted = pct(e.loss_ratio).to_string();
    let sent = bytes(sent).to_string();
    // The verdict's own words are the reference.
    assert!(verdict.text.contains(&format!("Goodput {goodput} is")), "{goodput} in {}", verdict.text);
    assert!(verdict.text.contains(&format!("is {mathis}")), "{mathis} in {}", verdict.text);
    for (figure, in_tui, in_report) in [
        (&goodput, format!("goodput {goodput}"), format!("<dt>goodput</dt><dd>{goodput}</dd>")),
        (&mathis, format!("Mathis bound {mathis}"), format!("<dt>Mathis bound</dt><dd>{mathis}</dd>")),
        (
            &retransmitted,
            format!("retransmitted {retransmitted} of bytes"),
            format!("<dt>retransmitted</dt><dd>{retransmitted}</dd>"),
        ),
        (&sent, format!("sent {sent}"), format!("sent {sent}")),
    ] {
        assert!(tui.contains(&in_tui), "the TUI writes {figure} as the verdict does ({in_tui:?}):\n{tui}");
        assert!(html.contains(&in_report), "the report writes {figure} as the verdict does ({in_report:?})");
    }
    assert!(html.contains(&report::escape(&verdict.text)), "the report quotes the same verdict");
}
