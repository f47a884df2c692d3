//! Ways of presenting the flow table.
pub mod json;
