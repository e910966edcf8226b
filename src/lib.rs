//! # aap-gateway
//!
//! An edge gateway that answers AI buyer agents over the Auto Agent Protocol (AAP, a strict
//! profile of A2A v1.0) on behalf of car dealers whose real systems are legacy REST and SOAP.
//!
//! ## The request's path
//!
//! ```text
//!  TCP ─▶ server   connection caps and deadlines, panic guard (the one tower layer)
//!           │
//!           ├─ server::routes ─ per-address quota, body read (size limit, own deadline)
//!           │
//!           ├─ router ─ which dealer? (Host and/or path prefix) ── none ─▶ 404
//!           │
//!           ├─ GET /.well-known/agent-card.json ─▶ protocol::agent_card (pre-rendered, ETag)
//!           │
//!           └─ POST {prefix}/a2a ─▶ binding::jsonrpc   envelope, A2A-Version, method, A2A-Extensions
//!                                     pipeline::handle        slot → decode → deadline → skill →
//!                                                             auth → rate limit → schema →
//!                                                             engine handler → reply schema
//!                                     binding::wire_error     AapError → JSON-RPC error (one place)
//! ```
//!
//! The handlers were compiled at load by `mapping` (the mapping files) into `engine` (the
//! runtime: proxy, feed, lead), which uses `lang` (jq, templates), `inventory` (the in-memory
//! index) and `upstream` (the dealer's systems). docs/architecture.md §Layers says what each
//! folder may use; `tests/architecture.rs` holds it.
//!
//! ## Invariants
//!
//! - Only `binding/` knows JSON-RPC; only `binding::wire_error` maps errors to codes.
//! - Everything compilable (schemas, cards, dealer routes, mappings) is built once into an `App`.
//! - `AapError` speaks AAP and A2A, never the wire; an internal cause is logged once and never
//!   sent to a caller. The upstream client speaks `UpstreamError`, never AAP.

pub mod app;
pub mod auth;
pub mod binding;
pub mod consent;
pub mod demo;
pub mod engine;
pub mod error;
pub mod formats;
pub mod idempotency;
pub mod inventory;
pub mod lang;
pub mod mapping;
pub mod pipeline;
pub mod protocol;
pub mod rate_limit;
pub mod redis_backend;
pub mod router;
pub mod schema;
pub mod server;
pub mod settings;
pub mod telemetry;
pub mod tools;
pub mod upstream;
