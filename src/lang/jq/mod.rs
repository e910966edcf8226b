//! jq programs that turn upstream replies into AAP data. Owns the compiler, the legacy-format
//! helpers, the lazy reading of replies and the native plans; uses `protocol` and `formats`.
//!
//! Sits on the reply side of a mapping: the upstream reply (JSON, or XML/SOAP decoded to JSON)
//! becomes a [`JqValue`], and the mapping's jq programs (`items`, `total`, `item`, `jq`, error
//! predicates) run over it to produce the AAP response `data`. jq is the language ops teams
//! already know for reshaping JSON; [`jaq`](https://github.com/01mf02/jaq) runs it in-process,
//! in safe Rust, with programs compiled once at load and shared by all requests (`Send + Sync`).
//!
//! Every program sees the variables `$request` (the validated AAP request data), `$tables`
//! (the mapping's lookup tables), `$dealer` (the dealer's settings) and `$lead` (`lead.submit`
//! only: the gateway's facts about the lead, see `engine::lead`), and the helpers below
//! for legacy formats on top of jq's standard library (`env` is disabled: it would expose the
//! gateway's secrets).
//!
//! Mappings are operator-trusted code: jaq has no fuel or time limit, so a program that loops
//! without producing output (`def f: f; f`) or recurses without bound can hang or crash the
//! gateway. Only an endless *stream* of outputs is bounded ([`MAX_OUTPUTS`]). `test-mappings`
//! and the mapping examples are the guard.
//!
//! ## Helper functions
//!
//! | helper | input → output |
//! | --- | --- |
//! | `dollars` | money → whole dollars, halves rounded away from zero: `"$24,990"` → `24990`, `"24990.00"` → `24990`, `"$24,990.60"` → `24991`, `"-$5.50"` → `-6`, `"USD 1,200"` → `1200`, `24990.5` → `24991`; `""`, `"Call for price"`, `null`, booleans, arrays, objects → `null`; `"45.999,00"`, `"24,99"` → error; `dollars("1.234,56")`: `"45.999,00"` → `45999` |
//! | `miles` | odometer → whole miles: `"12,345 mi"`, `"12345"`, `"12,345 miles"`, `12345` → `12345`; `"12,345.6"` → `12346`; blank, text without digits, negative → `null`; `"12.345"`, `"1,234 hrs"` → error; `miles("1.234")`: `"12.345"` → `12345` |
//! | `int` | tolerant integer, truncated toward zero: `"2022"`, `" 2022 "` → `2022`; `"28"` → `28`; `"1,234"` → `1234`; `2.5` → `2`; `"2.9"` → `2`; `""`, text without digits → `null`; `"12,34"`, `"1.234"` → error; `int("1'234")` reads `"1'234"` |
//! | `num` | tolerant number: `"239"` → `239`; `"61.5"` → `61.5`; `"239.00"` → `239`; `" 1,234.5 "` → `1234.5`; numbers pass; blank, text without digits → `null`; `"1.2.3"`, `"61,5"` → error; `num("1234,5")`: `"61,5"` → `61.5` |
//! | `nonempty` | strings trimmed, `""` and whitespace → `null`: `" EX-L "` → `"EX-L"`, `"  "` → `null`; non-strings pass (`0` → `0`) |
//! | `split_list($sep)` | `"A\|B\| C \|"` with `"\|"` → `["A","B","C"]` (items trimmed, empties dropped); `null`, `""` → `[]`; an array is cleaned the same way; another scalar `x` → `[x]` |
//! | `legacy_date` | → `"YYYY-MM-DD"`: `"03/15/2026"`, `"3/15/2026"`, `"2026-03-15"`, `"2026-03-15 10:00:00"`, `"2026-03-15T10:00:00Z"` → `"2026-03-15"` (the date as written); impossible dates (`"02/30/2026"`), two-digit years, anything else → `null` |
//! | `legacy_datetime($tz)` | wall-clock time in IANA zone `$tz` → RFC 3339 with that date's offset (DST-aware): `"2026-11-30 14:05:00"`, `"2026-11-30T14:05"`, `"11/30/2026 2:05 PM"` with `"America/Los_Angeles"` → `"2026-11-30T14:05:00-08:00"`; `"2026-07-01 14:05"` → `"2026-07-01T14:05:00-07:00"`; fractional seconds kept; input that already has an offset (`"2026-11-30T14:05:00-05:00"`, `"…Z"`) passes unchanged; date-only, garbage → `null`; an unknown zone is an error. A time skipped by DST moves forward, a repeated one takes the earlier offset. Zones come from the system database, else from the one built into the gateway |
//! | `compact` | drops object keys whose value is `null`, `""` or `[]`, in nested objects too (including objects inside arrays); array elements and `{}` are kept: `{a: 1, b: null, c: "", d: [], e: {f: null}, g: [null, 1]}` → `{a: 1, e: {}, g: [null, 1]}` |
//! | `lookup($table)` | `.` as key into object `$table`, `null` when missing: `"Certified Pre-Owned" \| lookup({"Certified Pre-Owned": "cpo"})` → `"cpo"`; string keys are trimmed, numbers are looked up as text (`1` → key `"1"`), `null` → `null`; a `$table` that is not an object (a misspelt table name) is an error |
//! | `lower`, `upper` | Unicode case mapping of strings: `"HONDA"` → `"honda"`; non-strings pass |
//! | `title` | capitalises words (after whitespace, `-`, `/`) and lowercases the rest; words with a digit are kept: `"HONDA CIVIC EX-L 4WD"` → `"Honda Civic Ex-L 4WD"`; non-strings pass |
//!
//! Numbers in text accept an optional sign, `,` thousands separators (groups of three) and a
//! decimal point; no exponents. `dollars`, `miles`, `int` and `num` also take a format named by
//! example (`dollars("1.234,56")`, `miles("1 234")`, `num("1234,5")`) and then read only that
//! format. A text with digits the helper cannot read exactly (`"1,5"`, `"45.999,00"` without a
//! format, and for the whole quantities a decimal separator before three digits: `"12.345"`,
//! which `.`-grouping systems mean as 12345)
//! is an error naming the format to write, so the record is skipped and counted, never given a
//! different number; a text without digits is `null`. Whole floats leave the gateway as integers
//! (`24990.0` → `24990`, as jq prints them); NaN and infinities as `null`.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

