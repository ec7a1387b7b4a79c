//! Basic auth: the header, bcrypt, and what wrong passwords may cost.
//! `cargo test -p gpudirect-trace --lib serve::auth`.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use base64::Engine as _;

use super::*;

fn header(user: &str, password: &str) -> Credentials {
    let raw = format!("{user}:{password}");
    Credentials(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    ))
}

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// Cost 4, the least bcrypt allows: these tests are about the logic.
fn users() -> BTreeMap<String, String> {
    let mut u = BTreeMap::new();
    u.insert(
        "prometheus".to_owned(),
        bcrypt::hash("s3cret", 4).expect("hash"),
    );
    u.insert("other".to_owned(), bcrypt::hash("x", 4).expect("hash"));
    u
}

#[test]
fn decodes_the_basic_scheme_only() {
    assert_eq!(
        decode(&header("u", "p:w").0),
        Some(("u".to_owned(), b"p:w".to_vec())),
        "the first colon splits; the password may hold more"
    );
    assert_eq!(decode("basic dTpw"), Some(("u".to_owned(), b"p".to_vec())));
    assert_eq!(decode("Bearer dTpw"), None);
    assert_eq!(decode("Basic !!!"), None);
    assert_eq!(decode("Basic dXNlcg=="), None, "no colon");
    assert_eq!(decode("Basic"), None);
}

#[test]
fn refuses_what_is_no_bcrypt_hash() {
    let mut u = BTreeMap::new();
    u.insert("alice".to_owned(), "plaintext".to_owned());
    let e = BasicAuth::new(u).expect_err("not a hash");
    assert!(e.contains("alice") && e.contains("bcrypt"), "{e}");
    assert!(BasicAuth::new(BTreeMap::new()).is_err());
    // htpasswd -B writes $2y$, Go's bcrypt $2a$: both are taken.
    let mut u = BTreeMap::new();
    u.insert(
        "a".to_owned(),
        bcrypt::hash("p", 4)
            .expect("hash")
            .replacen("$2b$", "$2y$", 1),
    );
    assert!(BasicAuth::new(u).is_ok());
}

#[tokio::test]
async fn right_password_passes_and_everything_else_fails() {
    let a = BasicAuth::new(users()).expect("valid");
    let check = |user: &str, password: &str| {
        let h = header(user, password);
        let a = &a;
        async move { a.check(Some(&h), ip(1)).await }
    };
    assert_eq!(check("prometheus", "s3cret").await, Verdict::Allowed);
    assert_eq!(
        check("prometheus", "s3cret").await,
        Verdict::Allowed,
        "cached"
    );
    assert_eq!(check("prometheus", "wrong").await, Verdict::Denied);
    assert_eq!(check("prometheus", "").await, Verdict::Denied);
    assert_eq!(check("nobody", "s3cret").await, Verdict::Denied);
    assert_eq!(
        check("other", "s3cret").await,
        Verdict::Denied,
        "another user's password"
    );
    assert_eq!(a.check(None, ip(1)).await, Verdict::Denied);
    let long = "s".repeat(MAX_PASSWORD + 1);
    assert_eq!(check("prometheus", &long).await, Verdict::Denied);
    assert!(
        !format!("{a:?}").contains("$2"),
        "no hash in Debug output: {a:?}"
    );
}

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// A verification that takes 20 ms and records how many run at once.
fn slow_counting_verify(password: &[u8], hash: &str) -> bool {
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    CALLS.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    bcrypt_verify(password, hash)
}

/// Wrong passwords from many addresses at once: one verification runs at a
/// time (so they cost at most one CPU), a cancelled request cannot let a
/// second one start beside it, an address with a check in progress gets
/// `Busy` at once, and a cached scraper never waits behind any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_passwords_verify_one_at_a_time_and_cached_scrapes_skip_the_queue() {
    let mut a = BasicAuth::new(users()).expect("valid");
    a.verify = slow_counting_verify;
    let a = Arc::new(a);
    assert_eq!(
        a.check(Some(&header("prometheus", "s3cret")), ip(1)).await,
        Verdict::Allowed
    );
    let calls_before = CALLS.load(Ordering::SeqCst);

    let mut attackers = tokio::task::JoinSet::new();
    for i in 0..24u8 {
        let a = a.clone();
        attackers.spawn(async move {
            a.check(
                Some(&header("prometheus", &format!("guess{i}"))),
                ip(100 + i),
            )
            .await
        });
    }
    // Cancelled while verifying: its verification finishes on its own,
    // still holding the one permit.
    let cancelled = {
        let a = a.clone();
        tokio::spawn(async move { a.check(Some(&header("nobody", "x")), ip(99)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    cancelled.abort();
    // A second guess from an address whose first is queued: refused at once.
    // The last one spawned (ip 123): ~24 x 20 ms of checks are ahead of it,
    // whichever order the runtime started them in (ip 100 may have been
    // checked already on a loaded machine: seen in a full `cargo test`).
    let t = Instant::now();
    let again = a
        .check(Some(&header("prometheus", "guess-again")), ip(123))
        .await;
    assert_eq!(again, Verdict::Busy);
    assert!(t.elapsed() < Duration::from_millis(15), "{:?}", t.elapsed());

    // The queue holds ~25 x 20 ms; the cached pair answers at once, from
    // any address (ip(100) included).
    let t = Instant::now();
    assert_eq!(
        a.check(Some(&header("prometheus", "s3cret")), ip(100))
            .await,
        Verdict::Allowed
    );
    assert!(t.elapsed() < Duration::from_millis(15), "{:?}", t.elapsed());

    while let Some(r) = attackers.join_next().await {
        assert_eq!(r.expect("task"), Verdict::Denied, "a guess passed");
    }
    assert_eq!(
        MOST.load(Ordering::SeqCst),
        1,
        "verifications ran side by side"
    );
    // Each wrong password cost one verification; the cached ones none.
    let calls = CALLS.load(Ordering::SeqCst) - calls_before;
    assert!((24..=25).contains(&calls), "{calls}");
    // The addresses are free again once answered.
    assert_eq!(
        a.check(Some(&header("prometheus", "x")), ip(100)).await,
        Verdict::Denied
    );
    assert_eq!(
        a.check(Some(&header("nobody", "x")), ip(99)).await,
        Verdict::Denied
    );
}
