//! The web config file: what is taken, and one clear message for each
//! mistake. `cargo test -p gpudirect-trace --lib serve::web_config`.

use std::path::Path;

use super::*;
use crate::serve::test_certs::{pki, Pki};

/// A directory with the test PKI's files and a web config `text`.
fn setup(text: &str) -> (tempfile::TempDir, Pki, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    for (name, pem) in [
        ("ca.crt", &p.ca),
        ("server.crt", &p.server_cert),
        ("server.key", &p.server_key),
        ("client.crt", &p.client_cert),
    ] {
        std::fs::write(dir.path().join(name), pem).expect("write");
    }
    let config = dir.path().join("web.yml");
    std::fs::write(&config, text).expect("write config");
    (dir, p, config)
}

fn load_err(text: &str) -> String {
    let (_dir, _, config) = setup(text);
    let e = WebConfig::load(&config).expect_err("refused");
    let msg = format!("{e:#}");
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.starts_with("web config "), "{msg}");
    msg
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

#[test]
fn no_file_or_an_empty_one_is_plain_http() {
    let plain = WebConfig::default();
    assert_eq!(
        (plain.scheme(), plain.describe().as_str()),
        ("http", "no TLS or authentication")
    );
    let (_dir, _, config) = setup("");
    let c = WebConfig::load(&config).expect("empty is fine");
    assert!(c.tls.is_none() && c.auth.is_none());
    let c = WebConfig::parse("tls_server_config:\nbasic_auth_users: {}\n", Path::new("/"))
        .expect("empty sections");
    assert!(c.tls.is_none() && c.auth.is_none());
}

#[test]
fn tls_with_files_relative_to_the_config_and_client_certificates() {
    let (_dir, _, config) = setup(TLS);
    let c = WebConfig::load(&config).expect("TLS");
    assert_eq!(c.scheme(), "https");
    assert_eq!(c.describe(), "TLS (no client certificates)");

    let text = format!("{TLS}  client_ca_file: ca.crt\n");
    let (_dir, _, config) = setup(&text);
    let c = WebConfig::load(&config).expect("client CA");
    assert_eq!(
        c.client_certs,
        Some(ClientCerts::Required),
        "the default with a client CA"
    );

    let text = format!("{TLS}  client_ca_file: ca.crt\n  client_auth_type: VerifyClientCertIfGiven\n  min_version: TLS13\n");
    let (_dir, _, config) = setup(&text);
    let c = WebConfig::load(&config).expect("if given");
    assert_eq!(
        c.describe(),
        "TLS (client certificates verified when given)"
    );

    // Inline PEM, and bcrypt users.
    let p = pki();
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let hash = bcrypt::hash("pw", 4).expect("hash");
    let text = format!(
        "tls_server_config:\n  cert: |\n{}  key: |\n{}basic_auth_users:\n  prometheus: {hash}\n\
         http_server_config:\n  http2: false\n",
        indent(&p.server_cert),
        indent(&p.server_key)
    );
    let c = WebConfig::parse(&text, Path::new("/nonexistent")).expect("inline");
    assert_eq!(c.describe(), "TLS (no client certificates), basic auth");
}

#[test]
fn each_mistake_is_one_message_naming_the_key() {
    for (text, want) in [
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            "needs both cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
            "missing.crt",
        ),
        (
            &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
            "needs client_ca_file",
        ),
        (
            &format!("{TLS}  client_ca_file: ca.crt\n  client_auth_type: NoClientCert\n"),
            "NoClientCert",
        ),
        (
            &format!("{TLS}  client_ca_file: ca.crt\n  client_auth_type: RequireAnyClientCert\n"),
            "not supported",
        ),
        (
            &format!("{TLS}  client_auth_type: Sometimes\n"),
            "\"Sometimes\"",
        ),
        (
            &format!("{TLS}  min_version: TLS10\n"),
            "TLS10 is not supported",
        ),
        (
            &format!("{TLS}  min_version: TLS13\n  max_version: TLS12\n"),
            "min_version is above max_version",
        ),
        (
            &format!("{TLS}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"),
            "cipher_suites is not supported",
        ),
        (
            &format!("{TLS}  cerf_file: x\n"),
            "unknown key \"cerf_file\"",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: client.crt\n",
            "key_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
            "cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: client.crt\n  key_file: server.key\n",
            "belong",
        ),
        ("basic_auth_users:\n  alice: hunter2\n", "alice"),
        ("basic_auth_users:\n  'a:b': $2y$04$abc\n", "':'"),
        ("basic_auth_users: [alice]\n", "mapping"),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
            "headers is not supported",
        ),
        ("http_server_config:\n  http2: maybe\n", "http2"),
        ("rate_limit:\n  interval: 1s\n", "rate_limit"),
        (
            "tls_config:\n  cert_file: x\n",
            "unknown key \"tls_config\"",
        ),
        ("a: &x 1\nb: *x\n", "not valid YAML"),
        ("[1, 2]\n", "mapping"),
        ("tls_server_config: [\n", "not valid YAML"),
    ] {
        let msg = load_err(text);
        assert!(msg.contains(want), "{text:?}: want {want:?} in {msg}");
    }
}

#[test]
fn files_are_read_as_untrusted_input() {
    // A FIFO: refused at once, never waited on.
    let (dir, _, config) = setup(TLS);
    let fifo = dir.path().join("fifo.key");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo on a path in our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: fifo.key\n",
    )
    .expect("write");
    let e = format!("{:#}", WebConfig::load(&config).expect_err("fifo"));
    assert!(e.contains("fifo.key: not a regular file"), "{e}");
    // A device, and the config itself as one.
    let e = format!(
        "{:#}",
        WebConfig::load(Path::new("/dev/zero")).expect_err("device")
    );
    assert!(e.contains("not a regular file"), "{e}");
    // Too big.
    std::fs::write(
        dir.path().join("big.crt"),
        vec![b'a'; MAX_FILE as usize + 1],
    )
    .expect("write");
    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: big.crt\n  key_file: server.key\n",
    )
    .expect("write");
    let e = format!("{:#}", WebConfig::load(&config).expect_err("big"));
    assert!(e.contains("more than the 1048576 read"), "{e}");
    // A name with control bytes is shown escaped, never raw.
    let odd = dir.path().join("odd\x1b[2Jname.yml");
    let e = format!("{:#}", WebConfig::load(&odd).expect_err("missing"));
    assert!(
        e.contains("odd\\x1b[2Jname.yml") && !e.contains('\x1b'),
        "{e}"
    );
    // Not UTF-8.
    std::fs::write(&config, b"basic_auth_users:\n  \xff: x\n").expect("write");
    let e = format!("{:#}", WebConfig::load(&config).expect_err("binary"));
    assert!(e.contains("not UTF-8"), "{e}");
    // A link (as Kubernetes mounts secrets) is followed.
    std::os::unix::fs::symlink(dir.path().join("server.key"), dir.path().join("link.key"))
        .expect("link");
    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: link.key\n",
    )
    .expect("write");
    assert!(WebConfig::load(&config)
        .expect("through a link")
        .tls
        .is_some());
}
