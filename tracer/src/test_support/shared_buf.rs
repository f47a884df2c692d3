//! A writer whose bytes tests can read back: what a front end or an exporter wrote, in memory.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

/// A writer whose bytes tests can read back.
#[derive(Clone, Default)]
pub(crate) struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("lock").clone()
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf8")
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
