//! OTLP over HTTP with protobuf bodies (ureq, blocking, on the sender's thread): the endpoint
//! and headers checked at start-up, TLS by rustls with the system's roots or a CA file.

use std::net::ToSocketAddrs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use prost::Message;
use ureq::http::{HeaderName, HeaderValue, Uri};
use ureq::tls::{Certificate, RootCerts, TlsConfig};

use crate::metrics::otlp::sender::{Outcome, Request, Signal, Transport, REQUEST_TIMEOUT};

/// The statuses OTLP/HTTP says to retry.
const RETRYABLE: [u16; 4] = [429, 502, 503, 504];
/// How much of a refusal's body is quoted.
const QUOTED_BODY: usize = 200;

/// The collector's base URL, checked: `http://` or `https://`, a host that resolves.
fn check_endpoint(endpoint: &str) -> Result<(String, bool)> {
    let example = "give its URL, e.g. http://collector:4318";
    let uri: Uri = endpoint.parse().map_err(|e| anyhow::anyhow!("--otlp {endpoint:?}: {e}: {example}"))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => bail!("--otlp {endpoint:?}: not an http:// or https:// URL: {example}"),
    };
    let host =
        uri.host().filter(|h| !h.is_empty()).with_context(|| format!("--otlp {endpoint:?}: no host: {example}"))?;
    if uri.query().is_some() {
        bail!("--otlp {endpoint:?}: the base URL takes no query: /v1/metrics and /v1/logs are added to it");
    }
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    (bare, port).to_socket_addrs().with_context(|| format!("--otlp {endpoint:?}: cannot resolve {host}"))?;
    Ok((endpoint.trim_end_matches('/').to_string(), https))
}

/// `KEY=VALUE` as an HTTP header. A refusal names the key, never the value (a secret).
fn header(text: &str) -> Result<(HeaderName, HeaderValue)> {
    let from = "--otlp-header (or OTEL_EXPORTER_OTLP_HEADERS)";
    let (k, v) = text.split_once('=').with_context(|| format!("{from}: a header without '=': give KEY=VALUE"))?;
    let name = HeaderName::from_bytes(k.trim().as_bytes())
        .map_err(|_| anyhow::anyhow!("{from}: {k:?} is not a header name"))?;
    let value = HeaderValue::from_str(v.trim())
        .map_err(|_| anyhow::anyhow!("{from}: the value of {k:?} is not a header value"))?;
    Ok((name, value))
}

/// The roots a TLS collector's certificate must chain to: `ca_file`'s only when given (as
/// `curl --cacert`), else the system's.
fn roots(ca_file: Option<&Path>) -> Result<RootCerts> {
    let certs: Vec<Certificate<'static>> = match ca_file {
        Some(path) => {
            let pem = std::fs::read(path).with_context(|| format!("--otlp-ca-file {}", path.display()))?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_, _>>()
                .with_context(|| format!("--otlp-ca-file {}: not PEM", path.display()))?;
            if certs.is_empty() {
                bail!("--otlp-ca-file {}: holds no PEM certificate", path.display());
            }
            certs
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let certs: Vec<_> = found.certs.iter().map(|c| Certificate::from_der(c.as_ref()).to_owned()).collect();
            if certs.is_empty() {
                bail!(
                    "no trusted root certificates found on this system for the https collector ({}): install \
                     ca-certificates or give --otlp-ca-file",
                    found.errors.first().map_or_else(|| "none in the usual places".to_string(), ToString::to_string)
                );
            }
            certs
        }
    };
    Ok(RootCerts::Specific(Arc::new(certs)))
}

/// The HTTP client of one collector.
pub(super) struct Http {
    agent: ureq::Agent,
    base: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Http {
    /// Check everything a bad command line could get wrong before anything is sent: one
    /// error line each.
    pub(super) fn new(endpoint: &str, headers: &[String], ca_file: Option<&Path>) -> Result<Self> {
        let (base, https) = check_endpoint(endpoint)?;
        let headers = headers.iter().map(|h| header(h)).collect::<Result<Vec<_>>>()?;
        if ca_file.is_some() && !https {
            bail!("--otlp-ca-file is for an https:// collector, and {endpoint} is not one");
        }
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(concat!("cctrace/", env!("CARGO_PKG_VERSION")));
        if https {
            let tls = TlsConfig::builder()
                .root_certs(roots(ca_file)?)
                .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .build();
            config = config.tls_config(tls);
        }
        Ok(Self { agent: config.build().new_agent(), base, headers })
    }

    fn outcome(signal: Signal, mut response: ureq::http::Response<ureq::Body>) -> Outcome {
        let status = response.status();
        let retry_after = || {
            let header = response.headers().get("retry-after")?.to_str().ok()?;
            header.trim().parse().ok().map(Duration::from_secs)
        };
        if RETRYABLE.contains(&status.as_u16()) {
            return Outcome::Retry { why: status.to_string(), after: retry_after() };
        }
        let body = response.body_mut().with_config().limit(1 << 20).read_to_vec().unwrap_or_default();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let quoted: String = text.chars().take(QUOTED_BODY).collect();
            return Outcome::Refused(format!("{status}: {}", quoted.trim()));
        }
        // A partial success says how much of the request the collector dropped.
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
        use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
        let rejected = match signal {
            Signal::Metrics => ExportMetricsServiceResponse::decode(body.as_slice())
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_data_points),
            Signal::Logs => ExportLogsServiceResponse::decode(body.as_slice())
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_log_records),
        };
        Outcome::Accepted { rejected: u64::try_from(rejected).unwrap_or(0) }
    }
}

