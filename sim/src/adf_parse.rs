//! The strict ADF 1.0 reader shared by the lead intake simulators ([`super::intake`] over HTTP,
//! [`super::smtp_intake`] over e-mail): what a picky dealer CRM accepts, so the tests notice
//! when the gateway's ADF (`aap_gateway::engine::lead::adf`) stops being acceptable.
//!
//! [`parse`] turns a document into a JSON description of the lead (absent or empty fields are
//! omitted; values are the element text, as text — a reader does not invent types):
//!
//! ```text
//! {"id": {"source", "value"},
//!  "requestdate",
//!  "vehicles": [{"interest", "status", "year", "make", "model", "vin", "stock", "trim",
//!                "bodystyle", "transmission", "odometer", "condition", "price", "comments"}],
//!  "customer": {"name", "email", "phone",
//!               "address": {"street": [..], "city", "regioncode", "postalcode", "country"},
//!               "comments"},
//!  "vendor": {"vendorname"},
//!  "provider": {"name", "url"}}
//! ```
//!
//! `id` is the prospect's `<id source="aap-gateway">` when there is one, else its first `<id>`.
//! `customer.name` is the `part="full"` name, else the other name parts joined with a space.
//! `email` and `phone` are the first non-empty ones. Values are trimmed, except the free-text
//! `comments`, which are kept exactly as sent.
//!
//! A document is refused with a short [`AdfError`] (it never quotes the content, which holds
//! personal data) when it is not well-formed UTF-8 XML, lacks `<?adf version="1.0"?>` before
//! its `<adf>` root, has no or more than one `<prospect>` (one lead per document), no
//! `<vehicle>`, a vehicle without the `<year>`, `<make>` and `<model>` elements the DTD
//! requires, an `interest`/`status` outside the DTD's values, more than one `<comments>` in a
//! vehicle, no customer name, neither email nor phone, or no `<vendorname>`. The trio's elements
//! must be present but may be empty: AAP accepts partial vehicles (a VIN alone), and the
//! gateway's general-inquiry placeholder is exactly an empty trio with a comment — what the
//! DTD allows, this reader allows.

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};
use serde_json::{Map, Value, json};

/// Why a document was refused: short, and never the document's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdfError {
    #[error("document is not well-formed XML")]
    NotWellFormed,
    #[error("document encoding is not UTF-8")]
    UnsupportedEncoding,
    #[error("document is nested too deeply or has too many elements")]
    TooComplex,
    #[error("missing <?adf version=\"1.0\"?>")]
    NoAdfInstruction,
    #[error("root element is not <adf>")]
    NotAdf,
    #[error("no prospect")]
    NoProspect,
    #[error("more than one prospect")]
    ManyProspects,
    #[error("no vehicle")]
    NoVehicle,
    #[error("vehicle without year, make and model")]
    VehicleWithoutTrio,
    #[error("vehicle interest or status not allowed by the ADF DTD")]
    VehicleAttribute,
    #[error("more than one comments element in a vehicle")]
    ManyVehicleComments,
    #[error("no customer name")]
    NoCustomerName,
    #[error("customer has neither email nor phone")]
    NoContactChannel,
    #[error("no vendorname")]
    NoVendorName,
}

/// The `source` of the `<id>` that carries the gateway's lead reference: a CRM told about the
/// gateway prefers that id to the others (the gateway writes it as
/// `aap_gateway::engine::lead::adf::ID_SOURCE`; a test here holds the two equal).
pub const GATEWAY_ID_SOURCE: &str = "aap-gateway";

/// Deepest element nesting accepted (ADF needs six levels).
const MAX_DEPTH: usize = 32;
/// Most elements accepted in one document.
const MAX_ELEMENTS: usize = 10_000;

/// `<vehicle interest>` values of the ADF 1.0 DTD.
const INTERESTS: [&str; 5] = ["buy", "lease", "sell", "trade-in", "test-drive"];
/// `<vehicle status>` values of the ADF 1.0 DTD.
const STATUSES: [&str; 2] = ["new", "used"];

