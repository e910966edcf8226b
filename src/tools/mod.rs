//! Tools for the ops team that maps a dealer, behind their own subcommands: JSON Schemas of
//! the files for editors (`schema`), the generated AAP reference (`reference`), dry runs of a mapping (`render`), a mapping scaffold
//! (`new-dealer`) and a live self-check of a search mapping (`verify`). None of them serves traffic; they share the loader and engine `serve` uses so
//! what they show is what the gateway does.

pub mod editor_schema;
pub mod examples;
pub mod reference;
pub mod render;
pub mod verify;
