//! `tls_server_config` of the web config file, made into a rustls server
//! configuration: the certificate chain and key, who may connect
//! (`client_auth_type` and `client_ca_file`) and the protocol versions.

use std::sync::Arc;

use rustls::{
    crypto::ring,
    pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};

/// What `client_auth_type` asks of a client's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// None asked for (`NoClientCert`, the default without client_ca_file).
    None,
    /// Verified against client_ca_file when given (`VerifyClientCertIfGiven`).
    VerifiedIfGiven,
    /// Required and verified (`RequireAndVerifyClientCert`, the default
    /// with client_ca_file).
    Required,
}

impl ClientCerts {
    /// The exporter-toolkit's names; Err: why one is refused.
    pub fn parse(name: Option<&str>, have_ca: bool) -> Result<Self, String> {
        let with_ca = |c| {
            if have_ca {
                Ok(c)
            } else {
                Err(format!(
                    "client_auth_type {} needs client_ca_file: the CA that signs the \
                     clients' certificates",
                    name.unwrap_or_default()
                ))
            }
        };
        match name.unwrap_or_default() {
            "" if have_ca => Ok(Self::Required),
            "" => Ok(Self::None),
            "NoClientCert" if have_ca => Err(
                "client_ca_file is given but client_auth_type is NoClientCert: say \
                 RequireAndVerifyClientCert (or VerifyClientCertIfGiven), or drop client_ca_file"
                    .into(),
            ),
            "NoClientCert" => Ok(Self::None),
            "VerifyClientCertIfGiven" => with_ca(Self::VerifiedIfGiven),
            "RequireAndVerifyClientCert" => with_ca(Self::Required),
            n @ ("RequestClientCert" | "RequireAnyClientCert") => Err(format!(
                "client_auth_type {n} is not supported: it accepts certificates no CA vouches \
                 for, which authenticates no one; use RequireAndVerifyClientCert with \
                 client_ca_file"
            )),
            other => Err(format!(
                "client_auth_type {other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                 RequireAndVerifyClientCert"
            )),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "no client certificates",
            Self::VerifiedIfGiven => "client certificates verified when given",
            Self::Required => "client certificates required",
        }
    }
}

/// A TLS version of min_version/max_version.
pub fn version(name: &str) -> Result<&'static rustls::SupportedProtocolVersion, String> {
    match name {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" | "TLS11" => Err(format!(
            "{name} is not supported (obsolete, RFC 8996): TLS12 or TLS13"
        )),
        other => Err(format!("{other:?} is not a TLS version: TLS12 or TLS13")),
    }
}

/// What the server is built from: the PEM texts already read.
pub struct Settings<'a> {
    pub cert_pem: &'a [u8],
    pub key_pem: &'a [u8],
    pub client_ca_pem: Option<&'a [u8]>,
    pub client_certs: ClientCerts,
    pub min: &'static rustls::SupportedProtocolVersion,
    pub max: &'static rustls::SupportedProtocolVersion,
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: not a PEM certificate ({e})"))?;
    if certs.is_empty() {
        return Err(format!(
            "{what}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
        ));
    }
    Ok(certs)
}

/// The rustls configuration; Err: which part is wrong and why.
pub fn server_config(s: &Settings<'_>) -> Result<ServerConfig, String> {
    let provider = Arc::new(ring::default_provider());
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| rank(v) >= rank(s.min) && rank(v) <= rank(s.max))
            .collect();
    if versions.is_empty() {
        return Err("min_version is above max_version".into());
    }
    let chain = certificates(s.cert_pem, "cert_file")?;
    let key = PrivateKeyDer::from_pem_slice(s.key_pem).map_err(|e| {
        format!("key_file: no PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC) in it ({e})")
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS versions: {e}"))?;
    let builder = match (s.client_certs, s.client_ca_pem) {
        (ClientCerts::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err("client certificates need client_ca_file".into()),
        (wanted, Some(ca_pem)) => {
            let mut roots = RootCertStore::empty();
            for c in certificates(ca_pem, "client_ca_file")? {
                roots.add(c).map_err(|e| {
                    format!("client_ca_file: a certificate rustls cannot use ({e})")
                })?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if wanted == ClientCerts::VerifiedIfGiven {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder
                .with_client_cert_verifier(v.build().map_err(|e| format!("client_ca_file: {e}"))?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!("cert_file and key_file: {e} (does the key belong to the certificate?)")
    })?;
    // HTTP/1.1 only: a client offering h2 and http/1.1 gets http/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn rank(v: &rustls::SupportedProtocolVersion) -> u8 {
    match v.version {
        rustls::ProtocolVersion::TLSv1_2 => 2,
        _ => 3,
    }
}
