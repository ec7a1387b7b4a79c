//! `serve --web.config.file FILE`: TLS, client certificates and basic auth,
//! configured the way Prometheus' own exporters are (the exporter-toolkit's
//! web configuration file; docs/metrics.md, "TLS and authentication"):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt           # or cert: |  (the PEM itself)
//!   key_file: server.key            # or key: |
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12              # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...          # bcrypt: htpasswd -nBC 10 prometheus
//! ```
//!
//! Relative paths are taken from the config file's directory (as the
//! exporter-toolkit does). The file and every file it names are read with
//! the care of any other input: regular files only (a FIFO or device is
//! refused, never waited on or read forever), at most [`MAX_FILE`] bytes,
//! names shown with control bytes escaped. Everything is read and checked
//! once, at start: a mistake is one message and a non-zero exit, before the
//! probes are loaded. Options the exporter-toolkit has and this server does
//! not implement are refused by name, never silently ignored.

use std::{
    collections::BTreeMap,
    io::Read as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use super::{
    auth::BasicAuth,
    tls::{self, ClientCerts},
    web_yaml::{self, Node},
};
use crate::sanitize;

/// Largest file read: a config, a certificate chain, a CA bundle.
pub const MAX_FILE: u64 = 1 << 20;

/// How `serve` answers: plain HTTP without a config file.
#[derive(Clone, Debug, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub client_certs: Option<ClientCerts>,
    pub auth: Option<Arc<BasicAuth>>,
}

impl WebConfig {
    /// Reads and checks `path`; Err is one message naming the file and the
    /// key at fault.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let shown = sanitize::text(&path.display().to_string()).into_owned();
        let text = read_input(path, "web config file")?;
        let text = String::from_utf8(text)
            .map_err(|_| anyhow::anyhow!("web config {shown}: not UTF-8 text"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).map_err(|e| anyhow::anyhow!("web config {shown}: {e}"))
    }

    /// The config in `text`, its relative paths taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        let root = web_yaml::parse(text).map_err(|e| format!("not valid YAML: {e}"))?;
        let top = entries(&root, "the file")?;
        let mut config = WebConfig::default();
        for (key, value) in top {
            match key.as_str() {
                "tls_server_config" => {
                    let (tls, client_certs) = tls_config(value, base)?;
                    config.tls = tls.map(Arc::new);
                    config.client_certs = client_certs;
                }
                "basic_auth_users" => config.auth = basic_auth(value)?.map(Arc::new),
                "http_server_config" => http_server_config(value)?,
                "rate_limit" => return Err(unsupported("rate_limit")),
                other => {
                    return Err(format!(
                        "unknown key {other:?}: the file has tls_server_config, \
                         basic_auth_users and http_server_config"
                    ))
                }
            }
        }
        Ok(config)
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// "TLS (client certificates required), basic auth": for the start message.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.tls.is_some() {
            let certs = self.client_certs.unwrap_or(ClientCerts::None);
            parts.push(format!("TLS ({})", certs.describe()));
        }
        if self.auth.is_some() {
            parts.push("basic auth".to_owned());
        }
        if parts.is_empty() {
            "no TLS or authentication".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

fn unsupported(key: &str) -> String {
    format!("{key} is not supported by gpudirect-trace serve")
}

/// A mapping's entries (a null value is an empty mapping).
fn entries<'a>(n: &'a Node, what: &str) -> Result<&'a [(String, Node)], String> {
    match n {
        Node::Map(e) => Ok(e),
        Node::Null => Ok(&[]),
        _ => Err(format!("{what} must be a mapping of keys to values")),
    }
}

fn text<'a>(n: &'a Node, key: &str) -> Result<Option<&'a str>, String> {
    match n {
        Node::Null => Ok(None),
        Node::Scalar(s) => Ok(Some(s)),
        _ => Err(format!("{key} must be text")),
    }
}

/// A PEM given inline (`cert`) or as a file (`cert_file`), one of the two.
fn pem(
    inline: Option<&str>,
    file: Option<&str>,
    base: &Path,
    key: &str,
) -> Result<Option<Vec<u8>>, String> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(format!("give {key} or {key}_file, not both")),
        (Some(t), None) => Ok(Some(t.as_bytes().to_vec())),
        (None, Some(f)) => {
            let p = resolve(base, f);
            read_input(&p, &format!("{key}_file"))
                .map(Some)
                .map_err(|e| format!("{e:#}"))
        }
        (None, None) => Ok(None),
    }
}

fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

