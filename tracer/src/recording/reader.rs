//! Reading a recording, entry by entry, in bounded memory.
//!
//! A file cut off anywhere (a crash, a full disk, a copy in progress) yields every complete
//! entry, including those in the complete blocks of a cut-off frame, and then says where it
//! ended ([`Reader::truncated`]); that is not an error. A damaged file is a [`ReadError`] that
//! says where, never a panic: lines are bounded by [`MAX_LINE`], the zstd window by
//! [`MAX_WINDOW_LOG`], and nothing is allocated from a length the file declares.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

use super::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use super::writer::{MAGIC_LEN, MAGIC_PAYLOAD, SKIPPABLE_MAGIC};

/// The longest line (entry) a reader accepts.
pub const MAX_LINE: usize = 16 << 20;
/// The largest zstd window a reader allocates (16 MiB); the writer's frames need far less.
pub const MAX_WINDOW_LOG: u32 = 24;
const ZSTD_MAGIC: u32 = 0xFD2F_B528;
const CHUNK: usize = 128 * 1024;

/// Why a recording cannot be read (further).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The message holds the I/O error's words, so it is not also the error's source (an error
    /// chain would print them twice).
    #[error("reading the recording: {0}")]
    Io(io::Error),
    /// Not a cctrace recording, or one of a newer format.
    #[error("not a cctrace recording: {0}")]
    NotARecording(String),
    /// The file is damaged: `offset` is the compressed byte offset of the zstd frame the damage
    /// is in, `line` the number (from 1) of the line being read.
    #[error("damaged recording: {what} (zstd frame at byte {offset}, line {line})")]
    Damaged { offset: u64, line: u64, what: String },
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Reads [`Entry`]s from a recording: the [`Header`] first, then the rest in order.
pub struct Reader<R> {
    inner: R,
    dctx: Decoder<'static>,
    input: Vec<u8>,
    in_pos: usize,
    in_len: usize,
    /// Compressed bytes handed to the decoder so far (the file offset it has reached).
    consumed: u64,
    /// Where the frame being decoded starts.
    frame_start: u64,
    /// The decoder is inside a frame (the last call did not end one).
    in_frame: bool,
    /// Decompressed bytes not yet returned as entries.
    lines: Vec<u8>,
    lines_pos: usize,
    chunk: Box<[u8]>,
    /// The last decode step filled `chunk`: the decoder may hold more output.
    chunk_full: bool,
    line: u64,
    header: Option<Header>,
    started: bool,
    eof: bool,
    done: bool,
    ended_cleanly: bool,
    truncated: Option<u64>,
}