impl Transport for Http {
    fn send(&mut self, request: &Request) -> Outcome {
        let mut post = self
            .agent
            .post(format!("{}{}", self.base, request.signal.path()))
            .header("content-type", "application/x-protobuf");
        for (k, v) in &self.headers {
            post = post.header(k, v);
        }
        match post.send(request.body.as_slice()) {
            Ok(response) => Self::outcome(request.signal, response),
            Err(e) => Outcome::Retry { why: e.to_string(), after: None },
        }
    }

    fn describe(&self) -> String {
        self.base.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_endpoint_header_or_ca_file_is_one_line() {
        for (endpoint, says) in [
            ("collector:4318", "not an http:// or https:// URL"),
            ("ftp://collector/", "not an http:// or https:// URL"),
            ("http://", "http://"),
            ("http://collector.invalid:4318", "cannot resolve collector.invalid"),
            ("http://127.0.0.1:4318/?a=b", "takes no query"),
        ] {
            let e =
                format!("{:#}", Http::new(endpoint, &[], None).err().unwrap_or_else(|| panic!("{endpoint} accepted")));
            assert!(e.contains(says) && !e.contains('\n'), "{endpoint}: {e}");
        }
        let ok = Http::new("http://127.0.0.1:4318/", &["x-api-key=s3cret".into()], None).expect("fine");
        assert_eq!(ok.describe(), "http://127.0.0.1:4318");
        for bad in ["novalue", "bad name=x", "k=\u{7f}"] {
            let e = format!("{:#}", Http::new("http://127.0.0.1:4318", &[bad.into()], None).err().expect("refused"));
            assert!(e.starts_with("--otlp-header") && !e.contains('\n'), "{bad}: {e}");
            assert!(!e.contains("\u{7f}") && !e.contains("novalue"), "no value repeated: {e}");
        }
        let e = format!(
            "{:#}",
            Http::new("http://127.0.0.1:4318", &[], Some(Path::new("/etc/hostname"))).err().expect("refused")
        );
        assert!(e.contains("is for an https:// collector"), "{e}");
        let e = format!(
            "{:#}",
            Http::new("https://127.0.0.1:4318", &[], Some(Path::new("/etc/hostname"))).err().expect("refused")
        );
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let e = format!(
            "{:#}",
            Http::new("https://127.0.0.1:4318", &[], Some(Path::new("/nonexistent.pem"))).err().expect("refused")
        );
        assert!(e.contains("/nonexistent.pem"), "{e}");
    }

    /// A TLS collector on localhost with a self-signed certificate, for one connection: it
    /// answers 200 to a request, or counts a handshake that failed.
    fn tls_collector(cert: &rcgen::CertifiedKey) -> (u16, std::thread::JoinHandle<bool>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let port = listener.local_addr().expect("addr").port();
        let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key.into())
            .expect("config");
        let served = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().expect("accepts");
            let conn = rustls::ServerConnection::new(Arc::new(config)).expect("conn");
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if tls.read(&mut byte).unwrap_or(0) == 0 {
                    return false;
                }
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let length: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                .unwrap_or(0);
            let mut body = vec![0; length];
            tls.read_exact(&mut body).expect("body");
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").expect("answers");
            tls.conn.send_close_notify();
            let _ = tls.flush();
            true
        });
        (port, served)
    }

    #[test]
    fn an_https_collector_is_trusted_through_the_ca_file_and_only_through_it() {
        use crate::metrics::otlp::sender::{Outcome, Request, Signal};
        let dir = std::env::temp_dir().join(format!("cct-otlp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let collector = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let (trusted, other) = (dir.join("ca.pem"), dir.join("other.pem"));
        std::fs::write(&trusted, collector.cert.pem()).expect("writes");
        std::fs::write(&other, stranger.cert.pem()).expect("writes");
        let request = Request { signal: Signal::Logs, body: vec![1, 2, 3], items: 1, made: std::time::Instant::now() };

        let (port, served) = tls_collector(&collector);
        let mut http = Http::new(&format!("https://localhost:{port}"), &[], Some(&trusted)).expect("client");
        assert_eq!(http.send(&request), Outcome::Accepted { rejected: 0 });
        assert!(served.join().expect("served"), "a request came over TLS");

        let (port, served) = tls_collector(&collector);
        let mut http = Http::new(&format!("https://localhost:{port}"), &[], Some(&other)).expect("client");
        let outcome = http.send(&request);
        assert!(
            matches!(&outcome, Outcome::Retry { why, .. } if why.to_lowercase().contains("certificate")),
            "{outcome:?}"
        );
        assert!(!served.join().expect("served"), "nothing was sent to a collector not trusted");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
