//! The host's journal of fixes: every action a cctrace process takes on the host (`cctrace fix`,
//! `--undo`, `f` and `u` in a terminal UI) is appended to one file beside the fix states, and
//! every running cctrace reads what others appended ([`Tail`]) and hands it to its pipeline as
//! an action, the way a recording's actions reach a replay: a `cctrace serve` learns of a fix
//! applied from another terminal, exports it as an event, records it, shows its comparison.
//!
//! One JSON object a line, `{"pid":N,"record":ACTION}` with the same [`ActionRecord`] the
//! recordings and `--json` write; appended with a single `write` under `O_APPEND`, so lines of
//! concurrent writers never interleave. The file is kept under [`ROTATE_AT`]: past it the next
//! writer renames it to `actions.jsonl.1` (replacing the one before) and starts a new one, and a
//! reader finishes the renamed file before it follows the new one.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::analysis::schema::ActionRecord;
use crate::analysis::state_dir::STATE_DIR;

/// The journal's file name, in [`STATE_DIR`].
pub const JOURNAL: &str = "actions.jsonl";
/// The size past which the journal is rotated: thousands of actions.
pub const ROTATE_AT: u64 = 1 << 20;
/// The most a reader takes in one poll (a line longer than this is skipped).
const READ_AT_MOST: u64 = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Line {
    /// The process that took the action: a reader skips its own.
    pid: u32,
    record: ActionRecord,
}

fn journal_path(dir: &Path) -> PathBuf {
    dir.join(JOURNAL)
}

fn rotated_path(dir: &Path) -> PathBuf {
    dir.join(format!("{JOURNAL}.1"))
}

/// Append `action`, taken by this process, to the host's journal. Best effort: the action is
/// done whatever happens here, so a failure is logged, not returned.
pub fn append(action: &ActionRecord) {
    if let Err(e) = append_in(Path::new(STATE_DIR), std::process::id(), action) {
        log::warn!("the action was not written to {STATE_DIR}/{JOURNAL}: {e}");
    }
}

fn append_in(dir: &Path, pid: u32, action: &ActionRecord) -> std::io::Result<()> {
    crate::host::create_state_dir(dir)?;
    let path = journal_path(dir);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= ROTATE_AT) {
        std::fs::rename(&path, rotated_path(dir))?;
    }
    let mut line = serde_json::to_vec(&Line { pid, record: action.clone() }).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut file = OpenOptions::new().append(true).create(true).mode(0o600).open(&path)?;
    file.write_all(&line)
}

/// Where a reader is: the journal's inode and the offset of the first byte not yet read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    inode: u64,
    offset: u64,
}

/// Reads what other processes append to the journal, from where it was when the reader started.
#[derive(Debug)]
pub struct Tail {
    dir: PathBuf,
    own_pid: u32,
    at: Option<Position>,
}

impl Tail {
    /// A reader of the host's journal that skips this process's own actions (its front end
    /// reports those itself): only what is appended from now on.
    pub fn from_now() -> Self {
        Self::in_dir(Path::new(STATE_DIR), std::process::id())
    }

    fn in_dir(dir: &Path, own_pid: u32) -> Self {
        let at = std::fs::metadata(journal_path(dir)).ok().map(|m| Position { inode: m.ino(), offset: m.len() });
        Self { dir: dir.to_path_buf(), own_pid, at }
    }

    /// The actions other processes appended since the last poll, oldest first.
    pub fn poll(&mut self) -> Vec<ActionRecord> {
        let mut out = Vec::new();
        let Ok(current) = File::open(journal_path(&self.dir)) else { return out };
        let Ok(inode) = current.metadata().map(|m| m.ino()) else { return out };
        if let Some(at) = self.at.filter(|at| at.inode != inode) {
            // Rotated since: the rest of the file this reader was in, then the new one.
            if let Ok(old) = File::open(rotated_path(&self.dir)) {
                if old.metadata().is_ok_and(|m| m.ino() == at.inode) {
                    self.read_lines(old, at.offset, &mut out);
                }
            }
            self.at = None;
        }
        let offset = self.at.map_or(0, |at| at.offset);
        let offset = self.read_lines(current, offset, &mut out);
        self.at = Some(Position { inode, offset });
        out
    }