use crate::formats::{Declared, Format, not_json};
use crate::protocol::vehicle::Vehicle;
use jaq_core::compile::Undefined;
use jaq_core::data::JustLut;
use jaq_core::load::{self, Arena, File, Loader, lex, parse};
use jaq_core::native::{self, bome, unary, v};
use jaq_core::ops::Math;
use jaq_core::path::Part;
use jaq_core::{Compiler, Ctx, Cv, DataT, Exn, Native, RunPtr, ValT as _, ValXs, Vars};
use jaq_json::{Map, Num, Rc, Val};
use jaq_std::ValT as _;
use jiff::civil::{Date, DateTime, Time};
use serde_json::Value;

mod compile;
#[cfg(test)]
mod date_tests;
mod dates;
#[cfg(test)]
mod helper_tests;
mod helpers;
mod json;
mod plan;
mod tape;
#[cfg(test)]
mod tests;

use self::compile::*;
use self::helpers::*;

/// Most outputs [`Jq::run`] collects before it gives up on a program as runaway.
pub const MAX_OUTPUTS: usize = 100_000;

/// Names of the variables every program may use, in the order [`JqVars`] binds them.
const GLOBAL_VARS: [&str; 4] = ["$request", "$tables", "$dealer", "$lead"];

/// How jaq sees our data: plain JSON values, no per-run global data.
type Data = JustLut<Val>;

/// A compiled jq program; cheap to clone, `Send + Sync`, compiled once at load.
#[derive(Clone)]
pub struct Jq {
    inner: Arc<Compiled>,
}

struct Compiled {
    code: Box<str>,
    filter: jaq_core::Filter<Data>,
    /// The same program as a native plan, when it is within the plan's subset (`plan`).
    plan: Option<plan::Plan>,
    /// The program's keys, when it is only a path of literal keys ([`Jq::key_path`]).
    key_path: Option<KeyPath>,
    /// [`Jq::reads_request`].
    reads_request: bool,
}

/// A value in jaq's representation, converted once and then shared (cloning is cheap).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JqValue(Val);

