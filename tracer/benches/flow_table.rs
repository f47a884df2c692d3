//! The flow table's memory per flow and its eviction cost against table size. Heap bytes are
//! counted by a global allocator wrapper (exact, not sampled); eviction is timed at three table
//! sizes and printed as ratios to the smallest. Then churn: short connections (opened and
//! closed within a millisecond, as a connection loop makes them) through the whole analysis,
//! with the cost of a sample, of a tick (expiry, eviction, diagnosis) at 1k, 10k and 100k flows
//! as ratios to the smallest, of a flow's JSON line, and the memory a closed connection keeps.
//! Asserts nothing.
//!
//! `cargo bench -p tracer --bench flow_table`

mod synthetic;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use tracer::analysis::diagnosis::DiagnosisConfig;
use tracer::analysis::environment::Environment;
use tracer::analysis::flow_table::{Flow, FlowTable, TableConfig};
use tracer::analysis::sample::{Sample, SampleReason, TcpState};
use tracer::analysis::schema::{FlowRecord, Record};
use tracer::analysis::time::WallClock;
use tracer::analysis::Analysis;

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

/// One short connection's samples, as the kernel reports a loopback connect-then-close: the
/// connect, established, the close's state changes and the destroy, 200 µs apart.
fn connection(cookie: u64, ts_ns: u64) -> [Sample; 5] {
    let steps = [
        (SampleReason::StateChange, TcpState::SynSent),
        (SampleReason::StateChange, TcpState::Established),
        (SampleReason::StateChange, TcpState::FinWait1),
        (SampleReason::StateChange, TcpState::FinWait2),
        (SampleReason::Destroy, TcpState::Close),
    ];
    std::array::from_fn(|i| {
        let mut s = synthetic::sample(cookie, ts_ns + i as u64 * 200_000, 0);
        (s.reason, s.tcp_state) = steps[i];
        s.bytes_sent = 1;
        s
    })
}

/// A table of `size` closed connections (lingering, as for 30 s after a close) and one bulk
/// flow, then `per_tick` new connections a second, each pushing the oldest out: the mean cost
/// of ingesting one sample and of one tick of the analysis (expiry, eviction, diagnosis), and
/// the heap each flow kept.
struct Churn {
    sample_ns: f64,
    tick_us: f64,
    heap_per_flow: f64,
}

fn churn(size: usize, per_tick: u64, ticks: u64) -> Churn {
    let heap_before = LIVE.load(Ordering::Relaxed);
    let table = TableConfig { max_flows: size + 1, closed_linger_ns: 3_600 * 1_000 * MS, ..TableConfig::default() };
    let mut a = Analysis::new(table, DiagnosisConfig::default(), Environment::default());
    let mut cookie = 1_000u64;
    let mut now = 1_000 * MS;
    let bulk = |t: u64| synthetic::sample(1, t, t / 100);
    // Fill: `size` connections spread over the seconds before, ticking as the pipeline does.
    let per_fill_tick = per_tick.max(size as u64 / 20);
    while a.table.len() <= size {
        for i in 0..per_fill_tick {
            for s in connection(cookie, now + i * 1_000) {
                a.ingest(&s);
            }
            cookie += 1;
        }
        a.ingest(&bulk(now));
        now += 1_000 * MS;
        a.tick(now);
    }
    let heap_per_flow = (LIVE.load(Ordering::Relaxed) - heap_before) as f64 / a.table.len() as f64;
    let (mut ingest, mut tick, mut samples) = (std::time::Duration::ZERO, std::time::Duration::ZERO, 0u64);
    for _ in 0..ticks {
        let batch: Vec<Sample> =
            (0..per_tick).flat_map(|i| connection(cookie + i, now + i * 1_000)).chain([bulk(now + 999 * MS)]).collect();
        cookie += per_tick;
        let start = Instant::now();
        for s in &batch {
            a.ingest(s);
        }
        ingest += start.elapsed();
        samples += batch.len() as u64;
        now += 1_000 * MS;
        let start = Instant::now();
        assert!(a.tick(now));
        tick += start.elapsed();
    }
    black_box(&a);
    Churn {
        sample_ns: ingest.as_nanos() as f64 / samples as f64,
        tick_us: tick.as_nanos() as f64 / 1_000.0 / ticks as f64,
        heap_per_flow,
    }
}