    /// Read the complete lines of `file` from `offset` into `out`; the offset after them (a
    /// line still being written is read next time).
    fn read_lines(&self, mut file: File, offset: u64, out: &mut Vec<ActionRecord>) -> u64 {
        let mut bytes = Vec::new();
        let read =
            file.seek(SeekFrom::Start(offset)).and_then(|_| (&mut file).take(READ_AT_MOST).read_to_end(&mut bytes));
        if read.is_err() {
            return offset;
        }
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            // Nothing complete: wait for the rest, unless no line can be that long.
            return if bytes.len() as u64 >= READ_AT_MOST { offset + bytes.len() as u64 } else { offset };
        };
        for line in bytes[..end].split(|&b| b == b'\n') {
            match serde_json::from_slice::<Line>(line) {
                Ok(l) if l.pid != self.own_pid => out.push(l.record),
                Ok(_) => {}
                Err(e) => log::warn!("{}: a line that is not an action: {e}", journal_path(&self.dir).display()),
            }
        }
        offset + end as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::schema::ActionKind;

    fn action(netns: u32) -> ActionRecord {
        ActionRecord {
            ts_ns: 1,
            action: ActionKind::Fix,
            netns,
            target: format!("ip netns cct-{netns}"),
            cc: "bbr".into(),
            default_before: "cubic".into(),
            default_after: "bbr".into(),
            switched: Vec::new(),
            sysctls: Vec::new(),
            messages: vec!["switched".into()],
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cct-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_reader_gets_what_others_append_from_its_start_on_and_not_its_own() {
        let d = dir("tail");
        append_in(&d, 1, &action(1)).expect("appends");
        let mut tail = Tail::in_dir(&d, 7);
        assert!(tail.poll().is_empty(), "what was there before the start is not new");
        append_in(&d, 2, &action(2)).expect("appends");
        append_in(&d, 7, &action(3)).expect("appends");
        // A line half written: read once it is complete.
        let mut f = OpenOptions::new().append(true).open(journal_path(&d)).expect("opens");
        f.write_all(br#"{"pid":3,"rec"#).expect("writes");
        assert_eq!(tail.poll(), vec![action(2)], "another's, not its own, not the half line");
        let rest = serde_json::to_string(&action(4)).expect("serializes");
        f.write_all(format!("ord\":{rest}}}\n").as_bytes()).expect("writes");
        assert_eq!(tail.poll(), vec![action(4)]);
        assert!(tail.poll().is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_rotated_journal_is_finished_before_the_new_one_is_followed() {
        let d = dir("rotate");
        append_in(&d, 1, &action(1)).expect("appends");
        let mut tail = Tail::in_dir(&d, 7);
        append_in(&d, 1, &action(2)).expect("appends");
        // Past the bound, the next append starts a new file.
        let f = OpenOptions::new().append(true).open(journal_path(&d)).expect("opens");
        f.set_len(ROTATE_AT).expect("grows");
        let mut padded = OpenOptions::new().write(true).open(journal_path(&d)).expect("opens");
        // The padding becomes one long line of NULs, which is no action.
        padded.seek(SeekFrom::End(-1)).expect("seeks");
        padded.write_all(b"\n").expect("writes");
        append_in(&d, 1, &action(3)).expect("appends");
        assert!(std::fs::metadata(rotated_path(&d)).is_ok(), "rotated");
        let got = tail.poll();
        assert_eq!(got, vec![action(2), action(3)], "the old file's rest, then the new one's");
        let _ = std::fs::remove_dir_all(&d);
    }
}
