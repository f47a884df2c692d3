use std::io::{BufRead, BufReader, Read, Write};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

use super::*;
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::schema::FlowRecord;
use crate::analysis::Analysis;
use crate::metrics::families::families;
use crate::metrics::otlp::events::EventKind;
use crate::test_support::feed;

fn attribute<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn str_of(v: Option<&any_value::Value>) -> Option<&str> {
    match v {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn int_of(v: Option<&any_value::Value>) -> Option<i64> {
    match v {
        Some(any_value::Value::IntValue(i)) => Some(*i),
        _ => None,
    }
}

/// The flagged upload's record after 30 s of the feed.
fn flagged_upload() -> Event {
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
    for tick in 0..300 {
        for s in &feed::batch(tick) {
            analysis.ingest(s);
        }
        analysis.tick(feed::ts_ns(tick));
    }
    let flow = analysis.table.get(feed::CUBIC).expect("the upload");
    let clock = WallClock::fixed(0);
    let record = FlowRecord::of(flow, analysis.verdict(flow), &clock, &analysis.env);
    Event {
        kind: EventKind::Flagged,
        ts_ns: feed::ts_ns(299),
        body: record.verdict.clone(),
        record: serde_json::to_value(record).expect("json"),
        extra: Vec::new(),
    }
}

#[test]
fn an_event_carries_the_conventions_names_and_every_field_of_its_record() {
    let event = flagged_upload();
    let clock = WallClock::fixed(1_000_000_000);
    let request = logs_request(
        std::slice::from_ref(&event),
        &resource(&Host { name: "media".into(), kernel: "6.18.0".into() }),
        &clock,
        7,
    );
    // What travels is what decodes.
    let request = ExportLogsServiceRequest::decode(request.encode_to_vec().as_slice()).expect("decodes");
    let resource = request.resource_logs[0].resource.as_ref().expect("resource");
    assert_eq!(str_of(attribute(&resource.attributes, "service.name")), Some("cctrace"));
    assert_eq!(str_of(attribute(&resource.attributes, "host.name")), Some("media"));
    assert_eq!(str_of(attribute(&resource.attributes, "os.type")), Some("linux"));
    assert_eq!(str_of(attribute(&resource.attributes, "os.version")), Some("6.18.0"));
    let record = &request.resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(record.event_name, "cctrace.flow.flagged");
    assert_eq!((record.severity_number, record.severity_text.as_str()), (13, "WARN"));
    assert_eq!(record.time_unix_nano, feed::ts_ns(299) + 1_000_000_000);
    assert_eq!(record.observed_time_unix_nano, 7);
    let a = &record.attributes;
    let r = &event.record;
    assert_eq!(str_of(attribute(a, "network.peer.address")), r["dst"].as_str());
    assert_eq!(int_of(attribute(a, "network.peer.port")), r["dport"].as_i64());
    assert_eq!(str_of(attribute(a, "network.local.address")), r["src"].as_str());
    assert_eq!(str_of(attribute(a, "network.transport")), Some("tcp"));
    assert_eq!(str_of(attribute(a, "container.name")), Some("jellyfin"));
    assert_eq!(str_of(attribute(a, "container.runtime.name")), Some("docker"));
    assert_eq!(int_of(attribute(a, "cctrace.cookie")), Some(feed::CUBIC as i64));
    assert_eq!(str_of(attribute(a, "cctrace.limited_by")), Some("cwnd"));
    assert!(
        matches!(attribute(a, "cctrace.evidence.loss_ratio"), Some(any_value::Value::DoubleValue(v)) if *v > 0.005)
    );
    let Some(any_value::Value::ArrayValue(fix)) = attribute(a, "cctrace.fix") else { panic!("fix lines: {a:#?}") };
    assert_eq!(fix.values.len(), r["fix"].as_array().map_or(0, Vec::len));
    assert!(attribute(a, "src").is_none() && attribute(a, "cctrace.src").is_none(), "named once, by the convention");
    // The server is the end whose port is not ephemeral.
    let (sport, dport) = (r["sport"].as_u64().expect("sport"), r["dport"].as_u64().expect("dport"));
    if (32768..=60999).contains(&sport) && !(32768..=60999).contains(&dport) {
        assert_eq!(int_of(attribute(a, "server.port")), Some(dport as i64));
        assert_eq!(int_of(attribute(a, "client.port")), Some(sport as i64));
    }
    // Every non-null leaf of the record is there, under some name.
    fn leaves(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Null => 0,
            serde_json::Value::Object(o) => o.values().map(leaves).sum(),
            _ => 1,
        }
    }
    let derived = 2 + usize::from(attribute(a, "server.port").is_some()) * 4; // network.transport/type, server.*, client.*
    assert_eq!(a.len(), 1 + leaves(r) + derived, "event.name, the record, the derived");
}

#[test]
fn families_become_gauges_and_cumulative_sums_with_units_and_the_same_labels() {
    let snap = crate::metrics::exposition::tests::snapshot();
    let (request, points) = metrics_request(&families(&snap), &resource(&Host::default()), 100, 200);
    let request = ExportMetricsServiceRequest::decode(request.encode_to_vec().as_slice()).expect("decodes");
    let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
    let total: usize = metrics
        .iter()
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(total as u64, points);
    let find = |name: &str| metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no {name}"));
    let sent = find("cctrace_sent_bytes");
    assert_eq!(sent.unit, "By");
    let Some(metric::Data::Sum(sum)) = &sent.data else { panic!("a sum") };
    assert!(sum.is_monotonic && sum.aggregation_temporality == AggregationTemporality::Cumulative as i32);
    let p = &sum.data_points[0];
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (100, 200));
    assert_eq!(p.value, Some(number_data_point::Value::AsInt(123_456)));
    let labels: Vec<(&str, Option<&str>)> =
        p.attributes.iter().map(|kv| (kv.key.as_str(), str_of(attribute(&p.attributes, &kv.key)))).collect();
    assert_eq!(labels, vec![("container", Some("jelly\"fin\n")), ("netns", Some("4026531840")), ("cc", Some("cubic"))]);
    let goodput = find("cctrace_goodput_bytes_per_second");
    assert_eq!(goodput.unit, "By/s");
    let Some(metric::Data::Gauge(g)) = &goodput.data else { panic!("a gauge") };
    assert_eq!(g.data_points[0].value, Some(number_data_point::Value::AsDouble(1e6)));
    assert_eq!(find("cctrace_loss_ratio").unit, "1");
    assert_eq!(find("cctrace_flows").unit, "{flow}");
    assert_eq!(find("cctrace_flagged_flow_rtt_seconds").unit, "s");
    assert!(metrics.iter().all(|m| m.name != "cctrace_hook_runs"), "no series, no metric");
}

