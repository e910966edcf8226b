//! The mapping compiler: a dealer's mapping folder (`upstreams.yaml` and one file per skill)
//! compiled into one `engine::Handler` per served skill. Uses `engine` (what it builds), `lang`
//! (templates and jq programs), `upstream` (clients), `schema` and `settings`; never a request.
//!
//! Every file is parsed with positions, every template and jq program compiled, the upstream
//! clients built, and every problem reported located as `file:line:col: message`. Nothing is
//! compiled after load. The jobs, one a file (each uses only those above it):
//!
//! - `file`: the mapping files as written (`File*`, unknown keys refused);
//! - `context`: what a load takes (`LoadContext`, the shared `LoadCache`) and gives
//!   (`DealerMappings`, what a reload carries over);
//! - `loader`: the loader's state and shared steps (a file with positions, deserializing, jq,
//!   tables, charsets);
//! - `upstreams`: `upstreams.yaml` built into clients, `${NAME}` expansion, references to them;
//! - `request`: an upstream call (method, templates, body, paging);
//! - `feed`: `feed.yaml`;
//! - `proxy`: a proxy-mode mapping (response programs, error rules, `supports`, `check` notes);
//! - `lead`: `lead.submit.yaml` (policy, HTTP or mail delivery);
//! - `folder`: the folder walk, each skill file to its handler.

mod context;
mod feed;
pub mod file;
mod folder;
mod lead;
mod loader;
mod proxy;
mod request;
mod upstreams;

pub use context::{Carried, DealerMappings, LoadCache, LoadContext};
pub use folder::load_folder;
pub use proxy::default_message;
pub use upstreams::expand;

use std::path::PathBuf;

use crate::protocol::Skill;
use crate::settings::Origin;

/// An example case from a mapping file, with where it came from.
#[derive(Debug, Clone)]
pub struct Example {
    pub skill: Skill,
    pub file: PathBuf,
    pub origin: Origin,
    pub case: file::FileExample,
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::engine::Handler;
    use crate::protocol::Skill;

    #[test]
    fn dealers_with_copies_of_one_mapping_compile_it_once() {
        let test = context::TestLoad::new();
        let cache = &test.cache;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let copy = tempfile::tempdir().expect("temp dir");
        for entry in std::fs::read_dir(root.join("mappings/demo-toyota")).expect("demo-toyota") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                let name = path.file_name().expect("file name");
                std::fs::copy(&path, copy.path().join(name)).expect("copy");
            }
        }
        let load =
            |dealer_id: &str, dir: &Path| load_folder(dir, &test.ctx(dealer_id)).expect("loads");
        let first = load("toyota_a", &root.join("mappings/demo-toyota"));
        let (programs, clients) = (cache.programs(), cache.clients());
        assert!(programs > 0 && clients > 0);
        let second = load("toyota_b", copy.path());
        assert_eq!(cache.programs(), programs, "no program compiled again");
        assert_eq!(cache.clients(), clients, "no HTTP client built again");
        // Each dealer still has its own `$dealer` and upstreams.
        let mapped = |m: &DealerMappings| match m.handlers.get(&Skill::InventorySearch) {
            Some(Handler::Proxy(mapped)) => Arc::clone(mapped),
            _ => panic!("a proxied search"),
        };
        let (a, b) = (mapped(&first), mapped(&second));
        assert!(Arc::ptr_eq(&a.request.templates, &b.request.templates));
        assert_ne!(a.shared.dealer_jq, b.shared.dealer_jq);
        assert!(!Arc::ptr_eq(&a.upstream, &b.upstream));
    }
}
