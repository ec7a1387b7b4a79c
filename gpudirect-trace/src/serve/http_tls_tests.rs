//! The server over TLS with client certificates and basic auth, on loopback
//! with a rustls client (tests/host/serve_tls.rs has a real Prometheus).
//! `cargo test -p gpudirect-trace --lib serve::http::tls_tests`.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use base64::Engine as _;
use rustls::{
    crypto::ring,
    pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, RootCertStore,
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::watch,
};

use super::{serve, Request, Response};
use crate::serve::{
    test_certs::{pki, Pki},
    web_config::WebConfig,
};

async fn start(web: WebConfig) -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop) = watch::channel(false);
    let handler = Arc::new(|r: &Request| Response::text(200, format!("metrics for {}\n", r.path)));
    tokio::spawn(serve(listener, handler, web, stop));
    (addr, stop_tx)
}

fn web(p: &Pki, client_certs: bool) -> WebConfig {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, pem) in [
        ("s.crt", &p.server_cert),
        ("s.key", &p.server_key),
        ("ca.crt", &p.ca),
    ] {
        std::fs::write(dir.path().join(name), pem).expect("write");
    }
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    let ca = if client_certs {
        "  client_ca_file: ca.crt\n"
    } else {
        ""
    };
    let text = format!(
        "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n{ca}\
         basic_auth_users:\n  prometheus: {hash}\n"
    );
    WebConfig::parse(&text, dir.path()).expect("web config")
}

fn client(p: &Pki, cert: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(p.ca.as_bytes()).expect("ca"))
        .expect("root");
    let b = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match cert {
        None => b.with_no_client_auth(),
        Some((c, k)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(c.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(k.as_bytes()).expect("key"),
            )
            .expect("client cert"),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One request over TLS: the answer, or the error where TLS refused it.
async fn get(
    addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    auth: Option<(&str, &str)>,
) -> std::io::Result<String> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut s = tls.connect(name, tcp).await?;
    let mut req = "GET /metrics HTTP/1.1\r\nHost: x\r\n".to_owned();
    if let Some((u, p)) = auth {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        req.push_str(&format!("Authorization: Basic {b64}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn tls_with_basic_auth_answers_the_right_password_only() {
    let p = pki();
    let (addr, _stop) = start(web(&p, false)).await;
    let tls = client(&p, None);
    let ok = get(addr, &tls, Some(("prometheus", "s3cret")))
        .await
        .expect("TLS");
    assert!(
        ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("metrics for /metrics\n"),
        "{ok}"
    );
    for auth in [
        Some(("prometheus", "wrong")),
        Some(("root", "s3cret")),
        None,
    ] {
        let no = get(addr, &tls, auth).await.expect("TLS");
        assert!(
            no.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{auth:?}: {no}"
        );
        assert!(
            no.contains("\r\nWWW-Authenticate: Basic realm=\"gpudirect-trace\""),
            "{no}"
        );
        assert!(!no.contains("metrics for"), "{no}");
    }
    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(addr).await.expect("connect");
    plain
        .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .await
        .expect("send");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut out)).await;
    assert!(
        !String::from_utf8_lossy(&out).contains("HTTP/1.1"),
        "{out:?}"
    );
}

#[tokio::test]
async fn client_certificates_from_another_ca_fail_the_handshake() {
    let p = pki();
    let (addr, _stop) = start(web(&p, true)).await;
    let good = client(&p, Some((&p.client_cert, &p.client_key)));
    let ok = get(addr, &good, Some(("prometheus", "s3cret")))
        .await
        .expect("trusted client");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    // TLS 1.3: the client sends its certificate after the server's Finished,
    // so the refusal is the server's alert, read as an error.
    for (what, tls) in [
        (
            "untrusted certificate",
            client(&p, Some((&p.rogue_cert, &p.rogue_key))),
        ),
        ("no certificate", client(&p, None)),
    ] {
        let e = get(addr, &tls, Some(("prometheus", "s3cret")))
            .await
            .expect_err(what);
        let msg = e.to_string();
        assert!(
            msg.contains("certificate") || msg.contains("alert"),
            "{what}: {msg}"
        );
    }
}

#[test]
fn the_server_certificate_must_match_its_key() {
    let p = pki();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("c.crt"), &p.client_cert).expect("write");
    std::fs::write(dir.path().join("s.key"), &p.server_key).expect("write");
    let e = WebConfig::parse(
        "tls_server_config:\n  cert_file: c.crt\n  key_file: s.key\n",
        Path::new(dir.path()),
    )
    .expect_err("mismatch");
    assert!(e.contains("belong"), "{e}");
}