/// The variables every program may use.
#[derive(Clone, Debug, Default)]
pub struct JqVars {
    /// `$request`: the validated AAP request data.
    pub request: JqValue,
    /// `$tables`: the mapping's lookup tables.
    pub tables: JqValue,
    /// `$dealer`: the dealer's settings.
    pub dealer: JqValue,
    /// `$lead`: facts the gateway adds to a `lead.submit` (its stable `reference`, …); `null`
    /// for other skills.
    pub lead: JqValue,
}

/// A compile error located within the program text.
#[derive(Debug, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct JqCompileError {
    /// 1-based line in the program text.
    pub line: usize,
    /// 1-based column (in characters) in the program text.
    pub col: usize,
    /// What is wrong, e.g. "undefined function `frobnicate/0`".
    pub message: String,
}

/// A program failed at run time: jq's error message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct JqRunError(pub String);

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Jq>();
    shared::<JqValue>();
    shared::<JqVars>();
};

impl fmt::Debug for Jq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Jq").field(&self.inner.code).finish()
    }
}

impl Jq {
    /// Compiles `code` with the standard library, the helpers and the variables `$request`,
    /// `$tables` and `$dealer`.
    ///
    /// Object literals are built left to right (see [`objects_left_assoc`]: same outputs,
    /// without jaq's quadratic copying). A program that does not compile that way is compiled
    /// again as written, so that errors are located in `code`.
    ///
    /// A program within the common subset of jq (paths, literals, object literals, `//`, `if`,
    /// the helpers, …; see `plan`) also gets a native plan, which [`Jq::run`] and friends then
    /// use: the same outputs, order and errors as jaq, without jaq's interpreter. Everything
    /// else runs in jaq ([`Jq::is_native`] tells which).
    pub fn compile(code: &str) -> Result<Jq, JqCompileError> {
        let mut jq = Jq::compile_interpreted(code)?;
        let plan = load::parse(code, |p| p.term()).and_then(|term| plan::compile(&term));
        if let Some(compiled) = Arc::get_mut(&mut jq.inner) {
            compiled.key_path = plan
                .as_ref()
                .and_then(plan::Plan::literal_path)
                .map(KeyPath);
            compiled.plan = plan;
        }
        Ok(jq)
    }

    /// Compiles `code` for jaq only, without a native plan: the reference [`Jq::compile`]'s
    /// plans are tested against, and the baseline of the mapping benchmarks.
    pub fn compile_interpreted(code: &str) -> Result<Jq, JqCompileError> {
        let filter = match compile_left_assoc(code) {
            Some(filter) => filter,
            None => compile_as_written(code)?,
        };
        Ok(Jq {
            inner: Arc::new(Compiled {
                code: code.into(),
                filter,
                plan: None,
                key_path: None,
                reads_request: code.contains(GLOBAL_VARS[0]),
            }),
        })
    }

    /// Whether the program runs as a native plan rather than in jaq.
    pub fn is_native(&self) -> bool {
        self.inner.plan.is_some()
    }

    /// Whether [`Jq::run_one_json`] builds the program's object as JSON directly (a native
    /// plan whose root is an object literal with literal keys, optionally `| compact`).
    pub fn builds_json_directly(&self) -> bool {
        self.inner.plan.as_ref().is_some_and(plan::Plan::is_record)
    }

    /// Whether the program may read `$request`: it names it. A variable can be read by no
    /// other way (jq has no lookup of a variable by a computed name, modules are refused,
    /// the helpers are Rust); a name in a string or a binding only makes this `true` in vain.
    pub fn reads_request(&self) -> bool {
        self.inner.reads_request
    }

    /// The program text.
    pub fn code(&self) -> &str {
        &self.inner.code
    }

    /// All outputs of the program, in order; more than [`MAX_OUTPUTS`] is an error.
    pub fn run(&self, input: &JqValue, vars: &JqVars) -> Result<Vec<JqValue>, JqRunError> {
        if let Some(plan) = &self.inner.plan {
            return run_plan(plan, input, vars);
        }
        let mut out = Vec::new();
        for value in self.outputs(input, vars) {
            if out.len() == MAX_OUTPUTS {
                return Err(JqRunError(format!(
                    "produced more than {MAX_OUTPUTS} values"
                )));
            }
            out.push(value?);
        }
        Ok(out)
    }

