//! The [`Snapshot`] in the Prometheus exposition formats, through the Prometheus project's own
//! Rust client: a [`Collector`] that encodes the latest snapshot's
//! [`families`](crate::metrics::families) at each scrape, and the choice between the text format
//! (0.0.4) and OpenMetrics by the scraper's `Accept` header.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::families::{families, Kind, Value};
use crate::metrics::model::Snapshot;

/// The latest snapshot, shared between the pipeline (which replaces it) and scrapes (which read
/// it): a scrape never waits for an evaluation, only for a pointer swap.
#[derive(Clone, Debug, Default)]
pub struct SharedSnapshot(Arc<Mutex<Published>>);

#[derive(Debug, Default)]
struct Published {
    snapshot: Arc<Snapshot>,
    at: Option<Instant>,
}

impl SharedSnapshot {
    pub fn set(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) =
            Published { snapshot: Arc::new(snapshot), at: Some(Instant::now()) };
    }

    pub fn get(&self) -> Arc<Snapshot> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).snapshot.clone()
    }

    /// How long ago the snapshot was replaced (`None`: never yet).
    pub fn age(&self) -> Option<Duration> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).at.map(|t| t.elapsed())
    }
}

/// Which exposition format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4.
    Text,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the scraper lists it as acceptable (Prometheus does, first), else text.
    pub fn negotiate(accept: Option<&str>) -> Self {
        // A media range with `q=0` is refused; any other weight accepts it.
        let wants_openmetrics = accept.is_some_and(|a| {
            a.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let q = parts.find_map(|p| p.strip_prefix("q=")).map_or(1.0, |q| q.parse::<f64>().unwrap_or(0.0));
                media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
            })
        });
        if wants_openmetrics {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A registry holding the exporter's collector.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    pub fn new(snapshot: SharedSnapshot) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector(snapshot)));
        Self { registry }
    }

    /// The whole exposition in `format`.
    pub fn render(&self, format: Format) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        match format {
            Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?,
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &self.registry)?,
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct SnapshotCollector(SharedSnapshot);

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.0.get();
        for f in families(&snap) {
            let unit = f.unit.suffix().map(|s| Unit::Other(s.into()));
            let metric_type = match f.kind {
                Kind::Gauge => MetricType::Gauge,
                Kind::Counter => MetricType::Counter,
            };
            let mut family = encoder.encode_descriptor(f.base, f.help, unit.as_ref(), metric_type)?;
            match f.points.as_slice() {
                [only] if only.labels.is_empty() => encode_point(f.kind, only.value, family)?,
                points => {
                    for p in points {
                        encode_point(f.kind, p.value, family.encode_family(&p.labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One series' value as its family's type.
fn encode_point(kind: Kind, value: Value, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
    match (kind, value) {
        (Kind::Gauge, Value::Int(v)) => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(encoder),
        (Kind::Gauge, Value::Float(v)) => ConstGauge::new(v).encode(encoder),
        (Kind::Counter, Value::Int(v)) => ConstCounter::new(v).encode(encoder),
        (Kind::Counter, Value::Float(v)) => ConstCounter::new(v).encode(encoder),
    }
}

#[cfg(test)]
pub(crate) mod tests;
