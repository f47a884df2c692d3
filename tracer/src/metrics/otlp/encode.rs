//! The OTLP messages, from the OpenTelemetry project's generated types (`opentelemetry-proto`,
//! encoded by prost): the [`families`](crate::metrics::families) as gauges and cumulative sums,
//! the [`Event`]s as log records, both under one resource that says which host and cctrace
//! they come from.
//!
//! Attribute names follow OpenTelemetry's semantic conventions where they have one: the
//! resource's `service.*`, `host.*`, `os.*`; an event's `network.*`, `server.*`/`client.*`,
//! `container.*`, `k8s.*`, `process.*`. Everything else a record holds is an attribute under
//! `cctrace.` with the name `--json` gives it (`cctrace.limited_by`, `cctrace.evidence.loss_ratio`,
//! `cctrace.fix`). Metric data points keep the exposition's labels (`container`, `netns`, `cc`):
//! the same series under the same names, whichever way they travel.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::Value as Json;

use crate::analysis::time::WallClock;
use crate::metrics::families::{Family, Kind, Value};
use crate::metrics::otlp::events::Event;

/// Attributes of a flow record (by their path in its JSON) that have a semantic-convention name.
const CONVENTIONS: &[(&str, &str)] = &[
    ("src", "network.local.address"),
    ("sport", "network.local.port"),
    ("dst", "network.peer.address"),
    ("dport", "network.peer.port"),
    ("dev", "network.interface.name"),
    ("container.name", "container.name"),
    ("container.id", "container.id"),
    ("container.runtime", "container.runtime.name"),
    ("container.pod.name", "k8s.pod.name"),
    ("container.pod.namespace", "k8s.namespace.name"),
    ("container.pod.uid", "k8s.pod.uid"),
    ("owner.pid", "process.pid"),
    ("owner.comm", "process.executable.name"),
];

/// The first port of the kernel's default ephemeral range (`net.ipv4.ip_local_port_range`).
const EPHEMERAL_PORTS: std::ops::RangeInclusive<u64> = 32768..=60999;

fn string(s: impl Into<String>) -> AnyValue {
    AnyValue { value: Some(any_value::Value::StringValue(s.into())) }
}

fn key_value(key: impl Into<String>, value: AnyValue) -> KeyValue {
    KeyValue { key: key.into(), value: Some(value), ..KeyValue::default() }
}

/// A JSON value as an attribute value (`None` for null).
fn any(v: &Json) -> Option<AnyValue> {
    let value = match v {
        Json::Null => return None,
        Json::Bool(b) => any_value::Value::BoolValue(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => any_value::Value::StringValue(s.clone()),
        Json::Array(a) => any_value::Value::ArrayValue(ArrayValue { values: a.iter().filter_map(any).collect() }),
        Json::Object(o) => any_value::Value::KvlistValue(KeyValueList {
            values: o.iter().filter_map(|(k, v)| Some(key_value(k.clone(), any(v)?))).collect(),
        }),
    };
    Some(AnyValue { value: Some(value) })
}

/// A record's fields as attributes: objects flattened into dotted names, each under its
/// convention's name or under `cctrace.`; nulls left out.
fn flatten(path: &str, v: &Json, out: &mut Vec<KeyValue>) {
    let convention = CONVENTIONS.iter().find(|(p, _)| *p == path).map(|(_, name)| *name);
    match (convention, v) {
        (None, Json::Object(fields)) => {
            for (k, v) in fields {
                let path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                flatten(&path, v, out);
            }
        }
        (name, v) => {
            if let Some(value) = any(v) {
                out.push(key_value(name.map_or_else(|| format!("cctrace.{path}"), String::from), value));
            }
        }
    }
}

/// Which end of a connection is the server, by its ports: the one outside the ephemeral range
/// while the other is inside it (a listener's port is chosen, a client's is drawn from the
/// range). `None` when the ports do not tell.
fn server_side(record: &Json) -> Option<(&'static str, &'static str)> {
    let port = |k: &str| record.get(k).and_then(Json::as_u64);
    let (sport, dport) = (port("sport")?, port("dport")?);
    match (EPHEMERAL_PORTS.contains(&sport), EPHEMERAL_PORTS.contains(&dport)) {
        (true, false) => Some(("dst", "src")),
        (false, true) => Some(("src", "dst")),
        _ => None,
    }
}

/// The attributes of an event: its name, the record's fields, what the network conventions
/// derive from them, and the event's own.
fn event_attributes(event: &Event) -> Vec<KeyValue> {
    let mut out = vec![key_value("event.name", string(event.kind.name()))];
    flatten("", &event.record, &mut out);
    let r = &event.record;
    if let Some(src) = r.get("src").and_then(Json::as_str) {
        out.push(key_value("network.transport", string("tcp")));
        let v6 = src.contains(':');
        out.push(key_value("network.type", string(if v6 { "ipv6" } else { "ipv4" })));
    }
    if let Some((server, client)) = server_side(r) {
        let port = |end: &str| if end == "src" { "sport" } else { "dport" };
        for (role, end) in [("server", server), ("client", client)] {
            if let (Some(address), Some(p)) = (r.get(end).and_then(any), r.get(port(end)).and_then(any)) {
                out.push(key_value(format!("{role}.address"), address));
                out.push(key_value(format!("{role}.port"), p));
            }
        }
    }
    for (k, v) in &event.extra {
        if let Some(value) = any(v) {
            out.push(key_value(*k, value));
        }
    }
    out
}

/// The host facts the resource names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// The kernel release (`uname -r`).
    pub kernel: String,
}

