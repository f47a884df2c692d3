use std::sync::mpsc;

use super::*;

/// A collector that answers from a script, and reports every attempt.
struct Scripted {
    answers: mpsc::Receiver<Outcome>,
    attempts: mpsc::Sender<(Signal, u64)>,
}

impl Transport for Scripted {
    /// Waits for the next scripted answer: a test holds the sender in a send as long as it
    /// wants, like a slow collector.
    fn send(&mut self, request: &Request) -> Outcome {
        let _ = self.attempts.send((request.signal, request.items));
        self.answers.recv().unwrap_or(Outcome::Retry { why: "script ended".into(), after: None })
    }

    fn describe(&self) -> String {
        "http://collector.test:4318".into()
    }
}

fn scripted() -> (Sender, mpsc::Sender<Outcome>, mpsc::Receiver<(Signal, u64)>) {
    let (answer, answers) = mpsc::channel();
    let (attempted, attempts) = mpsc::channel();
    let sender = Sender::start(Scripted { answers, attempts: attempted }, QUEUE_REQUESTS, |_| {}).expect("starts");
    (sender, answer, attempts)
}

fn req(signal: Signal, items: u64, bytes: usize) -> Request {
    Request { signal, body: vec![0; bytes], items, made: Instant::now() }
}

fn wait_idle(sender: &Sender) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sender.idle() {
        assert!(Instant::now() < deadline, "the sender never went idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_stalled_collector_costs_a_bounded_queue_stale_metrics_first_and_never_blocks_the_pusher() {
    let (sender, answer, attempts) = scripted();
    // The first request is taken and held in a send the collector does not answer.
    sender.push(req(Signal::Logs, 3, 100));
    assert_eq!(attempts.recv_timeout(Duration::from_secs(5)).expect("attempted"), (Signal::Logs, 3));
    let t = Instant::now();
    for i in 0..500 {
        let signal = if i % 10 == 0 { Signal::Logs } else { Signal::Metrics };
        sender.push(req(signal, 5, 1000));
    }
    let pushing = t.elapsed();
    assert!(pushing < Duration::from_millis(500), "500 pushes took {pushing:?}");
    assert_eq!(sender.shared.lock().items.len(), QUEUE_REQUESTS, "bounded");
    let c = sender.counts();
    // The 50 event requests are all kept: the oldest metrics made room for them.
    assert_eq!(c.log_records.dropped, 0, "{c:?}");
    let metrics_kept = (QUEUE_REQUESTS - 50) as u64;
    assert_eq!(c.metric_points.dropped, (450 - metrics_kept) * 5, "{c:?}");
    // Bytes bound too: a request larger than the whole budget is dropped on arrival, alone.
    sender.push(req(Signal::Logs, 7, QUEUE_BYTES + 1));
    assert_eq!(sender.counts().log_records.dropped, 7);
    assert_eq!(sender.shared.lock().items.len(), QUEUE_REQUESTS, "nothing made room for it");
    // The collector answers from now on: everything queued is delivered.
    for _ in 0..=QUEUE_REQUESTS {
        answer.send(Outcome::Accepted { rejected: 0 }).expect("answers");
    }
    wait_idle(&sender);
    let c = sender.counts();
    assert_eq!(c.log_records.sent, 3 + 50 * 5);
    assert_eq!(c.metric_points.sent, metrics_kept * 5);
}

#[test]
fn retried_until_accepted_refusals_and_partial_successes_are_counted() {
    let (sender, answer, attempts) = scripted();
    answer.send(Outcome::Retry { why: "connection refused".into(), after: None }).expect("answers");
    answer.send(Outcome::Accepted { rejected: 2 }).expect("answers");
    answer.send(Outcome::Refused("400 Bad Request".into())).expect("answers");
    let t = Instant::now();
    sender.push(req(Signal::Metrics, 10, 10));
    sender.push(req(Signal::Logs, 4, 10));
    wait_idle(&sender);
    let tries: Vec<_> = attempts.try_iter().collect();
    assert_eq!(tries, vec![(Signal::Metrics, 10), (Signal::Metrics, 10), (Signal::Logs, 4)]);
    assert!(t.elapsed() >= BACKOFF_FIRST, "waited before the retry: {:?}", t.elapsed());
    let c = sender.counts();
    assert_eq!((c.metric_points.sent, c.metric_points.dropped), (8, 2), "the partial success's rejects dropped");
    assert_eq!((c.log_records.sent, c.log_records.dropped), (0, 4), "refused");
}

#[test]
fn closing_tries_what_is_left_once_and_counts_the_rest() {
    let (sender, answer, _attempts) = scripted();
    for _ in 0..3 {
        sender.push(req(Signal::Logs, 1, 10));
    }
    // Nobody answers but with retries: closing ends the backoff, each gets one more try.
    for _ in 0..10 {
        answer.send(Outcome::Retry { why: "down".into(), after: Some(Duration::from_secs(60)) }).expect("answers");
    }
    std::thread::sleep(Duration::from_millis(50));
    sender.close();
    wait_idle(&sender);
    assert_eq!(sender.counts().log_records.dropped, 3);
    sender.push(req(Signal::Logs, 1, 10));
    assert_eq!(sender.counts().log_records.dropped, 4, "nothing is queued after closing");
    assert_eq!(sender.pending(), ExportCounts::default());
}