/// Reads an ADF document into the JSON description above.
pub fn parse(bytes: &[u8]) -> Result<Value, AdfError> {
    let root = read_tree(bytes)?;
    if root.name != "adf" {
        return Err(AdfError::NotAdf);
    }
    let prospect = match root.all("prospect").as_slice() {
        [] => return Err(AdfError::NoProspect),
        [one] => *one,
        _ => return Err(AdfError::ManyProspects),
    };
    lead(prospect)
}

// === the lead ===

fn lead(prospect: &Element) -> Result<Value, AdfError> {
    let mut out = Map::new();
    let ids = prospect.all("id");
    let id = ids
        .iter()
        .find(|id| id.attr("source") == Some(GATEWAY_ID_SOURCE))
        .or(ids.first());
    if let Some(id) = id {
        let mut value = Map::new();
        if let Some(source) = id.attr("source") {
            value.insert("source".into(), source.into());
        }
        value.insert("value".into(), id.text.trim().into());
        out.insert("id".into(), Value::Object(value));
    }
    put(&mut out, "requestdate", prospect.first_text("requestdate"));

    let vehicles = prospect.all("vehicle");
    if vehicles.is_empty() {
        return Err(AdfError::NoVehicle);
    }
    let vehicles = vehicles
        .into_iter()
        .map(vehicle)
        .collect::<Result<Vec<_>, _>>()?;
    out.insert("vehicles".into(), Value::Array(vehicles));
    out.insert("customer".into(), customer(prospect.first("customer"))?);

    let vendorname = prospect
        .first("vendor")
        .and_then(|v| v.first_text("vendorname"))
        .ok_or(AdfError::NoVendorName)?;
    out.insert("vendor".into(), json!({ "vendorname": vendorname }));

    if let Some(provider) = prospect.first("provider") {
        let mut p = Map::new();
        put(&mut p, "name", provider.first_text("name"));
        put(&mut p, "url", provider.first_text("url"));
        out.insert("provider".into(), Value::Object(p));
    }
    Ok(Value::Object(out))
}

fn vehicle(v: &Element) -> Result<Value, AdfError> {
    let mut out = Map::new();
    for (name, allowed) in [("interest", &INTERESTS[..]), ("status", &STATUSES[..])] {
        if let Some(value) = v.attr(name) {
            if !allowed.contains(&value) {
                return Err(AdfError::VehicleAttribute);
            }
            out.insert(name.into(), value.into());
        }
    }
    if ["year", "make", "model"]
        .iter()
        .any(|name| v.first(name).is_none())
    {
        return Err(AdfError::VehicleWithoutTrio);
    }
    for name in [
        "year",
        "make",
        "model",
        "vin",
        "stock",
        "trim",
        "bodystyle",
        "transmission",
        "odometer",
        "condition",
        "price",
    ] {
        put(&mut out, name, v.first_text(name));
    }
    match v.all("comments").as_slice() {
        [] => {}
        [one] if !one.text.trim().is_empty() => {
            out.insert("comments".into(), one.text.clone().into());
        }
        [_] => {}
        _ => return Err(AdfError::ManyVehicleComments),
    }
    Ok(Value::Object(out))
}

