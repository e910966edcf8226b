//! `auth`: which skills need an API key, and the keys (inline and from `keys_file`).

use super::file::{FileApiKey, FileAuth, FileKeysFile};
use super::load::ConfigLoader;
use super::paths::resolve;
use super::types::{ApiKey, AuthSettings};
use super::yaml;

impl ConfigLoader {
    pub(super) fn auth(&mut self, file: FileAuth) -> Option<Option<AuthSettings>> {
        let needs_key = |this: &mut ConfigLoader, pointer: &str, mode: &str| match mode {
            "none" => Some(false),
            "api_key" => Some(true),
            other => {
                this.problem(pointer, format!("`{other}` is not one of none, api_key"));
                None
            }
        };
        let default = needs_key(self, "/auth/mode", &file.mode);
        let mut public_skills = std::collections::BTreeSet::new();
        let mut complete = default.is_some();
        for skill in crate::protocol::Skill::ALL {
            if default == Some(false) && !file.skills.contains_key(skill.id()) {
                public_skills.insert(skill);
            }
        }
        for (name, mode) in &file.skills {
            let pointer = yaml::push_pointer("/auth/skills", name);
            let Some(skill) = crate::protocol::Skill::from_id(name) else {
                self.problem(
                    &pointer,
                    format!(
                        "`{name}` is not an AAP skill; use one of {}",
                        crate::protocol::Skill::ids()
                    ),
                );
                complete = false;
                continue;
            };
            match needs_key(self, &pointer, mode) {
                Some(false) => {
                    public_skills.insert(skill);
                }
                Some(true) => {}
                None => complete = false,
            }
        }
        if !complete {
            return None;
        }
        if public_skills.len() == crate::protocol::Skill::ALL.len() {
            if !file.keys.is_empty() || file.keys_file.is_some() {
                self.warn(
                    "/auth/mode",
                    "keys are configured but no skill needs one (`mode: none` and no \
                     `skills` entry on api_key): calls are not authenticated",
                );
            }
            return Some(None);
        }
        let mut keys = Vec::new();
        for (i, key) in file.keys.iter().enumerate() {
            if let Some(k) = self.api_key(&format!("/auth/keys/{i}"), key) {
                keys.push(k);
            }
        }
        let keys_file = file
            .keys_file
            .as_ref()
            .map(|path| resolve(self.source.path(), path));
        if let Some(resolved) = &keys_file {
            let resolved = resolved.clone();
            let parsed = std::fs::read_to_string(&resolved)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    yaml::parse(&resolved, &text)
                        .map_err(|p| p.to_string())
                        .and_then(|(value, _)| {
                            serde_json::from_value::<FileKeysFile>(value).map_err(|e| e.to_string())
                        })
                });
            match parsed {
                Ok(file) => {
                    for (i, key) in file.keys.iter().enumerate() {
                        if let Some(k) = self.api_key(&format!("/auth/keys_file#{i}"), key) {
                            keys.push(k);
                        }
                    }
                }
                Err(e) => self.problem(
                    "/auth/keys_file",
                    format!("cannot read {}: {e}", resolved.display()),
                ),
            }
        }
        if keys.is_empty() {
            self.problem(
                "/auth",
                "skills that need an API key (`mode` or `skills` on api_key) need at least one \
                 key (`keys` or `keys_file`)",
            );
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        for key in &keys {
            if !seen.insert(key.id.clone()) {
                self.problem("/auth/keys", format!("key id `{}` is used twice", key.id));
            }
        }
        Some(Some(AuthSettings {
            public_skills,
            keys,
            keys_file,
        }))
    }

    fn api_key(&mut self, pointer: &str, file: &FileApiKey) -> Option<ApiKey> {
        let mut ok = true;
        if file.id.is_empty()
            || !file
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            self.problem(
                &format!("{pointer}/id"),
                "must be letters, digits, `-`, `_` or `.`",
            );
            ok = false;
        }
        let hex = file.sha256.trim().to_ascii_lowercase();
        let mut sha256 = [0u8; 32];
        let valid_hex = hex.len() == 64
            && (0..32).all(|i| {
                u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map(|b| sha256[i] = b)
                    .is_ok()
            });
        if !valid_hex {
            self.problem(
                &format!("{pointer}/sha256"),
                "must be the 64 hex digits of the key's SHA-256 (printf %s \"$KEY\" | sha256sum)",
            );
            ok = false;
        }
        let quota = match &file.quota {
            Some(q) => Some(self.quota(&format!("{pointer}/quota"), q)?),
            None => None,
        };
        ok.then(|| ApiKey {
            id: file.id.clone(),
            sha256,
            dealers: file.dealers.clone(),
            quota,
        })
    }
}
