use jiff::Timestamp;
use jiff::tz::TimeZone;
use quick_xml::events::Event;

use super::*;
use quick_xml::Reader;
use serde_json::json;

/// AAP's worked `lead.submit` example request.
fn spec_example() -> Value {
    json!({"type":"lead.submit.request",
     "customer":{"first_name":"Anna","last_name":"Lee","email":"anna@example.com","phone":"+14155550123","preferred_contact":"phone"},
     "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["email","phone"],
                "consent_text":"I agree to share my contact info with Demo Toyota about VIN 1HGCY2F57RA000001.","scope":["lead_submission"]},
     "vehicle_of_interest":{"vin":"1HGCY2F57RA000001","year":2022,"make":"Honda","model":"Civic","condition":"cpo"},
     "trade_in":{"year":2014,"make":"Toyota","model":"Corolla","condition":"good","mileage":96000},
     "appointment":{"appointment_type":"test_drive","appointment_at":"2026-05-02T17:00:00Z","duration_minutes":60},
     "source_agent":{"name":"chatgpt-shopping","agent_card_url":"https://chatgpt.com/.well-known/agent-card.json"},
     "submitted_at":"2026-04-30T10:16:05Z","idempotency_key":"01HZ9K8R1G4B7Q9WS2F7APYZ6T"})
}

fn la() -> TimeZone {
    jiff::tz::db()
        .get("America/Los_Angeles")
        .expect("bundled zone")
}

fn render_with(request: &Value) -> String {
    let tz = la();
    let ctx = AdfContext {
        vendor_name: "Demo Toyota",
        reference: "lead-0001",
        timezone: &tz,
        received_at: "2026-04-30T10:20:00.123Z".parse().expect("ts"),
    };
    render(request, &ctx)
}

/// A parsed element: name, attributes, text (concatenated), children.
#[derive(Debug, Default)]
struct El {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<El>,
}

impl El {
    fn all(&self, name: &str) -> Vec<&El> {
        self.children.iter().filter(|c| c.name == name).collect()
    }
    fn one(&self, name: &str) -> &El {
        let found = self.all(name);
        assert_eq!(found.len(), 1, "exactly one <{name}> in <{}>", self.name);
        found[0]
    }
    fn at(&self, path: &str) -> &El {
        path.split('/').fold(self, |el, name| el.one(name))
    }
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn names(&self) -> Vec<&str> {
        self.children.iter().map(|c| c.name.as_str()).collect()
    }
}

/// Parses the document back with quick-xml, checking the prolog on the way.
fn parse_back(doc: &str) -> El {
    assert!(doc.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    let mut reader = Reader::from_str(doc);
    let mut stack: Vec<El> = vec![El::default()];
    let mut saw_adf_pi = false;
    loop {
        match reader.read_event().expect("well-formed") {
            Event::Decl(_) => {}
            Event::PI(pi) => {
                assert_eq!(pi.target(), b"adf");
                assert_eq!(pi.content(), br#" version="1.0""#);
                saw_adf_pi = true;
            }
            Event::Start(e) => {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.expect("attribute");
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).expect("utf8"),
                            a.unescape_value().expect("value").into_owned(),
                        )
                    })
                    .collect();
                stack.push(El {
                    name: String::from_utf8(e.name().as_ref().to_vec()).expect("utf8"),
                    attrs,
                    ..El::default()
                });
            }
            Event::Empty(e) => {
                let el = El {
                    name: String::from_utf8(e.name().as_ref().to_vec()).expect("utf8"),
                    ..El::default()
                };
                stack.last_mut().expect("parent").children.push(el);
            }
            Event::End(_) => {
                let el = stack.pop().expect("open");
                stack.last_mut().expect("parent").children.push(el);
            }
            Event::Text(t) => {
                let top = stack.last_mut().expect("open");
                if !top.name.is_empty() {
                    top.text.push_str(&t.xml10_content().expect("text"));
                }
            }
            Event::GeneralRef(r) => {
                let top = stack.last_mut().expect("open");
                let resolved = match r.resolve_char_ref().expect("char ref") {
                    Some(c) => c.to_string(),
                    None => {
                        quick_xml::escape::resolve_predefined_entity(&r.decode().expect("name"))
                            .expect("predefined")
                            .to_owned()
                    }
                };
                top.text.push_str(&resolved);
            }
            Event::Eof => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_adf_pi, "<?adf version=\"1.0\"?> present");
    let mut root = stack.pop().expect("document");
    assert!(stack.is_empty());
    assert_eq!(root.children.len(), 1);
    let adf = root.children.remove(0);
    assert_eq!(adf.name, "adf");
    adf
}

