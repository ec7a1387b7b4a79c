//! Certificates for the TLS tests, made with rcgen (pure Rust, the ring
//! that rustls uses too; no openssl CLI needed): a CA, a server certificate
//! for localhost and 127.0.0.1, a client certificate that CA signed, and one
//! signed by another CA (an untrusted client). ECDSA P-256 keys.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct Pki {
    pub ca: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
    pub rogue_cert: String,
    pub rogue_key: String,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("key");
    let cert = p.self_signed(&key).expect("self-signed CA");
    (cert.pem(), Issuer::new(p, key))
}

fn leaf(
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'static, KeyPair>,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(names.clone()).expect("params");
    p.distinguished_name
        .push(DnType::CommonName, names[0].clone());
    p.extended_key_usages = vec![usage];
    p.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

pub fn pki() -> Pki {
    let (ca_pem, issuer) = ca("gpudirect-trace test CA");
    let (server_cert, server_key) = leaf(
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &issuer,
    );
    let (client_cert, client_key) = leaf(
        &["prometheus"],
        ExtendedKeyUsagePurpose::ClientAuth,
        &issuer,
    );
    let (_, rogue_issuer) = ca("someone else's CA");
    let (rogue_cert, rogue_key) = leaf(
        &["prometheus"],
        ExtendedKeyUsagePurpose::ClientAuth,
        &rogue_issuer,
    );
    Pki {
        ca: ca_pem,
        server_cert,
        server_key,
        client_cert,
        client_key,
        rogue_cert,
        rogue_key,
    }
}
