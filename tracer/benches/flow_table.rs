//! The flow table's memory per flow and its eviction cost against table size. Heap bytes are
//! counted by a global allocator wrapper (exact, not sampled); eviction is timed at three table
//! sizes and printed as ratios to the smallest. Asserts nothing.
//!
//! `cargo bench -p tracer --bench flow_table`

mod synthetic;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use tracer::analysis::event::Sample;
use tracer::analysis::model::{Flow, FlowTable, TableConfig};

/// Live heap bytes of the whole process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MS: u64 = 1_000_000;

/// Flow `cookie`'s sample at `ts_ns`: a bulk upload acking at a rate of its own.
fn sample(cookie: u64, ts_ns: u64) -> Sample {
    synthetic::sample(cookie, ts_ns, ts_ns / 1000 * (cookie % 7 + 1))
}

/// Heap bytes per flow (the table's own index included) after `fill` filled a table made with
/// `cfg`.
fn bytes_per_flow(cfg: TableConfig, flows: u64, fill: impl Fn(&mut FlowTable)) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    let mut table = FlowTable::new(cfg);
    fill(&mut table);
    let after = LIVE.load(Ordering::Relaxed);
    assert_eq!(table.len() as u64, flows);
    black_box(&table);
    (after - before) as f64 / flows as f64
}

/// `flows` flows sending for 6 minutes, one sample every 100 ms, the table maintained every
/// second as the pipeline does: every flow's history as long as it gets.
fn busy(flows: u64) -> impl Fn(&mut FlowTable) {
    move |t| {
        for tick in 0..3_600u64 {
            for c in 0..flows {
                t.ingest(&sample(c, 1_000 * MS + tick * 100 * MS));
            }
            if tick % 10 == 0 {
                t.expire(1_000 * MS + tick * 100 * MS);
            }
        }
    }
}

/// Mean time to take in one new flow when the table is full (one eviction each), at `size`.
fn eviction_ns(size: usize, inserts: u64) -> f64 {
    let mut table = FlowTable::new(TableConfig { max_flows: size, ..TableConfig::default() });
    // Distinct last-seen times, so the oldest is well defined.
    for c in 0..size as u64 {
        table.ingest(&sample(c, 1_000 * MS + c * 1_000));
    }
    let base = size as u64;
    let samples: Vec<Sample> = (0..inserts).map(|i| sample(base + i, 2_000 * MS + i * 1_000)).collect();
    let start = Instant::now();
    for s in &samples {
        table.ingest(s);
    }
    let took = start.elapsed();
    assert_eq!(table.evicted(), inserts);
    took.as_nanos() as f64 / inserts as f64
}

fn main() {
    let inline = std::mem::size_of::<Flow>();
    // A flow seen once (a short connection, or an idle one listed at start-up).
    let once = bytes_per_flow(TableConfig::default(), 20_000, |t| {
        for c in 0..20_000 {
            t.ingest(&sample(c, 1_000 * MS));
        }
    });
    // Busy flows, all among the charted ones (full history) and none of them (short history).
    let charted = bytes_per_flow(TableConfig::default(), 200, busy(200));
    let uncharted = bytes_per_flow(TableConfig { charted_flows: 0, ..TableConfig::default() }, 200, busy(200));
    let cfg = TableConfig::default();
    let worst = cfg.charted_flows as f64 * charted + (cfg.max_flows - cfg.charted_flows) as f64 * uncharted;
    println!("size_of::<Flow>() = {inline} B");
    println!("heap per flow seen once:                           {once:>8.0} B");
    println!("heap per busy flow after 6 minutes, charted:       {charted:>8.0} B");
    println!("heap per busy flow after 6 minutes, not charted:   {uncharted:>8.0} B");
    println!("worst case, {} busy flows ({} charted): {:.0} MB", cfg.max_flows, cfg.charted_flows, worst / 1e6);

    let small = eviction_ns(1_000, 20_000);
    let medium = eviction_ns(10_000, 20_000);
    let large = eviction_ns(50_000, 20_000);
    println!("new flow into a full table of  1,000: {small:>10.0} ns (baseline)");
    println!("new flow into a full table of 10,000: {medium:>10.0} ns ({:.1}x)", medium / small);
    println!("new flow into a full table of 50,000: {large:>10.0} ns ({:.1}x)", large / small);
}
