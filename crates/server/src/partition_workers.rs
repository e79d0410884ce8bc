//! The threads the engine lends its partitions to (`partition.threads`,
//! docs/partitions.md "Lent partitions"): a fork-join pool. The engine's
//! thread runs the first job itself and waits for the rest, so the jobs
//! may borrow the partitions they work on.

use stoa_core::engine::PartitionWorkers;

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

#[cfg(test)]
mod tests {
    use super::*;

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
