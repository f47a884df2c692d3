//! Front ends that print: JSON Lines, through a writer that cannot block the process; and
//! [`stack`], which every mode's front end runs inside.
pub mod json;
pub mod line_writer;
pub mod stack;
