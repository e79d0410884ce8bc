//! The one place the benchmark reads the clock, so every timestamp in a run
//! comes from the same monotonic source.

use std::time::Instant;

pub fn now() -> Instant {
    Instant::now()
}
