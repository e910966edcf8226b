//! The folder walk: which file is what, in dependency order, and each skill file to its handler
//! (static, derived, feed, lead or proxy).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::Handler;
use crate::engine::feed::Feed;
use crate::engine::proxy::{IDENTIFIERS, ProxyMapping, ScannedVehicle};
use crate::mapping::Example;
use crate::mapping::file::{FileCommon, FileMode, FileSkill};
use crate::protocol::Skill;
use crate::settings::yaml::{Origin, Problem};
use crate::upstream::Upstream;

use super::context::{Carried, DealerMappings, LoadContext, Upstreams};
use super::loader::{MappingLoader, Source};

/// Loads `dir`. Every problem is collected before returning.
pub fn load_folder(dir: &Path, ctx: &LoadContext<'_>) -> Result<DealerMappings, Vec<Problem>> {
    let mut loader = MappingLoader {
        ctx,
        dir: dir.to_path_buf(),
        problems: Vec::new(),
        notes: Vec::new(),
        carried: Carried::default(),
    };
    let mut out = loader.load();
    if loader.problems.is_empty() {
        crate::settings::sort_problems(&mut loader.notes);
        out.notes = loader.notes;
        out.carried = loader.carried;
        Ok(out)
    } else {
        crate::settings::sort_problems(&mut loader.problems);
        Err(loader.problems)
    }
}

