//! JSON Schemas of the configuration file and of each mapping file kind, for editors (completion
//! and checking while typing, through `# yaml-language-server: $schema=…`). Generated from the
//! very `File*` types the loader deserializes, doc comments becoming descriptions, so they
//! cannot drift from what `check` accepts; `docs/schemas/` holds them, and
//! `tests/ops_tools.rs` fails when a committed one differs from `aap-gateway schema`.
//!
//! Draft 7: the draft editors' YAML language servers support best. The schemas say what is
//! well-formed; `check` still does the rest (durations, URLs, templates, jq, references).

use indexmap::IndexMap;
use serde_json::Value;

use crate::mapping::file::{FileCommon, FileFeed, FileSkill};
use crate::settings::file::FileConfig;
use crate::upstream::config::FileUpstream;

/// A file the gateway reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Config,
    Upstreams,
    Common,
    Feed,
    Skill,
}

impl FileKind {
    pub const ALL: [FileKind; 5] = [
        FileKind::Config,
        FileKind::Upstreams,
        FileKind::Common,
        FileKind::Feed,
        FileKind::Skill,
    ];

    /// The schema's file name in `docs/schemas/`.
    pub fn file_name(self) -> &'static str {
        match self {
            FileKind::Config => "config.schema.json",
            FileKind::Upstreams => "upstreams.schema.json",
            FileKind::Common => "common.schema.json",
            FileKind::Feed => "feed.schema.json",
            FileKind::Skill => "skill.schema.json",
        }
    }

    /// Which schema a YAML file takes, by its name: a mapping folder's fixed names, a skill
    /// file, else a configuration file.
    pub fn of_file(name: &str) -> FileKind {
        match name {
            "upstreams.yaml" => FileKind::Upstreams,
            "common.yaml" => FileKind::Common,
            "feed.yaml" => FileKind::Feed,
            n if crate::protocol::Skill::from_id(n.trim_end_matches(".yaml")).is_some() => {
                FileKind::Skill
            }
            _ => FileKind::Config,
        }
    }
}

/// The schema of `kind`, as pretty JSON with a final newline.
pub fn schema(kind: FileKind) -> String {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let (root, description) = match kind {
        FileKind::Config => (
            generator.into_root_schema_for::<FileConfig>(),
            "The gateway's configuration file (config/gateway.example.yaml documents every key).",
        ),
        FileKind::Upstreams => (
            generator.into_root_schema_for::<IndexMap<String, FileUpstream>>(),
            "A mapping folder's upstreams.yaml: the dealer systems, by name (docs/mappings.md \
             §upstreams.yaml).",
        ),
        FileKind::Common => (
            generator.into_root_schema_for::<FileCommon>(),
            "A mapping folder's common.yaml: tables and jq definitions shared by its files.",
        ),
        FileKind::Feed => (
            generator.into_root_schema_for::<FileFeed>(),
            "A mapping folder's feed.yaml: how the whole-inventory feed is fetched and mapped.",
        ),
        FileKind::Skill => (
            generator.into_root_schema_for::<FileSkill>(),
            "A mapping folder's <skill>.yaml: how one AAP skill is answered (docs/mappings.md \
             §A skill file).",
        ),
    };
    let mut value = root.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("description".to_owned(), Value::from(description));
        if kind == FileKind::Upstreams {
            obj.insert("title".to_owned(), Value::from("upstreams.yaml"));
        }
    }
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_schema_has_exactly_the_keys_the_loader_reads() {
        let schema: Value = serde_json::from_str(&schema(FileKind::Config)).unwrap();
        let keys: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, crate::settings::TOP_LEVEL_KEYS);
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn files_take_the_schema_of_their_kind() {
        assert_eq!(FileKind::of_file("inventory.search.yaml"), FileKind::Skill);
        assert_eq!(FileKind::of_file("upstreams.yaml"), FileKind::Upstreams);
        assert_eq!(FileKind::of_file("gateway.yaml"), FileKind::Config);
    }
}
