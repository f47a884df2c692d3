//! The command line: its definition ([`args`]) and the parsers of its values ([`values`]).

pub mod args;
pub mod docs;
pub mod values;

pub use args::{Cli, Command, DEFAULT_LISTEN};
