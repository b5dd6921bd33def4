//! Stand-alone comparison behind the replica's id map (docs/durability.md,
//! "What was done about it", steps 3 and 5): `HashMap`s of message ids under
//! three hashes, and a table of 64-id pages, on ids drawn as shards draw
//! them (blocks of 65,536, one open block per shard, interleaved).
//!
//! `cargo run --release -p leaseq-bench --example id_maps`
//!
//! Prints ns per insert and per removal while a map grows to 3 million ids,
//! and ns per insert-and-remove pair over a million-id sliding window, for
//! 1, 2, 8, 16 and 64 shards. Values are 80 bytes, as a replica's are.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

/// Plain Fibonacci hashing: the product's high bits pick bucket and tag.
#[derive(Default)]
struct Fibonacci(u64);
/// The id itself in the low bits (the bucket), the product's top 7 (the tag).
#[derive(Default)]
struct IdBucket(u64);
/// Runs of 64 ids in consecutive buckets, each run placed by its own product.
#[derive(Default)]
struct Runs64(u64);

macro_rules! id_hasher {
    ($name:ident, |$id:ident| $hash:expr) => {
        impl Hasher for $name {
            fn finish(&self) -> u64 {
                self.0
            }
            fn write(&mut self, _: &[u8]) {
                unreachable!("only u64 keys")
            }
            fn write_u64(&mut self, $id: u64) {
                self.0 = $hash;
            }
        }
    };
}
const LOW: u64 = u64::MAX >> 7;
id_hasher!(Fibonacci, |id| id.wrapping_mul(FIB));
id_hasher!(IdBucket, |id| (id & LOW) | (id.wrapping_mul(FIB) & !LOW));
id_hasher!(Runs64, |id| (id.wrapping_mul(FIB) & !LOW)
    | ((id >> 6).wrapping_mul(FIB).rotate_left(32) & LOW & !63)
    | (id & 63));

type Value = [u64; 10];

/// The operations measured, over any of the layouts.
trait IdMap: Default {
    fn insert(&mut self, id: u64, value: Value);
    fn remove(&mut self, id: u64);
}

impl<H: Hasher + Default> IdMap for HashMap<u64, Value, BuildHasherDefault<H>> {
    fn insert(&mut self, id: u64, value: Value) {
        HashMap::insert(self, id, value);
    }
    fn remove(&mut self, id: u64) {
        HashMap::remove(self, &id);
    }
}

/// 64-id pages found by one hash lookup of the page number, each with a
/// count of its full slots (as `IdTable`'s, without its sweep).
#[derive(Default)]
struct Pages(HashMap<u64, Box<Page>, BuildHasherDefault<Fibonacci>>);

/// Full slots, and the slots.
type Page = (u32, [Option<Value>; 64]);

impl IdMap for Pages {
    fn insert(&mut self, id: u64, value: Value) {
        let page = self.0.entry(id >> 6).or_insert_with(|| Box::new((0, [None; 64])));
        if page.1[(id & 63) as usize].replace(value).is_none() {
            page.0 += 1;
        }
    }
    fn remove(&mut self, id: u64) {
        if let Some(page) = self.0.get_mut(&(id >> 6)) {
            if page.1[(id & 63) as usize].take().is_some() {
                page.0 -= 1;
                if page.0 == 0 {
                    self.0.remove(&(id >> 6));
                }
            }
        }
    }
}

/// `n` ids as `shards` shards take them, round robin.
fn ids(n: usize, shards: usize) -> Vec<u64> {
    let (mut next, mut left, mut taken) = (vec![0u64; shards], vec![0u64; shards], 0u64);
    (0..n)
        .map(|i| {
            let s = i % shards;
            if left[s] == 0 {
                (next[s], left[s], taken) = (taken, 1 << 16, taken + (1 << 16));
            }
            left[s] -= 1;
            next[s] += 1;
            next[s] - 1
        })
        .collect()
}

fn per_op(started: Instant, ops: usize) -> f64 {
    started.elapsed().as_nanos() as f64 / ops as f64
}

fn measure<M: IdMap>(name: &str, grow: &[u64], window: &[u64], live: usize) {
    let mut map = M::default();
    let started = Instant::now();
    for &id in grow {
        map.insert(id, [id; 10]);
    }
    let insert = per_op(started, grow.len());
    let started = Instant::now();
    for &id in grow {
        map.remove(id);
    }
    let remove = per_op(started, grow.len());
    let mut map = M::default();
    for &id in &window[..live] {
        map.insert(id, [id; 10]);
    }
    let started = Instant::now();
    for at in live..window.len() {
        map.insert(window[at], [at as u64; 10]);
        map.remove(window[at - live]);
    }
    let pair = per_op(started, window.len() - live);
    println!("| {name} | {insert:.1} | {remove:.1} | {pair:.1} |");
}

fn main() {
    for shards in [1, 2, 8, 16, 64] {
        let grow = ids(3_000_000, shards);
        let window = ids(6_000_000, shards);
        println!("\n{shards} shards\n\n| layout | insert ns (growing) | remove ns | insert+remove ns (window) |");
        println!("|---|---:|---:|---:|");
        measure::<HashMap<u64, Value, BuildHasherDefault<Fibonacci>>>("Fibonacci", &grow, &window, 1_000_000);
        measure::<HashMap<u64, Value, BuildHasherDefault<IdBucket>>>("id as bucket", &grow, &window, 1_000_000);
        measure::<HashMap<u64, Value, BuildHasherDefault<Runs64>>>("runs of 64", &grow, &window, 1_000_000);
        measure::<Pages>("64-id pages", &grow, &window, 1_000_000);
    }
}