impl MappingLoader<'_> {
    fn load(&mut self) -> DealerMappings {
        let mut out = DealerMappings::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                self.problems.push(Problem {
                    origin: Origin::WholeFile {
                        path: self.dir.clone(),
                    },
                    message: format!("cannot read the mappings folder: {e}"),
                });
                return out;
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_file())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
            .collect();
        names.sort();

        let upstreams = if names.iter().any(|n| n == "upstreams.yaml") {
            self.upstreams()
        } else {
            HashMap::new()
        };
        let common = if names.iter().any(|n| n == "common.yaml") {
            self.read("common.yaml").and_then(|src| {
                let value = src.value.clone();
                self.deserialize::<FileCommon>(&src, "", value)
                    .map(|c| (src, c))
            })
        } else {
            None
        };
        let (common_src, common) = match common {
            Some((s, c)) => (Some(s), c),
            None => (None, FileCommon::default()),
        };
        if let (Some(defs), Some(src)) = (&common.jq_defs, &common_src) {
            // Compile the definitions alone once, so their errors point into common.yaml.
            if let Err(e) = self.ctx.cache.jq(&format!("{defs}\n.")) {
                self.problems.push(src.inner(
                    "/jq_defs",
                    e.line,
                    e.col,
                    format!("jq: {}", e.message),
                ));
            }
        }
        let feed = if names.iter().any(|n| n == "feed.yaml") {
            self.feed(&upstreams, &common, common_src.as_ref())
        } else {
            None
        };
        if let Some(f) = &feed {
            out.feeds.push(Arc::clone(f));
        }

        // Skills in dependency order: derived facets need the search mapping.
        let mut skill_files: Vec<(Skill, Source, FileSkill)> = Vec::new();
        for name in &names {
            if matches!(
                name.as_str(),
                "upstreams.yaml" | "common.yaml" | "feed.yaml"
            ) {
                continue;
            }
            let Some(src) = self.read(name) else { continue };
            let value = src.value.clone();
            let Some(file) = self.deserialize::<FileSkill>(&src, "", value) else {
                continue;
            };
            let stem = name.trim_end_matches(".yaml").trim_end_matches(".yml");
            let Some(skill) = Skill::from_id(&file.skill) else {
                self.problems.push(src.problem(
                    "/skill",
                    format!(
                        "`{}` is not an AAP skill; use one of {}",
                        file.skill,
                        Skill::ids()
                    ),
                ));
                continue;
            };
            if stem != skill.id() {
                self.problems.push(src.problem(
                    "/skill",
                    format!(
                        "file `{name}` serves `{}`; name it `{}.yaml`",
                        skill.id(),
                        skill.id()
                    ),
                ));
                continue;
            }
            skill_files.push((skill, src, file));
        }
        skill_files.sort_by_key(|(s, _, f)| (f.derive.is_some(), *s));
        let mut mapped: HashMap<Skill, Arc<ProxyMapping>> = HashMap::new();
        for (skill, src, file) in skill_files {
            if let Some(why) = &file.unsupported {
                let mapped = file.upstream.is_some()
                    || file.request.is_some()
                    || file.response.is_some()
                    || file.static_data.is_some()
                    || file.derive.is_some()
                    || file.mode == FileMode::Feed;
                if mapped {
                    self.problems.push(src.problem(
                        "/unsupported",
                        "`unsupported` next to a mapping: remove `unsupported` to serve the skill",
                    ));
                } else {
                    self.notes.push(src.problem(
                        "/unsupported",
                        format!("{skill} is not mapped yet and answers UNSUPPORTED_SKILL: {why}"),
                    ));
                }
                continue;
            }
            let examples = file.examples.clone();
            if let Some(handler) = self.skill(
                skill,
                &src,
                file,
                &upstreams,
                &common,
                feed.as_ref(),
                &mapped,
            ) {
                if let Handler::Proxy(m) = &handler {
                    mapped.insert(skill, Arc::clone(m));
                }
                for (i, example) in examples.into_iter().enumerate() {
                    out.examples.push(Example {
                        skill,
                        file: src.path.clone(),
                        origin: src.map.origin(&format!("/examples/{i}")),
                        case: example,
                    });
                }
                out.handlers.insert(skill, handler);
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn skill(
        &mut self,
        skill: Skill,
        src: &Source,
        file: FileSkill,
        upstreams: &Upstreams,
        common: &FileCommon,
        feed: Option<&Arc<Feed>>,
        mapped: &HashMap<Skill, Arc<ProxyMapping>>,
    ) -> Option<Handler> {
        if let Some(data) = file.static_data {
            return self.static_reply(skill, src, data);
        }
        if file.takes.is_some() && skill != Skill::InventoryVehicle {
            self.problems.push(src.problem(
                "/takes",
                "only `inventory.vehicle` takes `takes` (the identifiers its detail call takes)",
            ));
        }
        if let Some(derive) = &file.derive {
            let derivable = matches!(skill, Skill::InventoryFacets | Skill::InventoryVehicle);
            if !derivable || derive != "search" {
                self.problems.push(src.problem(
                    "/derive",
                    "only `inventory.facets` and `inventory.vehicle` can `derive: search`",
                ));
                return None;
            }
            return match mapped.get(&Skill::InventorySearch) {
                Some(search) if skill == Skill::InventoryVehicle => {
                    self.notes.push(scan_note(src, "/derive", search, "every"));
                    Some(Handler::ScannedVehicle(Arc::new(ScannedVehicle {
                        detail: None,
                        takes: Vec::new(),
                        search: Arc::clone(search),
                    })))
                }
                Some(search) => Some(Handler::DerivedFacets(Arc::clone(search))),
                None if file.mode == FileMode::Feed
                    || feed.is_some() && self.dir.join("inventory.search.yaml").exists() =>
                {
                    feed.map(|f| Handler::Feed {
                        skill,
                        feed: Arc::clone(f),
                    })
                }
                None => {
                    self.problems.push(src.problem("/derive", "`derive: search` needs a proxy-mode inventory.search.yaml in the same folder"));
                    None
                }
            };
        }
        if file.mode == FileMode::Feed {
            if !matches!(
                skill,
                Skill::InventorySearch | Skill::InventoryFacets | Skill::InventoryVehicle
            ) {
                self.problems.push(src.problem(
                    "/mode",
                    format!("`{skill}` cannot be served from an inventory feed"),
                ));
                return None;
            }
            return match feed {
                Some(f) => Some(Handler::Feed {
                    skill,
                    feed: Arc::clone(f),
                }),
                // A feed.yaml that exists but failed to load has said why already.
                None if self.dir.join("feed.yaml").exists() => None,
                None => {
                    self.problems.push(
                        src.problem("/mode", "mode `feed` needs a feed.yaml in the same folder"),
                    );
                    None
                }
            };
        }
        if skill == Skill::LeadSubmit {
            return self.lead(src, file, upstreams, common);
        }
        if file.lead.is_some() || file.mail.is_some() {
            self.problems.push(src.problem(
                if file.lead.is_some() {
                    "/lead"
                } else {
                    "/mail"
                },
                "only lead.submit takes `lead` and `mail`",
            ));
        }
        let takes = self.takes(src, file.takes.as_deref());
        let upstream = self.proxy_upstream(src, &file, upstreams);
        let detail = self
            .proxy(skill, src, file, upstream, common)?
            .into_shared();
        match takes? {
            Some(takes) if skill == Skill::InventoryVehicle => {
                let Some(search) = mapped.get(&Skill::InventorySearch) else {
                    self.problems.push(src.problem(
                        "/takes",
                        "a unit asked for by an identifier the detail call does not take is \
                         found in the search mapping's scan: this needs a proxy-mode \
                         inventory.search.yaml in the same folder",
                    ));
                    return None;
                };
                let others: Vec<&str> = IDENTIFIERS
                    .iter()
                    .copied()
                    .filter(|k| !takes.contains(k))
                    .collect();
                self.notes
                    .push(scan_note(src, "/takes", search, &others.join(" or ")));
                Some(Handler::ScannedVehicle(Arc::new(ScannedVehicle {
                    detail: Some(detail),
                    takes,
                    search: Arc::clone(search),
                })))
            }
            _ => Some(Handler::Proxy(detail)),
        }
    }

    /// `takes`: identifiers of `inventory.vehicle.request`; `Some(None)` when unset or all.
    fn takes(
        &mut self,
        src: &Source,
        declared: Option<&[String]>,
    ) -> Option<Option<Vec<&'static str>>> {
        let Some(declared) = declared else {
            return Some(None);
        };
        let mut takes = Vec::new();
        let mut ok = true;
        for (i, name) in declared.iter().enumerate() {
            match IDENTIFIERS.iter().find(|k| **k == name) {
                Some(k) => takes.push(*k),
                None => {
                    self.problems.push(src.problem(
                        &format!("/takes/{i}"),
                        format!("`{name}` is not an identifier of inventory.vehicle; use vin, stock or vehicle_id"),
                    ));
                    ok = false;
                }
            }
        }
        if takes.is_empty() && ok {
            self.problems.push(src.problem(
                "/takes",
                "`takes: []` means the detail call takes no identifier: use `derive: search` \
                 to answer from the search mapping's listings instead",
            ));
            ok = false;
        }
        ok.then_some(())?;
        Some((takes.len() < IDENTIFIERS.len()).then_some(takes))
    }

    fn proxy_upstream(
        &mut self,
        src: &Source,
        file: &FileSkill,
        upstreams: &Upstreams,
    ) -> Option<Arc<Upstream>> {
        match &file.upstream {
            Some(name) => self.upstream_ref(src, "/upstream", name, upstreams),
            None => {
                self.problems.push(src.problem(
                    "",
                    "a proxy-mode mapping needs `upstream` (or `static`, `derive`, `mode: feed`)",
                ));
                None
            }
        }
    }

    fn static_reply(&mut self, skill: Skill, src: &Source, data: Value) -> Option<Handler> {
        let handler = Handler::fixed(skill, data);
        let payload = handler.fixed_payload()?;
        let violations = self.ctx.schemas.check_response(skill, payload);
        for v in &violations {
            let at = v
                .instance_location
                .strip_prefix("/data")
                .unwrap_or(&v.instance_location);
            self.problems.push(src.problem(
                &format!("/static{at}"),
                format!("{}: {}", v.keyword, v.error),
            ));
        }
        violations.is_empty().then_some(handler)
    }
}

/// What answering `inventory.vehicle` from the search mapping's scan costs, for `check`.
fn scan_note(src: &Source, pointer: &str, search: &ProxyMapping, identifiers: &str) -> Problem {
    src.problem(
        pointer,
        format!(
            "a vehicle asked for by {identifiers} is found in a scan of every listing of \
             inventory.search ({}): up to {} records walked page by page on a `scan_cache` miss \
             ({:?}), refused if the scan cannot be whole; a unit listed as sold or held answers \
             VEHICLE_UNAVAILABLE",
            search.file,
            search.scan_limit,
            search.scan_cache.ttl(),
        ),
    )
}
