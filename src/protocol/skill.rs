//! The five AAP skills and their identifiers (docs/protocol.md §Skills).
//!
//! Everything the gateway says about a skill on the wire — request and response `type`, media
//! types, schema file names, card entries — comes from this one table, so the identifiers cannot
//! drift apart.

use std::fmt;

/// An AAP skill. The set is closed: AAP defines exactly these five.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skill {
    DealerInformation,
    InventoryFacets,
    InventorySearch,
    InventoryVehicle,
    LeadSubmit,
}

/// The static facts about one skill.
struct Facts {
    id: &'static str,
    name: &'static str,
    description: &'static str,
    request_type: &'static str,
    response_type: &'static str,
    /// Media-type slug; note `inventory.vehicle` is `vehicle-detail`.
    slug: &'static str,
    tags: &'static [&'static str],
}

impl Skill {
    pub const ALL: [Skill; 5] = [
        Skill::DealerInformation,
        Skill::InventoryFacets,
        Skill::InventorySearch,
        Skill::InventoryVehicle,
        Skill::LeadSubmit,
    ];

    fn facts(self) -> &'static Facts {
        match self {
            Skill::DealerInformation => &Facts {
                id: "dealer.information",
                name: "Dealer Information",
                description: "Dealer profile: rooftops, addresses, contacts, hours, capabilities and fees.",
                request_type: "dealer.information.request",
                response_type: "dealer.information.response",
                slug: "dealer-information",
                tags: &[
                    "dealer",
                    "dealership",
                    "profile",
                    "hours",
                    "contact",
                    "locations",
                    "fees",
                    "automotive",
                    "motorcycles",
                    "powersports",
                ],
            },
            Skill::InventoryFacets => &Facts {
                id: "inventory.facets",
                name: "Inventory Facets",
                description: "Counts and ranges over the dealer's inventory, optionally filtered.",
                request_type: "inventory.facets.request",
                response_type: "inventory.facets.response",
                slug: "inventory-facets",
                tags: &[
                    "inventory",
                    "facets",
                    "aggregation",
                    "filters",
                    "automotive",
                    "motorcycles",
                    "powersports",
                ],
            },
            Skill::InventorySearch => &Facts {
                id: "inventory.search",
                name: "Inventory Search",
                description: "Search the dealer's in-stock vehicle inventory with filters, sorting and paging.",
                request_type: "inventory.search.request",
                response_type: "inventory.search.response",
                slug: "inventory-search",
                tags: &[
                    "inventory",
                    "vehicles",
                    "search",
                    "cars",
                    "automotive",
                    "motorcycles",
                    "powersports",
                ],
            },
            Skill::InventoryVehicle => &Facts {
                id: "inventory.vehicle",
                name: "Vehicle Detail",
                description: "Full detail of one vehicle by VIN, stock number or vehicle id.",
                request_type: "inventory.vehicle.request",
                response_type: "inventory.vehicle.response",
                slug: "vehicle-detail",
                tags: &[
                    "inventory",
                    "vehicle",
                    "vin",
                    "stock",
                    "detail",
                    "automotive",
                    "motorcycles",
                    "powersports",
                ],
            },
            Skill::LeadSubmit => &Facts {
                id: "lead.submit",
                name: "Submit Lead",
                description: "Send a consented customer lead, optionally with an appointment request, to the dealer.",
                request_type: "lead.submit.request",
                response_type: "lead.submit.response",
                slug: "lead-submit",
                tags: &[
                    "lead",
                    "contact",
                    "consent",
                    "sales",
                    "appointment",
                    "automotive",
                    "motorcycles",
                    "powersports",
                ],
            },
        }
    }

    /// The skill id used on the card and in mapping files, e.g. `inventory.search`.
    pub fn id(self) -> &'static str {
        self.facts().id
    }

    pub fn name(self) -> &'static str {
        self.facts().name
    }

    pub fn description(self) -> &'static str {
        self.facts().description
    }

    pub fn tags(self) -> &'static [&'static str] {
        self.facts().tags
    }

    /// `data.type` of a request, e.g. `inventory.search.request`.
    pub fn request_type(self) -> &'static str {
        self.facts().request_type
    }

    /// `data.type` of a response, e.g. `inventory.search.response`.
    pub fn response_type(self) -> &'static str {
        self.facts().response_type
    }

    pub fn request_media_type(self) -> &'static str {
        match self {
            Skill::DealerInformation => "application/vnd.autoagent.dealer-information-request+json",
            Skill::InventoryFacets => "application/vnd.autoagent.inventory-facets-request+json",
            Skill::InventorySearch => "application/vnd.autoagent.inventory-search-request+json",
            Skill::InventoryVehicle => "application/vnd.autoagent.vehicle-detail-request+json",
            Skill::LeadSubmit => "application/vnd.autoagent.lead-submit-request+json",
        }
    }

    pub fn response_media_type(self) -> &'static str {
        match self {
            Skill::DealerInformation => {
                "application/vnd.autoagent.dealer-information-response+json"
            }
            Skill::InventoryFacets => "application/vnd.autoagent.inventory-facets-response+json",
            Skill::InventorySearch => "application/vnd.autoagent.inventory-search-response+json",
            Skill::InventoryVehicle => "application/vnd.autoagent.vehicle-detail-response+json",
            Skill::LeadSubmit => "application/vnd.autoagent.lead-submit-response+json",
        }
    }

    /// File name of the request schema, relative to a schema base URL.
    pub fn request_schema_file(self) -> String {
        format!("{}-request.schema.json", self.facts().slug)
    }

    /// File name of the response schema, relative to a schema base URL.
    pub fn response_schema_file(self) -> String {
        format!("{}-response.schema.json", self.facts().slug)
    }

    /// The skill ids joined by `, `, for messages that refuse a value.
    pub fn ids() -> String {
        Skill::ALL.map(Skill::id).join(", ")
    }

    pub fn from_id(id: &str) -> Option<Skill> {
        Skill::ALL.into_iter().find(|s| s.id() == id)
    }

    pub fn from_request_type(ty: &str) -> Option<Skill> {
        Skill::ALL.into_iter().find(|s| s.request_type() == ty)
    }

    /// The skill whose request media type this is, if any.
    pub fn from_request_media_type(media_type: &str) -> Option<Skill> {
        Skill::ALL
            .into_iter()
            .find(|s| s.request_media_type() == media_type)
    }
}

impl fmt::Display for Skill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_follow_the_spec_table() {
        for skill in Skill::ALL {
            assert_eq!(Skill::from_id(skill.id()), Some(skill));
            assert_eq!(Skill::from_request_type(skill.request_type()), Some(skill));
            assert_eq!(
                Skill::from_request_media_type(skill.request_media_type()),
                Some(skill)
            );
            assert_eq!(skill.request_type(), format!("{}.request", skill.id()));
            assert_eq!(skill.response_type(), format!("{}.response", skill.id()));
        }
        assert_eq!(
            Skill::InventoryVehicle.request_schema_file(),
            "vehicle-detail-request.schema.json"
        );
    }
}