fn tls_config(
    n: &Node,
    base: &Path,
) -> Result<(Option<rustls::ServerConfig>, Option<ClientCerts>), String> {
    let mut get: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for (key, value) in entries(n, "tls_server_config")? {
        let full = format!("tls_server_config.{key}");
        match key.as_str() {
            "cert_file" | "key_file" | "cert" | "key" | "client_ca_file" | "client_auth_type"
            | "min_version" | "max_version" => {
                get.insert(key, text(value, &full)?);
            }
            "cipher_suites"
            | "curve_preferences"
            | "prefer_server_cipher_suites"
            | "client_allowed_sans"
            | "client_ca" => {
                return Err(format!(
                    "{} (rustls offers only its modern suites and groups; say what you need \
                     in an issue)",
                    unsupported(&full)
                ))
            }
            other => return Err(format!("tls_server_config: unknown key {other:?}")),
        }
    }
    let value = |k: &str| get.get(k).copied().flatten();
    let cert = pem(value("cert"), value("cert_file"), base, "cert")?;
    let key = pem(value("key"), value("key_file"), base, "key")?;
    let ca_file = value("client_ca_file");
    let (cert, key) = match (cert, key) {
        (None, None) if get.is_empty() => return Ok((None, None)),
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(
                "tls_server_config needs both cert_file (or cert) and key_file (or key)".into(),
            )
        }
    };
    let client_certs = ClientCerts::parse(value("client_auth_type"), ca_file.is_some())
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let ca = match ca_file {
        Some(f) => {
            Some(read_input(&resolve(base, f), "client_ca_file").map_err(|e| format!("{e:#}"))?)
        }
        None => None,
    };
    let version = |k: &str, default| match value(k) {
        None => Ok(default),
        Some(v) => tls::version(v).map_err(|e| format!("tls_server_config.{k}: {e}")),
    };
    let settings = tls::Settings {
        cert_pem: &cert,
        key_pem: &key,
        client_ca_pem: ca.as_deref(),
        client_certs,
        min: version("min_version", &rustls::version::TLS12)?,
        max: version("max_version", &rustls::version::TLS13)?,
    };
    let config = tls::server_config(&settings).map_err(|e| format!("tls_server_config: {e}"))?;
    Ok((Some(config), Some(client_certs)))
}

fn basic_auth(n: &Node) -> Result<Option<BasicAuth>, String> {
    let mut users = BTreeMap::new();
    for (user, hash) in entries(n, "basic_auth_users")? {
        if user.contains(':') {
            return Err(format!(
                "basic_auth_users: user {user:?} has a ':' (basic auth cannot send it)"
            ));
        }
        let hash = text(hash, &format!("basic_auth_users.{user}"))?
            .ok_or_else(|| format!("basic_auth_users.{user}: no bcrypt hash"))?;
        users.insert(user.clone(), hash.to_owned());
    }
    if users.is_empty() {
        return Ok(None);
    }
    BasicAuth::new(users)
        .map(Some)
        .map_err(|e| format!("basic_auth_users: {e}"))
}

fn http_server_config(n: &Node) -> Result<(), String> {
    for (key, value) in entries(n, "http_server_config")? {
        match key.as_str() {
            // The server speaks HTTP/1.1 only: a client offering h2 gets it.
            "http2" => match text(value, "http_server_config.http2")? {
                Some("true" | "false") | None => {}
                Some(v) => {
                    return Err(format!(
                        "http_server_config.http2: {v:?} is not true or false"
                    ))
                }
            },
            "headers" => return Err(unsupported("http_server_config.headers")),
            other => return Err(format!("http_server_config: unknown key {other:?}")),
        }
    }
    Ok(())
}

/// Reads a file the config names (or the config itself) as any untrusted
/// input: a regular file of at most [`MAX_FILE`] bytes, opened without
/// blocking (a FIFO is refused, not waited on). Links are followed:
/// Kubernetes mounts secrets as links.
pub fn read_input(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let shown = sanitize::text(&path.display().to_string()).into_owned();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| anyhow::anyhow!("{what} {shown}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| anyhow::anyhow!("{what} {shown}: {e}"))?;
    if !meta.is_file() {
        anyhow::bail!("{what} {shown}: not a regular file");
    }
    if meta.len() > MAX_FILE {
        anyhow::bail!(
            "{what} {shown}: {} bytes, more than the {MAX_FILE} read",
            meta.len()
        );
    }
    let mut data = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut data)
        .map_err(|e| anyhow::anyhow!("{what} {shown}: {e}"))?;
    if data.len() as u64 > MAX_FILE {
        anyhow::bail!("{what} {shown}: grew past the {MAX_FILE} bytes read");
    }
    Ok(data)
}

#[cfg(test)]
#[path = "web_config_tests.rs"]
mod tests;
