//! The JSON log format, with the one line per request written without a serializer.
//!
//! Why: the request line is the one event of every request, and `tracing-subscriber`'s JSON
//! format writes each of its pieces through a `serde_json` serializer over a `fmt::Write`
//! adaptor (about 3 % of a proxied search's CPU, `bench/README.md`). Here the line is made in
//! one buffer with the reply writer's JSON helpers and handed over at once. Every other event,
//! and a request line with fields of other kinds, goes to the JSON format itself; a test holds
//! the two to the same bytes.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent};
use tracing_subscriber::registry::LookupSpan;

use crate::protocol::json_text;

/// The target of the per-request lines (`telemetry::request`).
pub(super) const REQUEST_TARGET: &str = "aap_gateway::request";

/// The JSON format of the logs: the event's fields at the top level, no spans; timestamp,
/// level and target.
pub(super) fn json_format() -> Format<Json, SystemTime> {
    Format::default()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
}

/// A format (the JSON format) with request lines written by hand.
pub(super) struct Lines(pub(super) Format<Json, SystemTime>);

impl<S> FormatEvent<S, JsonFields> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() == REQUEST_TARGET && *meta.level() == Level::INFO {
            let line = request_line(event)?;
            if let Some(line) = line {
                return writer.write_str(&line);
            }
        }
        self.0.format_event(ctx, writer, event)
    }
}

/// The line the JSON format writes for `event`, or `None` when a field is of a kind left to it.
fn request_line(event: &Event<'_>) -> Result<Option<String>, fmt::Error> {
    let mut timestamp = String::with_capacity(32);
    SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
    let mut line = Line {
        out: Vec::with_capacity(384),
        debug: String::new(),
        whole: true,
    };
    line.out.extend_from_slice(b"{\"timestamp\":");
    json_text::write_str(&mut line.out, &timestamp);
    line.out.extend_from_slice(b",\"level\":\"INFO\"");
    event.record(&mut line);
    if !line.whole {
        return Ok(None);
    }
    line.out.extend_from_slice(b",\"target\":");
    json_text::write_str(&mut line.out, event.metadata().target());
    line.out.extend_from_slice(b"}\n");
    // Only whole UTF-8 strings and ASCII went in.
    String::from_utf8(line.out)
        .map(Some)
        .map_err(|_| fmt::Error)
}

/// A line being made: each field as `,"name":value`.
struct Line {
    out: Vec<u8>,
    /// A reused buffer for values given as `Debug`.
    debug: String,
    /// Whether every field was of a kind written here.
    whole: bool,
}

impl Line {
    fn key(&mut self, field: &Field) {
        self.out.push(b',');
        json_text::write_str(&mut self.out, field.name());
        self.out.push(b':');
    }
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        json_text::write_str(&mut self.out, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use fmt::Write as _;
        self.debug.clear();
        if write!(self.debug, "{value:?}").is_err() {
            self.whole = false;
            return;
        }
        self.key(field);
        json_text::write_str(&mut self.out, &self.debug);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        json_text::write_value(&mut self.out, &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn record_i128(&mut self, _: &Field, _: i128) {
        self.whole = false;
    }

    fn record_u128(&mut self, _: &Field, _: u128) {
        self.whole = false;
    }

    fn record_bytes(&mut self, _: &Field, _: &[u8]) {
        self.whole = false;
    }

    fn record_error(&mut self, _: &Field, _: &(dyn std::error::Error + 'static)) {
        self.whole = false;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Everything written, shared with the test.
    #[derive(Clone, Default)]
    struct Out(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Out {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Out {
        type Writer = Out;
        fn make_writer(&'a self) -> Out {
            self.clone()
        }
    }

    /// The lines `log` writes, with the JSON format alone and with [`Lines`] in front of it,
    /// timestamps blanked (the two runs are at different times); the second run's lines parsed.
    fn both(log: impl Fn()) -> (Vec<serde_json::Value>, String, String) {
        let text =
            |out: Out| String::from_utf8(out.0.lock().expect("lock").clone()).expect("UTF-8");
        let layer = |out: &Out| {
            tracing_subscriber::fmt::layer()
                .with_writer(out.clone())
                .json()
        };
        let (by_serde, by_hand) = (Out::default(), Out::default());
        let format = layer(&by_serde).event_format(json_format());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(format), &log);
        let format = layer(&by_hand).event_format(Lines(json_format()));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(format), &log);
        let (by_serde, raw) = (text(by_serde), text(by_hand));
        let parsed = raw
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        (
            parsed,
            without_timestamps(&by_serde),
            without_timestamps(&raw),
        )
    }

    /// The text with each `"timestamp":"…"` value blanked.
    fn without_timestamps(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("\"timestamp\":\"") {
            let start = at + "\"timestamp\":\"".len();
            out.push_str(&rest[..start]);
            let end = rest[start..].find('"').expect("closed") + start;
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn request_lines_are_the_bytes_the_json_format_writes() {
        let (lines, by_serde, by_hand) = both(|| {
            let id = "01a24d8b-bad6-77e5-b6c3-2ef23da3de0a";
            let dealer: Arc<str> = Arc::from("honda \"of\" río\n");
            for (status, latency) in [(200u16, 3.493_639_000_000_000_4), (429, 0.0), (500, 1e-7)] {
                tracing::info!(
                    target: "aap_gateway::request",
                    request_id = %id,
                    trace_id = "",
                    dealer = %dealer,
                    skill = "inventory.search",
                    binding = "jsonrpc",
                    outcome = "ok",
                    status,
                    latency_ms = latency,
                    "request"
                );
            }
            // Kinds left to the JSON format, and events that are not request lines.
            tracing::info!(target: "aap_gateway::request", big = 1u128 << 100, "request");
            tracing::warn!(target: "aap_gateway::request", skipped = 3u64, "refused");
            tracing::info!(target: "aap_gateway::server", ready = true, "listening");
            tracing::info!(target: "aap_gateway::request", negative = -4i64, ok = false, "x");
        });
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[0]["dealer"], "honda \"of\" río\n");
        assert_eq!(lines[0]["status"], 200);
        assert_eq!(lines[0]["latency_ms"], 3.493_639_000_000_000_4);
        assert_eq!(by_hand, by_serde);
    }
}
