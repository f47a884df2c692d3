//! The fix, the core half: what a verdict prints to run ([`commands`]), and `cctrace fix`'s plan,
//! the state it keeps for `--undo`, the per-socket switch's records and the kernel's refusals
//! in words ([`plan`]). The host half, which reads the host, asks and acts, is the crate's
//! `fix` module; the program that switches running sockets is loaded by `kernel::switch`.
//! `docs/architecture.md` lists every part of the concept.

pub mod commands;
mod plan;

pub use plan::{
    buffer_steps, cc_bytes, decode_switch_records, errno, held_switch_line, refusal, socket_refusal, state_file_name,
    switches_now, valid_cc_name, Connection, FixControl, Persist, Plan, State, Step, Switched, SwitchedCookie,
    SysctlStep, Target, Unreached, BUFFER_KEYS, STATE_VERSION,
};
