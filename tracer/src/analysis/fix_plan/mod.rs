//! The fix's plan, its pure half: what a verdict prints to run ([`commands`]), and `cctrace fix`'s
//! [`Plan`] with the buffer maxima it raises ([`buffer_steps`]), the [`State`] it keeps for
//! `--undo`, the live switch's records ([`Switched`]) and the kernel's refusals in words
//! ([`refusal`]). The host half, which reads the host, asks and acts, is the crate's `fix`
//! module; the program that switches running sockets is loaded by `kernel::switch`.
//! `docs/architecture.md` lists every part of the concept.

mod buffers;
pub mod commands;
mod plan;
mod refusal;
mod state;
mod switch;
mod target;
#[cfg(test)]
mod tests;

pub use buffers::{buffer_steps, SysctlStep, BUFFER_KEYS};
pub use plan::{Connection, FixControl, Persist, Plan};
pub use refusal::{errno, refusal, socket_refusal, Step};
pub use state::{state_file_name, State, SwitchedCookie, STATE_VERSION};
pub use switch::{cc_bytes, decode_switch_records, held_switch_line, switches_now, valid_cc_name, Switched, Unreached};
pub use target::Target;
