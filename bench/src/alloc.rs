//! The global allocator: mimalloc, with live-byte counting that the memory
//! scenario switches on.
//!
//! Invariant: while counting is off the only extra work per allocation is one
//! Relaxed load of a flag that is never written during the other scenarios,
//! so the allocator the throughput and latency figures see is plain mimalloc.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use mimalloc::MiMalloc;

/// mimalloc plus an optional live-byte count.
#[derive(Debug)]
pub(crate) struct CountingMimalloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc, a correct allocator;
// the counting touches only two atomics and never the memory itself.
unsafe impl GlobalAlloc for CountingMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: the count is read after the measured work is joined.
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout (the caller upholds
        // `GlobalAlloc::alloc`'s contract).
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: as for `alloc`.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from this allocator with `layout` (caller's contract).
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: as for `dealloc`, and `new_size` is the caller's valid size.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// Starts counting live bytes from zero.
pub(crate) fn start_counting() {
    LIVE.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
}

/// Stops counting.
pub(crate) fn stop_counting() {
    COUNTING.store(false, Ordering::Relaxed);
}

/// Bytes allocated and not freed since `start_counting`.
pub(crate) fn live_bytes() -> i64 {
    LIVE.load(Ordering::Relaxed)
}
