//! The decoders against awkward bodies: charsets, CSV quirks, deep and wide XML.

use std::borrow::Cow;

use super::charsets::*;
use super::csv_rows::*;
use super::xml_tree::*;
use super::*;
use crate::lang::jq::JqValue;
use serde_json::json;

#[test]
fn csv_rows_become_objects_keyed_by_header() {
    let body = "\u{FEFF}VIN,Price,Model\r\nA1,\"$24,990\",Civic \r\nB2,,Accord\r\n";
    let v = Format::Csv.decode(body.as_bytes()).unwrap();
    assert_eq!(
        v,
        json!([{"VIN": "A1", "Price": "$24,990", "Model": "Civic"}, {"VIN": "B2", "Price": "", "Model": "Accord"}])
    );
}

/// Every row `CsvText::rows` reads, as the JSON the feed maps.
fn rows_one_by_one(body: &[u8]) -> Result<Value, String> {
    let text = CsvText::new(body, Declared::default())?;
    every_row(text.rows()?)
}

/// The rows left in `rows`, each as the JSON object the feed maps.
fn every_row<R: std::io::Read>(mut rows: CsvRows<R>) -> Result<Value, String> {
    let mut record = csv::StringRecord::new();
    let mut out = Vec::new();
    while rows.next_into(&mut record)? {
        out.push(row_json(&rows.columns().row(&record)));
    }
    Ok(Value::Array(out))
}

fn row_json(row: &CsvRow<'_>) -> Value {
    let object = row
        .fields()
        .map(|(name, field)| (name.to_owned(), Value::String(field.to_owned())))
        .collect();
    Value::Object(object)
}

#[test]
fn csv_fields_and_names_lose_surrounding_ascii_white_space_only() {
    let body = " Make ,\tPrice\r\n  Honda\t,\" $1 \" \r\n\u{a0}Kia\u{a0},\"\"\r\n";
    assert_eq!(
        Format::Csv.decode(body.as_bytes()).unwrap(),
        json!([{"Make": "Honda", "Price": "$1"}, {"Make": "\u{a0}Kia\u{a0}", "Price": ""}])
    );
}

#[test]
fn csv_rows_become_the_jq_objects_their_json_text_parses_to() {
    // Names that repeat, rows short and long, quotes, escapes JSON must write, non-ASCII.
    let body = "Make,Note,Make,Tab\\\r\nHonda,\"a \\ b \"\"q\"\"\",Acura,\"x\ty\u{1}\"\r\n\
                Kia\r\n,,,,extra\r\n\"Škoda\",\"line\nbreak\",Ü,€\r\n";
    let text = CsvText::new(body.as_bytes(), Declared::default()).unwrap();
    let mut rows = text.rows().unwrap();
    let objects = crate::lang::jq::TextObjects::new(rows.columns().names());
    let mut record = csv::StringRecord::new();
    let mut seen = 0;
    while rows.next_into(&mut record).unwrap() {
        let row = rows.columns().row(&record);
        let json = serde_json::to_vec(&row_json(&row)).unwrap();
        let expected = crate::lang::jq::JqValue::from_json_slice(&json).unwrap();
        assert_eq!(
            objects.build(row.text(), row.entries()),
            expected,
            "{row:?}"
        );
        seen += 1;
    }
    assert_eq!(seen, 4);
}

#[test]
fn csv_rows_read_one_by_one_are_the_rows_of_the_decoded_document() {
    // A repeated header keeps its first place and its last field the row reaches; a short
    // row lacks its missing columns; a long row's extra fields are dropped.
    let body = "\u{FEFF}A,B,A,C\r\n1,2,3,4\r\n5,6\r\n7\r\n8,9,10,11,12\r\n\"x, \"\"y\"\"\",,,\r\n";
    let whole = Format::Csv.decode(body.as_bytes()).unwrap();
    assert_eq!(
        whole,
        json!([{"A": "3", "B": "2", "C": "4"}, {"A": "5", "B": "6"}, {"A": "7"},
               {"A": "10", "B": "9", "C": "11"}, {"A": "", "B": "", "C": ""}])
    );
    assert_eq!(rows_one_by_one(body.as_bytes()).unwrap(), whole);
    let quoted = "Name\r\n\"x, \"\"y\"\"\"\r\n";
    assert_eq!(
        rows_one_by_one(quoted.as_bytes()).unwrap(),
        json!([{"Name": "x, \"y\""}])
    );
}

