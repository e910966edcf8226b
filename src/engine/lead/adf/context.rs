//! What the rendering needs besides the request: facts the gateway owns.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// `<id source="…">` of the prospect: who numbered the lead.
pub const ID_SOURCE: &str = "aap-gateway";

/// The comment of the placeholder vehicle of a lead without `vehicle_of_interest`.
pub const GENERAL_INQUIRY: &str = "General inquiry: no specific vehicle";

/// What the rendering needs besides the request: facts the gateway owns.
#[derive(Debug, Clone, Copy)]
pub struct AdfContext<'a> {
    /// The selling dealership (`<vendorname>`), from our own configuration, never the buyer.
    pub vendor_name: &'a str,
    /// The stable lead reference, written as `<id sequence="1" source="aap-gateway">`; the CRM
    /// recognizes a re-delivered lead by it.
    pub reference: &'a str,
    /// The rooftop's time zone, in which the appointment text is written.
    pub timezone: &'a TimeZone,
    /// Written as `<requestdate>` when the request has no `submitted_at`.
    pub received_at: Timestamp,
}