fn comments_of(v: &El) -> Vec<String> {
    v.one("comments")
        .text
        .split("; ")
        .map(str::to_owned)
        .collect()
}

#[test]
fn spec_example_renders_the_mapped_document() {
    let doc = render_with(&spec_example());
    assert!(doc.contains("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<?adf version=\"1.0\"?>"));
    let adf = parse_back(&doc);
    let p = adf.one("prospect");
    assert_eq!(
        p.names(),
        [
            "id",
            "requestdate",
            "vehicle",
            "vehicle",
            "customer",
            "vendor",
            "provider"
        ]
    );
    let id = p.one("id");
    assert_eq!(id.text, "lead-0001");
    assert_eq!(id.attr("sequence"), Some("1"));
    assert_eq!(id.attr("source"), Some("aap-gateway"));
    assert_eq!(p.one("requestdate").text, "2026-04-30T10:16:05Z");

    let vehicles = p.all("vehicle");
    let voi = vehicles[0];
    assert_eq!(voi.attr("interest"), Some("test-drive"));
    assert_eq!(voi.attr("status"), Some("used"));
    assert_eq!(voi.names(), ["year", "make", "model", "vin", "comments"]);
    assert_eq!(voi.one("year").text, "2022");
    assert_eq!(voi.one("make").text, "Honda");
    assert_eq!(voi.one("model").text, "Civic");
    assert_eq!(voi.one("vin").text, "1HGCY2F57RA000001");
    assert_eq!(voi.one("comments").text, "certified pre-owned");

    let trade = vehicles[1];
    assert_eq!(trade.attr("interest"), Some("trade-in"));
    assert_eq!(trade.attr("status"), None);
    assert_eq!(
        trade.names(),
        ["year", "make", "model", "odometer", "condition"]
    );
    assert_eq!(trade.one("odometer").text, "96000");
    assert_eq!(trade.one("odometer").attr("units"), Some("mi"));
    assert_eq!(trade.one("condition").text, "good");

    let customer = p.one("customer");
    assert_eq!(customer.names(), ["contact", "comments"]);
    let contact = customer.one("contact");
    assert_eq!(contact.names(), ["name", "email", "phone"]);
    assert_eq!(contact.one("name").text, "Anna Lee");
    assert_eq!(contact.one("name").attr("part"), Some("full"));
    assert_eq!(contact.one("email").text, "anna@example.com");
    assert_eq!(contact.one("phone").text, "+14155550123");
    assert_eq!(
        customer.one("comments").text,
        "Requested test-drive: 2026-05-02 10:00 PDT (60 min)\n\
             Preferred contact: phone\n\
             Contact consent granted 2026-04-30T10:16:00Z for email, phone: \
             \"I agree to share my contact info with Demo Toyota about VIN 1HGCY2F57RA000001.\""
    );
    assert_eq!(p.at("vendor/vendorname").text, "Demo Toyota");
    assert_eq!(p.one("vendor").names(), ["vendorname"]);
    let provider = p.one("provider");
    assert_eq!(provider.names(), ["name"]);
    assert_eq!(provider.one("name").text, "chatgpt-shopping");
    assert_eq!(provider.one("name").attr("part"), Some("full"));
}