/// A source that hands out one byte per read, as the worst network would.
struct Trickle(std::io::Cursor<Vec<u8>>);

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(1);
        self.0.read(&mut buf[..n])
    }
}

fn streamed(body: &[u8], declared: Declared<'_>) -> Result<Value, String> {
    every_row(csv_stream(
        Trickle(std::io::Cursor::new(body.to_vec())),
        declared,
    )?)
}

#[test]
fn a_csv_read_as_it_arrives_gives_the_rows_and_errors_of_the_whole_body() {
    let utf8 = "\u{FEFF}VIN,Model\r\nA1,Civic \r\nB2,\"CR-V, \"\"Hybrid\"\"\"\r\n".as_bytes();
    let latin1 = b"VIN,Color\r\nA1,Cr\xe8me\r\n";
    let cases = [
        (utf8, Declared::default()),
        (latin1, mapping("windows-1252", None)),
        (latin1, content_type("text/csv; charset=iso-8859-1")),
        (b"A,B\n1,2\n\xff,3\n", Declared::default()),
        (b"", Declared::default()),
    ];
    for (body, declared) in cases {
        assert_eq!(
            streamed(body, declared),
            Format::Csv.decode_with(body, declared),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(
        streamed(latin1, mapping("windows-1252", None)).unwrap(),
        json!([{ "VIN": "A1", "Color": "Cr\u{e8}me" }])
    );
}

#[test]
fn csv_rows_read_one_by_one_fail_as_the_whole_document_does() {
    for body in [&b"A,B\n1,2\n\xff,3\n"[..], b"\xff,B\n1,2\n"] {
        let whole = Format::Csv.decode(body).unwrap_err();
        assert_eq!(rows_one_by_one(body).unwrap_err(), whole);
    }
    let whole = Format::Csv.decode(b"A,B\n1,2\n\xff,3\n").unwrap_err();
    assert!(whole.starts_with("CSV row 3 is not valid UTF-8"), "{whole}");
}

#[test]
fn xml_namespaces_lists_and_attributes() {
    let body = r#"<?xml version="1.0"?>
<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>
  <r:Result xmlns:r="urn:x" count="1"><r:Vehicle><r:VIN>A&amp;B</r:VIN></r:Vehicle></r:Result>
</s:Body></s:Envelope>"#;
    let format = Format::Xml {
        list_elements: HashSet::from(["Vehicle".to_owned()]),
    };
    let v = format.decode(body.as_bytes()).unwrap();
    assert_eq!(
        v,
        json!({"Envelope": {"Body": {"Result": {"@count": "1", "Vehicle": [{"VIN": "A&B"}]}}}})
    );
}

#[test]
fn repeated_xml_elements_become_arrays() {
    let v = Format::Xml {
        list_elements: HashSet::new(),
    }
    .decode(b"<a><b>1</b><b>2</b><c/></a>")
    .unwrap();
    assert_eq!(v, json!({"a": {"b": ["1", "2"], "c": ""}}));
}

// --- charsets ---

fn xml() -> Format {
    Format::Xml {
        list_elements: HashSet::new(),
    }
}

fn content_type(value: &str) -> Declared<'_> {
    Declared {
        mapping: None,
        content_type: Some(value),
    }
}

fn mapping(label: &str, content_type: Option<&'static str>) -> Declared<'static> {
    Declared {
        mapping: Some(charset(label).unwrap()),
        content_type,
    }
}

/// Windows-1252 bytes: é E9, ü FC, © A9, € 80 (0x80 is a C1 control in true ISO-8859-1;
/// exports labelled ISO-8859-1 mean Windows-1252, and so does the label).
const CAR_1252: &[u8] = b"<car><model>M\xE9gane</model><trim>\xFCber \xA9</trim>\
    <price>\x80 31 990</price></car>";

fn car() -> Value {
    json!({"car": {"model": "Mégane", "trim": "über ©", "price": "€ 31 990"}})
}

fn with_declaration(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!("<?xml version=\"1.0\" encoding=\"{encoding}\"?>\n").into_bytes();
    out.extend_from_slice(body);
    out
}

#[test]
fn latin1_xml_is_read_in_the_charset_its_declaration_names() {
    for label in ["ISO-8859-1", "iso-8859-1", "latin1", "windows-1252"] {
        let body = with_declaration(label, CAR_1252);
        assert_eq!(xml().decode(&body).unwrap(), car(), "{label}");
    }
    // Single quotes, other pseudo-attributes around it, a newline before it.
    let body = [
        b"\n<?xml encoding = 'ISO-8859-1' standalone='yes' ?>".as_slice(),
        CAR_1252,
    ]
    .concat();
    assert_eq!(xml().decode(&body).unwrap(), car());
}

#[test]
fn the_content_type_charset_overrides_the_xml_declaration() {
    // A UTF-8 body whose declaration lies, and a Latin-1 one whose declaration lies.
    let utf8 = with_declaration("ISO-8859-1", "<car><model>Mégane</model></car>".as_bytes());
    let got = xml()
        .decode_with(&utf8, content_type("application/xml; charset=UTF-8"))
        .unwrap();
    assert_eq!(got, json!({"car": {"model": "Mégane"}}));
    let latin1 = with_declaration("UTF-8", CAR_1252);
    let got = xml()
        .decode_with(&latin1, content_type("text/xml;Charset=\"iso-8859-1\""))
        .unwrap();
    assert_eq!(got, car());
}

#[test]
fn the_mapping_charset_overrides_content_type_and_declaration() {
    let body = with_declaration("UTF-8", CAR_1252);
    let declared = mapping("windows-1252", Some("application/xml; charset=utf-8"));
    assert_eq!(xml().decode_with(&body, declared).unwrap(), car());
}

#[test]
fn a_utf16le_body_with_a_bom_is_transcoded() {
    let text = "<?xml version=\"1.0\" encoding=\"UTF-16\"?><car><model>Mégane</model>\
                <trim>über ©</trim><price>€ 31 990</price></car>";
    let mut body = vec![0xFF, 0xFE];
    body.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    assert_eq!(xml().decode(&body).unwrap(), car());
    // Cut in the middle of a code unit: an error, not a guess.
    let error = xml().decode(&body[..body.len() - 1]).unwrap_err();
    assert_eq!(error, "body is not valid UTF-16LE per the byte order mark");
}

#[test]
fn a_windows_1252_csv_is_read_in_the_mapping_charset() {
    let body = b"VIN,Model,Interior\r\nA1,M\xE9gane,Cr\xE8me \xA9 \x80\r\n";
    let got = Format::Csv
        .decode_with(body, mapping("windows-1252", Some("text/csv")))
        .unwrap();
    assert_eq!(
        got,
        json!([{"VIN": "A1", "Model": "Mégane", "Interior": "Crème © €"}])
    );
}

#[test]
fn a_csv_that_is_not_utf8_asks_for_a_charset_without_quoting_the_body() {
    let body = b"VIN,Model\r\nA1,Civic\r\nB2,M\xE9gane\r\n";
    let error = Format::Csv.decode(body).unwrap_err();
    assert!(error.contains("charset: windows-1252"), "{error}");
    assert!(error.starts_with("CSV row 3 is not valid UTF-8"), "{error}");
    assert!(error.contains("no charset declared"), "{error}");
    assert!(!error.contains("gane") && !error.contains("B2"), "{error}");
    // A Content-Type that says UTF-8 is named as the reason.
    let error = Format::Csv
        .decode_with(body, content_type("text/csv; charset=utf-8"))
        .unwrap_err();
    assert!(
        error.contains("UTF-8 per the Content-Type header"),
        "{error}"
    );
    assert!(error.contains("charset: windows-1252"), "{error}");
}

#[test]
fn a_utf8_body_is_borrowed_not_copied() {
    let body = "\u{FEFF}<car><model>Mégane</model></car>".as_bytes();
    let (text, charset) = to_utf8(body, true, Declared::default()).unwrap();
    assert!(matches!(text, Cow::Borrowed(b) if b.as_ptr() == body[3..].as_ptr()));
    assert_eq!(charset.source, Source::Bom);
    let body = "VIN,Model\nA1,Mégane\n".as_bytes();
    let declared = content_type("text/csv; charset=utf-8");
    let (text, _) = to_utf8(body, false, declared).unwrap();
    assert!(matches!(text, Cow::Borrowed(b) if b.as_ptr() == body.as_ptr()));
    // Nor is an ASCII body in a single-byte charset.
    let (text, _) = to_utf8(b"VIN\nA1\n", false, mapping("latin1", None)).unwrap();
    assert!(matches!(text, Cow::Borrowed(_)));
    // Invalid UTF-8 XML fails in the parser, as before.
    let error = xml()
        .decode(b"<car><model>M\xE9gane</model></car>")
        .unwrap_err();
    assert!(error.starts_with("bad XML text"), "{error}");
}

#[test]
fn an_unknown_charset_label_is_a_clear_error() {
    let body = with_declaration("x-no-such-charset", b"<car/>");
    let error = xml().decode(&body).unwrap_err();
    assert_eq!(
        error,
        "the XML declaration names an unknown charset \"x-no-such-charset\"; \
         set `charset:` in the mapping to override"
    );
    let error = Format::Csv
        .decode_with(b"a\n1\n", content_type("text/csv; charset=klingon"))
        .unwrap_err();
    assert!(error.starts_with("the Content-Type header names an unknown charset \"klingon\""));
    // What does not look like a label is not quoted.
    let body = with_declaration("<b>J. Smith</b>", b"<car/>");
    let error = xml().decode(&body).unwrap_err();
    assert!(
        error.starts_with("the XML declaration names an unknown charset;"),
        "{error}"
    );
    // The mapping's label is checked when the folder loads.
    assert!(charset("latin1").is_ok_and(|e| e == encoding_rs::WINDOWS_1252));
    assert!(charset("ISO-8859-15").is_ok_and(|e| e == encoding_rs::ISO_8859_15));
    assert!(
        charset("klingon")
            .unwrap_err()
            .starts_with("unknown charset `klingon`")
    );
    // Labels that encoding_rs maps to its "replacement" decoder are not charsets to read.
    assert!(charset("iso-2022-kr").is_err());
}

#[test]
fn charset_sources_are_read_precisely() {
    assert_eq!(
        content_type_charset("text/csv; charset=\"UTF-8\""),
        Some("UTF-8")
    );
    assert_eq!(
        content_type_charset("text/csv ; CHARSET = latin1 ; x=y"),
        Some("latin1")
    );
    assert_eq!(content_type_charset("text/csv"), None);
    assert_eq!(content_type_charset("text/csv; charset="), None);
    assert_eq!(
        xml_declared_encoding(b"<?xml version=\"1.0\"?><a/>"),
        None,
        "no encoding pseudo-attribute"
    );
    assert_eq!(
        xml_declared_encoding(b"<?xml-stylesheet href='a'?><a/>"),
        None
    );
    assert_eq!(xml_declared_encoding(b"<a/>"), None);
    // A declaration that says UTF-16 but is readable as ASCII is not UTF-16.
    let body = with_declaration("UTF-16", "<a>é</a>".as_bytes());
    assert_eq!(xml().decode(&body).unwrap(), json!({"a": "é"}));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(Format::Json.decode(b"\xff\xfe{").is_err());
    assert!(
        Format::Xml {
            list_elements: HashSet::new()
        }
        .decode(b"<a><b></a>")
        .is_err()
    );
}

/// Bodies as legacy systems and broken proxies send them: a BOM or not, an XML declaration
/// naming some charset or not, then anything.
fn legacy_body() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let prefix = prop_oneof![
        Just(Vec::new()),
        Just(UTF8_BOM.to_vec()),
        Just(b"\xFF\xFE".to_vec()),
        Just(b"\xFE\xFF".to_vec()),
        prop::sample::select(vec![
            "ISO-8859-1",
            "windows-1252",
            "UTF-16",
            "utf-16be",
            "Shift_JIS",
            "x-unknown",
            "",
        ])
        .prop_map(|label| format!("<?xml version=\"1.0\" encoding=\"{label}\"?>").into_bytes()),
        Just(b"<?xml version='1.0' encoding='".to_vec()),
    ];
    let rest = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        "[<>a-z/ =\"'&;#\\[\\]!?\u{e9}\u{20ac}\\x00-\\x7f]{0,200}".prop_map(String::into_bytes),
    ];
    (prefix, rest).prop_map(|(mut prefix, rest)| {
        prefix.extend(rest);
        prefix
    })
}

