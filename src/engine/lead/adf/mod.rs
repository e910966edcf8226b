//! A `lead.submit` request rendered as an ADF 1.0 document (docs/protocol.md §Lead delivery and
//! ADF), for dealer CRMs that take leads as ADF/XML — by HTTP POST or, as most still do, by
//! e-mail.
//!
//! The gateway has already validated the request against its schema and checked consent; this
//! module only translates. It follows AAP's ADF field table and rules, in the element order of our
//! reading of the ADF 1.0 DTD:
//!
//! ```text
//! <?xml version="1.0" encoding="UTF-8"?>
//! <?adf version="1.0"?>
//! <adf><prospect>
//!   <id sequence="1" source="aap-gateway">REFERENCE</id>
//!   <requestdate>submitted_at, else the time the gateway received the lead</requestdate>
//!   <vehicle interest="buy|test-drive" status="new|used">   vehicle_of_interest, or a placeholder
//!     year make model vin stock trim bodystyle transmission odometer price comments
//!   </vehicle>
//!   <vehicle interest="trade-in">                            trade_in, when present
//!     year make model vin stock trim bodystyle transmission odometer condition price comments
//!   </vehicle>
//!   <customer><contact>name email phone address</contact><comments/></customer>
//!   <vendor><vendorname>the dealership, from our own configuration</vendorname></vendor>
//!   <provider><name part="full">source_agent.name</name><url/></provider>
//! </prospect></adf>
//! ```
//!
//! Vehicles: `status` comes from the vehicle of interest's condition (`cpo` → `used`); the
//! trade-in's condition goes to `<condition>`; transmissions fold to `A` or `M`
//! ([`fold_transmission`]); `<odometer units="mi">`; `<price currency="USD">` is `type="quote"`
//! for the vehicle of interest and `type="asking"` for a (rare) buyer-stated trade-in value. A
//! lead without `vehicle_of_interest` leads with a general-inquiry placeholder vehicle (see
//! `VehicleBlock::placeholder` for why it looks the way it does).
//!
//! What ADF has no element for is folded into text rather than dropped: the vehicle's
//! `<comments>` (one per vehicle, entries joined with `; `) carries `certified pre-owned`,
//! `Displacement: {cc}cc`, a transmission that folds to neither `A` nor `M`, and every
//! `other_attributes` entry as `key: value`; the customer's `<comments>` (entries on separate
//! lines) carries the buyer's message, the requested appointment in the rooftop's time zone, its
//! notes, the preferred contact channel and the consent audit line. The ConsentGrant must never
//! be lost (docs/protocol.md §Consent), so that line quotes `consent_text` verbatim.
//!
//! Every value is written through quick-xml's writer and escaper, never spliced in by hand. Two
//! things an escaper cannot fix are handled first: characters XML 1.0 cannot carry at all (C0
//! controls other than tab and line feed, U+FFFE, U+FFFF) are dropped, and CR / CRLF line ends
//! become LF, as every XML parser would read them anyway. What the CRM reads back is therefore
//! exactly the text written.
//!
//! Not mapped (AAP's ADF table gives them no ADF element and the gateway keeps them elsewhere):
//! `vehicle_id`, `msrp`, `list_price`, `fees`, `idempotency_key`, `source_agent.agent_card_url`;
//! nor the colours, features and other listing details that the ADF table does not name.
//! `<vendor>` carries only `<vendorname>`, as in AAP's ADF skeleton, although a strict reading of
//! the DTD also wants a `<contact>` (an open point: docs/protocol.md §Lead delivery and ADF).
//!
//! The files: `context` (what the gateway adds), `prospect` (the customer, comments and the
//! document), `vehicle` (vehicle blocks, transmissions), `xml` (text as XML carries it).

mod context;
mod prospect;
mod vehicle;
mod xml;

use quick_xml::Writer;
use serde_json::Value;

pub use context::{AdfContext, GENERAL_INQUIRY, ID_SOURCE};
use prospect::Prospect;
pub use vehicle::fold_transmission;
pub use xml::xml_text;

/// Renders a `lead.submit.request` (already validated against its schema) as an ADF 1.0 document.
pub fn render(request: &Value, ctx: &AdfContext<'_>) -> String {
    let prospect = Prospect::from_request(request, ctx);
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into a `Vec` cannot fail; an error could only come from quick-xml itself, and a
    // half-written document must not be sent, so nothing is returned then.
    if prospect.write(&mut writer).is_err() {
        return String::new();
    }
    String::from_utf8(writer.into_inner())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests;
