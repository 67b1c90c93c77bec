//! Benchmarks of full-depth vector ranking and RRF fusion at catalog sizes (1k and 10k tools,
//! 384 dimensions like all-MiniLM-L6-v2), on fixed-seed pseudo-random vectors.

use std::sync::OnceLock;

use divan::{Bencher, black_box};
use retrieval::{Hit, Hybrid, VectorIndex};

fn main() {
    divan::main();
}

const SIZES: [usize; 2] = [1_000, 10_000];
const DIM: usize = 384;

#[divan::bench(consts = SIZES)]
fn rank<const SIZE: usize>(bencher: Bencher) {
    let index = index(SIZE);
    let query = vectors(1, 7).remove(0);
    bencher.bench(|| index.rank(black_box(&query), &|_| true));
}

#[divan::bench(consts = SIZES)]
fn build<const SIZE: usize>(bencher: Bencher) {
    let vectors = vectors(SIZE, 1);
    let keys = keys(SIZE);
    bencher.bench(|| VectorIndex::build(black_box(keys.clone()), black_box(&vectors)));
}

/// Hybrid fusion of a full-depth vector list with a BM25 list of a tenth of the catalog.
#[divan::bench(consts = SIZES)]
fn fuse<const SIZE: usize>(bencher: Bencher) {
    let index = index(SIZE);
    let query = vectors(1, 7).remove(0);
    let vector = index.rank(&query, &|_| true);
    let bm25: Vec<Hit> = vector.iter().rev().step_by(10).copied().collect();
    let keys = keys(SIZE);
    let key = |doc: u32| keys[doc as usize].as_str();
    bencher.bench(|| Hybrid::default().fuse(black_box(&bm25), black_box(&vector), 8, &key));
}

fn index(size: usize) -> &'static VectorIndex {
    static INDEXES: [OnceLock<VectorIndex>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = SIZES.iter().position(|&s| s == size).unwrap_or(0);
    INDEXES[slot].get_or_init(|| {
        VectorIndex::build(keys(size), &vectors(size, 1)).expect("generated vectors are valid")
    })
}

fn keys(size: usize) -> Vec<String> {
    (0..size)
        .map(|i| format!("server{}__tool{i}", i % 20))
        .collect()
}

/// `count` vectors from a xorshift generator seeded with `seed`.
fn vectors(count: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..count)
        .map(|_| (0..DIM).map(|_| next()).collect())
        .collect()
}
