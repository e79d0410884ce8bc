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

/// Returns free pages to the system: mimalloc's and glibc's (which holds
/// the tree's leaf buffers, `stoa_tree`'s `leaf_bytes`).
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

/// Turns transparent huge pages off for this process. mimalloc asks for
/// them on its arenas (`MADV_HUGEPAGE`), and with the kernel's usual
/// `defrag=madvise` a fault in such a region may compact memory and then
/// zero 2 MiB before the thread goes on: under a steady write load that
/// was 13% of the partition thread's time, in `clear_page_erms`, and the
/// pauses behind a 3-member ensemble's p99.9 of 20-28 ms (7-12 ms
/// without). The B+tree's nodes are small and scattered, so huge pages
/// bought nothing measurable in return.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's memory
    // map that the kernel reads at page-fault time.
    unsafe {
        if libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0 {
            log::debug!(
                "cannot turn transparent huge pages off: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
