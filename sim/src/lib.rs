//! Stand-ins for a dealer group's legacy systems, for `aap-gateway demo` and the gateway's tests:
//! a REST DMS and a SOAP 1.2 vehicle service over the demo Toyota group's inventory, a CSV/XML
//! inventory feed of the demo Honda store, a SOAP 1.1 CRM, and two lead intakes (ADF/JSON over
//! HTTP, ADF by e-mail over SMTP).
//!
//! They behave like the awkward systems the gateway meets in the field (legacy formats, one value
//! per filter, sold units listed, faults and quirks of their own) and every one answers the same
//! `/_sim/` controls for tests: what it received, and a switch to fail, hang or answer garbage
//! ([`sim`]). Everything binds `127.0.0.1` on an ephemeral port and stops with its handle.
//!
//! This crate is not the gateway: it knows nothing of AAP and the gateway does not need it to
//! run. The gateway depends on it only for its `demo` command (the `demo` feature, on by
//! default) and in its tests.

pub mod adf_parse;
pub mod crm;
pub mod dms;
pub mod feed;
pub mod intake;
pub mod inventory;
pub mod sim;
pub mod smtp_intake;
mod soap;
pub mod soap_dms;

use serde_json::{Value, json};

/// The legacy systems the demo dealers sit in front of, on loopback ephemeral ports.
pub struct Simulators {
    /// Demo Toyota's REST DMS (search, facets).
    pub dms: sim::SimHandle,
    /// Demo Toyota's SOAP 1.2 vehicle service (vehicle detail).
    pub soap_dms: sim::SimHandle,
    /// Demo Toyota's SOAP 1.1 CRM (leads, appointments).
    pub crm: sim::SimHandle,
    /// Demo Honda's CSV inventory feed.
    pub feed: sim::SimHandle,
    /// Demo Honda's CRM intake mailbox (ADF/XML by SMTP).
    pub smtp: smtp_intake::SmtpIntake,
}

impl Simulators {
    /// Starts all five on loopback ephemeral ports; they stop when this is dropped.
    pub async fn start() -> std::io::Result<Simulators> {
        Ok(Simulators {
            dms: dms::start_dms().await?,
            soap_dms: soap_dms::start_soap_dms().await?,
            crm: crm::start_crm().await?,
            feed: feed::start_feed().await?,
            smtp: smtp_intake::start_smtp_intake().await?,
        })
    }

    /// The `${NAME}`s the demo mappings use to find the simulators.
    pub fn var(&self, name: &str) -> Option<String> {
        match name {
            "DMS_URL" => Some(self.dms.base_url()),
            "SOAP_DMS_URL" => Some(self.soap_dms.base_url()),
            "CRM_URL" => Some(self.crm.base_url()),
            "FEED_URL" => Some(self.feed.base_url()),
            "SMTP_URL" => Some(self.smtp.smtp_url()),
            _ => None,
        }
    }

    /// Every `${NAME}` [`Simulators::var`] answers.
    pub const VARS: [&'static str; 5] =
        ["DMS_URL", "SOAP_DMS_URL", "CRM_URL", "FEED_URL", "SMTP_URL"];

    /// Where each one listens, for the demo's endpoints file.
    pub fn endpoints(&self) -> Value {
        json!({
            "dms": self.dms.base_url(),
            "soap_dms": self.soap_dms.base_url(),
            "crm": self.crm.base_url(),
            "feed": self.feed.base_url(),
            "smtp": self.smtp.smtp_url(),
            "smtp_control": self.smtp.control.base_url(),
        })
    }
}
