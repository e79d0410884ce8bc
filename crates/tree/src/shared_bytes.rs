//! A znode's data: one allocation holding a reference count, the length
//! and the bytes, behind a thin pointer (8 bytes in the node). triomphe's
//! `ThinArc` is the same shape with a 16-byte header (a `usize` count and a
//! `usize` length); with `u32`s (znode data is at most megabytes) the
//! header is 8 bytes, and 100-byte data lands in mimalloc's 112-byte size
//! class instead of the 128-byte one: 16 bytes less per znode.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

#[repr(C)]
struct Header {
    count: AtomicU32,
    len: u32,
}

const HEADER_BYTES: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_BYTES == 8);

/// The length that marks null data (ZooKeeper keeps null apart from
/// empty): no bytes follow it. Real data is far shorter.
const NULL_LEN: u32 = u32::MAX;

/// Clones past this mean a leak: stop rather than let the count wrap (as
/// `Arc` does).
const COUNT_MAX: u32 = u32::MAX / 2;

/// Immutable shared bytes; cloning bumps a count.
pub struct SharedBytes {
    header: NonNull<Header>,
}

// SAFETY: the bytes never change once written and the count is atomic:
// sharing across threads is as safe as with `Arc<[u8]>`.
unsafe impl Send for SharedBytes {}
// SAFETY: as above.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    pub fn new(bytes: &[u8]) -> SharedBytes {
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|&len| len != NULL_LEN)
            .expect("znode data is under 4 GiB");
        Self::with_len(len, bytes)
    }

    /// Null data: reads as empty, and `is_null` tells it apart.
    pub fn null() -> SharedBytes {
        Self::with_len(NULL_LEN, &[])
    }

    /// `bytes`, or null.
    pub fn of(bytes: Option<&[u8]>) -> SharedBytes {
        bytes.map_or_else(SharedBytes::null, SharedBytes::new)
    }

    pub fn is_null(&self) -> bool {
        self.header().len == NULL_LEN
    }

    /// The bytes, or None for null data.
    pub fn as_option(&self) -> Option<&[u8]> {
        (!self.is_null()).then_some(&**self)
    }

    /// `len` is `bytes.len()`, or `NULL_LEN` with no bytes.
    fn with_len(len: u32, bytes: &[u8]) -> SharedBytes {
        let layout = layout(len);
        // SAFETY: the layout's size is at least the header's, never zero.
        let raw = unsafe { alloc(layout) };
        let Some(header) = NonNull::new(raw.cast::<Header>()) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `raw` is valid for `layout.size()` bytes and aligned for
        // the header; the bytes go right after the header, inside that size.
        unsafe {
            header.as_ptr().write(Header {
                count: AtomicU32::new(1),
                len,
            });
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), raw.add(HEADER_BYTES), bytes.len());
        }
        SharedBytes { header }
    }

    fn header(&self) -> &Header {
        // SAFETY: the allocation lives while any clone (self) does.
        unsafe { self.header.as_ref() }
    }
}

fn layout(len: u32) -> Layout {
    let bytes = if len == NULL_LEN { 0 } else { len as usize };
    Layout::from_size_align(HEADER_BYTES + bytes, std::mem::align_of::<Header>())
        .expect("a length under 4 GiB fits a layout")
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let len = match self.header().len {
            NULL_LEN => 0,
            len => len as usize,
        };
        // SAFETY: `new` wrote `len` bytes after the header, and they live
        // as long as self.
        unsafe {
            std::slice::from_raw_parts(self.header.as_ptr().cast::<u8>().add(HEADER_BYTES), len)
        }
    }
}

impl Clone for SharedBytes {
    fn clone(&self) -> SharedBytes {
        // Relaxed, as `Arc`: a new reference is made from an existing one,
        // which keeps the allocation alive meanwhile.
        let previous = self.header().count.fetch_add(1, Ordering::Relaxed);
        if previous > COUNT_MAX {
            std::process::abort();
        }
        SharedBytes {
            header: self.header,
        }
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        if self.header().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other clone's use of the bytes happens before the free.
        fence(Ordering::Acquire);
        let layout = layout(self.header().len);
        // SAFETY: the last reference: nothing reads the allocation after
        // this, and it was allocated with this layout.
        unsafe { dealloc(self.header.as_ptr().cast::<u8>(), layout) }
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            return f.write_str("SharedBytes(null)");
        }
        f.debug_tuple("SharedBytes").field(&&**self).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clones_share_one_allocation_until_the_last_goes() {
        let a = SharedBytes::new(b"hello");
        let b = a.clone();
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!(a.header().count.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!(&*b, b"hello");
        assert_eq!(b.header().count.load(Ordering::Relaxed), 1);
        let empty = SharedBytes::new(&[]);
        assert!(empty.is_empty());
        assert!(!empty.is_null() && empty.as_option() == Some(&[][..]));
        let null = SharedBytes::null();
        assert!(null.is_empty() && null.is_null() && null.as_option().is_none());
        assert!(null.clone().is_null());
        assert_eq!(format!("{null:?}"), "SharedBytes(null)");
        assert_eq!(
            format!("{:?}", SharedBytes::new(&[1, 2])),
            "SharedBytes([1, 2])"
        );
    }

    #[test]
    fn clones_dropped_on_other_threads() {
        let data = SharedBytes::new(&[7; 1000]);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let mine = data.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let c = mine.clone();
                        assert_eq!(c.len(), 1000);
                    }
                    mine.iter().map(|&b| b as u64).sum::<u64>()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 7000);
        }
        assert_eq!(data.header().count.load(Ordering::Relaxed), 1);
    }

    proptest! {
        #[test]
        fn holds_what_it_was_given(bytes in proptest::collection::vec(any::<u8>(), 0..600), clones in 0usize..4) {
            let shared = SharedBytes::new(&bytes);
            let copies: Vec<_> = (0..clones).map(|_| shared.clone()).collect();
            drop(shared);
            for c in &copies {
                prop_assert_eq!(&**c, &bytes[..]);
            }
        }
    }
}
