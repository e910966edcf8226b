//! The layers of `src/` as docs/architecture.md §Layers declares them, held against the code:
//!
//! - each top-level folder (or file) of `src/` imports only the folders declared below it, and
//!   the few rules that are narrower than the order (the upstream client knows nothing of AAP,
//!   `formats` nothing of the crate) hold;
//! - the module graph has no cycles: a module never imports, directly or through others, a
//!   module that imports it.
//!
//! Read from the source: every `crate::…`, `super::…` and `self::…` path outside comments and
//! test code names the deepest module file it reaches; a module's own submodules and parents do
//! not count. Test code (inline `mod tests`, `tests.rs` files and `tests/` folders) may reach
//! anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`lang::jq::plan`) → file text, for every file under `src/` except the
/// crate roots.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&root).expect("under src");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] || is_test_code(&parts) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read module");
            out.insert(parts.join("::"), text);
        }
    }
    out
}

/// A file that only tests compile: `tests.rs`, `*_tests.rs`, anything under a `tests/` folder.
fn is_test_code(parts: &[String]) -> bool {
    parts.iter().any(|p| p == "tests" || p.ends_with("_tests"))
}

/// The code of a module file without comments and without its `#[cfg(test)] mod tests`.
fn code(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path the code names from `crate`, `super` or `self`, as segments after the keyword(s)
/// resolved against `module`; `use x::{a, b::c}` counts as `x::a` and `x::b::c`.
fn named_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .any(|k| rest.starts_with(k));
        let boundary = i == 0 || !ident(bytes[i - 1] as char);
        if !(starts && boundary) {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        // Read `a::b::c` and a following `{…}` group.
        let end = rest
            .find(|c: char| !(ident(c) || c == ':'))
            .unwrap_or(rest.len());
        let head: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        // `crate` is the root, `self` this module, each `super` one level up (whatever the
        // file layout).
        let mut base: Vec<String> = module.split("::").map(str::to_owned).collect();
        let mut segments = Vec::new();
        for (n, s) in head.iter().enumerate() {
            match *s {
                "crate" if n == 0 => base.clear(),
                "self" if n == 0 => {}
                "super" if segments.is_empty() => {
                    base.pop();
                }
                _ => segments.push((*s).to_owned()),
            }
        }
        let group = rest[end..]
            .strip_prefix('{')
            .and_then(|g| g.split_once('}'));
        match group {
            Some((items, _)) => {
                for item in items.split(',') {
                    let item: Vec<String> = item
                        .trim()
                        .split("::")
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty() && s != "self")
                        .collect();
                    out.push(base.iter().chain(&segments).chain(&item).cloned().collect());
                }
            }
            None => out.push(base.iter().cloned().chain(segments).collect()),
        }
        i += end.max(1);
    }
    out
}

/// The deepest known module a path reaches.
fn module_of(path: &[String], known: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains_key(m))
}

fn related(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

/// Each module and the modules its code reaches (itself, its parents and children left out).
fn dependencies(modules: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<String>> {
    let mut deps: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in modules {
        let named = named_paths(name, &code(text));
        let targets = named
            .iter()
            .filter_map(|p| module_of(p, modules))
            .filter(|t| !related(name, t))
            .collect();
        deps.insert(name, targets);
    }
    deps
}

/// The layers, top first: a folder (or file) of `src/` may import the ones in the layers below
/// its own, never one above it nor a sibling of its own layer. docs/architecture.md §Layers
/// says what each is.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["tools"],
    &["demo"],
    &["server"],
    &["binding"],
    &["pipeline"],
    &["app"],
    &["mapping"],
    &["engine"],
    &["inventory", "lang"],
    &["auth", "consent", "idempotency", "rate_limit", "router"],
    &["redis_backend", "upstream"],
    &["schema", "telemetry"],
    &["settings"],
    &["protocol"],
    &["error", "formats"],
];

/// Narrower than the order: (folder, what it must never import, why).
const NEVER: &[(&str, &[&str], &str)] = &[
    (
        "upstream",
        &["error", "protocol", "schema"],
        "the upstream client speaks HTTP, SOAP and SMTP, never AAP: its failures are \
         `UpstreamError`, turned into `AapError` by `engine`",
    ),
    (
        "formats",
        &["error", "protocol"],
        "formats is the floor both the engine and the upstream client stand on",
    ),
];

fn layer(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

#[test]
fn every_folder_imports_only_the_layers_below_it() {
    let modules = modules();
    assert!(modules.contains_key("lang::jq::plan"), "src/ was read");
    let mut undeclared: BTreeSet<String> = BTreeSet::new();
    let mut broken = Vec::new();
    for (module, targets) in dependencies(&modules) {
        let from = top(module);
        let Some(own) = layer(from) else {
            undeclared.insert(from.to_owned());
            continue;
        };
        for target in &targets {
            let to = top(target);
            if to == from {
                continue;
            }
            match layer(to) {
                None => {
                    undeclared.insert(to.to_owned());
                }
                Some(below) if below > own => {}
                Some(_) => broken.push(format!(
                    "{module} imports {target}: `{to}` is not below `{from}`"
                )),
            }
            if let Some((_, never, why)) = NEVER.iter().find(|(f, ..)| *f == from)
                && never.contains(&to)
            {
                broken.push(format!("{module} imports {target}: {why}"));
            }
        }
    }
    assert!(
        undeclared.is_empty(),
        "folders of src/ that LAYERS does not place (add them, and to docs/architecture.md): \
         {undeclared:?}"
    );
    assert!(
        broken.is_empty(),
        "layer rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let modules = modules();
    assert!(modules.contains_key("lang::jq::plan"), "src/ was read");
    let deps = dependencies(&modules);
    // A cycle exists when some module reaches itself; report each with its path.
    let mut cycles = Vec::new();
    for start in deps.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(start.to_string(), vec![start.to_string()])];
        while let Some((at, path)) = stack.pop() {
            for next in deps.get(at.as_str()).into_iter().flatten() {
                if next == start {
                    cycles.push(path.join(" → ") + " → " + start);
                } else if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_reader_sees_crate_super_and_grouped_imports() {
    let known: BTreeMap<String, String> = [
        "app",
        "engine",
        "engine::template",
        "engine::request",
        "upstream",
    ]
    .into_iter()
    .map(|m| (m.to_owned(), String::new()))
    .collect();
    let code = "use super::template::{Context, Templates};\nuse crate::upstream::{self, Upstream};\nlet x = crate::app::App::new();";
    let reached: BTreeSet<String> = named_paths("engine::request", code)
        .iter()
        .filter_map(|p| module_of(p, &known))
        .collect();
    let expected: BTreeSet<String> = ["engine::template", "upstream", "app"]
        .map(str::to_owned)
        .into();
    assert_eq!(reached, expected);
}
