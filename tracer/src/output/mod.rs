//! Front ends that print: JSON Lines, through a writer that cannot block the process.
pub mod json;
pub mod writer;
