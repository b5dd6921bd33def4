//! An empty queue costs what it holds, not what its limit allows (issue 20,
//! defect 6: a `max_messages = MAX_CAPACITY` queue used to allocate its whole
//! slab page table up front, about 100 MB).
//!
//! A counting global allocator measures the bytes a queue keeps allocated; it
//! is the only test in this binary, so nothing else allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use leaseq::{Engine, MAX_CAPACITY, ManualClock, QueueConfig};

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the caller's own layout and
// pointer, so `System`'s guarantees carry over; the counter has no effect on
// the allocation itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

#[test]
fn an_empty_queue_at_the_capacity_limit_costs_kilobytes() {
    let engine = Engine::builder().clock(ManualClock::new()).build();
    for shards in [1, 4] {
        let name = format!("huge-{shards}");
        let before = live();
        let queue =
            engine.create_queue(&name, QueueConfig::default().max_messages(MAX_CAPACITY).shards(shards)).unwrap();
        let empty = live() - before;
        println!("{shards} shard(s), max_messages {MAX_CAPACITY}: {empty} bytes while empty");
        assert!(empty < 256 * 1024 * shards as isize, "{shards} shard(s): an empty queue keeps {empty} bytes");

        // Memory follows what it holds: 1,000 messages cost about 1,000 slots
        // (plus the first page and chunk of each shard used), not the limit.
        for i in 0..1000u32 {
            queue.send(i.to_le_bytes()).unwrap();
        }
        let holding = live() - before;
        println!("{shards} shard(s) holding 1,000 messages: {holding} bytes");
        assert!(holding < 256 * 1024 * shards as isize + 1000 * 512, "{shards} shard(s): {holding} bytes for 1,000");
        engine.delete_queue(&name).unwrap();
    }
}
