//! Giving freed memory back to the system after a large allocation went:
//! recovery (which reads the whole WAL into memory), a snapshot installed
//! from the leader (its data arrives whole, hundreds of megabytes for a
//! large tree), and each snapshot written (on the snapshot thread).
//!
//! The server runs on mimalloc, which purges freed pages lazily, one second
//! after the free at the earliest and only when the allocator is next
//! busy in the right place: a follower that installed a 100 MB snapshot
//! was seen to keep 190 MiB of freed pages resident for as long as it ran.
//! Purging at every free instead (`purge_delay` 0) slowed a restart with a
//! million znodes by a fifth, so it is done here, at the few moments that
//! free that much.

/// Returns free pages to the system: mimalloc's and, for what C code
/// allocated, glibc's.
pub fn return_free_memory() {
    // SAFETY: mi_collect only reorganizes the allocator's own free memory;
    // it is thread-safe and has no preconditions (mimalloc initializes
    // itself on first use).
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: as above, for glibc's allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}
