//! The front-end stack every mode runs ([`stack`]: a front end with its side job, recorder and
//! metrics around it), and the front ends that are not the terminal UI ([`crate::tui`]): JSON
//! Lines on stdout ([`json`], through [`line_writer`], which cannot block the process) and
//! headless ([`stack::Headless`], for `cctrace record` and `serve`).
pub mod json;
pub mod line_writer;
pub mod stack;
