//! The JSON-RPC reply every answer of the gateway must be, whatever a caller sent
//! (docs/protocol.md §Order of checks, §Error data array): one object with `jsonrpc: "2.0"`, an
//! `id` that is a string, a number or null, and exactly one of an object `result` or an `error`
//! with an integer code, a message and `data` whose entries are typed, the first a
//! `google.rpc.ErrorInfo`. The fuzz tests hold every reply to it.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};

/// Checks a reply's shape; its label: `JsonRpc result`, or `JsonRpc error X` with the AAP code
/// (or, without an AAP error, the A2A reason).
pub fn check_reply(body: &Value, text: &str) -> Result<String, TestCaseError> {
    let object = body
        .as_object()
        .ok_or_else(|| TestCaseError::fail(format!("not a JSON object: {text}")))?;
    prop_assert_eq!(object.get("jsonrpc"), Some(&json!("2.0")), "{}", text);
    let id = object
        .get("id")
        .ok_or_else(|| TestCaseError::fail(format!("no id: {text}")))?;
    prop_assert!(
        id.is_null() || id.is_string() || id.is_number(),
        "id: {}",
        text
    );
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => {
            prop_assert!(result.is_object(), "result: {}", text);
            Ok("JsonRpc result".to_owned())
        }
        (None, Some(error)) => {
            prop_assert!(error["code"].is_i64(), "error.code is an integer: {}", text);
            prop_assert!(
                error["message"].is_string(),
                "error.message is a string: {}",
                text
            );
            let data = error["data"]
                .as_array()
                .ok_or_else(|| TestCaseError::fail(format!("error.data array: {text}")))?;
            prop_assert!(!data.is_empty(), "{}", text);
            for entry in data {
                prop_assert!(entry["@type"].is_string(), "@type on {}: {}", entry, text);
            }
            prop_assert_eq!(
                &data[0]["@type"],
                &json!("type.googleapis.com/google.rpc.ErrorInfo"),
                "ErrorInfo first: {}",
                text
            );
            let reason = data[0]["reason"].as_str().unwrap_or("?");
            // The AAP error, when there is one, names its code.
            let aap = data.iter().skip(1).find_map(|d| d["code"].as_str());
            Ok(match aap {
                Some(code) => format!("JsonRpc error {code}"),
                None => format!("JsonRpc error {reason}"),
            })
        }
        _ => Err(TestCaseError::fail(format!("one of result/error: {text}"))),
    }
}
