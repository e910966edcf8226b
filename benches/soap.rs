//! The SOAP pieces of a lead or vehicle call, without network:
//!
//! - `soap/render_submit_lead_digest`: a typical `SubmitLead` Body (as a template renders it)
//!   wrapped in a SOAP 1.1 envelope with a WS-Security `PasswordDigest` UsernameToken, with the
//!   clock and nonce fixed: escaping, SHA-1, Base64 and the string pushes.
//! - `soap/render_submit_lead_digest_fresh`: the same through `soap::request`, i.e. with a real
//!   clock read and a fresh random nonce, as in production.
//! - `soap/render_submit_lead_plain`: no security header (the floor: one allocation and copies).
//! - `soap/decode_reply_2k`: a typical ~2 KB `SubmitLeadResponse` envelope → Body as JSON.
//! - `soap/decode_fault_1_2`: a SOAP 1.2 Fault with subcode and detail.

use std::collections::HashSet;
use std::hint::black_box;

use aap_gateway::formats::Declared;
use aap_gateway::upstream::Secret;
use aap_gateway::upstream::soap::{self, SoapSettings, SoapVersion, WsSecurity};
use criterion::{Criterion, criterion_group, criterion_main};

/// What a `lead.submit` body template renders for a typical lead: about 1.1 KB.
const SUBMIT_LEAD: &str = r#"<SubmitLead xmlns="http://crm.demo-toyota.example/leads/2019"><lead><ExternalReference>aap-01HZ9F4M7C0X3K5RN8B3WJTW2P</ExternalReference><Source>AAP Gateway</Source><RequestDate>2024-03-05T07:08:09Z</RequestDate><Customer><FirstName>Jane</FirstName><LastName>O&apos;Doe</LastName><Email>jane.doe@example.com</Email><Phone>+1-555-0100</Phone><PreferredContact>email</PreferredContact><PostalCode>94107</PostalCode></Customer><Vehicle><Vin>JTDKARFU0L3123456</Vin><StockNumber>T12345</StockNumber><Year>2020</Year><Make>Toyota</Make><Model>Prius</Model><Trim>LE</Trim><Condition>used</Condition><Price currency="USD">24990</Price></Vehicle><Interest>test_drive</Interest><Comments>Is the car still available? I&apos;d like a test drive on Saturday morning &amp; a trade-in estimate for my 2014 Corolla (about 98,000 miles).</Comments><TradeIn><Year>2014</Year><Make>Toyota</Make><Model>Corolla</Model><Mileage>98000</Mileage></TradeIn><Consent><Contact>true</Contact><Marketing>false</Marketing><CapturedAt>2024-03-05T07:07:58Z</CapturedAt><Text>I agree to be contacted by Demo Toyota about my request.</Text></Consent></lead></SubmitLead>"#;

/// A typical CRM answer: the lead id, its status, the assigned salesperson and echoes.
fn reply_2k() -> String {
    let mut warnings = String::new();
    for i in 0..8 {
        warnings.push_str(&format!(
            "<Warning code=\"W{i:03}\"><Field>Customer/Phone</Field><Message>Phone number \
             normalised to E.164 format for routing rule {i}</Message></Warning>"
        ));
    }
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema"><soap:Header><ServerInfo xmlns="http://crm.demo-toyota.example/leads/2019"><Node>crm-app-02</Node><ElapsedMs>184</ElapsedMs></ServerInfo></soap:Header><soap:Body><SubmitLeadResponse xmlns="http://crm.demo-toyota.example/leads/2019"><SubmitLeadResult><Success>true</Success><LeadId>L-2024-0003187</LeadId><Status>New</Status><Duplicate>false</Duplicate><ExternalReference>aap-01HZ9F4M7C0X3K5RN8B3WJTW2P</ExternalReference><ReceivedAt>2024-03-05T07:08:10.184Z</ReceivedAt><AssignedTo><SalespersonId>SP-118</SalespersonId><Name>Alex Rivera</Name><Email>alex.rivera@demo-toyota.example</Email></AssignedTo><Warnings>{warnings}</Warnings></SubmitLeadResult></SubmitLeadResponse></soap:Body></soap:Envelope>"#
    )
}

const FAULT_1_2: &str = r#"<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" xmlns:crm="urn:crm"><env:Body><env:Fault><env:Code><env:Value>env:Sender</env:Value><env:Subcode><env:Value>crm:DuplicateLead</env:Value></env:Subcode></env:Code><env:Reason><env:Text xml:lang="en">Lead already exists</env:Text></env:Reason><env:Detail><crm:ExistingLeadId>L-7</crm:ExistingLeadId></env:Detail></env:Fault></env:Body></env:Envelope>"#;

fn bench(c: &mut Criterion) {
    let digest = SoapSettings {
        version: SoapVersion::V1_1,
        security: Some(WsSecurity {
            username: "demo-crm".to_owned(),
            password: Secret::new("crm-s3cret"),
            digest: true,
        }),
    };
    let plain = SoapSettings {
        version: SoapVersion::V1_1,
        security: None,
    };
    let now: jiff::Timestamp = "2024-03-05T07:08:09Z".parse().expect("timestamp");
    let nonce = [7u8; 16];
    let action = Some("http://crm.demo-toyota.example/leads/2019/SubmitLead");
    let reply = reply_2k();
    let lists = HashSet::from(["Warning".to_owned()]);
    assert!(
        (1800..2600).contains(&reply.len()),
        "reply is {} bytes",
        reply.len()
    );
    assert!(
        soap::decode_reply(reply.as_bytes(), Declared::default(), &lists)
            .expect("decodes")
            .fault
            .is_none()
    );

    let mut group = c.benchmark_group("soap");
    group.bench_function("render_submit_lead_digest", |b| {
        b.iter(|| {
            soap::request_at(
                &digest,
                String::new(),
                action,
                black_box(SUBMIT_LEAD),
                false,
                now,
                nonce,
            )
        })
    });
    group.bench_function("render_submit_lead_digest_fresh", |b| {
        b.iter(|| {
            soap::request(
                &digest,
                String::new(),
                action,
                black_box(SUBMIT_LEAD),
                false,
            )
        })
    });
    group.bench_function("render_submit_lead_plain", |b| {
        b.iter(|| {
            soap::request_at(
                &plain,
                String::new(),
                action,
                black_box(SUBMIT_LEAD),
                false,
                now,
                nonce,
            )
        })
    });
    group.bench_function("decode_reply_2k", |b| {
        b.iter(|| soap::decode_reply(black_box(reply.as_bytes()), Declared::default(), &lists))
    });
    group.bench_function("decode_fault_1_2", |b| {
        b.iter(|| soap::decode_reply(black_box(FAULT_1_2.as_bytes()), Declared::default(), &lists))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

// The binary runs on mimalloc (see src/main.rs); measure the same allocator here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
