//! `lead.submit.yaml`: the lead policy, and delivery over HTTP (a proxy mapping) or by mail.

use std::sync::Arc;

use crate::engine::Handler;
use serde_json::Value;

use crate::engine::lead::verdict::Verdict;
use crate::engine::lead::{Destination, LeadMapping, LeadPolicy, MailDelivery};
use crate::engine::proxy::NotProcessed;
use crate::lang::template::{Context, Templates};
use crate::mapping::file::{FileCommon, FileLead, FileMode, FileSkill, FileVerdict};
use crate::protocol::Skill;
use crate::upstream::{Mailer, Upstream};

use super::context::{Target, Upstreams};
use super::loader::{MappingLoader, Source};

impl MappingLoader<'_> {
    /// `lead.submit.yaml`: the policy, then delivery over HTTP (the mapping engine) or by mail.
    pub(super) fn lead(
        &mut self,
        src: &Source,
        file: FileSkill,
        upstreams: &Upstreams,
        common: &FileCommon,
    ) -> Option<Handler> {
        let policy = self.lead_policy(src, file.lead.as_ref());
        if file.mode == FileMode::Feed {
            self.problems
                .push(src.problem("/mode", "`lead.submit` cannot be served from a feed"));
            return None;
        }
        let Some(name) = &file.upstream else {
            self.problems.push(src.problem(
                "",
                "lead.submit needs `upstream` (the CRM: a rest, soap or smtp upstream)",
            ));
            return None;
        };
        let target = self.target_ref(src, "/upstream", name, upstreams);
        let path = src.path.display().to_string();
        match target {
            Some(Target::Smtp(mailer)) => {
                if file
                    .lead
                    .as_ref()
                    .is_some_and(|l| l.not_processed.is_some())
                {
                    self.problems.push(src.problem(
                        "/lead/not_processed",
                        "`not_processed` is for HTTP delivery; a mail server's refusal is \
                         always certain",
                    ));
                }
                if file.lead.as_ref().is_some_and(|l| l.verdict.is_some()) {
                    self.problems.push(src.problem(
                        "/lead/verdict",
                        "`verdict` follows a CRM's ticket over HTTP; a mail server gives none",
                    ));
                }
                let delivery = self.mail_delivery(src, &file, mailer, common);
                Some(Handler::Lead(Arc::new(LeadMapping {
                    file: path,
                    policy: policy?,
                    destination: delivery?,
                    verdict: None,
                })))
            }
            Some(Target::Http(upstream)) => {
                if file.mail.is_some() {
                    self.problems.push(src.problem(
                        "/mail",
                        format!("`{name}` is not an SMTP upstream; `mail` is for e-mail delivery"),
                    ));
                }
                let not_processed = self.not_processed(src, file.lead.as_ref());
                let verdict = match file.lead.as_ref().and_then(|l| l.verdict.as_ref()) {
                    Some(declared) => self.verdict(src, declared, &upstream, common).map(Some),
                    None => Some(None),
                };
                let mapped = self
                    .proxy(Skill::LeadSubmit, src, file, Some(upstream), common)
                    .map(|mut mapped| {
                        mapped.not_processed = not_processed;
                        mapped
                    });
                Some(Handler::Lead(Arc::new(LeadMapping {
                    file: path,
                    policy: policy?,
                    destination: Destination::Http(mapped?.into_shared()),
                    verdict: verdict?,
                })))
            }
            None => {
                // Still compile an HTTP delivery so every problem of the file is reported at once.
                if file.request.is_some() {
                    let _ = self.proxy(Skill::LeadSubmit, src, file, None, common);
                }
                None
            }
        }
    }

    fn lead_policy(&mut self, src: &Source, file: Option<&FileLead>) -> Option<LeadPolicy> {
        let default = FileLead {
            follow_up_channels: Vec::new(),
            timezone: "UTC".to_owned(),
            check_vehicle: false,
            test_drive_needs_vehicle: false,
            dealer_phone: None,
            not_processed: None,
            verdict: None,
        };
        let file = file.unwrap_or(&default);
        let mut ok = true;
        for (i, channel) in file.follow_up_channels.iter().enumerate() {
            if !crate::consent::CHANNELS.contains(&channel.as_str()) {
                self.problems.push(src.problem(
                    &format!("/lead/follow_up_channels/{i}"),
                    format!("`{channel}` is not a channel; expected email, phone or sms"),
                ));
                ok = false;
            }
        }
        let timezone = match jiff::tz::TimeZone::get(&file.timezone) {
            Ok(tz) => Some(tz),
            Err(_) => {
                self.problems.push(src.problem(
                    "/lead/timezone",
                    format!(
                        "`{}` is not an IANA time zone like America/Los_Angeles",
                        file.timezone
                    ),
                ));
                None
            }
        };
        if let Some(phone) = &file.dealer_phone
            && !is_e164(phone)
        {
            self.problems.push(src.problem(
                "/lead/dealer_phone",
                format!("`{phone}` is not an E.164 number like +14155550100"),
            ));
            ok = false;
        }
        ok.then_some(())?;
        Some(LeadPolicy {
            follow_up: file.follow_up_channels.clone(),
            timezone: timezone?,
            check_vehicle: file.check_vehicle,
            test_drive_needs_vehicle: file.test_drive_needs_vehicle,
            dealer_phone: file.dealer_phone.clone(),
            dealer_name: self.ctx.dealer_name.to_owned(),
            dealer_id: self.ctx.dealer_id.to_owned(),
        })
    }

    /// `lead.not_processed` of an HTTP delivery: statuses must be error statuses; unset, `check`
    /// notes that every unhandled error answer is an unknown outcome.
    fn not_processed(&mut self, src: &Source, file: Option<&FileLead>) -> NotProcessed {
        let Some(declared) = file.and_then(|f| f.not_processed.as_ref()) else {
            self.notes.push(src.problem(
                "/lead",
                "no `lead.not_processed`: every error status or SOAP fault no `errors` rule \
                 handles is an unknown outcome (the CRM may have committed the lead before a \
                 proxy answered 502/504), left to `idempotency.on_ambiguous`; list the answers \
                 the CRM's contract says mean \"nothing stored\" (e.g. `status: [400, 422]`, \
                 `fault: [Client]`) so a retry of those is certainly safe",
            ));
            return NotProcessed::default();
        };
        let mut status = Vec::new();
        for (i, code) in declared.status.iter().enumerate() {
            if (400..=599).contains(code) {
                status.push(*code);
            } else {
                self.problems.push(src.problem(
                    &format!("/lead/not_processed/status/{i}"),
                    format!("`{code}` is not an HTTP error status (400–599)"),
                ));
            }
        }
        NotProcessed {
            status,
            fault: declared.fault.clone(),
        }
    }

    /// `lead.verdict`: the poll, compiled with a skill's own steps from its part of the file
    /// (so its problems are located there), and its timing.
    fn verdict(
        &mut self,
        src: &Source,
        declared: &FileVerdict,
        upstream: &Arc<Upstream>,
        common: &FileCommon,
    ) -> Option<Arc<Verdict>> {
        const AT: &str = "/lead/verdict";
        let every = self.duration(src, &format!("{AT}/every"), &declared.every);
        let wait = self.duration(src, &format!("{AT}/wait"), &declared.wait);
        let mut ok = true;
        if declared.attempts == 0 {
            self.problems.push(src.problem(
                &format!("{AT}/attempts"),
                "`attempts: 0` never asks: give at least 1",
            ));
            ok = false;
        }
        if let (Some(every), Some(wait)) = (every, wait)
            && every > wait
        {
            self.problems.push(src.problem(
                &format!("{AT}/every"),
                format!(
                    "`every: {}` is longer than `wait: {}`: the buyer would never hear a verdict",
                    declared.every, declared.wait
                ),
            ));
            ok = false;
        }
        // The poll is written like a skill file's call: compiled by the same steps.
        let part = src.part(AT);
        let mut call = serde_json::Map::new();
        call.insert("skill".into(), Value::from(Skill::LeadSubmit.id()));
        for key in ["request", "response", "errors"] {
            if let Some(value) = part.value.get(key) {
                call.insert(key.into(), value.clone());
            }
        }
        let file: FileSkill = match serde_json::from_value(Value::Object(call)) {
            Ok(file) => file,
            Err(e) => {
                self.problems
                    .push(src.problem(AT, format!("the poll: {e}")));
                return None;
            }
        };
        let poll = self.proxy(
            Skill::LeadSubmit,
            &part,
            file,
            Some(Arc::clone(upstream)),
            common,
        );
        ok.then_some(())?;
        Some(Arc::new(Verdict {
            poll: poll?.into_shared(),
            every: every?,
            wait: wait?,
            attempts: declared.attempts,
        }))
    }

    fn mail_delivery(
        &mut self,
        src: &Source,
        file: &FileSkill,
        mailer: Arc<Mailer>,
        common: &FileCommon,
    ) -> Option<Destination> {
        let mut ok = true;
        for (key, present) in [
            ("/request", file.request.is_some()),
            ("/errors", !file.errors.is_empty()),
        ] {
            if present {
                self.problems.push(src.problem(
                    key,
                    "an e-mail delivery has no HTTP call: leave it out (the mail carries the ADF \
                     document)",
                ));
                ok = false;
            }
        }
        let subject = match &file.mail {
            Some(mail) => {
                let mut templates = Templates::new();
                match templates.add("subject", &mail.subject, Context::Header) {
                    Ok(()) => Some(templates),
                    Err(e) => {
                        self.problems.push(src.inner(
                            "/mail/subject",
                            e.line.unwrap_or(1),
                            1,
                            format!("template: {}", e.message),
                        ));
                        None
                    }
                }
            }
            None => {
                self.problems.push(src.problem(
                    "",
                    "a lead delivered by e-mail needs `mail: { subject: ... }`",
                ));
                None
            }
        };
        let response = match file.response.as_ref().and_then(|r| r.jq.as_ref()) {
            Some(jq) => self.jq(src, "/response/jq", jq, common),
            None => {
                self.problems.push(src.problem(
                    "/response",
                    "give `jq` building the reply data from the mail receipt \
                     {message_id, server_reply}",
                ));
                None
            }
        };
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        ok.then_some(())?;
        Some(Destination::Mail(Box::new(MailDelivery {
            mailer,
            subject: subject?,
            response: response?,
            shared,
        })))
    }
}

/// `+` and 2–15 digits, the first not 0 (E.164, as AAP's phone pattern).
fn is_e164(phone: &str) -> bool {
    phone.strip_prefix('+').is_some_and(|digits| {
        (2..=15).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0')
    })
}