fn customer(customer: Option<&Element>) -> Result<Value, AdfError> {
    let customer = customer.ok_or(AdfError::NoCustomerName)?;
    let contact = customer.first("contact").ok_or(AdfError::NoCustomerName)?;
    let names = contact.all("name");
    let name = match names.iter().find(|n| n.attr("part") == Some("full")) {
        Some(full) => full.text.trim().to_owned(),
        None => names
            .iter()
            .map(|n| n.text.trim())
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    };
    if name.is_empty() {
        return Err(AdfError::NoCustomerName);
    }
    let first_of = |element: &str| {
        contact
            .all(element)
            .into_iter()
            .map(|e| e.text.trim())
            .find(|t| !t.is_empty())
    };
    let email = first_of("email");
    let phone = first_of("phone");
    if email.is_none() && phone.is_none() {
        return Err(AdfError::NoContactChannel);
    }
    let mut out = Map::new();
    out.insert("name".into(), name.into());
    put(&mut out, "email", email);
    put(&mut out, "phone", phone);
    if let Some(address) = contact.first("address") {
        let mut streets: Vec<(u32, &str)> = address
            .all("street")
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let line = s
                    .attr("line")
                    .and_then(|l| l.trim().parse().ok())
                    .unwrap_or(u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1));
                (line, s.text.trim())
            })
            .filter(|(_, s)| !s.is_empty())
            .collect();
        streets.sort_by_key(|(line, _)| *line);
        let mut a = Map::new();
        if !streets.is_empty() {
            a.insert(
                "street".into(),
                streets.into_iter().map(|(_, s)| Value::from(s)).collect(),
            );
        }
        for name in ["city", "regioncode", "postalcode", "country"] {
            put(&mut a, name, address.first_text(name));
        }
        out.insert("address".into(), Value::Object(a));
    }
    if let Some(comments) = customer
        .first("comments")
        .filter(|c| !c.text.trim().is_empty())
    {
        out.insert("comments".into(), comments.text.clone().into());
    }
    Ok(Value::Object(out))
}

/// Inserts `value` under `key` when present.
fn put(out: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        out.insert(key.into(), value.into());
    }
}

// === the tree ===

/// An element: its attributes, its own text (entities resolved, line ends normalized) and its
/// child elements. Text between child elements is kept too but only leaves' text is used.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Element>,
}

impl Element {
    fn all(&self, name: &str) -> Vec<&Element> {
        self.children.iter().filter(|c| c.name == name).collect()
    }

