//! The threads the engine lends its partitions to (`partition.threads`,
//! docs/partitions.md "Lent partitions"): a fork-join pool. The engine's
//! thread runs the first job itself and waits for the rest, so the jobs
//! may borrow the partitions they work on.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use stoa_core::engine::{PartitionThreads, PartitionWorkers};

pub struct PartitionPool {
    pool: rayon::ThreadPool,
}

impl PartitionPool {
    pub fn start(threads: u32) -> Result<PartitionPool, String> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads as usize)
            .thread_name(|i| format!("stoa-part-{}", i + 1))
            .build()
            .map_err(|e| format!("cannot start {threads} partition thread(s): {e}"))?;
        Ok(PartitionPool { pool })
    }
}

impl PartitionWorkers for PartitionPool {
    fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    fn run_all(&self, jobs: &mut [&mut (dyn FnMut() + Send)]) {
        let Some((first, rest)) = jobs.split_first_mut() else {
            return;
        };
        self.pool.in_place_scope(|scope| {
            for job in rest {
                scope.spawn(move |_| job());
            }
            first();
        });
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread per partition that its core goes away to between turns
/// (`partition.owned`, docs/partitions.md "Step 3, the inversion"): each
/// runs the jobs sent to it in order, then wakes the engine's thread,
/// which takes the core back (`Engine::take_returned`).
pub struct OwnedThreads {
    senders: Vec<mpsc::Sender<Job>>,
}

impl OwnedThreads {
    /// `poll`: how long each thread looks for its next job before it parks
    /// (`partition.pollMicros`).
    pub fn start(
        partitions: u32,
        returned: Arc<tokio::sync::Notify>,
        poll: Duration,
    ) -> Result<Self, String> {
        let mut senders = Vec::new();
        for partition in 0..partitions {
            let (tx, rx) = mpsc::channel::<Job>();
            let returned = returned.clone();
            std::thread::Builder::new()
                .name(format!("stoa-own-{partition}"))
                .spawn(move || {
                    while let Some(job) = next_job(&rx, poll) {
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        if ran.is_err() {
                            // Its core is lost with the job: the engine
                            // cannot go on without it.
                            log::error!("partition {partition}'s thread panicked; stopping");
                            std::process::exit(70);
                        }
                        returned.notify_one();
                    }
                })
                .map_err(|e| format!("cannot start partition {partition}'s thread: {e}"))?;
            senders.push(tx);
        }
        Ok(OwnedThreads { senders })
    }
}

/// The next job sent to a partition's thread: looked for during `poll`
/// first, while a sender finds the thread awake and wakes nobody, then
/// waited for parked. None once the engine is gone.
fn next_job(jobs: &mpsc::Receiver<Job>, poll: Duration) -> Option<Job> {
    if !poll.is_zero() {
        let until = Instant::now() + poll;
        loop {
            match jobs.try_recv() {
                Ok(job) => return Some(job),
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) if Instant::now() >= until => break,
                Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
    }
    jobs.recv().ok()
}

impl PartitionThreads for OwnedThreads {
    fn send(&self, partition: usize, job: Box<dyn FnOnce() + Send>) {
        // The thread lives as long as its sender: the engine's.
        self.senders[partition]
            .send(job)
            .expect("a partition's thread runs while the engine does");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_threads_run_every_job_in_order_polling_or_parked() {
        for poll in [Duration::ZERO, Duration::from_micros(200)] {
            let returned = Arc::new(tokio::sync::Notify::new());
            let threads = OwnedThreads::start(2, returned, poll).unwrap();
            let (done_tx, done_rx) = mpsc::channel();
            for i in 0..200u32 {
                let done = done_tx.clone();
                threads.send((i % 2) as usize, Box::new(move || done.send(i).unwrap()));
                if i % 50 == 0 {
                    // Some jobs find their thread parked, some polling.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            let got: Vec<u32> = (0..200).map(|_| done_rx.recv().unwrap()).collect();
            for partition in 0..2 {
                let mine: Vec<u32> = got.iter().copied().filter(|i| i % 2 == partition).collect();
                let sent: Vec<u32> = (0..200).filter(|i| i % 2 == partition).collect();
                assert_eq!(
                    mine, sent,
                    "poll {poll:?}: partition {partition}'s jobs in order"
                );
            }
        }
    }

    #[test]
    fn a_thread_that_polls_stops_with_its_sender() {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::spawn(move || next_job(&rx, Duration::from_millis(5)).is_none());
        drop(tx);
        assert!(thread.join().unwrap());
    }

    #[test]
    fn every_job_runs_once_before_run_all_returns() {
        let pool = PartitionPool::start(3).unwrap();
        for round in 0..50 {
            let mut counts = vec![0u64; 1 + round % 7];
            let mut jobs: Vec<Box<dyn FnMut() + Send + '_>> = (counts.iter_mut())
                .enumerate()
                .map(|(i, count)| {
                    Box::new(move || *count += i as u64 + 1) as Box<dyn FnMut() + Send + '_>
                })
                .collect();
            let mut refs: Vec<&mut (dyn FnMut() + Send)> =
                jobs.iter_mut().map(|job| &mut **job as _).collect();
            pool.run_all(&mut refs);
            drop(jobs);
            let expected: Vec<u64> = (1..=counts.len() as u64).collect();
            assert_eq!(counts, expected);
        }
    }
}
