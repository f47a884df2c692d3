//! A live run shown: the front end (the terminal UI, JSON Lines or nothing) over the traced
//! source in the one stack through the pipeline, with the lines on stderr around it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};

use super::lines::{recorded_line, summary_line};
use super::settings::{Front, LiveSettings};
use crate::analysis::environment::Environment;
use crate::analysis::filter::FilterSpec;
use crate::analysis::Analysis;
use crate::frontend::json::JsonOutput;
use crate::frontend::line_writer::LineWriter;
use crate::frontend::stack::{stack, Extras, Headless};
use crate::kernel::filter::live::{FilterUpkeep, LiveFilter};
use crate::kernel::LiveSource;
use crate::metrics::{MetricsService, OtlpStatus};
use crate::pipeline::{self, FrontEnd, PipelineOptions};
use crate::recording::{Recorder, RecordingStatus};
use crate::signals::Shutdown;
use crate::source::{ActionPoll, EventSource, WithHostActions};

/// The actions other cctrace processes take on the host from now on (`cctrace fix`, another
/// terminal UI's `f` and `u`), read from the fix journal.
fn host_actions() -> ActionPoll {
    let mut journal = crate::fix::journal::Tail::from_now();
    Box::new(move || journal.poll())
}

/// The live source with everything set up around it, ready to run a front end on.
pub(super) struct Traced {
    pub(super) source: LiveSource,
    pub(super) spec: FilterSpec,
    pub(super) live_filter: Option<LiveFilter>,
    pub(super) env: Environment,
    pub(super) metrics: Option<MetricsService>,
    pub(super) serving: Option<SocketAddr>,
    pub(super) otlp: Option<OtlpStatus>,
}

/// How the run is shown.
pub(super) struct Shown {
    pub(super) front: Front,
    /// JSON Lines print every kernel sample too.
    pub(super) events: bool,
    /// The OTLP collector's address and how often metrics go there, when they do.
    pub(super) otlp: Option<(String, Duration)>,
    /// What the demo's lab is, when one runs.
    pub(super) demo: Option<String>,
    pub(super) start: (u64, u64),
    pub(super) pipeline_opts: PipelineOptions,
}

impl Shown {
    /// How a live run with `settings` is shown, `demo` the lab's description if one runs.
    pub(super) fn of(settings: &LiveSettings<'_>, demo: Option<String>, start: (u64, u64)) -> Self {
        Self {
            front: settings.front,
            events: settings.events,
            otlp: settings.metrics.otlp.as_ref().map(|o| (o.endpoint.clone(), o.interval)),
            demo,
            start,
            pipeline_opts: settings.pipeline.clone(),
        }
    }

    /// How often what is shown (and recorded) moves on: the terminal UI's frames, else the
    /// pipeline's tick.
    pub(super) fn tick(&self) -> Duration {
        if self.front == Front::Tui {
            crate::tui::TuiOptions::default().frame_interval
        } else {
            self.pipeline_opts.tick
        }
    }
}

/// Run the front end over the traced source until a stop, then say how it went: one path for
/// all three front ends, which differ only in what they are and the lines around them.
pub(super) async fn show(
    shown: &Shown,
    traced: &mut Traced,
    analysis: &mut Analysis,
    recorder: Option<Recorder>,
    shutdown: &mut Shutdown,
) -> Result<()> {
    let recording = recorder.as_ref().map(Recorder::status);
    if shown.front.says_on_stderr() {
        say_what_runs(shown, traced, recording.as_ref());
        traced.live_filter.as_ref().context("the filter maps are missing")?;
    }
    // The filter in force is shared: the terminal UI's prompt (F) changes it, and the same
    // upkeep in every front end keeps it following the host.
    let filter_control = match shown.front {
        Front::Tui => traced.live_filter.clone().map(|f| Box::new(f) as crate::tui::FilterControlBox),
        _ => None,
    };
    let extras = Extras { job: traced.live_filter.take().map(FilterUpkeep), recorder, metrics: traced.metrics.take() };
    let source = &mut WithHostActions::new(&mut traced.source, host_actions());
    let summary = match shown.front {
        Front::Tui => {
            let header = tui_header(shown, source.describe(), traced.serving, &traced.spec);
            let mut ui = crate::tui::TuiRun::new(header, shown.pipeline_opts.clone(), extras);
            ui.kernel_filter = filter_control;
            // `f` and `u` change the host through the same code as `cctrace fix`.
            ui.fixer = Some(Box::<crate::fix::HostFixer>::default() as crate::tui::FixControlBox);
            let summary = crate::tui::run(source, analysis, ui, shutdown).await;
            if let Ok(s) = &summary {
                eprintln!("{}", summary_line(s));
            }
            summary
        }
        Front::Json => {
            let out = LineWriter::spawn(Box::new(std::io::stdout()));
            let wall = crate::analysis::time::WallClock::from_start(shown.start.0, shown.start.1);
            let json = stack(JsonOutput::new(out, wall, shown.events), extras);
            through(json, source, analysis, &shown.pipeline_opts, shutdown).await
        }
        Front::Headless => through(stack(Headless, extras), source, analysis, &shown.pipeline_opts, shutdown).await,
    };
    if let Some(r) = &recording {
        eprintln!("{}", recorded_line(r, summary.as_ref().ok()));
    }
    if let Some(o) = &traced.otlp {
        eprintln!("{}", o.line());
    }
    summary.map(drop)
}

/// The pipeline into `front` on the monotonic clock.
async fn through<F: FrontEnd>(
    mut front: F,
    source: &mut dyn EventSource,
    analysis: &mut Analysis,
    opts: &PipelineOptions,
    shutdown: &mut Shutdown,
) -> Result<crate::analysis::schema::SummaryRecord> {
    pipeline::run(source, analysis, &mut front, opts, crate::clock::monotonic_now_ns, shutdown).await
}

/// What runs, on stderr, where no terminal UI shows it.
fn say_what_runs(shown: &Shown, traced: &Traced, recording: Option<&RecordingStatus>) {
    let described = traced.source.describe();
    if traced.spec.is_empty() {
        eprintln!("cctrace: tracing TCP in all network namespaces ({described})");
    } else {
        eprintln!("cctrace: tracing TCP flows of {} ({described})", traced.spec.describe().join(" "));
    }
    if let Some(d) = &shown.demo {
        eprintln!("cctrace: {d}");
    }
    if let Some(r) = recording {
        eprintln!("cctrace: recording to {}", r.path().display());
    }
    if let Some(addr) = traced.serving {
        eprintln!("cctrace: serving metrics at http://{addr}/metrics");
    }
    if let Some((otlp, interval)) = &shown.otlp {
        eprintln!(
            "cctrace: exporting to the OTLP collector at {otlp}: metrics every {} s, events as they happen",
            interval.as_secs()
        );
    }
}

/// The terminal UI's header: the host, the source, where the metrics go, the demo.
fn tui_header(
    shown: &Shown,
    mut described: String,
    serving: Option<SocketAddr>,
    spec: &FilterSpec,
) -> crate::tui::HeaderInfo {
    // Where the metrics are, before the demo's long description the header may cut short.
    if let Some(addr) = serving {
        described.push_str(&format!(" · metrics on http://{addr}/metrics"));
    }
    if let Some((otlp, _)) = &shown.otlp {
        described.push_str(&format!(" · OTLP to {otlp}"));
    }
    if let Some(d) = &shown.demo {
        described.push_str(&format!(" · {d}"));
    }
    let mut header = crate::tui::HeaderInfo::live(crate::host::hostname(), crate::host::kernel_release(), described);
    header.filters = spec.describe();
    header
}
