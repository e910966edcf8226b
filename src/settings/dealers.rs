//! `dealers` (and the top-level `provider`): each dealer's routing, card and mapping folder,
//! and the overlaps that would make routing ambiguous.

use super::file::{FileCard, FileDealer, FileProvider};
use super::load::{ConfigLoader, is_nil};
use super::paths::{check_interface_url, is_absolute_url, is_clean_path, resolve};
use super::types::DealerSettings;
use crate::protocol::agent_card::{CardSettings, Provider};

impl ConfigLoader {
    pub(super) fn provider(&mut self, pointer: &str, file: FileProvider) -> Option<Provider> {
        if !is_absolute_url(&file.url) {
            self.problem(
                &format!("{pointer}/url"),
                format!("`{}` is not an absolute URL", file.url),
            );
            return None;
        }
        Some(Provider {
            organization: file.organization,
            url: file.url,
        })
    }

    pub(super) fn dealers(&mut self, value: Option<config::Value>) -> Option<Vec<DealerSettings>> {
        let Some(value) = value.filter(|v| !is_nil(v)) else {
            self.problem("", "no `dealers` configured; list at least one dealer");
            return None;
        };
        let items = self.section::<Vec<config::Value>>("/dealers", value)?;
        if items.is_empty() {
            self.problem("/dealers", "list at least one dealer");
            return None;
        }
        let mut dealers = Vec::with_capacity(items.len());
        let mut complete = true;
        for (i, item) in items.into_iter().enumerate() {
            let pointer = format!("/dealers/{i}");
            match self
                .section::<FileDealer>(&pointer, item)
                .and_then(|d| self.dealer(&pointer, d))
            {
                Some(d) => dealers.push(d),
                None => complete = false,
            }
        }
        self.check_dealer_overlaps(&dealers);
        complete.then_some(dealers)
    }

    fn dealer(&mut self, pointer: &str, file: FileDealer) -> Option<DealerSettings> {
        let mut ok = true;
        if file.id.is_empty()
            || !file
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.problem(
                &format!("{pointer}/id"),
                format!("`{}` must be letters, digits, `_` or `-`", file.id),
            );
            ok = false;
        }
        let mut hosts = Vec::with_capacity(file.hosts.len());
        for (i, host) in file.hosts.iter().enumerate() {
            let h = host.trim().to_ascii_lowercase();
            if h.is_empty() || h.contains(['/', ':', ' ']) && !h.starts_with('[') {
                self.problem(
                    &format!("{pointer}/hosts/{i}"),
                    format!("`{host}` must be a bare host name such as dealer.example.com"),
                );
                ok = false;
            }
            hosts.push(h);
        }
        let path_prefix = match file.path_prefix.as_deref() {
            None => String::new(),
            Some(p) if is_clean_path(p) && p != "/" => p.to_owned(),
            Some(p) => {
                self.problem(
                    &format!("{pointer}/path_prefix"),
                    format!(
                        "`{p}` must look like /dealers/my-dealer (leading `/`, no trailing `/`)"
                    ),
                );
                ok = false;
                String::new()
            }
        };
        let card = self.card(&format!("{pointer}/card"), file.card);
        if let Some(profile) = &file.profile
            && !profile.is_object()
        {
            self.problem(
                &format!("{pointer}/profile"),
                "must be a mapping (AAP DealerInformation)",
            );
            ok = false;
        }
        let card = card?;
        ok.then(|| DealerSettings {
            id: file.id,
            hosts,
            path_prefix,
            card,
            profile: file.profile,
            mappings: file.mappings.map(|m| resolve(self.source.path(), &m)),
            pointer: pointer.to_owned(),
        })
    }

    fn card(&mut self, pointer: &str, file: FileCard) -> Option<CardSettings> {
        let mut ok = true;
        for (key, value) in [("name", &file.name), ("description", &file.description)] {
            if value.trim().is_empty() {
                self.problem(
                    &format!("{pointer}/{key}"),
                    format!("`{key}` must not be empty"),
                );
                ok = false;
            }
        }
        match &file.url {
            Some(url) => {
                if let Err(message) = check_interface_url(url) {
                    self.problem(&format!("{pointer}/url"), message);
                    ok = false;
                }
            }
            None => self.warn(
                pointer,
                "card.url is not set; the card advertises the listen address, which is right only \
                 for local development",
            ),
        }
        for (key, value) in [
            ("documentation_url", &file.documentation_url),
            ("icon_url", &file.icon_url),
        ] {
            if let Some(v) = value
                && !is_absolute_url(v)
            {
                self.problem(
                    &format!("{pointer}/{key}"),
                    format!("`{v}` is not an absolute URL"),
                );
                ok = false;
            }
        }
        let provider = match file.provider {
            Some(p) => match self.provider(&format!("{pointer}/provider"), p) {
                Some(p) => Some(p),
                None => return None,
            },
            None => None,
        };
        ok.then_some(CardSettings {
            name: file.name,
            description: file.description,
            url: file.url,
            version: file.version,
            documentation_url: file.documentation_url,
            icon_url: file.icon_url,
            provider,
        })
    }

    /// Two dealers that would both claim the same request make routing ambiguous.
    fn check_dealer_overlaps(&mut self, dealers: &[DealerSettings]) {
        for (i, a) in dealers.iter().enumerate() {
            for b in &dealers[..i] {
                if a.id == b.id {
                    self.problem(
                        &format!("{}/id", a.pointer),
                        format!("duplicate dealer id `{}`", a.id),
                    );
                    continue;
                }
                let same_prefix = a.path_prefix == b.path_prefix;
                let hosts_overlap = (a.hosts.is_empty() && b.hosts.is_empty())
                    || a.hosts.iter().any(|h| b.hosts.contains(h));
                if same_prefix && hosts_overlap {
                    self.problem(
                        &a.pointer,
                        format!(
                            "dealer `{}` claims the same hosts and path prefix as `{}`; give one a \
                             distinct `hosts` entry or `path_prefix`",
                            a.id, b.id
                        ),
                    );
                }
            }
        }
    }
}