#[test]
fn hostile_text_stays_well_formed_and_round_trips() {
    let hostile = "O'Brien <script>&amp; \"quoted\" ]]> Zoë 東京 🚗 \u{1}\u{8}\u{1b}\u{7f}\ttab\r\nline\rend\u{FFFF}";
    let expected = "O'Brien <script>&amp; \"quoted\" ]]> Zoë 東京 🚗 \u{7f}\ttab\nline\nend";
    let mut request = spec_example();
    request["customer"]["first_name"] = json!(hostile);
    request["customer"]["last_name"] = json!("</name><name>x");
    request["message"] = json!(hostile);
    request["consent"]["consent_text"] = json!(hostile);
    request["vehicle_of_interest"]["model"] = json!(hostile);
    request["vehicle_of_interest"]["other_attributes"] = json!({"k<&>": hostile});
    request["source_agent"]["name"] = json!(hostile);
    request["source_agent"]["url"] = json!("https://agent.example/?a=1&b=\"2\"");
    let tz = la();
    let ctx = AdfContext {
        vendor_name: "Smith & Sons <Toyota>",
        reference: "ref\"&<>'",
        timezone: &tz,
        received_at: Timestamp::UNIX_EPOCH,
    };
    let doc = render(&request, &ctx);
    assert!(!doc.contains("<script>"));
    assert!(!doc.contains("]]>"));
    let adf = parse_back(&doc);
    let p = adf.one("prospect");
    assert_eq!(p.one("id").text, "ref\"&<>'");
    let contact = p.at("customer/contact");
    assert_eq!(contact.all("name").len(), 1);
    assert_eq!(
        contact.one("name").text,
        format!("{expected} </name><name>x")
    );
    let comments = p.at("customer/comments").text.clone();
    assert!(comments.starts_with(&format!("{expected}\n")), "{comments}");
    assert!(
        comments.ends_with(&format!(": \"{expected}\"")),
        "{comments}"
    );
    let voi = p.all("vehicle")[0];
    assert_eq!(voi.one("model").text, expected);
    assert_eq!(
        voi.one("comments").text,
        format!("certified pre-owned; k<&>: {expected}")
    );
    assert_eq!(p.at("vendor/vendorname").text, "Smith & Sons <Toyota>");
    assert_eq!(p.at("provider/name").text, expected);
    assert_eq!(
        p.at("provider/url").text,
        "https://agent.example/?a=1&b=\"2\""
    );
}