impl Reader<io::BufReader<File>> {
    /// Open the recording at `path`.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        Self::new(io::BufReader::new(File::open(path)?))
    }
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Result<Self, ReadError> {
        let mut dctx = Decoder::new()?;
        dctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))?;
        Ok(Self {
            inner,
            dctx,
            input: vec![0; CHUNK],
            in_pos: 0,
            in_len: 0,
            consumed: 0,
            frame_start: 0,
            in_frame: false,
            lines: Vec::new(),
            lines_pos: 0,
            chunk: vec![0; CHUNK].into_boxed_slice(),
            chunk_full: false,
            line: 0,
            header: None,
            started: false,
            eof: false,
            done: false,
            ended_cleanly: false,
            truncated: None,
        })
    }

    /// The header, once the first entry was read.
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// After the last entry: `Some(byte)` when the file ended before its `End` entry (cut off
    /// at `byte`, its length), `None` while reading or when it ended cleanly.
    pub fn truncated(&self) -> Option<u64> {
        self.truncated
    }

    /// Compressed bytes read so far.
    pub fn position(&self) -> u64 {
        self.consumed
    }

    /// Lines (entries) read so far.
    pub fn lines_read(&self) -> u64 {
        self.line
    }

    fn damaged(&self, what: impl Into<String>) -> ReadError {
        ReadError::Damaged { offset: self.frame_start, line: self.line + 1, what: what.into() }
    }

    /// Fill `input` from the file; false at its end.
    fn refill(&mut self) -> Result<bool, ReadError> {
        if self.in_pos < self.in_len {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        loop {
            match self.inner.read(&mut self.input) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.in_pos = 0;
                    self.in_len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Check the start of the file: cctrace's skippable frame, or a plain zstd frame (a
    /// recording recompressed by `zstd`). Returns false when the file ends inside it.
    fn read_magic(&mut self) -> Result<bool, ReadError> {
        let mut head = [0u8; MAGIC_LEN];
        let mut have = 0;
        while have < MAGIC_LEN {
            match self.inner.read(&mut head[have..]) {
                Ok(0) => break,
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let magic = (have >= 4).then(|| u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
        if magic == Some(ZSTD_MAGIC)
            || (magic.is_none() && have > 0 && ZSTD_MAGIC.to_le_bytes()[..have] == head[..have])
        {
            // A plain zstd stream: all of it goes to the decoder.
            self.input[..have].copy_from_slice(&head[..have]);
            self.in_pos = 0;
            self.in_len = have;
            return Ok(true);
        }
        self.consumed = have as u64;
        if let Some(magic) = magic {
            if magic != SKIPPABLE_MAGIC {
                return Err(ReadError::NotARecording(format!(
                    "it starts with {:02x} {:02x} {:02x} {:02x}, neither cctrace's magic nor zstd's",
                    head[0], head[1], head[2], head[3]
                )));
            }
        }
        if have < MAGIC_LEN {
            return Ok(false);
        }
        let size = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if size != 16 || &head[8..20] != MAGIC_PAYLOAD {
            return Err(ReadError::NotARecording("its first frame is not cctrace's".into()));
        }
        let version = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
        if version == 0 || version > FORMAT_VERSION {
            return Err(ReadError::NotARecording(format!(
                "format version {version}; this cctrace reads versions 1 to {FORMAT_VERSION}"
            )));
        }
        self.frame_start = self.consumed;
        Ok(true)
    }

    /// Decode one step; false when there is nothing more to decode.
    fn decode(&mut self) -> Result<bool, ReadError> {
        let more_input = self.refill()?;
        if !more_input && !self.chunk_full {
            return Ok(false);
        }
        let mut input = InBuffer::around(&self.input[self.in_pos..self.in_len]);
        let mut output = OutBuffer::around(&mut self.chunk[..]);
        let hint = self.dctx.run(&mut input, &mut output).map_err(|e| ReadError::Damaged {
            offset: self.frame_start,
            line: self.line + 1,
            what: format!("zstd: {e}"),
        })?;
        let (read, written) = (input.pos(), output.pos());
        self.chunk_full = written == self.chunk.len();
        self.lines.extend_from_slice(&self.chunk[..written]);
        self.in_pos += read;
        self.consumed += read as u64;
        if hint == 0 {
            self.in_frame = false;
            self.frame_start = self.consumed;
        } else if read > 0 {
            self.in_frame = true;
        }
        Ok(read > 0 || written > 0 || more_input)
    }

    /// The next entry; `Ok(None)` after the last one (see [`Reader::truncated`]).
    pub fn next_entry(&mut self) -> Result<Option<Entry>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_inner();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn next_inner(&mut self) -> Result<Option<Entry>, ReadError> {
        if !self.started {
            self.started = true;
            if !self.read_magic()? {
                self.truncated = Some(self.consumed);
                return Ok(None);
            }
        }
        loop {
            let pending = &self.lines[self.lines_pos..];
            if let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                if nl > MAX_LINE {
                    return Err(self.damaged(format!("a line longer than {MAX_LINE} bytes")));
                }
                let entry = self.parse(self.lines_pos, nl)?;
                self.lines_pos += nl + 1;
                self.line += 1;
                if matches!(entry, Entry::End { .. }) {
                    self.ended_cleanly = true;
                }
                return Ok(Some(entry));
            }
            if pending.len() > MAX_LINE {
                return Err(self.damaged(format!("a line longer than {MAX_LINE} bytes")));
            }
            // Keep only the unfinished line before decoding more.
            self.lines.drain(..self.lines_pos);
            self.lines_pos = 0;
            if !self.decode()? {
                let unfinished = self.in_frame || !self.lines.is_empty();
                if unfinished || !self.ended_cleanly {
                    self.truncated = Some(self.consumed);
                }
                return Ok(None);
            }
        }
    }

    fn parse(&mut self, at: usize, len: usize) -> Result<Entry, ReadError> {
        let text = &self.lines[at..at + len];
        let entry: Entry = serde_json::from_slice(text).map_err(|e| self.damaged(format!("not an entry: {e}")))?;
        match (&entry, self.line) {
            (Entry::Header(h), 0) => {
                if h.format != FORMAT {
                    return Err(ReadError::NotARecording(format!("its header says format {:?}", h.format)));
                }
                if h.version == 0 || h.version > FORMAT_VERSION {
                    return Err(ReadError::NotARecording(format!(
                        "format version {}; this cctrace reads versions 1 to {FORMAT_VERSION}",
                        h.version
                    )));
                }
                self.header = Some(h.clone());
            }
            (_, 0) => return Err(ReadError::NotARecording("its first line is not a header".into())),
            (Entry::Header(_), _) => return Err(self.damaged("a second header")),
            _ => {}
        }
        Ok(entry)
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Entry, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().transpose()
    }
}

/// Read all of `bytes` as a recording: what the fuzz target and the corpus test run.
/// Returns the entries read, and whether (and where) it ended early.
pub fn read_all(bytes: &[u8]) -> (Vec<Entry>, Result<Option<u64>, ReadError>) {
    let mut reader = match Reader::new(bytes) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut entries = Vec::new();
    loop {
        match reader.next_entry() {
            Ok(Some(e)) => entries.push(e),
            Ok(None) => return (entries, Ok(reader.truncated())),
            Err(e) => return (entries, Err(e)),
        }
    }
}
