//! The HTTP server under abuse (issue 19), on loopback with real sockets.
//! `cargo test -p gpudirect-trace --lib serve::http::abuse_tests`.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::watch,
};

use super::{serve, Conns, Request, Response, MAX_CONNECTIONS, MAX_PER_PEER};

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

#[test]
fn the_oldest_idle_connection_of_a_peer_makes_room_and_busy_ones_stay() {
    let mut c = Conns::default();
    let first: Vec<_> = (0..MAX_PER_PEER)
        .map(|_| c.admit(ip(1), -1, false, false).expect("room"))
        .collect();
    // The oldest is being answered: the second oldest goes instead.
    first[0].1.store(false, Ordering::Relaxed);
    let (id, _) = c
        .admit(ip(1), -1, false, false)
        .expect("an idle one is closed for it");
    assert!(c.open.contains_key(&first[0].0), "busy connections stay");
    assert!(
        !c.open.contains_key(&first[1].0),
        "the oldest idle one goes"
    );
    assert!(c.open.contains_key(&id));
    assert_eq!(c.open.len(), MAX_PER_PEER);
    // Another peer is not limited by this one's connections.
    assert!(c.admit(ip(2), -1, false, false).is_some());
    // All busy: refused.
    for e in c.open.values() {
        e.idle.store(false, Ordering::Relaxed);
    }
    assert!(c.admit(ip(1), -1, false, false).is_none());
    assert_eq!((c.evicted, c.refused), (1, 1));
}

#[test]
fn the_total_is_bounded_across_peers() {
    let mut c = Conns::default();
    for i in 0..MAX_CONNECTIONS {
        assert!(c.admit(ip((i % 250) as u8), -1, false, false).is_some());
    }
    let oldest = *c.open.keys().next().expect("one");
    assert!(c.admit(ip(251), -1, false, false).is_some());
    assert_eq!(c.open.len(), MAX_CONNECTIONS);
    assert!(!c.open.contains_key(&oldest));
}

/// The server as `serve` runs it: a current-thread runtime on its own thread.
fn start_server() -> (SocketAddr, watch::Sender<bool>, std::thread::JoinHandle<()>) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("addr");
    let (stop_tx, stop) = watch::channel(false);
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).expect("listener");
            let handler = Arc::new(|_: &Request| Response::text(200, "metric 1\n"));
            serve(listener, handler, super::WebConfig::default(), stop)
                .await
                .expect("serve");
        });
    });
    (addr, stop_tx, thread)
}

/// One slow client, reconnecting whenever it is closed, until `done`: it
/// sends a partial request head a byte at a time and never finishes it.
async fn slowloris(addr: SocketAddr, done: Arc<AtomicBool>, connects: Arc<AtomicU64>) {
    while !done.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        connects.fetch_add(1, Ordering::Relaxed);
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n").await;
        let mut buf = [0u8; 256];
        while !done.load(Ordering::Relaxed) {
            tokio::select! {
                r = s.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if s.write_all(b"X").await.is_err() {
                        break;
                    }
                }
            }
        }
    }
}

/// One scrape from a thread of its own, as Prometheus (another process)
/// sends it: the request right after connecting, the answer within 3 s.
fn scrape(addr: SocketAddr) -> Result<String, String> {
    use std::io::{Read as _, Write as _};
    let t = Duration::from_secs(3);
    let mut s = std::net::TcpStream::connect_timeout(&addr, t).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

#[test]
fn scrapes_keep_answering_during_300_slow_clients() {
    let (addr, stop, server) = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let done = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicU64::new(0));
    let results = rt.block_on(async {
        let clients: Vec<_> = (0..300)
            .map(|_| tokio::spawn(slowloris(addr, done.clone(), connects.clone())))
            .collect();
        // Let them take every slot there is.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let results = tokio::task::spawn_blocking(move || {
            (0..10)
                .map(|_| {
                    let t = Instant::now();
                    let r = scrape(addr);
                    std::thread::sleep(Duration::from_millis(200));
                    (r, t.elapsed())
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("scraper");
        done.store(true, Ordering::Relaxed);
        for c in clients {
            let _ = tokio::time::timeout(Duration::from_secs(2), c).await;
        }
        results
    });
    let _ = stop.send(true);
    server.join().expect("server thread");
    let n = connects.load(Ordering::Relaxed);
    assert!(n >= 300, "the slow clients connected ({n})");
    for (r, took) in &results {
        match r {
            Ok(body) => assert!(
                body.starts_with("HTTP/1.1 200") && body.ends_with("metric 1\n"),
                "{body}"
            ),
            Err(e) => panic!("a scrape failed during the slow clients: {e} after {took:?}"),
        }
    }
}
