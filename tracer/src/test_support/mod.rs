//! What tests share: wire records as the kernel writes them ([`wire`], for the integration
//! tests and benches too), and, for the crate's own unit tests, the skip rule, a readable writer
//! and `feed`, a deterministic host with five flows for the tests of every layer.

#[cfg(test)]
pub(crate) mod feed;
pub mod wire;

#[cfg(test)]
use std::io::{self, Write};
#[cfg(test)]
use std::sync::{Arc, Mutex};

/// A test that needs something this machine lacks returns early with `why` on stderr; under
/// `CI=true` (where root, BTF and cgroup v2 are given) it fails instead (the one rule, in the
/// lab crate).
#[cfg(test)]
pub(crate) use cctrace_lab::skip::skip;

/// A writer whose bytes tests can read back.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct SharedBuf(Arc<Mutex<Vec<u8>>>);

#[cfg(test)]
impl SharedBuf {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("lock").clone()
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf8")
    }
}

#[cfg(test)]
impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