/// A one-request HTTP server: the request's head and body, answered with `status`.
fn collector(status: &'static str) -> (std::net::SocketAddr, std::thread::JoinHandle<(String, Vec<u8>)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("addr");
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accepts");
        let mut reader = BufReader::new(stream.try_clone().expect("clones"));
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("reads");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        let mut stream = stream;
        write!(stream, "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").expect("answers");
        (head, body)
    });
    (addr, handle)
}

#[test]
fn the_client_posts_protobuf_with_the_headers_to_the_signals_path() {
    use crate::metrics::otlp::sender::{request, Outcome, Signal, Transport};
    let (addr, server) = collector("200 OK");
    let mut http =
        super::super::http::Http::new(&format!("http://{addr}/"), &["x-api-key=s3cret".into()], None).expect("client");
    let event = flagged_upload();
    let message = logs_request(&[event], &resource(&Host::default()), &WallClock::fixed(0), 1);
    assert_eq!(http.send(&request(Signal::Logs, &message, 1)), Outcome::Accepted { rejected: 0 });
    let (head, body) = server.join().expect("served");
    assert!(head.starts_with("POST /v1/logs HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/x-protobuf"), "{head}");
    assert!(head.contains("x-api-key: s3cret"), "{head}");
    assert_eq!(ExportLogsServiceRequest::decode(body.as_slice()).expect("decodes"), message);
    let (addr, server) = collector("503 Service Unavailable");
    let mut http = super::super::http::Http::new(&format!("http://{addr}"), &[], None).expect("client");
    assert!(matches!(http.send(&request(Signal::Metrics, &message, 1)), Outcome::Retry { .. }));
    server.join().expect("served");
    let (addr, server) = collector("400 Bad Request");
    let mut http = super::super::http::Http::new(&format!("http://{addr}"), &[], None).expect("client");
    assert!(
        matches!(http.send(&request(Signal::Metrics, &message, 1)), Outcome::Refused(why) if why.starts_with("400"))
    );
    server.join().expect("served");
}
