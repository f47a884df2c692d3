//! `cctrace replay FILE`: a recording through the same pipeline and front-end stack as a live
//! run, ticking where it ticked.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;

use super::lines::summary_line;
use super::settings::{diagnosis_config, filter_spec};
use crate::analysis::flow_table::TableConfig;
use crate::analysis::Analysis;
use crate::cli::Cli;
use crate::frontend::json::JsonOutput;
use crate::frontend::line_writer::LineWriter;
use crate::frontend::stack::{stack, Extras};
use crate::pipeline::{self, PipelineOptions};
use crate::recording::player::PacedRecording;
use crate::recording::RecordingSource;
use crate::side_job::NoJob;
use crate::signals::Shutdown;
use crate::source::EventSource;

/// `cctrace replay FILE`: the recording through the same pipeline, ticking where it ticked.
pub(super) async fn replay(cli: &Cli, file: &std::path::Path) -> Result<()> {
    if !filter_spec(cli).is_empty() || cli.record.is_some() {
        anyhow::bail!("a replay takes no --cgroup, --container, --netns or --record: they apply while recording");
    }
    if cli.listen.is_some() || cli.otlp.is_some() {
        anyhow::bail!("a replay takes no --listen or --otlp: metrics are exported while tracing live (cctrace serve)");
    }
    let mut shutdown = Shutdown::install()?;
    let mut source = RecordingSource::open(file)?;
    let h = source.header().clone();
    eprintln!("cctrace: replaying {} (recorded on {}, Linux {}, {})", file.display(), h.host, h.kernel, h.source);
    if !h.filters.is_empty() {
        eprintln!("cctrace: recorded with the filter {}", h.filters.join(" "));
    }
    let mut config = diagnosis_config(cli);
    if let (Some(bytes), Some(bps)) = (h.heavy_min_bytes, h.heavy_min_bps) {
        config.heavy_min_bytes = bytes;
        config.heavy_min_bps = bps;
    }
    let mut analysis =
        Analysis::new(TableConfig::default(), config, crate::analysis::environment::Environment::default());
    let pipeline_opts = PipelineOptions {
        tick: Duration::from_millis(h.tick_ms.max(10)),
        duration: cli.duration,
        final_drain: Duration::ZERO,
        scripted: true,
        ..PipelineOptions::default()
    };
    let (result, truncated) = if cli.json || !std::io::stdout().is_terminal() {
        let out = LineWriter::spawn(Box::new(std::io::stdout()));
        let wall = crate::analysis::time::WallClock::from_start(h.start_unix_ns, h.start_monotonic_ns);
        let mut front = stack(JsonOutput::new(out, wall, cli.events), Extras::<NoJob>::default());
        // As fast as it reads: the recorded ticks decide what is printed, not the pace.
        let result = pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, || 0, &mut shutdown).await;
        (result.map(drop), source.truncated())
    } else {
        let header = crate::tui::HeaderInfo {
            host: h.host.clone(),
            kernel: h.kernel.clone(),
            source: format!("{} · recorded from {}", source.describe(), h.source),
            recording: None,
            filters: h.filters.clone(),
        };
        // At the recorded pace, with the playback keys.
        let mut paced = PacedRecording::open(file)?;
        let mut ui = crate::tui::TuiRun::new(header, pipeline_opts, Extras::<NoJob>::default());
        ui.player = Some(paced.player());
        let result = crate::tui::run(&mut paced, &mut analysis, ui, &mut shutdown)
            .await
            .map(|summary| eprintln!("{}", summary_line(&summary)));
        (result, paced.source().truncated())
    };
    if let Some(at) = truncated {
        eprintln!("cctrace: recording truncated at byte {at}");
    }
    result
}
