//! A live source stopped before its final drain accounts for every sample the kernel emitted,
//! even while traffic goes on: the JSON summary's check (received == emitted) then holds on a
//! machine where other flows keep running.

use std::time::Duration;

use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use tracer::kernel::{KernelOptions, KernelSource};
use tracer::source::EventSource;

/// Read batches until none comes for the rest of `how_long`.
async fn read_for(source: &mut dyn EventSource, how_long: Duration) {
    let until = tokio::time::Instant::now() + how_long;
    while let Ok(Ok(Some(_))) = tokio::time::timeout_at(until, source.next_batch()).await {}
}

#[tokio::test]
async fn after_stop_producing_received_and_lost_add_up_to_emitted_under_traffic() {
    if let Some(why) = cctrace_lab::skip::missing_root_or_btf() {
        cctrace_lab::skip::skip(&why);
        return;
    }
    let lab = VethPair::create(VethOptions::default()).expect("lab");
    // Sample every flow as often as the kernel allows, so samples keep coming.
    let opts = KernelOptions { sample_interval: Duration::from_millis(1), ..KernelOptions::default() };
    let mut source =
        KernelSource::start(&opts, &tracer::kernel::btf_file::KernelBtf::Kernel).expect("loading cctrace's programs");
    let sink = Sink::start(lab.receiver(), lab.receiver_addr(), 5201, SinkOptions::default()).expect("sink");
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        5201,
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(3)),
    )
    .expect("sender");
    read_for(&mut source, Duration::from_millis(700)).await;
    source.stop_producing().expect("stopping the source");
    // Drain what was queued; the sender is still sending.
    read_for(&mut source, Duration::from_millis(300)).await;
    let c = source.counters();
    std::thread::sleep(Duration::from_millis(200));
    let later = source.counters();
    eprintln!("after stop: {c:?}; 200 ms later: {later:?}");
    assert!(c.received > 100, "traffic was sampled: {c:?}");
    assert_eq!(Some(c.received + c.lost), c.kernel_emitted, "{c:?}");
    assert_eq!(later.kernel_emitted, c.kernel_emitted, "nothing is written after stop_producing");
    drop(sender);
    drop(sink);
}