    /// The program's only output; none or several is an error.
    pub fn run_one(&self, input: &JqValue, vars: &JqVars) -> Result<JqValue, JqRunError> {
        let mut out = self.run(input, vars)?;
        match (out.pop(), out.len()) {
            (Some(value), 0) => Ok(value),
            (None, _) => Err(JqRunError("produced no value".into())),
            (Some(_), n) => Err(JqRunError(format!(
                "produced {} values, expected one",
                n + 1
            ))),
        }
    }

    /// [`Jq::run_one`] converted to JSON (`JqValue::to_json`). A program that builds one
    /// object from literal keys (a mapping's `item`) builds it as JSON directly.
    pub fn run_one_json(&self, input: &JqValue, vars: &JqVars) -> Result<Value, JqRunError> {
        if let Some(plan) = &self.inner.plan {
            let mut env = plan.env(globals(vars));
            if let Some(object) = plan.eval_record_json(&input.0, &mut env) {
                return object.map(Value::Object).map_err(error_message);
            }
        }
        self.run_one(input, vars).map(|v| v.to_json())
    }

    /// [`Jq::run_one_json`] on a record of a reply read lazily ([`Doc::records`]): a program
    /// that builds one object reads only the fields it uses off the reply's tape.
    pub fn run_one_json_record(
        &self,
        record: &DocRecord<'_>,
        vars: &JqVars,
    ) -> Result<Value, JqRunError> {
        self.record_runner(vars).run(record)
    }

    /// [`Jq::run_one_json_record`] for the records of one page: the variables are bound once,
    /// not per record.
    pub fn record_runner<'a>(&'a self, vars: &'a JqVars) -> RecordRunner<'a> {
        RecordRunner {
            jq: self,
            vars,
            env: self
                .inner
                .plan
                .as_ref()
                .filter(|plan| plan.is_record())
                .map(|plan| plan.env(globals(vars))),
        }
    }

    /// The keys of a program that is only a path of literal keys from `.` (`.Items`,
    /// `.data.vehicles`), which a reply read lazily answers without becoming a value
    /// ([`Doc::records`], [`Doc::at`]).
    pub fn key_path(&self) -> Option<&KeyPath> {
        self.inner.key_path.as_ref()
    }

    /// jq truthiness (neither `null` nor `false`) of the first output; no output is `false`.
    /// Later outputs are not computed.
    pub fn run_bool(&self, input: &JqValue, vars: &JqVars) -> Result<bool, JqRunError> {
        if let Some(plan) = &self.inner.plan {
            let mut first = None;
            let mut env = plan.env(globals(vars));
            let _ = plan.run(&input.0, &mut env, &mut |_, y| {
                first = Some(y);
                ControlFlow::Break(())
            });
            return match first {
                None => Ok(false),
                Some(y) => Ok(y.map_err(error_message)?.as_bool()),
            };
        }
        match self.outputs(input, vars).next() {
            None => Ok(false),
            Some(value) => Ok(value?.0.as_bool()),
        }
    }

    /// The outputs, computed lazily.
    fn outputs<'a>(
        &'a self,
        input: &JqValue,
        vars: &JqVars,
    ) -> impl Iterator<Item = Result<JqValue, JqRunError>> + 'a {
        // `Vars` binds the last global variable first; `with_global_vars` looks them up in
        // reverse, so the order here matches `GLOBAL_VARS`.
        let vars = Vars::new(globals(vars));
        let ctx = Ctx::<Data>::new(&self.inner.filter.lut, vars);
        let outputs = self.inner.filter.id.run((ctx, input.0.clone()));
        outputs.map(|r| r.map(JqValue).map_err(run_error))
    }
}

/// The values of the global variables, in [`GLOBAL_VARS`] order.
/// A record program with its variables bound ([`Jq::record_runner`]).
pub struct RecordRunner<'a> {
    jq: &'a Jq,
    vars: &'a JqVars,
    /// The native plan's environment. Bindings restore their slots as their scope ends, so
    /// after a record it holds the globals and nothing else, as a fresh one does.
    env: Option<plan::Env>,
}