/// One request exercising every row of AAP's ADF field table.
#[test]
fn every_table_row() {
    let request = json!({"type":"lead.submit.request",
        "customer":{"first_name":"Ben","last_name":"Okafor","email":"ben@example.com","phone":"+13105550199",
            "preferred_contact":"sms",
            "address":{"address_line_1":"1 Main St","address_line_2":"Apt 4","city":"Oakland","state":"CA","zip":"94607"}},
        "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["phone","sms"],"consent_text":"OK to text me.",
            "scope":["lead_submission"],"expires_at":"2026-07-30T10:16:00Z"},
        "vehicle_of_interest":{"year":2025,"make":"Toyota","model":"RAV4","trim":"XLE","vin":"2T3P1RFV8RW000001",
            "stock":"T12345","condition":"new","body":"suv","transmission":"8-speed automatic","mileage":12,
            "price":34990,"displacement_cc":2487,"other_attributes":{"final_drive":"awd","seats":5,"abs":true,"packages":["tow","sun"]},
            "msrp":36000,"vehicle_id":"internal-9"},
        "trade_in":{"year":2016,"make":"Mazda","model":"3","trim":"Touring","vin":"JM1BM1V79G1000001","mileage":88000,
            "condition":"fair","transmission":"6-speed manual"},
        "appointment":{"appointment_type":"sales","appointment_at":"2026-12-05T18:30:00Z","notes":"Bring the title."},
        "message":"Looking for a family SUV.",
        "source_agent":{"name":"acme-agent","url":"https://acme.example/agent"}});
    let adf = parse_back(&render_with(&request));
    let p = adf.one("prospect");
    // No submitted_at: the time the gateway received the lead, to the second.
    assert_eq!(p.one("requestdate").text, "2026-04-30T10:20:00Z");

    let vehicles = p.all("vehicle");
    let voi = vehicles[0];
    assert_eq!(voi.attr("interest"), Some("buy"));
    assert_eq!(voi.attr("status"), Some("new"));
    assert_eq!(
        voi.names(),
        [
            "year",
            "make",
            "model",
            "vin",
            "stock",
            "trim",
            "bodystyle",
            "transmission",
            "odometer",
            "price",
            "comments"
        ]
    );
    for (name, value) in [
        ("year", "2025"),
        ("make", "Toyota"),
        ("model", "RAV4"),
        ("vin", "2T3P1RFV8RW000001"),
        ("stock", "T12345"),
        ("trim", "XLE"),
        ("bodystyle", "suv"),
        ("transmission", "A"),
        ("odometer", "12"),
        ("price", "34990"),
    ] {
        assert_eq!(voi.one(name).text, value, "{name}");
    }
    assert_eq!(voi.one("odometer").attr("units"), Some("mi"));
    assert_eq!(voi.one("price").attr("type"), Some("quote"));
    assert_eq!(voi.one("price").attr("currency"), Some("USD"));
    assert_eq!(
        comments_of(voi),
        [
            "Displacement: 2487cc",
            "final_drive: awd",
            "seats: 5",
            "abs: true",
            "packages: tow, sun"
        ]
    );

    let trade = vehicles[1];
    assert_eq!(trade.attr("interest"), Some("trade-in"));
    assert_eq!(
        trade.names(),
        [
            "year",
            "make",
            "model",
            "vin",
            "trim",
            "transmission",
            "odometer",
            "condition"
        ]
    );
    assert_eq!(trade.one("trim").text, "Touring");
    assert_eq!(trade.one("vin").text, "JM1BM1V79G1000001");
    assert_eq!(trade.one("transmission").text, "M");
    assert_eq!(trade.one("odometer").text, "88000");
    assert_eq!(trade.one("condition").text, "fair");

    let contact = p.at("customer/contact");
    assert_eq!(contact.one("name").text, "Ben Okafor");
    let address = contact.one("address");
    assert_eq!(
        address.names(),
        [
            "street",
            "street",
            "city",
            "regioncode",
            "postalcode",
            "country"
        ]
    );
    let streets = address.all("street");
    assert_eq!(streets[0].attr("line"), Some("1"));
    assert_eq!(streets[0].text, "1 Main St");
    assert_eq!(streets[1].attr("line"), Some("2"));
    assert_eq!(streets[1].text, "Apt 4");
    assert_eq!(address.one("city").text, "Oakland");
    assert_eq!(address.one("regioncode").text, "CA");
    assert_eq!(address.one("postalcode").text, "94607");
    assert_eq!(address.one("country").text, "US");

    assert_eq!(
        p.at("customer/comments").text,
        "Looking for a family SUV.\n\
             Requested sales appointment: 2026-12-05 10:30 PST\n\
             Appointment notes: Bring the title.\n\
             Preferred contact: sms\n\
             Contact consent granted 2026-04-30T10:16:00Z for phone, sms, expires 2026-07-30T10:16:00Z: \"OK to text me.\""
    );
    let provider = p.one("provider");
    assert_eq!(provider.names(), ["name", "url"]);
    assert_eq!(provider.one("name").text, "acme-agent");
    assert_eq!(provider.one("url").text, "https://acme.example/agent");
}

#[test]
fn customer_only_lead_gets_the_placeholder_vehicle() {
    let mut request = spec_example();
    let obj = request.as_object_mut().expect("object");
    obj.remove("vehicle_of_interest");
    obj.remove("trade_in");
    obj.insert("appointment".into(), json!({"appointment_type": "service"}));
    let adf = parse_back(&render_with(&request));
    let p = adf.one("prospect");
    let vehicles = p.all("vehicle");
    assert_eq!(vehicles.len(), 1);
    let v = vehicles[0];
    assert_eq!(v.attr("interest"), Some("buy"));
    assert_eq!(v.attr("status"), None);
    assert_eq!(v.names(), ["year", "make", "model", "comments"]);
    assert!(v.one("year").text.is_empty());
    assert!(v.one("make").text.is_empty());
    assert!(v.one("model").text.is_empty());
    assert_eq!(v.one("comments").text, GENERAL_INQUIRY);
    assert!(
        p.at("customer/comments")
            .text
            .starts_with("Requested service appointment: time to be arranged\n")
    );
}

