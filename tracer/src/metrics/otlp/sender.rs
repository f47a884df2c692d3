//! Delivery to the collector, away from the pipeline: encoded requests wait in a bounded queue
//! that a thread of its own sends over HTTP (a blocking client: the pipeline's runtime has one
//! thread, and a slow collector must not take turns from it). Pushing never waits for the
//! network; a full queue drops (stale metrics first) and counts what it dropped; a collector
//! that is down, slow or refusing gets retries with backoff until a request is too old.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use prost::Message;

use crate::metrics::model::{Delivery, ExportCounts};

/// The queue holds at most this many requests by default (a quarter of an hour of metrics at
/// the default interval, while a collector is down)...
pub const QUEUE_REQUESTS: usize = 64;
/// ...and at most this many encoded bytes (an export of 4,543 series, the group bound reached,
/// is 356 KB).
pub const QUEUE_BYTES: usize = 8 << 20;
/// A request not delivered within this long is dropped rather than sent late.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(300);
/// The first wait after a failure; each next one doubles, up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long one request may take, connection included (OTLP exporters' usual default).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Which OTLP signal a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Data points.
    Metrics,
    /// Log records (events).
    Logs,
}

impl Signal {
    /// The path OTLP/HTTP receives it at, below the collector's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Self::Metrics => "/v1/metrics",
            Self::Logs => "/v1/logs",
        }
    }
}

/// One encoded export request.
#[derive(Clone, Debug)]
pub struct Request {
    pub signal: Signal,
    pub body: Vec<u8>,
    /// Data points or log records in it.
    pub items: u64,
    pub made: Instant,
}

/// What an attempt came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted; the collector rejected this many items of it (a partial success).
    Accepted { rejected: u64 },
    /// Worth trying again (no connection, a timeout, 429, 502, 503, 504), not before the
    /// collector's `Retry-After` when it gave one.
    Retry { why: String, after: Option<Duration> },
    /// Refused for good (any other status): the request is dropped.
    Refused(String),
}

/// Sends one request; the HTTP client in production, a fake in tests.
pub trait Transport: Send + 'static {
    fn send(&mut self, request: &Request) -> Outcome;
    /// Where requests go, for messages.
    fn describe(&self) -> String;
}

#[derive(Debug, Default)]
struct Queue {
    /// At most this many requests wait.
    capacity: usize,
    items: VecDeque<Request>,
    bytes: usize,
    /// A request taken by the thread and not yet delivered or dropped.
    in_flight: Option<(Signal, u64)>,
    closing: bool,
    counts: ExportCounts,
    /// Retried at least once since the last delivery: the collector is unreachable.
    down: bool,
}

impl Queue {
    fn delivery(&mut self, signal: Signal) -> &mut Delivery {
        match signal {
            Signal::Metrics => &mut self.counts.metric_points,
            Signal::Logs => &mut self.counts.log_records,
        }
    }

    fn drop_items(&mut self, signal: Signal, items: u64) {
        self.delivery(signal).dropped += items;
    }

    fn fits(&self, bytes: usize) -> bool {
        self.items.len() < self.capacity && self.bytes + bytes <= QUEUE_BYTES
    }

    /// Make room for `request`: the oldest metrics go first (a later export carries the
    /// counters on), then the oldest events; whether it fits now.
    fn make_room(&mut self, request: &Request) -> bool {
        if request.body.len() > QUEUE_BYTES {
            return false;
        }
        while !self.fits(request.body.len()) {
            let victim = self
                .items
                .iter()
                .position(|r| r.signal == Signal::Metrics)
                .or(if request.signal == Signal::Logs && !self.items.is_empty() { Some(0) } else { None });
            let Some(at) = victim else { return false };
            let Some(old) = self.items.remove(at) else { return false };
            self.bytes -= old.body.len();
            self.drop_items(old.signal, old.items);
        }
        true
    }
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Something was queued, or it is time to close.
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The queue and the thread that empties it.
#[derive(Debug, Clone)]
pub struct Sender {
    shared: Arc<Shared>,
    to: String,
}

impl Sender {
    /// Start the thread, with room for `capacity` requests; `say` is told when the collector
    /// becomes unreachable and reachable again, and when it refuses a request.
    pub fn start(transport: impl Transport, capacity: usize, say: fn(&str)) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        shared.lock().capacity = capacity.max(1);
        let to = transport.describe();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new().name("cctrace-otlp".into()).spawn(move || run(&thread_shared, transport, say))?;
        Ok(Self { shared, to })
    }

