//! A QUIC server and client for the UDP tests (quinn over UDP, TLS with a self-signed cert):
//!
//! `quic-peer serve ADDR CERT_OUT` serves each request (a byte count, on a bidirectional
//! stream) with that many bytes; `quic-peer fetch ADDR CERT BYTES` fetches them and prints
//! how many arrived. The congestion control is quinn's own (CUBIC by default), in this process.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use quinn::rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

const CHUNK: usize = 64 * 1024;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") if args.len() == 4 => serve(args[2].parse()?, &args[3]).await,
        Some("fetch") if args.len() == 5 => fetch(args[2].parse()?, &args[3], args[4].parse()?).await,
        _ => bail!("usage: quic-peer serve ADDR CERT_OUT | quic-peer fetch ADDR CERT BYTES"),
    }
}

async fn serve(addr: SocketAddr, cert_out: &str) -> Result<()> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert = certified.cert.der().clone();
    let key = PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der());
    std::fs::write(cert_out, cert.as_ref()).with_context(|| format!("writing {cert_out}"))?;
    let config = quinn::ServerConfig::with_single_cert(vec![cert], key.into())?;
    let endpoint = quinn::Endpoint::server(config, addr)?;
    println!("listening");
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            if let Err(e) = answer(incoming).await {
                eprintln!("quic-peer: {e:#}");
            }
        });
    }
    Ok(())
}

async fn answer(incoming: quinn::Incoming) -> Result<()> {
    let conn = incoming.await?;
    let (mut send, mut recv) = conn.accept_bi().await?;
    let request = recv.read_to_end(32).await?;
    let mut left: usize = std::str::from_utf8(&request)?.trim().parse()?;
    let chunk = vec![0x5a_u8; CHUNK];
    while left > 0 {
        let n = left.min(CHUNK);
        send.write_all(&chunk[..n]).await?;
        left -= n;
    }
    send.finish()?;
    conn.closed().await;
    Ok(())
}

async fn fetch(addr: SocketAddr, cert: &str, bytes: usize) -> Result<()> {
    let der = std::fs::read(cert).with_context(|| format!("reading {cert}"))?;
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der))?;
    let config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse()?)?;
    endpoint.set_default_client_config(config);
    let conn = endpoint.connect(addr, "localhost")?.await.context("QUIC handshake")?;
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(bytes.to_string().as_bytes()).await?;
    send.finish()?;
    let mut got = 0usize;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        got += chunk.bytes.len();
    }
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    println!("{got}");
    Ok(())
}
