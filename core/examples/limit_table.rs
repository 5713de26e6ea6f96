//! The cost of one rate-limit decision in the table every worker shares
//! (`edge_core::policy::limit::KeyTable`), for bench/README.md "Traffic rules": one thread on one key,
//! one thread over a million keys (cache misses), and two threads on the two CPUs either sharing one
//! key (a client whose connections land on both cores: the key's cache line moves between them) or on
//! keys of their own (the usual case). `cargo run --release -p edge-core --example limit_table`.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use edge_core::policy::limit::{Gcra, KeyTable};

const OPS: u64 = 20_000_000;

/// ns per decision of `threads` threads, each pinned to its own CPU, each deciding `OPS / threads`
/// requests of the keys `key(thread, i)`.
fn run(table: &Arc<KeyTable>, threads: usize, key: fn(&KeyTable, usize, u64) -> u64) -> f64 {
    let limit = Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000);
    let start = Arc::new(Barrier::new(threads));
    let per = OPS / threads as u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (table, start) = (table.clone(), start.clone());
            std::thread::spawn(move || {
                let cores = core_affinity::get_core_ids().unwrap_or_default();
                if let Some(c) = cores.get(t % cores.len().max(1)) {
                    core_affinity::set_for_current(*c);
                }
                start.wait();
                let begun = Instant::now();
                for i in 0..per {
                    let k = key(&table, t, i);
                    let now = table.clock(Instant::now());
                    std::hint::black_box(table.admit(k, &limit, now));
                }
                begun.elapsed()
            })
        })
        .collect();
    let slowest = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap();
    slowest.as_nanos() as f64 / per as f64
}

fn main() {
    let table = Arc::new(KeyTable::new(1_000_000));
    println!("KeyTable for 1 000 000 keys: {} MiB", table.bytes() >> 20);
    let one = |t: &KeyTable, _: usize, _: u64| t.key(b"one client");
    let many =
        |_: &KeyTable, _: usize, i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 1_000_000) | 1;
    let own = |t: &KeyTable, thread: usize, _: u64| t.key(&thread.to_be_bytes());
    println!("{:<52} {:>8}", "case", "ns/decision");
    for (name, threads, key) in [
        (
            "1 thread, 1 key",
            1,
            one as fn(&KeyTable, usize, u64) -> u64,
        ),
        ("1 thread, 1 000 000 keys", 1, many),
        ("2 threads on 2 CPUs, a key each", 2, own),
        ("2 threads on 2 CPUs, one shared key (contended)", 2, one),
    ] {
        println!("{name:<52} {:>8.1}", run(&table, threads, key));
    }
}