impl RecordRunner<'_> {
    /// The program's one output for `record`, as JSON.
    pub fn run(&mut self, record: &DocRecord<'_>) -> Result<Value, JqRunError> {
        self.run_vehicle(record).map(Vehicle::into_value)
    }

    /// [`RecordRunner::run`] as a search page holds it: an object of literal keys built by
    /// the native plan stays a [`crate::protocol::vehicle::DocRecord`] (keys shared, unchanged
    /// texts sliced from the reply), any other output is JSON.
    pub fn run_vehicle(&mut self, record: &DocRecord<'_>) -> Result<Vehicle, JqRunError> {
        if let (Some(plan), Some(env)) = (&self.jq.inner.plan, &mut self.env)
            && let Some(object) = plan.eval_record(record, env)
        {
            return object.map(Vehicle::Record).map_err(error_message);
        }
        let whole = JqValue(record.value().clone());
        self.jq.run_one_json(&whole, self.vars).map(Vehicle::from)
    }
}

fn globals(vars: &JqVars) -> [Val; 4] {
    [
        vars.request.0.clone(),
        vars.tables.0.clone(),
        vars.dealer.0.clone(),
        vars.lead.0.clone(),
    ]
}

/// [`Jq::run`] on a native plan: the same outputs, limit and first error as the jaq path.
fn run_plan(plan: &plan::Plan, input: &JqValue, vars: &JqVars) -> Result<Vec<JqValue>, JqRunError> {
    let mut out = Vec::new();
    let mut failed = None;
    let mut env = plan.env(globals(vars));
    let _ = plan.run(&input.0, &mut env, &mut |_, y| {
        if out.len() == MAX_OUTPUTS {
            failed = Some(JqRunError(format!(
                "produced more than {MAX_OUTPUTS} values"
            )));
            return ControlFlow::Break(());
        }
        match y {
            Ok(y) => {
                out.push(JqValue(y));
                ControlFlow::Continue(())
            }
            Err(e) => {
                failed = Some(error_message(e));
                ControlFlow::Break(())
            }
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The keys of a path like `.data.vehicles` ([`Jq::key_path`]).
#[derive(Clone, Debug)]
pub struct KeyPath(Box<[bytes::Bytes]>);

/// A decoded upstream reply. JSON is read into a tape ([`tape`]) and becomes a jq value only
/// when a program needs all of it ([`Doc::value`]); the records of a list are read off the tape
/// ([`Doc::records`]). Other formats are decoded to a value at once.
pub struct Doc(DocBody);

enum DocBody {
    /// Read into a tape; the whole value is built on first use.
    Lazy(tape::Tape, std::sync::OnceLock<JqValue>),
    Decoded(JqValue),
}

impl Doc {
    /// A reply already decoded.
    pub fn from_value(value: JqValue) -> Doc {
        Doc(DocBody::Decoded(value))
    }

    /// A JSON reply, read lazily; the same errors as [`JqValue::from_json_bytes`].
    pub fn from_json_bytes(body: &bytes::Bytes) -> Result<Doc, serde_json::Error> {
        Ok(Doc(DocBody::Lazy(
            tape::Tape::parse(body)?,
            std::sync::OnceLock::new(),
        )))
    }

    /// The whole reply as a jq value (built on first use).
    pub fn value(&self) -> &JqValue {
        match &self.0 {
            DocBody::Lazy(tape, value) => value.get_or_init(|| JqValue(tape.root().to_val())),
            DocBody::Decoded(value) => value,
        }
    }

    /// The items of the array at `path`, as records for [`Jq::run_one_json_record`]; `None`
    /// when the reply was not read lazily or `path` does not lead through objects to an
    /// array (the caller then runs its program on [`Doc::value`], for the same outcome).
    pub fn records(&self, path: &KeyPath) -> Option<Vec<DocRecord<'_>>> {
        let at = self.walk(path)??;
        let records = at.items()?.map(|at| DocRecord {
            at,
            value: std::cell::OnceCell::new(),
        });
        Some(records.collect())
    }

    /// The value at `path` (`null` when a key is missing); `None` when the reply was not read
    /// lazily or a step is not an object.
    pub fn at(&self, path: &KeyPath) -> Option<JqValue> {
        Some(JqValue(
            self.walk(path)?.map_or(Val::Null, tape::At::to_val),
        ))
    }

    /// `Some(None)` when a key is missing on the way.
    fn walk(&self, path: &KeyPath) -> Option<Option<tape::At<'_>>> {
        let DocBody::Lazy(tape, _) = &self.0 else {
            return None;
        };
        let mut at = tape.root();
        let hint = std::sync::atomic::AtomicUsize::new(0);
        for key in &path.0 {
            match at.get(key, &hint)? {
                Some(value) => at = value,
                None => return Some(None),
            }
        }
        Some(Some(at))
    }
}

/// One record of a list in a reply read lazily ([`Doc::records`]).
pub struct DocRecord<'d> {
    at: tape::At<'d>,
    value: std::cell::OnceCell<Val>,
}

impl DocRecord<'_> {
    /// The whole record as a value (built on first use).
    fn value(&self) -> &Val {
        self.value.get_or_init(|| self.at.to_val())
    }
}

