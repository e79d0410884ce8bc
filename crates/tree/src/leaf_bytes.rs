//! A leaf's byte buffer: exactly as long as its contents, on the C
//! library's allocator rather than the process's.
//!
//! A leaf holds up to 16 KiB and grows by one entry at a time. The
//! process's allocator (mimalloc) rounds a block up to a size class, four
//! per doubling (512 B apart at 2-4 KiB, 2 KiB apart at 8-16 KiB), so a
//! leaf left between two classes wastes an eighth of a class on average:
//! 8 MiB of a 128 MiB tree of a million znodes of 100 B, with 4 KiB
//! leaves. glibc's malloc rounds to 16 B. Only these buffers go there: the tree's small allocations stay on
//! mimalloc, which is faster at them. The buffer never holds spare room
//! (a leaf that stops growing would keep it), so each growth is a
//! `realloc`, as it was with `Vec::reserve_exact`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::{Deref, Range};
use std::ptr::NonNull;

pub(crate) struct LeafBytes {
    /// Dangling when empty: no allocation.
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is owned, like a `Vec<u8>`'s.
unsafe impl Send for LeafBytes {}
// SAFETY: shared access only reads.
unsafe impl Sync for LeafBytes {}

impl LeafBytes {
    pub(crate) const fn new() -> Self {
        LeafBytes {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    pub(crate) fn from_slice(bytes: &[u8]) -> Self {
        let mut out = LeafBytes::new();
        out.replace(0..0, bytes);
        out
    }

    /// Puts `with` where `range` was, moving what follows.
    pub(crate) fn replace(&mut self, range: Range<usize>, with: &[u8]) {
        let Range { start, end } = range;
        assert!(
            start <= end && end <= self.len,
            "{start}..{end} of {}",
            self.len
        );
        let old_len = self.len;
        let new_len = old_len - (end - start) + with.len();
        let new_end = start + with.len();
        if new_len > old_len {
            self.resize(new_len);
        }
        // SAFETY: the buffer holds max(old_len, new_len) bytes here; both
        // moves stay inside it, and `with` is not part of it (we hold it
        // mutably).
        unsafe {
            let base = self.ptr.as_ptr();
            // A rewrite of the same size (a setData with data of the same
            // length) moves nothing.
            if new_end != end {
                std::ptr::copy(base.add(end), base.add(new_end), old_len - end);
            }
            std::ptr::copy_nonoverlapping(with.as_ptr(), base.add(start), with.len());
        }
        if new_len < old_len {
            self.resize(new_len);
        }
    }

    /// Reallocates to exactly `new_len` bytes, keeping the first ones.
    fn resize(&mut self, new_len: usize) {
        if new_len == 0 {
            self.free();
            self.ptr = NonNull::dangling();
            self.len = 0;
            return;
        }
        let new_layout = layout(new_len);
        // SAFETY: a non-zero size; a block to grow or shrink was allocated
        // by `System` with its current length.
        let ptr = unsafe {
            if self.len == 0 {
                System.alloc(new_layout)
            } else {
                System.realloc(self.ptr.as_ptr(), layout(self.len), new_len)
            }
        };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(new_layout);
        };
        self.ptr = ptr;
        self.len = new_len;
    }

    fn free(&mut self) {
        if self.len > 0 {
            // SAFETY: the block was allocated by `System` with this layout.
            unsafe { System.dealloc(self.ptr.as_ptr(), layout(self.len)) }
        }
    }
}

fn layout(len: usize) -> Layout {
    Layout::array::<u8>(len).expect("a leaf's bytes fit the address space")
}

impl Drop for LeafBytes {
    fn drop(&mut self) {
        self.free();
    }
}

impl Deref for LeafBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes (or none at a dangling pointer).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for LeafBytes {
    fn clone(&self) -> Self {
        LeafBytes::from_slice(self)
    }
}

impl Default for LeafBytes {
    fn default() -> Self {
        LeafBytes::new()
    }
}

impl std::fmt::Debug for LeafBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeafBytes({} B)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of replacements leaves the same bytes as a `Vec`'s
        /// splices, through growth, shrinking, emptying and clones.
        #[test]
        fn replaces_like_a_vec_splice(
            steps in prop::collection::vec(
                (any::<u16>(), any::<u16>(), prop::collection::vec(any::<u8>(), 0..300)),
                0..60,
            )
        ) {
            let mut ours = LeafBytes::new();
            let mut model: Vec<u8> = Vec::new();
            for (a, b, with) in steps {
                let len = model.len();
                let (mut start, mut end) = (a as usize % (len + 1), b as usize % (len + 1));
                if start > end {
                    std::mem::swap(&mut start, &mut end);
                }
                ours.replace(start..end, &with);
                model.splice(start..end, with.iter().copied());
                prop_assert_eq!(&*ours, &model[..]);
                let copy = ours.clone();
                prop_assert_eq!(&*copy, &model[..]);
            }
        }
    }

    #[test]
    fn an_empty_buffer_holds_no_block() {
        let mut bytes = LeafBytes::from_slice(b"abc");
        bytes.replace(0..3, b"");
        assert!(bytes.is_empty());
        assert_eq!(bytes.ptr, NonNull::dangling());
        assert_eq!(&*LeafBytes::from_slice(b""), b"");
    }

    #[test]
    #[should_panic(expected = "2..5 of 3")]
    fn a_range_past_the_end_is_refused() {
        LeafBytes::from_slice(b"abc").replace(2..5, b"x");
    }
}