/// Mean time to format one closed connection's flow line, as `--json` prints it.
fn json_line_ns(flows: u64) -> (f64, usize) {
    let mut a = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
    for c in 0..flows {
        for s in connection(c, 1_000 * MS + c * 1_000) {
            a.ingest(&s);
        }
    }
    a.tick(2_000 * MS);
    let clock = WallClock::fixed(0);
    let mut buf = Vec::new();
    let start = Instant::now();
    for flow in a.table.flows() {
        let record = Record::Flow(FlowRecord::of(flow, a.verdict(flow), &clock, &a.env));
        serde_json::to_writer(&mut buf, &record).expect("serializes");
        buf.push(b'\n');
    }
    let took = start.elapsed();
    black_box(&buf);
    (took.as_nanos() as f64 / flows as f64, buf.len() / flows as usize)
}

fn main() -> anyhow::Result<()> {
    use cctrace_lab::figures::{number, Row, Section};
    let mut section = Section::new("flow-table", "The flow table: memory and a tick under churn").about(
        "`cargo bench -p tracer --bench flow_table`: synthetic samples through the real analysis, heap bytes \
         counted by an allocator wrapper (exact); churn is 500 connections born and 500 evicted a tick, the \
         best of three runs at each size (a shared machine's load only adds time).",
    );
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
    let n = |v: f64| number(v.round());
    section.row(Row::new("heap per flow seen once", format!("{} B", n(once))));
    section.row(Row::new(
        "heap per busy flow after 6 minutes, charted / not charted",
        format!("{} / {} B", n(charted), n(uncharted)),
    ));
    section.row(Row::new(
        format!(
            "the table's worst case, {} busy flows ({} charted)",
            n(cfg.max_flows as f64),
            n(cfg.charted_flows as f64)
        ),
        format!("{} MB", n(worst / 1e6)),
    ));

    let small = eviction_ns(1_000, 20_000);
    let medium = eviction_ns(10_000, 20_000);
    let large = eviction_ns(50_000, 20_000);
    println!("new flow into a full table of  1,000: {small:>10.0} ns (baseline)");
    println!("new flow into a full table of 10,000: {medium:>10.0} ns ({:.1}x)", medium / small);
    println!("new flow into a full table of 50,000: {large:>10.0} ns ({:.1}x)", large / small);
    section.row(Row::new(
        "a new flow into a full table of 1,000 / 10,000 / 50,000",
        format!("{} / {} / {} ns ({:.1}x at 50,000)", n(small), n(medium), n(large), large / small),
    ));

    // Churn: the same changes a tick (500 connections born and 500 evicted) at every size.
    let sizes = [1_000usize, 10_000, 100_000];
    // The best of three runs at each size: a shared machine's load only ever adds time.
    let runs: Vec<Churn> = sizes
        .iter()
        .map(|&n| (0..3).map(|_| churn(n, 500, 30)).min_by(|a, b| a.tick_us.total_cmp(&b.tick_us)).expect("three runs"))
        .collect();
    for (size, c) in sizes.iter().zip(&runs) {
        println!(
            "churn, table of {size:>7} closed connections: sample {:>5.0} ns, tick {:>8.0} us ({:.2}x), heap {:>5.0} B per flow",
            c.sample_ns,
            c.tick_us,
            c.tick_us / runs[0].tick_us,
            c.heap_per_flow
        );
        section.row(Row::new(
            format!("churn, a table of {} closed connections", n(*size as f64)),
            format!(
                "tick {:.2} ms ({:.1}x), a sample {} ns, {} B per flow",
                c.tick_us / 1e3,
                c.tick_us / runs[0].tick_us,
                n(c.sample_ns),
                n(c.heap_per_flow)
            ),
        ));
    }
    let (line_ns, line_bytes) =
        (0..3).map(|_| json_line_ns(20_000)).min_by(|a, b| a.0.total_cmp(&b.0)).expect("three runs");
    println!("a closed connection's JSON flow line: {line_ns:.0} ns, {line_bytes} B");
    section.row(Row::new(
        "a closed connection's JSON flow line",
        format!("{} ns, {} B", n(line_ns), n(line_bytes as f64)),
    ));
    section.write().map(drop)
}