impl JqValue {
    /// `null`.
    pub fn null() -> JqValue {
        JqValue(Val::Null)
    }

    /// Converts a JSON value (once; the result is cheap to clone).
    pub fn from_json(v: &Value) -> JqValue {
        JqValue(val_from_json(v))
    }

    /// Parses JSON text straight into jaq's representation, with no `serde_json::Value` in
    /// between: the value `from_json` gives for the parsed text (upstream replies take this
    /// path).
    pub fn from_json_slice(body: &[u8]) -> Result<JqValue, serde_json::Error> {
        Self::from_json_bytes(&bytes::Bytes::copy_from_slice(body))
    }

    /// [`JqValue::from_json_slice`] for a body already held in shared memory (an upstream
    /// reply): its strings become slices of `body`, not copies (see `extract/json.rs`).
    pub fn from_json_bytes(body: &bytes::Bytes) -> Result<JqValue, serde_json::Error> {
        json::parse(body).map(JqValue)
    }

    /// Converts back to JSON. Whole floats become integers, NaN and infinities `null`, byte
    /// strings and invalid UTF-8 are decoded lossily, non-string object keys become their
    /// JSON text.
    pub fn to_json(&self) -> Value {
        val_to_json(&self.0)
    }

    /// jq truthiness: neither `null` nor `false`.
    pub fn is_truthy(&self) -> bool {
        self.0.as_bool()
    }

    /// The array of `items`, in order.
    pub fn array(items: Vec<JqValue>) -> JqValue {
        JqValue(items.into_iter().map(|v| v.0).collect())
    }

    /// This object with `key` set to `value` (the object itself is shared, not changed); `None`
    /// when this is not an object.
    pub fn with_field(&self, key: &str, value: JqValue) -> Option<JqValue> {
        let Val::Obj(map) = &self.0 else {
            return None;
        };
        let mut map = map.clone();
        Rc::make_mut(&mut map).insert(Val::from(key.to_owned()), value.0);
        Some(JqValue(Val::Obj(map)))
    }

    /// The value as a key to look up: a string as it is, a number as its JSON text; `None` for
    /// anything else (`null`, an empty string, a list, an object).
    pub fn key_text(&self) -> Option<String> {
        match &self.0 {
            Val::TStr(b) | Val::BStr(b) if !b.is_empty() => Some(lossy(b)),
            Val::Num(_) => Some(val_to_json(&self.0).to_string()),
            _ => None,
        }
    }
}

/// Objects whose values are all strings (a CSV row), built straight into jaq's representation:
/// the keys made once, each object's strings slices of one copy of its text. The same value
/// [`JqValue::from_json_slice`] gives for the object written as JSON, without the JSON.
pub struct TextObjects {
    keys: Vec<Val>,
}

impl TextObjects {
    /// Objects with these keys (distinct), in this order.
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> TextObjects {
        TextObjects {
            keys: keys.into_iter().map(|k| Val::from(k.to_owned())).collect(),
        }
    }

    /// `{key[i]: field, …}` for each `(i, field)` in order; every field is a slice of `text`
    /// (else it is copied).
    pub fn build<'a>(
        &self,
        text: &'a str,
        fields: impl Iterator<Item = (usize, &'a str)>,
    ) -> JqValue {
        let shared = bytes::Bytes::copy_from_slice(text.as_bytes());
        let whole = text.as_bytes().as_ptr_range();
        let mut map = Map::with_capacity_and_hasher(self.keys.len(), Default::default());
        for (at, field) in fields {
            let range = field.as_bytes().as_ptr_range();
            let value = if whole.start <= range.start && range.end <= whole.end {
                let start = range.start as usize - whole.start as usize;
                shared.slice(start..start + field.len())
            } else {
                bytes::Bytes::copy_from_slice(field.as_bytes())
            };
            map.insert(self.keys[at].clone(), Val::utf8_str(value));
        }
        JqValue(Val::obj(map))
    }
}