    fn first(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The trimmed text of the first `name` child, if it has any.
    fn first_text(&self, name: &str) -> Option<&str> {
        self.first(name)
            .map(|e| e.text.trim())
            .filter(|t| !t.is_empty())
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the document into a tree, enforcing well-formedness (one root, balanced tags, known
/// entities, legal characters) and the `<?adf version="1.0"?>` prolog.
fn read_tree(bytes: &[u8]) -> Result<Element, AdfError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|_| AdfError::NotWellFormed)?;
    let mut reader = Reader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut adf_instruction = false;
    let mut first = true;
    let mut elements = 0usize;
    loop {
        let event = reader.read_event().map_err(|_| AdfError::NotWellFormed)?;
        let at_start = std::mem::replace(&mut first, false);
        let in_prolog = stack.is_empty() && root.is_none();
        match event {
            Event::Decl(decl) => {
                if !at_start {
                    return Err(AdfError::NotWellFormed);
                }
                if let Some(encoding) = decl.encoding() {
                    let encoding = encoding.map_err(|_| AdfError::NotWellFormed)?;
                    if !encoding.eq_ignore_ascii_case(b"utf-8")
                        && !encoding.eq_ignore_ascii_case(b"us-ascii")
                    {
                        return Err(AdfError::UnsupportedEncoding);
                    }
                }
            }
            Event::PI(pi) => {
                // Only before the root element does the instruction describe the document.
                if in_prolog && pi.target() == b"adf" {
                    let version = pi
                        .attributes()
                        .filter_map(Result::ok)
                        .find(|a| a.key.as_ref() == b"version");
                    adf_instruction = version.is_some_and(|a| a.value.as_ref() == b"1.0");
                }
            }
            Event::DocType(_) => {
                if !in_prolog {
                    return Err(AdfError::NotWellFormed);
                }
            }
            Event::Comment(_) => {}
            // A second root is not XML.
            Event::Start(_) | Event::Empty(_) if root.is_some() => {
                return Err(AdfError::NotWellFormed);
            }
            Event::Start(start) => {
                elements += 1;
                if stack.len() >= MAX_DEPTH || elements > MAX_ELEMENTS {
                    return Err(AdfError::TooComplex);
                }
                stack.push(open(&start)?);
            }
            Event::Empty(start) => {
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return Err(AdfError::TooComplex);
                }
                let element = open(&start)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::End(_) => {
                let element = stack.pop().ok_or(AdfError::NotWellFormed)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::Text(t) => {
                let content = t.xml10_content().map_err(|_| AdfError::NotWellFormed)?;
                push_text(stack.last_mut(), &content)?;
            }
            Event::CData(c) => {
                if stack.is_empty() {
                    return Err(AdfError::NotWellFormed);
                }
                let content = c.xml10_content().map_err(|_| AdfError::NotWellFormed)?;
                push_text(stack.last_mut(), &content)?;
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(|_| AdfError::NotWellFormed)? {
                    Some(c) => c.to_string(),
                    None => {
                        let name = r.decode().map_err(|_| AdfError::NotWellFormed)?;
                        // No DTD is read, so only XML's five predefined entities exist.
                        quick_xml::escape::resolve_predefined_entity(&name)
                            .ok_or(AdfError::NotWellFormed)?
                            .to_owned()
                    }
                };
                if stack.is_empty() {
                    return Err(AdfError::NotWellFormed);
                }
                push_text(stack.last_mut(), &resolved)?;
            }
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(AdfError::NotWellFormed);
    }
    let root = root.ok_or(AdfError::NotWellFormed)?;
    // Checked last so that a broken document is reported as such whatever its prolog.
    if !adf_instruction {
        return Err(AdfError::NoAdfInstruction);
    }
    Ok(root)
}

/// A new element from its start tag, attributes checked and unescaped.
fn open(start: &BytesStart<'_>) -> Result<Element, AdfError> {
    let name = std::str::from_utf8(start.name().as_ref())
        .map_err(|_| AdfError::NotWellFormed)?
        .to_owned();
    let mut attrs = Vec::new();
    for attr in start.attributes().with_checks(true) {
        let attr = attr.map_err(|_| AdfError::NotWellFormed)?;
        let key = std::str::from_utf8(attr.key.as_ref())
            .map_err(|_| AdfError::NotWellFormed)?
            .to_owned();
        let value = attr.unescape_value().map_err(|_| AdfError::NotWellFormed)?;
        legal(&value)?;
        attrs.push((key, value.into_owned()));
    }
    Ok(Element {
        name,
        attrs,
        ..Element::default()
    })
}

/// Appends character data to the open element; outside the root only whitespace is allowed.
fn push_text(open: Option<&mut Element>, content: &str) -> Result<(), AdfError> {
    legal(content)?;
    match open {
        Some(element) => {
            element.text.push_str(content);
            Ok(())
        }
        None if content.trim().is_empty() => Ok(()),
        None => Err(AdfError::NotWellFormed),
    }
}

/// Refuses characters outside XML 1.0's `Char` production (C0 controls, U+FFFE, U+FFFF).
fn legal(text: &str) -> Result<(), AdfError> {
    let bad = text.chars().any(|c| {
        matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}')
    });
    if bad {
        Err(AdfError::NotWellFormed)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aap_gateway::engine::lead::adf::{self, AdfContext};

    const MINIMAL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<?adf version="1.0"?>
<adf>
  <prospect>
    <id sequence="1" source="other">X-1</id>
    <id sequence="1" source="aap-gateway">lead-7</id>
    <requestdate>2026-04-30T10:16:05Z</requestdate>
    <vehicle interest="buy" status="used">
      <year>2022</year><make>Honda</make><model>Civic</model>
      <odometer units="mi"> 12000 </odometer>
      <comments>certified pre-owned; a &amp; b</comments>
    </vehicle>
    <customer>
      <contact>
        <name part="first">Anna</name><name part="last">Lee</name>
        <phone type="voice"></phone>
        <phone type="cellphone">+14155550123</phone>
        <address><street line="2">Apt 4</street><street line="1">1 Main</street><country>US</country></address>
      </contact>
      <comments><![CDATA[<raw> & text]]></comments>
    </customer>
    <vendor><vendorname>Demo Toyota</vendorname></vendor>
  </prospect>
</adf>
"#;

    #[test]
    fn the_gateway_id_source_is_the_one_the_gateway_writes() {
        assert_eq!(GATEWAY_ID_SOURCE, adf::ID_SOURCE);
    }

    #[test]
    fn reads_a_document() {
        let lead = parse(MINIMAL.as_bytes()).expect("valid");
        assert_eq!(
            lead,
            json!({
                "id": {"source": "aap-gateway", "value": "lead-7"},
                "requestdate": "2026-04-30T10:16:05Z",
                "vehicles": [{"interest": "buy", "status": "used", "year": "2022", "make": "Honda",
                    "model": "Civic", "odometer": "12000", "comments": "certified pre-owned; a & b"}],
                "customer": {"name": "Anna Lee", "phone": "+14155550123",
                    "address": {"street": ["1 Main", "Apt 4"], "country": "US"},
                    "comments": "<raw> & text"},
                "vendor": {"vendorname": "Demo Toyota"}
            })
        );
    }

    #[test]
    fn reads_what_the_gateway_renders() {
        let request = json!({"type":"lead.submit.request",
            "customer":{"first_name":"Zoë <b>","last_name":"O'Brien & \"Co\"","email":"z@example.com",
                "address":{"address_line_1":"1 ]]> St","zip":"94103"}},
            "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["email"],
                "consent_text":"Yes <really> & \"truly\"","scope":["lead_submission"]},
            "source_agent":{"name":"agent & co","url":"https://a.example/?x=1&y=2"},
            "message":"Line one\r\nline two\u{1}"});
        let tz = jiff::tz::TimeZone::UTC;
        let doc = adf::render(
            &request,
            &AdfContext {
                vendor_name: "Demo & Sons",
                reference: "ref-1",
                timezone: &tz,
                received_at: jiff::Timestamp::UNIX_EPOCH,
            },
        );
        let lead = parse(doc.as_bytes()).expect("valid");
        assert_eq!(
            lead["id"],
            json!({"source": "aap-gateway", "value": "ref-1"})
        );
        assert_eq!(lead["requestdate"], "1970-01-01T00:00:00Z");
        assert_eq!(
            lead["vehicles"],
            json!([{"interest": "buy", "comments": adf::GENERAL_INQUIRY}])
        );
        assert_eq!(lead["customer"]["name"], "Zoë <b> O'Brien & \"Co\"");
        assert_eq!(lead["customer"]["email"], "z@example.com");
        assert_eq!(
            lead["customer"]["address"],
            json!({"street": ["1 ]]> St"], "postalcode": "94103", "country": "US"})
        );
        assert_eq!(
            lead["customer"]["comments"],
            "Line one\nline two\nContact consent granted 2026-04-30T10:16:00Z for email: \"Yes <really> & \"truly\"\""
        );
        assert_eq!(lead["vendor"]["vendorname"], "Demo & Sons");
        assert_eq!(
            lead["provider"],
            json!({"name": "agent & co", "url": "https://a.example/?x=1&y=2"})
        );
    }

    fn refused(doc: &str) -> AdfError {
        parse(doc.as_bytes()).expect_err("refused")
    }

    #[test]
    fn refusals() {
        let with = |from: &str, to: &str| {
            assert!(MINIMAL.contains(from), "{from}");
            MINIMAL.replacen(from, to, 1)
        };
        assert_eq!(refused("<adf><prospect>"), AdfError::NotWellFormed);
        assert_eq!(
            refused(&with("</adf>", "</adf><adf/>")),
            AdfError::NotWellFormed
        );
        assert_eq!(refused(&with("</adf>", "</adf>x")), AdfError::NotWellFormed);
        assert_eq!(
            refused(&with("a &amp; b", "a & b")),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with("a &amp; b", "a &nbsp; b")),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with("a &amp; b", "a \u{1} b")),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with("a &amp; b", "a &#1; b")),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with("</make>", "</model>")),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with(
                "interest=\"buy\"",
                "interest=\"buy\" interest=\"buy\""
            )),
            AdfError::NotWellFormed
        );
        assert_eq!(
            parse(b"<?adf version=\"1.0\"?><adf>\xff</adf>").expect_err("bytes"),
            AdfError::NotWellFormed
        );
        assert_eq!(
            refused(&with("encoding=\"UTF-8\"", "encoding=\"ISO-8859-1\"")),
            AdfError::UnsupportedEncoding
        );
        assert_eq!(
            refused(&with("<?adf version=\"1.0\"?>", "")),
            AdfError::NoAdfInstruction
        );
        assert_eq!(
            refused(&with("<?adf version=\"1.0\"?>", "<?adf version=\"2.0\"?>")),
            AdfError::NoAdfInstruction
        );
        assert_eq!(refused("<?adf version=\"1.0\"?><lead/>"), AdfError::NotAdf);
        assert_eq!(
            refused("<?adf version=\"1.0\"?><adf/>"),
            AdfError::NoProspect
        );
        assert_eq!(
            refused("<?adf version=\"1.0\"?><adf><prospect/><prospect/></adf>"),
            AdfError::ManyProspects
        );
        let no_vehicle = {
            let start = MINIMAL.find("<vehicle").expect("vehicle");
            let end = MINIMAL.find("</vehicle>").expect("end") + "</vehicle>".len();
            format!("{}{}", &MINIMAL[..start], &MINIMAL[end..])
        };
        assert_eq!(refused(&no_vehicle), AdfError::NoVehicle);
        assert_eq!(
            refused(&with("<model>Civic</model>", "")),
            AdfError::VehicleWithoutTrio
        );
        assert_eq!(
            refused(&with("interest=\"buy\"", "interest=\"rent\"")),
            AdfError::VehicleAttribute
        );
        assert_eq!(
            refused(&with("status=\"used\"", "status=\"cpo\"")),
            AdfError::VehicleAttribute
        );
        assert_eq!(
            refused(&with("</vehicle>", "<comments>again</comments></vehicle>")),
            AdfError::ManyVehicleComments
        );
        assert_eq!(
            refused(&with(
                "<name part=\"first\">Anna</name><name part=\"last\">Lee</name>",
                "<name part=\"full\"> </name>"
            )),
            AdfError::NoCustomerName
        );
        assert_eq!(
            refused(&with("+14155550123", "")),
            AdfError::NoContactChannel
        );
        assert_eq!(
            refused(&with("<vendorname>Demo Toyota</vendorname>", "")),
            AdfError::NoVendorName
        );
        let deep = format!(
            "<?adf version=\"1.0\"?><adf>{}{}</adf>",
            "<x>".repeat(40),
            "</x>".repeat(40)
        );
        assert_eq!(refused(&deep), AdfError::TooComplex);
    }

    #[test]
    fn an_empty_trio_is_allowed() {
        let doc = MINIMAL.replacen(
            "<year>2022</year><make>Honda</make><model>Civic</model>",
            "<year/><make></make><model>  </model><vin>1HGCY2F57RA000001</vin>",
            1,
        );
        let lead = parse(doc.as_bytes()).expect("valid");
        assert_eq!(lead["vehicles"][0]["vin"], "1HGCY2F57RA000001");
        assert!(lead["vehicles"][0].get("year").is_none());
    }

    #[test]
    fn error_texts_quote_no_content() {
        for error in [AdfError::NotWellFormed, AdfError::NoContactChannel] {
            assert!(!error.to_string().contains("Anna"));
        }
    }
}