/// OpenTelemetry's name for the CPU architecture (`host.arch`).
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        other => other,
    }
}

/// The resource every export is about: this cctrace on this host.
pub fn resource(host: &Host) -> Resource {
    let attributes = [
        ("service.name", "cctrace"),
        ("service.version", env!("CARGO_PKG_VERSION")),
        // One cctrace per host: the host tells instances apart (Prometheus's `instance`, once a
        // collector translates the resource).
        ("service.instance.id", host.name.as_str()),
        ("host.name", host.name.as_str()),
        ("host.arch", host_arch()),
        ("os.type", "linux"),
        ("os.version", host.kernel.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| key_value(k, string(v)))
    .collect();
    Resource { attributes, ..Resource::default() }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "cctrace".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..InstrumentationScope::default()
    }
}

fn data_point(
    labels: &[(&'static str, std::borrow::Cow<'_, str>)],
    value: Value,
    start: u64,
    now: u64,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes: labels.iter().map(|(k, v)| key_value(*k, string(v.as_ref()))).collect(),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(match value {
            Value::Int(v) => number_data_point::Value::AsInt(i64::try_from(v).unwrap_or(i64::MAX)),
            Value::Float(v) => number_data_point::Value::AsDouble(v),
        }),
        ..NumberDataPoint::default()
    }
}

/// The families as OTLP metrics at `now_unix_ns`, counters cumulative since `start_unix_ns`
/// (the process's start: they count from it); families without series are left out. Also
/// the number of data points.
pub fn metrics_request(
    families: &[Family<'_>],
    resource: &Resource,
    start_unix_ns: u64,
    now_unix_ns: u64,
) -> (ExportMetricsServiceRequest, u64) {
    let mut points = 0;
    let metrics = families
        .iter()
        .filter(|f| !f.points.is_empty())
        .map(|f| {
            points += f.points.len() as u64;
            let data = match f.kind {
                Kind::Gauge => metric::Data::Gauge(Gauge {
                    data_points: f.points.iter().map(|p| data_point(&p.labels, p.value, 0, now_unix_ns)).collect(),
                }),
                Kind::Counter => metric::Data::Sum(Sum {
                    data_points: f
                        .points
                        .iter()
                        .map(|p| data_point(&p.labels, p.value, start_unix_ns, now_unix_ns))
                        .collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                }),
            };
            Metric {
                name: f.name(),
                description: f.help.into(),
                unit: f.unit.ucum().into(),
                data: Some(data),
                ..Metric::default()
            }
        })
        .collect();
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics { scope: Some(scope()), metrics, ..ScopeMetrics::default() }],
            ..ResourceMetrics::default()
        }],
    };
    (request, points)
}

/// The events as OTLP log records, timed by `clock`, observed at `now_unix_ns`.
pub fn logs_request(
    events: &[Event],
    resource: &Resource,
    clock: &WallClock,
    now_unix_ns: u64,
) -> ExportLogsServiceRequest {
    let log_records = events
        .iter()
        .map(|e| {
            let (severity_number, severity_text) = e.kind.severity();
            LogRecord {
                time_unix_nano: (clock.unix_secs(e.ts_ns) * 1e9) as u64,
                observed_time_unix_nano: now_unix_ns,
                severity_number,
                severity_text: severity_text.into(),
                body: Some(string(e.body.as_str())),
                attributes: event_attributes(e),
                event_name: e.kind.name().into(),
                ..LogRecord::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource.clone()),
            scope_logs: vec![ScopeLogs { scope: Some(scope()), log_records, ..ScopeLogs::default() }],
            ..ResourceLogs::default()
        }],
    }
}

#[cfg(test)]
mod tests;