#[test]
fn trade_in_only_lead_still_leads_with_the_placeholder() {
    let mut request = spec_example();
    request
        .as_object_mut()
        .expect("object")
        .remove("vehicle_of_interest");
    request["appointment"] = json!({"appointment_type": "trade_in",
        "appointment_at": "2026-05-02T17:00:00-07:00", "duration_minutes": 30});
    let adf = parse_back(&render_with(&request));
    let p = adf.one("prospect");
    let interests: Vec<Option<&str>> = p
        .all("vehicle")
        .iter()
        .map(|v| v.attr("interest"))
        .collect();
    assert_eq!(interests, [Some("buy"), Some("trade-in")]);
    assert!(
        p.at("customer/comments")
            .text
            .starts_with("Requested trade-in appraisal: 2026-05-02 17:00 PDT (30 min)\n")
    );
}

#[test]
fn cpo_displacement_and_attributes_merge_into_one_comments() {
    let mut request = spec_example();
    request["vehicle_of_interest"] = json!({"year": 2021, "make": "Harley-Davidson",
        "model": "Street Glide", "condition": "cpo", "vehicle_type": "motorcycle",
        "displacement_cc": 1868, "transmission": "6-speed manual",
        "other_attributes": {"final_drive": "belt", "engine_stroke": 4}});
    let adf = parse_back(&render_with(&request));
    let voi = adf.one("prospect").all("vehicle")[0];
    assert_eq!(voi.all("comments").len(), 1);
    assert_eq!(
        voi.one("comments").text,
        "certified pre-owned; Displacement: 1868cc; final_drive: belt; engine_stroke: 4"
    );
    assert_eq!(voi.attr("status"), Some("used"));
    assert_eq!(voi.one("transmission").text, "M");
}

#[test]
fn unfoldable_transmission_goes_to_comments() {
    let mut request = spec_example();
    request["vehicle_of_interest"]["transmission"] = json!("sequential");
    let adf = parse_back(&render_with(&request));
    let voi = adf.one("prospect").all("vehicle")[0];
    assert!(voi.all("transmission").is_empty());
    assert_eq!(
        voi.one("comments").text,
        "certified pre-owned; Transmission: sequential"
    );
}

#[test]
fn transmission_folding() {
    for (text, folded) in [
        ("automatic", Some("A")),
        ("Automatic", Some("A")),
        ("8-speed automatic", Some("A")),
        ("10-Speed Automatic w/OD", Some("A")),
        ("cvt", Some("A")),
        ("CVT", Some("A")),
        ("e-CVT", Some("A")),
        ("dct", Some("A")),
        ("7-speed DCT", Some("A")),
        ("DSG", Some("A")),
        ("semi-automatic", Some("A")),
        ("automated manual", Some("A")),
        ("single-speed", Some("A")),
        ("A/T", Some("A")),
        ("A", Some("A")),
        ("manual", Some("M")),
        ("6-speed manual", Some("M")),
        ("Manual", Some("M")),
        ("M/T", Some("M")),
        ("stick shift", Some("M")),
        ("M", Some("M")),
        ("sequential", None),
        ("", None),
    ] {
        assert_eq!(fold_transmission(text), folded, "{text:?}");
    }
}

#[test]
fn test_drive_only_changes_the_interest() {
    let mut request = spec_example();
    request["appointment"]["appointment_type"] = json!("sales");
    let adf = parse_back(&render_with(&request));
    let voi = adf.one("prospect").all("vehicle")[0];
    assert_eq!(voi.attr("interest"), Some("buy"));
}

#[test]
fn xml_text_drops_what_xml_cannot_carry() {
    assert_eq!(
        xml_text("a\u{0}b\u{1f}c\td\r\ne\rf\u{fffe}"),
        "abc\td\ne\nf"
    );
    assert_eq!(xml_text("Zoë ]]> &"), "Zoë ]]> &");
}
