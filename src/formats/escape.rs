//! Escaping for the contexts a user's string is written into: XML text and attributes, URL
//! path segments and query parts, form-encoded credentials, header values. Every place that
//! writes a buyer's or an operator's value into one of these uses the function here, so each
//! rule is written once.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

/// Characters left as they are in a URL path segment or a query name or value (RFC 3986
/// unreserved); everything else is percent-encoded, `/` and `?` included.
pub const URL_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `application/x-www-form-urlencoded` as RFC 6749 §2.3.1 asks for client credentials.
pub const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'*');

/// XML character escaping for text and attribute values.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all are dropped rather than sent broken.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// Whether `text` can stand in an HTTP or mail header value: no line break, no NUL (a value
/// that could start a header of its own is refused, never cleaned).
pub fn header_safe(text: &str) -> bool {
    !text.contains(['\r', '\n', '\0'])
}

#[cfg(test)]
mod tests {
    use percent_encoding::utf8_percent_encode;

    use super::*;

    #[test]
    fn xml_escape_leaves_no_markup_and_drops_what_xml_cannot_carry() {
        assert_eq!(
            xml_escape("<a href=\"x\">'&'</a>\u{1}\t"),
            "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;\t"
        );
    }

    #[test]
    fn url_components_keep_only_unreserved_characters() {
        assert_eq!(
            utf8_percent_encode("a/b?c=d&e f~-._", URL_COMPONENT).to_string(),
            "a%2Fb%3Fc%3Dd%26e%20f~-._"
        );
        assert_eq!(
            utf8_percent_encode("a b:c*", FORM).to_string(),
            "a%20b%3Ac*"
        );
    }

    #[test]
    fn header_values_refuse_line_breaks() {
        assert!(header_safe("Anna Lee"));
        assert!(!header_safe("x\r\nBcc: y"));
        assert!(!header_safe("x\0"));
    }
}
