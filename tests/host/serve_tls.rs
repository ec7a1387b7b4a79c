//! `serve` over TLS with client certificates and basic auth, scraped by a
//! real Prometheus (Debian package, loopback only): the right certificate
//! and password get the series; a wrong password is refused with 401 and a
//! certificate from another CA fails the handshake. Certificates are made
//! by the test (rcgen: gpudirect-trace/src/serve/test_certs.rs).

use std::{
    net::TcpListener,
    path::Path,
    time::{Duration, Instant},
};

use gpudirect_trace::{
    serve::{self, ServeOptions, WebConfig},
    session::Session,
};

use crate::{
    inject::{known_kernel_object, load_unattached},
    require_root,
    serve::{map_pages, serve_cli, Prometheus},
};

#[path = "../../gpudirect-trace/src/serve/test_certs.rs"]
mod test_certs;

/// Writes the test PKI and a web config (TLS, client certificates
/// required, one bcrypt user) into `dir`; returns the config's path.
fn write_setup(dir: &Path) -> std::path::PathBuf {
    let p = test_certs::pki();
    for (name, pem) in [
        ("ca.crt", &p.ca),
        ("server.crt", &p.server_cert),
        ("server.key", &p.server_key),
        ("client.crt", &p.client_cert),
        ("client.key", &p.client_key),
        ("rogue.crt", &p.rogue_cert),
        ("rogue.key", &p.rogue_key),
    ] {
        std::fs::write(dir.join(name), pem).expect("write");
    }
    // Cost 6 (a production hash is 10 or more): the build under test is
    // unoptimised, and the wrong-password job makes it verify every second.
    let hash = bcrypt::hash("s3cret", 6).expect("bcrypt");
    let config = dir.join("web-config.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n\
             basic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .expect("write web config");
    config
}

fn job(name: &str, dir: &Path, cert: &str, password: &str, target: &str) -> String {
    let d = dir.display();
    format!(
        "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {d}/ca.crt\n      \
         cert_file: {d}/{cert}.crt\n      key_file: {d}/{cert}.key\n    basic_auth:\n      \
         username: prometheus\n      password: {password}\n    static_configs:\n      \
         - targets: ['{target}']\n"
    )
}

#[test]
fn prometheus_scrapes_serve_over_tls_with_basic_auth_and_is_refused_without() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_setup(dir.path());
    let web = WebConfig::load(&config).expect("the web config loads");
    let tracer = load_unattached(8 << 20);
    let device = known_kernel_object();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let opts = ServeOptions {
        web,
        ..Default::default()
    };
    let server = serve::start(Session::from_tracer(tracer, true), listener, &opts)
        .expect("start the metrics server");
    map_pages(&server, device.addr, 5, 0xa000_0000, 4096);
    let target = server.local_addr().to_string();
    let d = dir.path();
    let prom = Prometheus::with_scrape_configs(&format!(
        "{}{}{}",
        job("gpudirect-trace", d, "client", "s3cret", &target),
        job("wrong-password", d, "client", "guess", &target),
        job("untrusted-cert", d, "rogue", "s3cret", &target),
    ));
    let name = &device.name;
    prom.wait_for(
        &format!(
            r#"gpudirect_dma_map_bytes_total{{job="gpudirect-trace",device="{name}",direction="to_device"}}"#
        ),
        5.0 * 4096.0,
    );
    prom.wait_for(r#"up{job="gpudirect-trace"}"#, 1.0);

    // The refused ones: down, with the reason on the targets page.
    let deadline = Instant::now() + Duration::from_secs(60);
    let errors = loop {
        let errors = prom.scrape_errors().unwrap_or_default();
        let has = |job: &str, what: &str| {
            errors
                .iter()
                .any(|(j, e)| j == job && !e.is_empty() && e.contains(what))
        };
        // The wrong password's first scrape can meet the right one's first
        // bcrypt check from the same address and get 429 (one check per
        // address at a time, by design); once the right pair is remembered,
        // every wrong scrape is a 401.
        if has("wrong-password", "401") && has("untrusted-cert", "") {
            break errors;
        }
        assert!(
            Instant::now() < deadline,
            "scrape errors never showed: {errors:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let error = |job: &str| {
        errors
            .iter()
            .find(|(j, _)| j == job)
            .map(|(_, e)| e.clone())
            .unwrap_or_default()
    };
    eprintln!("refused scrapes: {errors:?}");
    assert!(error("wrong-password").contains("401"), "{errors:?}");
    let cert_error = error("untrusted-cert");
    assert!(
        cert_error.contains("tls") && cert_error.contains("certificate"),
        "a failed handshake: {errors:?}"
    );
    assert!(error("gpudirect-trace").is_empty(), "{errors:?}");
    for job in ["wrong-password", "untrusted-cert"] {
        prom.wait_for(&format!(r#"up{{job="{job}"}}"#), 0.0);
        let leaked = prom
            .query(&format!(r#"{{job="{job}",__name__=~"gpudirect_.*"}}"#))
            .expect("prometheus answers");
        assert!(leaked.is_empty(), "{job} got series: {leaked:?}");
    }
    drop(prom);
    server.stop().expect("the server stops cleanly");
}

/// Before any port is bound or program loaded (so no root needed): one
/// line naming the file and what is wrong, exit 1.
#[test]
fn serve_with_a_bad_web_config_fails_at_start_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_setup(dir.path());
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = taken.local_addr().expect("addr").to_string();
    for (text, want) in [
        (None, "No such file"),
        (
            Some("tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n"),
            "does the key belong",
        ),
        (
            Some("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS11\n"),
            "TLS11 is not supported",
        ),
        (Some("basic_auth_users:\n  prometheus: s3cret\n"), "not a bcrypt hash"),
    ] {
        let path = match text {
            Some(t) => {
                std::fs::write(&config, t).expect("write");
                config.display().to_string()
            }
            None => dir.path().join("missing.yml").display().to_string(),
        };
        // The port is taken: the config must be refused before binding it.
        let (code, err) = serve_cli(&["--listen", &listen, "--web.config.file", &path]);
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("web config") && err.contains(want) && !err.contains("panicked"),
            "want {want:?}: {err}"
        );
    }
}
