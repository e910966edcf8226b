//! The mapping languages: what an ops team writes inside a mapping file.
//!
//! `jq` runs the response programs (jaq, with the legacy-format helpers and native plans of the
//! common shapes); `template` renders request templates (minijinja, escaped per output context).
//! Owns no I/O; uses only `protocol` (the vehicle shape plans write) and `formats`.

pub mod jq;
pub mod template;