proptest::proptest! {
    /// Whatever the body and whatever declares its charset, decoding answers (a value or
    /// an error) and never panics.
    #[test]
    fn no_body_or_charset_makes_decoding_panic(
        body in legacy_body(),
        mapping_label in proptest::option::of(proptest::sample::select(
            vec!["windows-1252", "utf-8", "utf-16le", "shift_jis"],
        )),
        content_type in proptest::option::of(proptest::sample::select(vec![
            "text/xml; charset=ISO-8859-1",
            "application/xml;charset=\"utf-16\"",
            "text/csv; charset=",
            "text/csv; charset=bogus",
            "text/plain",
        ])),
    ) {
        let declared = Declared {
            mapping: mapping_label.map(|label| charset(label).unwrap()),
            content_type,
        };
        let list = Format::Xml { list_elements: HashSet::from(["a".to_owned()]) };
        for format in [Format::Json, Format::Csv, list] {
            let _ = format.decode_with(&body, declared);
            let _ = JqValue::decode(&format, &bytes::Bytes::copy_from_slice(&body), declared);
        }
    }
}

// --- budgets ---

/// `depth` nested `<e>` elements (each with a sibling `<s/>` for width), closed properly.
fn nested(depth: usize, width: usize) -> Vec<u8> {
    let mut out = String::with_capacity(depth * (8 + 4 * width));
    for _ in 0..depth {
        out.push_str("<e>");
        for _ in 0..width {
            out.push_str("<s/>");
        }
    }
    for _ in 0..depth {
        out.push_str("</e>");
    }
    out.into_bytes()
}

