//! The header's facts that the UI cannot know by itself: host, kernel, source, filters.

/// Facts for the header that the UI cannot know by itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Host name.
    pub host: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// What the samples come from ([`crate::source::EventSource::describe`]).
    pub source: String,
    /// Recording status ("recording to x.cctrace"), `None` when not recording.
    pub recording: Option<String>,
    /// Filters applied before the UI (the kernel filter: command-line options, or what the
    /// filter prompt set), one short phrase each.
    pub filters: Vec<String>,
}

impl HeaderInfo {
    /// Header for samples taken on the machine named `host` running `kernel` (the caller reads
    /// them); "?" for what is unknown: the header informs, it is never a reason to fail.
    pub fn live(host: String, kernel: String, source: impl Into<String>) -> Self {
        let known = |s: String| if s.is_empty() { "?".to_string() } else { s };
        Self { host: known(host), kernel: known(kernel), source: source.into(), recording: None, filters: Vec::new() }
    }
}
