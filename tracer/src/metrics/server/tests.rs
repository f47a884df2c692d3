use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn serves_metrics_and_health_then_refuses_after_shutdown() {
    let shared = SharedSnapshot::default();
    let server = MetricsServer::bind("127.0.0.1:0".parse().expect("addr"), shared.clone()).await.expect("binds");
    let addr = server.local_addr();
    let health = get(addr, "/health").await.expect("answers");
    assert!(health.starts_with("HTTP/1.1 503"), "no snapshot yet: {health}");
    shared.set(crate::metrics::Snapshot::default());
    assert!(get(addr, "/health").await.expect("answers").starts_with("HTTP/1.1 200"));
    let metrics = get(addr, "/metrics").await.expect("answers");
    assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains("cctrace_events_lost_total 0"), "{metrics}");
    assert!(get(addr, "/nothing").await.expect("answers").starts_with("HTTP/1.1 404"));
    // An idle keep-alive connection held open across the shutdown must not hold it.
    let idle = tokio::net::TcpStream::connect(addr).await.expect("connects");
    tokio::time::timeout(Duration::from_secs(2), server.shutdown()).await.expect("shutdown does not hang");
    drop(idle);
    let after = tokio::time::timeout(Duration::from_secs(2), get(addr, "/metrics")).await.expect("no hang");
    assert!(after.is_err(), "refused after shutdown: {after:?}");
}

#[test]
fn only_loopback_unless_asked() {
    assert!(check_listen("127.0.0.1:9617".parse().expect("addr"), false).is_ok());
    assert!(check_listen("[::1]:9617".parse().expect("addr"), false).is_ok());
    let err = check_listen("0.0.0.0:9617".parse().expect("addr"), false).expect_err("refused");
    assert!(err.to_string().contains("--allow-non-loopback"), "{err}");
    assert!(check_listen("0.0.0.0:9617".parse().expect("addr"), true).is_ok());
}