#[test]
fn deep_xml_is_refused_where_it_gets_too_deep() {
    let ok = JqValue::decode(
        &xml(),
        &bytes::Bytes::copy_from_slice(&nested(MAX_XML_DEPTH, 0)),
        Declared::default(),
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    // 128 levels of 3 bytes each: the 129th `<e>` ends at byte 3 × 129.
    let too_deep = xml().decode(&nested(MAX_XML_DEPTH + 1, 0)).unwrap_err();
    assert_eq!(
        too_deep,
        format!("XML nests deeper than {MAX_XML_DEPTH} elements (at byte 387)")
    );
    // The attack of issue 15: ~10⁵ levels in a few hundred KB (far under the reply cap)
    // used to overflow the stack when the value was converted and dropped.
    for format in [xml(), Format::Json] {
        let body = match format {
            Format::Json => "[".repeat(100_000).into_bytes(),
            Format::Csv | Format::Xml { .. } => nested(100_000, 0),
        };
        let error = JqValue::decode(
            &format,
            &bytes::Bytes::copy_from_slice(&body),
            Declared::default(),
        )
        .unwrap_err();
        assert!(
            error.contains("deeper than") || error.contains("recursion limit"),
            "{error}"
        );
    }
}

#[test]
fn deep_json_is_bounded_by_the_parser() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
    assert!(
        JqValue::decode(
            &Format::Json,
            &bytes::Bytes::copy_from_slice(&deep(127)),
            Declared::default()
        )
        .is_ok()
    );
    let error = JqValue::decode(
        &Format::Json,
        &bytes::Bytes::copy_from_slice(&deep(129)),
        Declared::default(),
    )
    .unwrap_err();
    assert!(error.contains("recursion limit"), "{error}");
    assert!(Format::Json.decode(&deep(129)).is_err());
}

