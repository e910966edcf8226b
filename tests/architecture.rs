//! The module graph of `src/` has no cycles (docs/architecture.md §Invariants): a module never
//! imports, directly or through others, a module that imports it. Read from the source: every
//! `crate::…`, `super::…` and `self::…` path outside comments and test modules names the
//! deepest module file it reaches; a module's own submodules and parents do not count.

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
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read module");
            out.insert(parts.join("::"), text);
        }
    }
    out
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

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let modules = modules();
    assert!(modules.contains_key("lang::jq::plan"), "src/ was read");
    let mut deps: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in &modules {
        let named = named_paths(name, &code(text));
        let targets = named
            .iter()
            .filter_map(|p| module_of(p, &modules))
            .filter(|t| !related(name, t))
            .collect();
        deps.insert(name, targets);
    }
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
        "mapping",
        "mapping::template",
        "mapping::request",
        "upstream",
    ]
    .into_iter()
    .map(|m| (m.to_owned(), String::new()))
    .collect();
    let code = "use super::template::{Context, Templates};\nuse crate::upstream::{self, Upstream};\nlet x = crate::app::App::new();";
    let reached: BTreeSet<String> = named_paths("mapping::request", code)
        .iter()
        .filter_map(|p| module_of(p, &known))
        .collect();
    let expected: BTreeSet<String> = ["mapping::template", "upstream", "app"]
        .map(str::to_owned)
        .into();
    assert_eq!(reached, expected);
}
