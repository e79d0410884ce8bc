//! Giving freed memory back to the system after recovery, which reads the
//! whole WAL into memory on a thread of its own: glibc would keep that in
//! the thread's arena for good (some 150 MiB with a million znodes).
//!
//! Not after snapshots, though they free as much: trimming a heap that
//! size holds the allocator's locks for up to a quarter of a second, a
//! stall every snapCount writes.

/// Returns free heap pages to the system (glibc's `malloc_trim`); a no-op
/// with other C libraries. Walks the whole heap under the allocator's
/// locks: only before serving.
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganizes the allocator's own free
    // memory; it is thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