#[test]
fn wide_xml_is_refused_past_the_node_budget() {
    let budget = Budget {
        depth: 8,
        nodes: 100,
    };
    let list = HashSet::new();
    // The root and 99 children: 100 nodes.
    assert!(decode_xml_within(&nested(1, 99), &list, budget).is_ok());
    let error = decode_xml_within(&nested(1, 100), &list, budget).unwrap_err();
    assert_eq!(
        error,
        "XML holds more than 100 elements and attributes (at byte 403)"
    );
    // Attributes count too.
    let attributes = format!(
        "<e {}/>",
        (0..100)
            .map(|i| format!("a{i}=''"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(decode_xml_within(attributes.as_bytes(), &list, budget).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 64,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Deep and wide documents: within the budgets they decode (and convert to jq values,
    /// and are dropped) on a test thread's stack; past them they are refused, and the
    /// error says which budget and where. Never a crash.
    #[test]
    fn deep_and_wide_documents_decode_or_are_refused(
        depth in proptest::prop_oneof![1usize..=140, 140usize..20_000],
        width in 0usize..40,
        nodes in 50usize..2_000,
    ) {
        let budget = Budget { depth: MAX_XML_DEPTH, nodes };
        let body = nested(depth, width);
        let needed = depth * (1 + width);
        // The `<s/>` children sit one level below the deepest `<e>`.
        let levels = depth + usize::from(width > 0);
        match decode_xml_within(&body, &HashSet::new(), budget) {
            Ok(value) => {
                proptest::prop_assert!(levels <= MAX_XML_DEPTH && needed <= nodes);
                drop(JqValue::from_json(&value));
            }
            Err(error) => {
                let over_depth = error.starts_with("XML nests deeper than 128 elements (at byte ");
                let over_nodes = error.starts_with(&format!("XML holds more than {nodes} elements"));
                proptest::prop_assert!(over_depth || over_nodes, "{}", error);
                proptest::prop_assert!(levels > MAX_XML_DEPTH || needed > nodes);
            }
        }
    }
}

// === unpacking ===

fn gzipped(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn limits(max_bytes: u64) -> Unpack {
    Unpack {
        member: None,
        max_bytes,
        max_ratio: DEFAULT_MAX_RATIO,
    }
}

#[test]
fn packings_are_told_by_their_first_bytes_and_short_bodies_are_plain() {
    assert_eq!(Packing::sniff(b"\x1f\x8b\x08\x00"), Packing::Gzip);
    assert_eq!(Packing::sniff(b"PK\x03\x04rest"), Packing::Zip);
    assert_eq!(Packing::sniff(b"PK\x05\x06"), Packing::Zip);
    for plain in [
        &b""[..],
        b"[",
        b"PK",
        b"\x1f",
        b"VIN,PK\x03\x04",
        b"\xEF\xBB\xBF{}",
    ] {
        assert_eq!(Packing::sniff(plain), Packing::Plain, "{plain:?}");
    }
    // A plain body is not copied.
    assert_eq!(unpacked_whole(b"[1]", None, &limits(10)).unwrap(), None);
}

#[test]
fn concatenated_gzip_members_unpack_as_one_document() {
    // `cat a.gz b.gz` is a valid gzip file (RFC 1952 §2.2): exports appended daily are.
    let mut body = gzipped(b"VIN,Price\nA1,1\n");
    body.extend(gzipped(b"B2,2\n"));
    let text = unpacked_whole(&body, Some("application/gzip"), &limits(1 << 20)).unwrap();
    assert_eq!(text.as_deref(), Some(&b"VIN,Price\nA1,1\nB2,2\n"[..]));
}

#[test]
fn a_small_document_is_never_refused_for_its_ratio_and_a_large_one_is() {
    // Well over 100 times, under the floor: a short export of repeated values.
    let small = vec![b'x'; (RATIO_FLOOR / 2) as usize];
    let packed = gzipped(&small);
    assert!(packed.len() * 100 < small.len());
    let out = unpacked_whole(&packed, None, &limits(u64::MAX)).unwrap();
    assert_eq!(out.map(|o| o.len()), Some(small.len()));
    let large = vec![b'x'; (RATIO_FLOOR * 4) as usize];
    let error = unpacked_whole(&gzipped(&large), None, &limits(u64::MAX)).unwrap_err();
    assert!(
        error.starts_with("the gzip file unpacks to more than 100 times"),
        "{error}"
    );
}

#[test]
fn a_truncated_or_corrupt_gzip_file_is_an_error_that_says_so() {
    let body = gzipped(&b"VIN,Price\nA1,1\n".repeat(1000));
    let error = unpacked_whole(&body[..body.len() / 2], None, &limits(1 << 30)).unwrap_err();
    assert!(
        error.starts_with("the gzip file does not unpack ("),
        "{error}"
    );
}

// === CSV dialects ===

#[test]
fn numbers_with_decimal_commas_are_rewritten_and_other_text_is_not() {
    let dialect = CsvDialect {
        delimiter: b';',
        quote: b'\'',
        decimal_comma: true,
    };
    let body = "Prix;Heures;Date;Tel;Note;Stock #\n\
        '12.499,50';1.250 h;07.12.2026;0 800 123 456;'vu; 2x';A-1\n\
        € 9.999;-3,5;12,5;1'250'000,00;abc;12a34\n";
    let text = CsvText::new(body.as_bytes(), Declared::default()).unwrap();
    let mut rows = text.rows_with(&dialect).unwrap();
    let names: Vec<&str> = rows.columns().names().collect();
    assert_eq!(names, ["Prix", "Heures", "Date", "Tel", "Note", "Stock #"]);
    let mut record = csv::StringRecord::new();
    let mut all = Vec::new();
    while rows.next_into(&mut record).unwrap() {
        all.push(record.iter().map(str::to_owned).collect::<Vec<_>>());
    }
    assert_eq!(
        all,
        [
            [
                "12499.50",
                "1250 h",
                "07.12.2026",
                "0 800 123 456",
                "vu; 2x",
                "A-1"
            ],
            ["€ 9999", "-3.5", "12.5", "1250000.00", "abc", "12a34"],
        ]
    );
}
