//! Runs jobs on a few threads at once and gives their results back in the
//! jobs' order (VM runs: each guest is one TCG thread, so a 2-CPU host
//! runs two side by side in about the time of one).

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Mutex,
};

/// `f` over `jobs` on `workers` threads; results in `jobs`' order.
pub fn run<J: Sync, R: Send>(jobs: &[J], workers: usize, f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let r = f(job);
                out.lock().expect("no worker panics holding it")[i] = Some(r);
            });
        }
    });
    out.into_inner()
        .expect("workers done")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_order_whatever_finishes_first() {
        let jobs: Vec<u64> = (0..20).collect();
        let r = super::run(&jobs, 3, |&j| {
            std::thread::sleep(std::time::Duration::from_millis((20 - j) % 7));
            j * 2
        });
        assert_eq!(r, (0..20).map(|j| j * 2).collect::<Vec<_>>());
        assert!(super::run(&Vec::<u8>::new(), 2, |_| 0).is_empty());
    }
}