impl From<&Value> for JqValue {
    fn from(v: &Value) -> JqValue {
        JqValue::from_json(v)
    }
}

fn val_from_json(v: &Value) -> Val {
    match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Val::Num(Num::from_integral(i))
            } else if let Some(u) = n.as_u64() {
                Val::Num(Num::from_integral(u))
            } else {
                Val::Num(Num::Float(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => Val::from(s.clone()),
        Value::Array(a) => a.iter().map(val_from_json).collect(),
        Value::Object(o) => Val::obj(
            o.iter()
                .map(|(k, v)| (Val::from(k.clone()), val_from_json(v)))
                .collect(),
        ),
    }
}

fn val_to_json(v: &Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => num_to_json(n),
        Val::TStr(b) | Val::BStr(b) => Value::String(lossy(b)),
        Val::Arr(a) => Value::Array(a.iter().map(val_to_json).collect()),
        Val::Obj(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Val::TStr(b) | Val::BStr(b) => lossy(b),
                        other => other.to_string(),
                    };
                    (key, val_to_json(v))
                })
                .collect(),
        ),
    }
}

/// [`lossy`] as a record's text: valid UTF-8 shared, not copied.
fn shared_text(bytes: bytes::Bytes) -> crate::protocol::vehicle::Text {
    use crate::protocol::vehicle::Text;
    match bytestring::ByteString::try_from(bytes.clone()) {
        Ok(text) => Text::Shared(text),
        Err(_) => Text::Owned(lossy(&bytes)),
    }
}

/// The text of a jaq string: valid UTF-8 as is (checked the fast way), anything else lossily.
fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn num_to_json(n: &Num) -> Value {
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::Float(f) => float_to_json(*f),
        Num::BigInt(_) | Num::Dec(_) => {
            let text = n.to_string();
            if let Ok(i) = text.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = text.parse::<u64>() {
                Value::from(u)
            } else {
                float_to_json(text.parse().unwrap_or(f64::NAN))
            }
        }
    }
}

/// Largest integer below which every whole `f64` is exact.
const EXACT_F64_INT: f64 = 9_007_199_254_740_992.0;

fn float_to_json(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() <= EXACT_F64_INT {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// Turns an exception from a running program into jq's message.
fn run_error(e: Exn<'_, Val>) -> JqRunError {
    match e.get_err() {
        Ok(e) => error_message(e),
        Err(e) => match e.get_halt() {
            Ok(code) => JqRunError(format!("halt({code}) is not allowed in mappings")),
            Err(_) => JqRunError("internal jq error: unexpected control flow".into()),
        },
    }
}

/// jq's message for an error value.
fn error_message(e: jaq_core::Error<Val>) -> JqRunError {
    JqRunError(match e.into_val() {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(&b).into_owned(),
        other => other.to_string(),
    })
}

// === decoding an upstream body ===

impl JqValue {
    /// An upstream body as the value jq programs run on: JSON (the common case, and the one on
    /// every proxied search) parsed straight into it, its strings slices of `body`; CSV and XML
    /// decoded by [`Format::decode_with`] first.
    pub fn decode(
        format: &Format,
        body: &bytes::Bytes,
        declared: Declared<'_>,
    ) -> Result<JqValue, String> {
        match format {
            Format::Json => JqValue::from_json_bytes(body).map_err(not_json),
            Format::Csv | Format::Xml { .. } => format
                .decode_with(body, declared)
                .map(|v| JqValue::from_json(&v)),
        }
    }
}

impl Doc {
    /// [`JqValue::decode`] as a [`Doc`]: JSON read lazily when `lazy` (a list whose records are
    /// read off the reply, [`Doc::records`]), everything else decoded at once. The same errors.
    pub fn decode(
        format: &Format,
        body: &bytes::Bytes,
        declared: Declared<'_>,
        lazy: bool,
    ) -> Result<Doc, String> {
        match format {
            Format::Json if lazy => Doc::from_json_bytes(body).map_err(not_json),
            _ => JqValue::decode(format, body, declared).map(Doc::from_value),
        }
    }
}
