//! HTTP basic auth for `serve` (`--web.config.file`'s `basic_auth_users`):
//! bcrypt hashes, as Prometheus' own exporters take them.
//!
//! bcrypt is slow on purpose, so a client sending wrong passwords could make
//! the exporter burn a CPU per connection. The bounds:
//! - one verification at a time, on tokio's blocking pool (the server's own
//!   thread keeps answering scrapes meanwhile): wrong passwords cost at most
//!   one CPU, however many arrive;
//! - one verification queued or running per client address: its other
//!   requests meanwhile get 429 at once instead of holding a connection
//!   slot while they wait (a flood from one address once held all 32 of its
//!   slots for seconds, and the scraper sharing that address got nothing);
//! - the (user, password) pairs that verified are remembered by their
//!   SHA-256, so a scraper pays bcrypt once, not at every scrape, and never
//!   waits behind a queue of wrong passwords;
//! - an unknown user is checked against a configured hash all the same, so
//!   the answer's time does not tell which users exist.

use std::{
    collections::{BTreeMap, HashSet},
    net::IpAddr,
    sync::{Arc, Mutex},
};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;

/// bcrypt reads at most 72 bytes of a password; longer ones are refused
/// rather than compared on their first 72 bytes.
const MAX_PASSWORD: usize = 72;
/// Verified pairs remembered (a handful of scrapers is the use).
const MAX_VERIFIED: usize = 64;

/// The `Authorization` header's value, kept out of Debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials(pub String);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

pub struct BasicAuth {
    /// user -> bcrypt hash.
    users: BTreeMap<String, String>,
    /// Checked for unknown users (any configured hash: the same cost).
    decoy: String,
    verified: Mutex<HashSet<[u8; 32]>>,
    /// Client addresses with a verification queued or running.
    checking: Arc<Mutex<HashSet<IpAddr>>>,
    one_at_a_time: Arc<Semaphore>,
    /// bcrypt's verification (the tests count how many run at once).
    verify: fn(&[u8], &str) -> bool,
}

fn bcrypt_verify(password: &[u8], hash: &str) -> bool {
    bcrypt::verify(password, hash).unwrap_or(false)
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl BasicAuth {
    /// `users`: user -> bcrypt hash. Err: why a hash is not usable.
    pub fn new(users: BTreeMap<String, String>) -> Result<Self, String> {
        for (user, hash) in &users {
            let parts: bcrypt::HashParts = hash
                .parse()
                .map_err(|e| format!("user {user:?}: not a bcrypt hash ({e})"))?;
            // Go's bcrypt (and htpasswd -B) allow 4..=31.
            if !(4..=31).contains(&parts.get_cost()) {
                return Err(format!("user {user:?}: bcrypt cost {}", parts.get_cost()));
            }
        }
        let decoy = users
            .values()
            .next()
            .cloned()
            .ok_or("basic_auth_users names no user")?;
        Ok(Self {
            users,
            decoy,
            verified: Mutex::new(HashSet::new()),
            checking: Arc::default(),
            one_at_a_time: Arc::new(Semaphore::new(1)),
            verify: bcrypt_verify,
        })
    }

    /// Whether `header` (the Authorization header, if any) from `peer`
    /// names a user and its password.
    pub async fn check(&self, header: Option<&Credentials>, peer: IpAddr) -> Verdict {
        let Some((user, password)) = header.and_then(|h| decode(&h.0)) else {
            return Verdict::Denied;
        };
        if password.len() > MAX_PASSWORD {
            return Verdict::Denied;
        }
        let key = digest(&user, &password);
        if self.lock().contains(&key) {
            return Verdict::Allowed;
        }
        let Some(_turn) = Turn::take(&self.checking, peer) else {
            return Verdict::Busy;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.decoy.clone(), false),
        };
        // The permit goes with the verification into the blocking pool: a
        // connection closed while bcrypt runs cannot let a second start.
        let Ok(permit) = self.one_at_a_time.clone().acquire_owned().await else {
            return Verdict::Denied;
        };
        let verify = self.verify;
        let matched = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            verify(&password, &hash)
        })
        .await
        .unwrap_or(false);
        if !(matched && known) {
            return Verdict::Denied;
        }
        let mut v = self.lock();
        if v.len() >= MAX_VERIFIED {
            v.clear();
        }
        v.insert(key);
        Verdict::Allowed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No credentials, or wrong ones: 401.
    Denied,
    /// Another check from this address is queued or running: 429.
    Busy,
}

/// A client address's one verification; the address is free again when
/// it is dropped (the request answered, or its connection closed).
struct Turn {
    checking: Arc<Mutex<HashSet<IpAddr>>>,
    peer: IpAddr,
}

impl Turn {
    fn take(checking: &Arc<Mutex<HashSet<IpAddr>>>, peer: IpAddr) -> Option<Self> {
        let mut set = checking.lock().unwrap_or_else(|p| p.into_inner());
        set.insert(peer).then(|| Self {
            checking: checking.clone(),
            peer,
        })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut set = self.checking.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(&self.peer);
    }
}

/// `Basic base64(user:password)` -> (user, password bytes).
fn decode(header: &str) -> Option<(String, Vec<u8>)> {
    let (scheme, b64) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

fn digest(user: &str, password: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((user.len() as u64).to_le_bytes());
    h.update(user.as_bytes());
    h.update(password);
    h.finalize().into()
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