    /// Queue `request` without waiting; what does not fit is dropped and counted.
    pub fn push(&self, request: Request) {
        let mut q = self.shared.lock();
        if q.closing || !q.make_room(&request) {
            q.drop_items(request.signal, request.items);
            return;
        }
        q.bytes += request.body.len();
        q.items.push_back(request);
        drop(q);
        self.shared.wake.notify_one();
    }

    /// What was delivered and dropped so far; what still waits is neither.
    pub fn counts(&self) -> ExportCounts {
        self.shared.lock().counts
    }

    /// No more requests: the thread sends what is queued, once each, then ends.
    pub fn close(&self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_all();
    }

    /// Nothing queued or being sent.
    pub fn idle(&self) -> bool {
        let q = self.shared.lock();
        q.items.is_empty() && q.in_flight.is_none()
    }

    /// What was neither delivered nor dropped yet (at the end: what the wait ran out on).
    pub fn pending(&self) -> ExportCounts {
        let q = self.shared.lock();
        let mut out = ExportCounts::default();
        for (signal, items) in q.items.iter().map(|r| (r.signal, r.items)).chain(q.in_flight) {
            match signal {
                Signal::Metrics => out.metric_points.dropped += items,
                Signal::Logs => out.log_records.dropped += items,
            }
        }
        out
    }

    /// Where it sends.
    pub fn describe(&self) -> &str {
        &self.to
    }
}

fn run(shared: &Shared, mut transport: impl Transport, say: fn(&str)) {
    loop {
        let request = {
            let mut q = shared.lock();
            while q.items.is_empty() && !q.closing {
                q = shared.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            let Some(r) = q.items.pop_front() else { return };
            q.bytes -= r.body.len();
            q.in_flight = Some((r.signal, r.items));
            r
        };
        deliver(shared, &mut transport, &request, say);
        shared.lock().in_flight = None;
    }
}

/// Send `request` until it is accepted, refused, too old, or the sender closes (then once).
fn deliver(shared: &Shared, transport: &mut impl Transport, request: &Request, say: fn(&str)) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let outcome = transport.send(request);
        let mut q = shared.lock();
        match outcome {
            Outcome::Accepted { rejected } => {
                if std::mem::take(&mut q.down) {
                    say(&format!("the OTLP collector at {} takes exports again", transport.describe()));
                }
                let rejected = rejected.min(request.items);
                let d = q.delivery(request.signal);
                d.sent += request.items - rejected;
                d.dropped += rejected;
                return;
            }
            Outcome::Refused(why) => {
                say(&format!("the OTLP collector at {} refused {} items: {why}", transport.describe(), request.items));
                q.drop_items(request.signal, request.items);
                return;
            }
            Outcome::Retry { why, after } => {
                if !q.down {
                    q.down = true;
                    say(&format!(
                        "the OTLP collector at {} is unreachable ({why}): retrying with backoff, dropping what does not fit the queue",
                        transport.describe()
                    ));
                }
                if q.closing || request.made.elapsed() >= GIVE_UP_AFTER {
                    q.drop_items(request.signal, request.items);
                    return;
                }
                let wait = after.map_or(backoff, |a| a.max(backoff)).min(BACKOFF_MAX);
                // Woken early only to close: then one last try.
                let (q, _) =
                    shared.wake.wait_timeout_while(q, wait, |q| !q.closing).unwrap_or_else(PoisonError::into_inner);
                drop(q);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Encode a message for a request.
pub fn request(signal: Signal, message: &impl Message, items: u64) -> Request {
    Request { signal, body: message.encode_to_vec(), items, made: Instant::now() }
}

#[cfg(test)]
mod tests;
