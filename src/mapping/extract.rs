//! jq programs that turn upstream replies into AAP data.
//!
//! Sits on the reply side of a mapping: the upstream reply (JSON, or XML/SOAP decoded to JSON)
//! becomes a [`JqValue`], and the mapping's jq programs (`items`, `total`, `item`, `jq`, error
//! predicates) run over it to produce the AAP response `data`. jq is the language ops teams
//! already know for reshaping JSON; [`jaq`](https://github.com/01mf02/jaq) runs it in-process,
//! in safe Rust, with programs compiled once at load and shared by all requests (`Send + Sync`).
//!
//! Every program sees the variables `$request` (the validated AAP request data), `$tables`
//! (the mapping's lookup tables), `$dealer` (the dealer's settings) and `$lead` (`lead.submit`
//! only: the gateway's facts about the lead, see `mapping::lead`), and the helpers below
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
//! | `dollars` | money → whole dollars, halves rounded away from zero: `"$24,990"` → `24990`, `"24990.00"` → `24990`, `"$24,990.60"` → `24991`, `"-$5.50"` → `-6`, `"USD 1,200"` → `1200`, `24990.5` → `24991`; `""`, `"Call for price"`, `null`, booleans, arrays, objects → `null` |
//! | `miles` | odometer → whole miles: `"12,345 mi"`, `"12345"`, `"12,345 miles"`, `12345` → `12345`; `"12,345.6"` → `12346`; blank, garbage, negative → `null` |
//! | `int` | tolerant integer, truncated toward zero: `"2022"`, `" 2022 "` → `2022`; `"28"` → `28`; `"1,234"` → `1234`; `2.5` → `2`; `"2.9"` → `2`; `""`, garbage → `null` |
//! | `num` | tolerant number: `"239"` → `239`; `"61.5"` → `61.5`; `"239.00"` → `239`; `" 1,234.5 "` → `1234.5`; numbers pass; blank, garbage → `null` |
//! | `nonempty` | strings trimmed, `""` and whitespace → `null`: `" EX-L "` → `"EX-L"`, `"  "` → `null`; non-strings pass (`0` → `0`) |
//! | `split_list($sep)` | `"A\|B\| C \|"` with `"\|"` → `["A","B","C"]` (items trimmed, empties dropped); `null`, `""` → `[]`; an array is cleaned the same way; another scalar `x` → `[x]` |
//! | `legacy_date` | → `"YYYY-MM-DD"`: `"03/15/2026"`, `"3/15/2026"`, `"2026-03-15"`, `"2026-03-15 10:00:00"`, `"2026-03-15T10:00:00Z"` → `"2026-03-15"` (the date as written); impossible dates (`"02/30/2026"`), two-digit years, anything else → `null` |
//! | `legacy_datetime($tz)` | wall-clock time in IANA zone `$tz` → RFC 3339 with that date's offset (DST-aware): `"2026-11-30 14:05:00"`, `"2026-11-30T14:05"`, `"11/30/2026 2:05 PM"` with `"America/Los_Angeles"` → `"2026-11-30T14:05:00-08:00"`; `"2026-07-01 14:05"` → `"2026-07-01T14:05:00-07:00"`; fractional seconds kept; input that already has an offset (`"2026-11-30T14:05:00-05:00"`, `"…Z"`) passes unchanged; date-only, garbage → `null`; an unknown zone is an error. A time skipped by DST moves forward, a repeated one takes the earlier offset. Zones come from the system database, else from the one built into the gateway |
//! | `compact` | drops object keys whose value is `null`, `""` or `[]`, in nested objects too (including objects inside arrays); array elements and `{}` are kept: `{a: 1, b: null, c: "", d: [], e: {f: null}, g: [null, 1]}` → `{a: 1, e: {}, g: [null, 1]}` |
//! | `lookup($table)` | `.` as key into object `$table`, `null` when missing: `"Certified Pre-Owned" \| lookup({"Certified Pre-Owned": "cpo"})` → `"cpo"`; string keys are trimmed, numbers are looked up as text (`1` → key `"1"`), `null` → `null`; a `$table` that is not an object (a misspelt table name) is an error |
//! | `lower`, `upper` | Unicode case mapping of strings: `"HONDA"` → `"honda"`; non-strings pass |
//! | `title` | capitalises words (after whitespace, `-`, `/`) and lowercases the rest; words with a digit are kept: `"HONDA CIVIC EX-L 4WD"` → `"Honda Civic Ex-L 4WD"`; non-strings pass |
//!
//! Numbers in text accept an optional sign, `,` thousands separators (groups of three: `"1,5"`
//! is garbage) and a decimal point; no exponents. Whole floats leave the gateway as integers
//! (`24990.0` → `24990`, as jq prints them); NaN and infinities as `null`.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

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

mod json;
mod plan;

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

// ---------------------------------------------------------------------------------------------
// Compilation support

type Def = parse::Def<&'static str>;

/// Definitions every program can call: jq's standard library (the helpers are native).
/// Parsed once; cloned into each compile.
static PRELUDE: LazyLock<Vec<Def>> = LazyLock::new(|| {
    jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .collect()
});

/// Lets the `'static` prelude live alongside a program text of any lifetime.
fn shorten<'s>(def: Def) -> parse::Def<&'s str> {
    def
}

/// Compiles `code` as jaq's loader parses it; errors are located in `code`.
fn compile_as_written(code: &str) -> Result<jaq_core::Filter<Data>, JqCompileError> {
    let arena = Arena::default();
    let loader = Loader::new(PRELUDE.iter().cloned().map(shorten));
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| load_error(code, errs))?;
    compile_modules(modules).map_err(|errs| undefined_error(code, errs))
}

fn compile_modules(
    modules: load::Modules<&str, ()>,
) -> Result<jaq_core::Filter<Data>, jaq_core::compile::Errors<&str, ()>> {
    Compiler::default()
        .with_funs(funs())
        .with_global_vars(GLOBAL_VARS)
        .compile(modules)
}

/// The name under which [`compile_left_assoc`] hands the rewritten program to the loader.
const MAIN: &str = "aap_gateway_main";

/// Compiles `code` with its object literals left-associated ([`objects_left_assoc`]); `None`
/// when it does not compile (the caller then compiles it as written, for the error), uses
/// module directives (`import`, `include`) or mentions [`MAIN`].
///
/// jaq's loader takes the main program only as text, but its prelude as parsed definitions:
/// the rewritten program becomes the last prelude definition, `MAIN`, and the main program
/// calls it. A program's top-level `def`s are local definitions of its main term either way.
fn compile_left_assoc(code: &str) -> Option<jaq_core::Filter<Data>> {
    if code.contains(MAIN) {
        return None;
    }
    let mut body = load::parse(code, |p| p.term())?;
    objects_left_assoc(&mut body);
    let main = parse::Def {
        name: MAIN,
        args: Vec::new(),
        body,
    };
    let arena = Arena::default();
    let loader = Loader::new(PRELUDE.iter().cloned().map(shorten).chain([main]));
    let modules = loader
        .load(
            &arena,
            File {
                code: MAIN,
                path: (),
            },
        )
        .ok()?;
    compile_modules(modules).ok()
}

/// Rewrites every object literal of more than two entries, `{k1: v1, k2: v2, …, kn: vn}`, into
/// `{k1: v1} + {k2: v2} + … + {kn: vn}` (`+` groups to the left), in all nested terms.
///
/// jaq compiles an object literal into that sum grouped to the *right*,
/// `{k1: v1} + ({k2: v2} + (… + {kn: vn}))`, and object `+` inserts its right side into a copy
/// of its left side: an n-key object costs about n²/2 inserts, clones and drops (≈ 80 µs for
/// Demo Toyota's 30-key `vehicle`, more than all its field conversions). Grouped to the left,
/// each `+` inserts one entry into the object built so far, which nothing else holds, so it
/// grows in place. Outputs, their order and errors are the same: `l + r` runs `r` for each
/// output of `l` in turn (so entries are evaluated in the same order, as often, and the first
/// error wins either way), and object `+` is associative (a key keeps its first position and
/// takes its last value).
fn objects_left_assoc<S>(term: &mut parse::Term<S>) {
    use parse::Term as T;
    match term {
        T::Id | T::Recurse | T::Num(_) | T::Var(_) | T::Break(_) => {}
        T::Str(_, parts) => {
            for part in parts {
                if let lex::StrPart::Term(t) = part {
                    objects_left_assoc(t);
                }
            }
        }
        T::Arr(t) => {
            if let Some(t) = t {
                objects_left_assoc(t);
            }
        }
        T::Obj(entries) => {
            for (k, v) in entries.iter_mut() {
                objects_left_assoc(k);
                if let Some(v) = v {
                    objects_left_assoc(v);
                }
            }
            if entries.len() > 2 {
                let mut singles = std::mem::take(entries)
                    .into_iter()
                    .map(|entry| T::Obj(vec![entry]));
                if let Some(first) = singles.next() {
                    *term = singles.fold(first, |sum, single| {
                        let add = parse::BinaryOp::Math(Math::Add);
                        T::BinOp(Box::new(sum), add, Box::new(single))
                    });
                }
            }
        }
        T::Neg(t) | T::Label(_, t) => objects_left_assoc(t),
        T::BinOp(l, op, r) => {
            objects_left_assoc(l);
            if let parse::BinaryOp::Pipe(Some(pattern)) = op {
                pattern_objects_left_assoc(pattern);
            }
            objects_left_assoc(r);
        }
        T::Fold(_, xs, pattern, args) => {
            objects_left_assoc(xs);
            pattern_objects_left_assoc(pattern);
            args.iter_mut().for_each(objects_left_assoc);
        }
        T::TryCatch(t, catch) => {
            objects_left_assoc(t);
            if let Some(catch) = catch {
                objects_left_assoc(catch);
            }
        }
        T::IfThenElse(branches, else_) => {
            for (cond, then) in branches {
                objects_left_assoc(cond);
                objects_left_assoc(then);
            }
            if let Some(else_) = else_ {
                objects_left_assoc(else_);
            }
        }
        T::Def(defs, t) => {
            for def in defs {
                objects_left_assoc(&mut def.body);
            }
            objects_left_assoc(t);
        }
        T::Call(_, args) => args.iter_mut().for_each(objects_left_assoc),
        T::Path(t, path) => {
            objects_left_assoc(t);
            for (part, _) in &mut path.0 {
                match part {
                    Part::Index(i) => objects_left_assoc(i),
                    Part::Range(from, to) => {
                        from.iter_mut().chain(to).for_each(objects_left_assoc);
                    }
                }
            }
        }
    }
}

/// [`objects_left_assoc`] for the terms in a destructuring pattern (`. as {(f): $x}`).
fn pattern_objects_left_assoc<S>(pattern: &mut parse::Pattern<S>) {
    match pattern {
        parse::Pattern::Var(_) => {}
        parse::Pattern::Arr(patterns) => patterns.iter_mut().for_each(pattern_objects_left_assoc),
        parse::Pattern::Obj(entries) => {
            for (k, p) in entries {
                objects_left_assoc(k);
                pattern_objects_left_assoc(p);
            }
        }
    }
}

/// Native functions: jq's standard library (with `env` disabled) and our helpers.
fn funs() -> impl Iterator<Item = native::Fun<Data>> {
    let std = jaq_std::funs().map(|(name, args, f)| {
        if name == "env" {
            (name, args, Native::<Data>::new(env_disabled))
        } else {
            (name, args, f)
        }
    });
    jaq_core::funs()
        .chain(std)
        .chain(jaq_json::funs())
        .chain(helper_funs())
}

fn env_disabled(_: Cv<'_, Data>) -> ValXs<'_, Val> {
    bome(Err(jaq_core::Error::str(
        "env is not available in mappings",
    )))
}

/// The helpers (see the module documentation for what they do). All are native: number and
/// date parsing need exact decimal rounding and a time zone database, and in jq `compact` and
/// `split_list` cost 30–150 µs per record (`with_entries`, `map`), `nonempty` and `lookup` 2–4 µs
/// per call (jaq's `isstring`, `isobject` and `type` are chains of comparisons).
fn helper_funs<D: for<'a> DataT<V<'a> = Val>>() -> impl Iterator<Item = native::Fun<D>> {
    let funs: [native::Filter<RunPtr<D>>; 13] = [
        ("nonempty", v(0), |cv| bome(nonempty(cv.1))),
        ("lookup", v(1), |cv| unary(cv, lookup)),
        ("dollars", v(0), |cv| bome(Ok(dollars(&cv.1)))),
        ("miles", v(0), |cv| bome(Ok(miles(&cv.1)))),
        ("int", v(0), |cv| bome(Ok(int(&cv.1)))),
        ("num", v(0), |cv| bome(Ok(num(&cv.1)))),
        ("legacy_date", v(0), |cv| bome(Ok(legacy_date(&cv.1)))),
        ("legacy_datetime", v(1), |cv| unary(cv, legacy_datetime)),
        ("lower", v(0), |cv| {
            bome(Ok(map_str(cv.1, str::to_lowercase)))
        }),
        ("upper", v(0), |cv| {
            bome(Ok(map_str(cv.1, str::to_uppercase)))
        }),
        ("title", v(0), |cv| bome(Ok(map_str(cv.1, title)))),
        ("compact", v(0), |cv| bome(Ok(compact(cv.1)))),
        ("split_list", v(1), |cv| unary(cv, split_list)),
    ];
    funs.into_iter().map(native::run::<D>)
}

/// `name/arity` of every helper, for the message that refuses an unknown function.
fn helper_names() -> Vec<String> {
    helper_funs::<Data>()
        .map(|(name, arity, _)| format!("{name}/{}", arity.len()))
        .collect()
}

fn load_error(code: &str, errs: load::Errors<&str, ()>) -> JqCompileError {
    let mut found = Vec::new();
    for (file, err) in errs {
        let ours = same_text(file.code, code);
        let mut push = |at: &str, message: String| found.push((ours, offset_in(code, at), message));
        match err {
            load::Error::Lex(errs) => {
                for (expect, at) in errs {
                    match expect {
                        lex::Expect::Delim(open) => {
                            push(open, format!("unclosed `{open}`"));
                        }
                        other => push(at, format!("expected {}", lex_expected(&other))),
                    }
                }
            }
            load::Error::Parse(errs) => {
                for (expect, at) in errs {
                    let found = if at.is_empty() {
                        "end of program".to_string()
                    } else {
                        format!("`{at}`")
                    };
                    push(at, format!("expected {}, found {found}", expect.as_str()));
                }
            }
            load::Error::Io(errs) => {
                for (path, e) in errs {
                    push(path, format!("cannot load module `{path}`: {e}"));
                }
            }
        }
    }
    located(code, found)
}

fn lex_expected(expect: &lex::Expect<&str>) -> &'static str {
    match expect {
        lex::Expect::Digit => "digit",
        lex::Expect::Ident => "identifier",
        lex::Expect::Escape => "string escape sequence",
        lex::Expect::Unicode => "4-digit hexadecimal code point",
        lex::Expect::Token => "token",
        _ => "closing delimiter",
    }
}

fn undefined_error(code: &str, errs: jaq_core::compile::Errors<&str, ()>) -> JqCompileError {
    let mut found = Vec::new();
    for (file, errs) in errs {
        let ours = same_text(file.code, code);
        for (name, undefined) in errs {
            let message = match undefined {
                Undefined::Filter(arity) => format!(
                    "undefined function `{name}/{arity}`; besides jq's builtins the gateway's \
                     helpers are {}",
                    helper_names().join(", ")
                ),
                Undefined::Var => format!("undefined variable `{name}`"),
                Undefined::Label => format!("undefined label `{name}`"),
                Undefined::Mod => format!("undefined module `{name}`"),
                _ => format!("undefined `{name}`"),
            };
            found.push((ours, offset_in(code, name), message));
        }
    }
    located(code, found)
}

/// The first error in the program text (others are counted), or else one in the prelude.
fn located(code: &str, mut found: Vec<(bool, Option<usize>, String)>) -> JqCompileError {
    found.sort_by_key(|(ours, at, _)| (!ours, at.unwrap_or(usize::MAX)));
    let more = found.len().saturating_sub(1);
    let Some((ours, at, mut message)) = found.into_iter().next() else {
        return JqCompileError {
            line: 1,
            col: 1,
            message: "invalid program".into(),
        };
    };
    if !ours {
        message = format!("internal error in the built-in jq helpers: {message}");
    }
    match more {
        0 => {}
        1 => message.push_str(" (and 1 more error)"),
        n => message.push_str(&format!(" (and {n} more errors)")),
    }
    let before = at
        .filter(|_| ours)
        .and_then(|at| code.get(..at))
        .unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    JqCompileError { line, col, message }
}

fn same_text(a: &str, b: &str) -> bool {
    std::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()
}

/// Byte offset of `part` within `whole`, when `part` is a slice of it.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let (base, start) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    let offset = start.checked_sub(base)?;
    (offset + part.len() <= whole.len()).then_some(offset)
}

// ---------------------------------------------------------------------------------------------
// Native helpers

fn as_str(v: &Val) -> Option<&str> {
    match v {
        Val::TStr(b) | Val::BStr(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

fn int_val(i: i64) -> Val {
    Val::Num(Num::from_integral(i))
}

/// A finite `f64` rounded by `round`, as an integer value (`null` when out of range).
fn float_to_int(f: f64, round: fn(f64) -> f64) -> Val {
    let r = round(f);
    if r.is_finite() && r.abs() <= EXACT_F64_INT {
        int_val(r as i64)
    } else {
        Val::Null
    }
}

/// A number written as text: sign, integer digits (separators removed) and fraction digits.
struct Decimal<'s> {
    negative: bool,
    int: String,
    frac: &'s str,
}

impl Decimal<'_> {
    /// `[+-]digits[.digits]`, with optional `,` separating groups of three integer digits.
    fn parse(s: &str) -> Option<Decimal<'_>> {
        let s = s.trim();
        let (negative, s) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if !digits(frac) {
            return None;
        }
        let mut groups = int.split(',');
        let first = groups.next().unwrap_or("");
        let mut clean = String::with_capacity(int.len());
        clean.push_str(first);
        let mut grouped = false;
        for group in groups {
            if group.len() != 3 || !digits(group) {
                return None;
            }
            grouped = true;
            clean.push_str(group);
        }
        let first_ok = digits(first) && !(grouped && (first.is_empty() || first.len() > 3));
        if !first_ok || (clean.is_empty() && frac.is_empty()) {
            return None;
        }
        Some(Decimal {
            negative,
            int: clean,
            frac,
        })
    }

    fn magnitude(&self) -> Option<i64> {
        if self.int.is_empty() {
            Some(0)
        } else {
            self.int.parse().ok()
        }
    }

    fn signed(&self, magnitude: i64) -> Val {
        int_val(if self.negative { -magnitude } else { magnitude })
    }

    /// Rounded half away from zero.
    fn rounded(&self) -> Val {
        let round_up = self.frac.as_bytes().first().is_some_and(|d| *d >= b'5');
        match self.magnitude() {
            Some(m) => m
                .checked_add(i64::from(round_up))
                .map_or(Val::Null, |m| self.signed(m)),
            None => Val::Null,
        }
    }

    fn truncated(&self) -> Val {
        self.magnitude().map_or(Val::Null, |m| self.signed(m))
    }

    /// An integer when the fraction is zero, else a float.
    fn number(&self) -> Val {
        if self.frac.bytes().all(|b| b == b'0')
            && let Some(m) = self.magnitude()
        {
            return self.signed(m);
        }
        let sign = if self.negative { "-" } else { "" };
        let int = if self.int.is_empty() { "0" } else { &self.int };
        let frac = if self.frac.is_empty() { "0" } else { self.frac };
        format!("{sign}{int}.{frac}")
            .parse::<f64>()
            .map_or(Val::Null, Val::from)
    }
}

fn strip_prefix_ci<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

fn strip_suffix_ci<'s>(s: &'s str, suffix: &str) -> Option<&'s str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix)
        .then(|| s.get(..cut))
        .flatten()
}

fn dollars(v: &Val) -> Val {
    match v {
        Val::Num(_) if v.is_int() => v.clone(),
        Val::Num(_) => v
            .as_f64()
            .map_or(Val::Null, |f| float_to_int(f, f64::round)),
        _ => as_str(v).and_then(parse_dollars).unwrap_or(Val::Null),
    }
}

fn parse_dollars(s: &str) -> Option<Val> {
    let mut s = s.trim();
    s = strip_prefix_ci(s, "USD").unwrap_or(s).trim();
    s = strip_suffix_ci(s, "USD").unwrap_or(s).trim();
    let negative = match s.strip_prefix('-') {
        Some(rest) => {
            s = rest.trim_start();
            true
        }
        None => false,
    };
    s = s.strip_prefix('$').unwrap_or(s);
    let amount = Decimal::parse(s)?;
    if negative && amount.negative {
        return None;
    }
    let amount = Decimal {
        negative: negative || amount.negative,
        ..amount
    };
    Some(amount.rounded())
}

fn miles(v: &Val) -> Val {
    let value = match v {
        Val::Num(_) if v.is_int() => v.clone(),
        Val::Num(_) => v
            .as_f64()
            .map_or(Val::Null, |f| float_to_int(f, f64::round)),
        _ => as_str(v)
            .and_then(|s| {
                let s = s.trim();
                let s = ["miles", "mile", "mi.", "mi"]
                    .iter()
                    .find_map(|unit| strip_suffix_ci(s, unit))
                    .unwrap_or(s);
                Decimal::parse(s)
            })
            .map_or(Val::Null, |d| d.rounded()),
    };
    match value.as_f64() {
        Some(m) if m >= 0.0 => value,
        _ => Val::Null,
    }
}

fn int(v: &Val) -> Val {
    match v {
        Val::Num(_) if v.is_int() => v.clone(),
        Val::Num(_) => v
            .as_f64()
            .map_or(Val::Null, |f| float_to_int(f, f64::trunc)),
        _ => as_str(v)
            .and_then(Decimal::parse)
            .map_or(Val::Null, |d| d.truncated()),
    }
}

fn num(v: &Val) -> Val {
    match v {
        Val::Num(_) => v.clone(),
        _ => as_str(v)
            .and_then(Decimal::parse)
            .map_or(Val::Null, |d| d.number()),
    }
}

/// jq's `trim`: `White_Space` removed at both ends; bytes that are not UTF-8 stop it.
fn trim_white_space(bytes: &[u8]) -> &[u8] {
    // Most values start and end with a printable ASCII character: nothing to trim. (The ASCII
    // characters with `White_Space` are U+0009..=U+000D and the space.)
    let printable = |b: &u8| b.is_ascii() && !matches!(b, b'\t'..=b'\r' | b' ');
    if bytes.first().is_some_and(printable) && bytes.last().is_some_and(printable) {
        return bytes;
    }
    let mut start = 0;
    for chunk in bytes.utf8_chunks() {
        let rest = chunk.valid().trim_start();
        start += chunk.valid().len() - rest.len();
        if !rest.is_empty() || !chunk.invalid().is_empty() {
            break;
        }
    }
    let bytes = bytes.get(start..).unwrap_or_default();
    let end = match bytes.utf8_chunks().last() {
        Some(last) if last.invalid().is_empty() => {
            bytes.len() - (last.valid().len() - last.valid().trim_end().len())
        }
        _ => bytes.len(),
    };
    bytes.get(..end).unwrap_or_default()
}

/// jq's `trim` of a string, as `jaq_std` does it (a byte string is an error).
fn trim(v: &Val) -> jaq_core::ValR<Val> {
    Ok(v.as_sub_str(trim_white_space(v.try_as_utf8_bytes()?)))
}

/// `if isstring then trim | if . == "" then null end else . end`.
fn nonempty(v: Val) -> jaq_core::ValR<Val> {
    if !matches!(v, Val::TStr(_) | Val::BStr(_)) {
        return Ok(v);
    }
    let trimmed = trim(&v)?;
    Ok(if is_blank(&trimmed) {
        Val::Null
    } else {
        trimmed
    })
}

/// jq's `type`.
fn type_name(v: &Val) -> &'static str {
    match v {
        Val::Null => "null",
        Val::Bool(_) => "boolean",
        Val::Num(_) => "number",
        Val::TStr(_) | Val::BStr(_) => "string",
        Val::Arr(_) => "array",
        Val::Obj(_) => "object",
    }
}

/// `if $table | isobject | not then error(…) elif . == null then null
/// else $table[if isstring then trim else tostring end] end`.
fn lookup(v: Val, table: Val) -> jaq_core::ValR<Val> {
    if !matches!(table, Val::Obj(_)) {
        return Err(jaq_core::Error::str(format_args!(
            "lookup: the table is {}, not an object (is its name right?)",
            type_name(&table)
        )));
    }
    let key = match v {
        Val::Null => return Ok(Val::Null),
        Val::TStr(_) | Val::BStr(_) => trim(&v)?,
        // `tostring`
        other => other.into_string(),
    };
    jaq_core::ValT::index(table, &key)
}

/// `null`, `""` and `[]`: what `compact` drops.
fn is_blank(v: &Val) -> bool {
    match v {
        Val::Null => true,
        Val::TStr(b) | Val::BStr(b) => b.is_empty(),
        Val::Arr(a) => a.is_empty(),
        _ => false,
    }
}

/// In place when nothing else holds the object or array (as for an object literal just built);
/// otherwise on a copy, as jaq values are immutable.
fn compact(v: Val) -> Val {
    match v {
        Val::Obj(mut o) => {
            Rc::make_mut(&mut o).retain(|_, v| {
                *v = compact(std::mem::take(v));
                !is_blank(v)
            });
            Val::Obj(o)
        }
        Val::Arr(mut a) => {
            for v in Rc::make_mut(&mut a) {
                *v = compact(std::mem::take(v));
            }
            Val::Arr(a)
        }
        other => other,
    }
}

fn split_list(v: Val, sep: Val) -> jaq_core::ValR<Val> {
    let items: Vec<Val> = match &v {
        Val::Null => Vec::new(),
        Val::Arr(a) => a.iter().cloned().collect(),
        Val::TStr(_) | Val::BStr(_) => {
            let sep = as_str(&sep).filter(|s| !s.is_empty()).ok_or_else(|| {
                jaq_core::Error::str(format_args!(
                    "split_list: the separator must be a non-empty string, not {sep}"
                ))
            })?;
            let (Val::TStr(text) | Val::BStr(text)) = &v else {
                unreachable!("matched a string")
            };
            // The pieces are slices of the string (`clean` below keeps them, trimmed).
            let piece = |p: &str| Val::utf8_str(text.slice_ref(p.as_bytes()));
            let mut one = sep.chars();
            match (std::str::from_utf8(text), one.next(), one.next()) {
                // A one-character separator (nearly always) is searched for as a `char`.
                (Ok(s), Some(c), None) => s.split(c).map(piece).collect(),
                (Ok(s), _, _) => s.split(sep).map(piece).collect(),
                (Err(_), _, _) => Vec::new(),
            }
        }
        _ => vec![v.clone()],
    };
    let clean = |item: Val| match &item {
        Val::TStr(b) | Val::BStr(b) => match std::str::from_utf8(b) {
            Ok(s) if s.trim().is_empty() => None,
            Ok(s) if s.trim().len() < s.len() => {
                Some(Val::utf8_str(b.slice_ref(s.trim().as_bytes())))
            }
            _ => Some(item),
        },
        _ => (!matches!(item, Val::Null)).then_some(item),
    };
    Ok(items.into_iter().filter_map(clean).collect())
}

fn map_str(v: Val, f: impl FnOnce(&str) -> String) -> Val {
    match as_str(&v) {
        Some(s) => Val::from(f(s)),
        None => v,
    }
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().any(|c| c.is_ascii_digit()) {
            out.push_str(word);
        } else {
            let mut start = true;
            for c in word.chars() {
                if start {
                    out.extend(c.to_uppercase());
                } else {
                    out.extend(c.to_lowercase());
                }
                start = matches!(c, '-' | '/');
            }
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Leading ASCII digits (between `min` and `max` of them) as a number, and the rest.
fn take_digits(s: &str, min: usize, max: usize) -> Option<(i16, &str)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n < min || n > max {
        return None;
    }
    let (digits, rest) = s.split_at_checked(n)?;
    Some((digits.parse().ok()?, rest))
}

/// `YYYY-MM-DD` or `M/D/YYYY` at the start of `s`, and the rest.
fn date_prefix(s: &str) -> Option<(Date, &str)> {
    let iso = || {
        let (year, rest) = take_digits(s, 4, 4)?;
        let (month, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        Some((year, month, day, rest))
    };
    let us = || {
        let (month, rest) = take_digits(s, 1, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('/')?, 1, 2)?;
        let (year, rest) = take_digits(rest.strip_prefix('/')?, 4, 4)?;
        Some((year, month, day, rest))
    };
    let (year, month, day, rest) = iso().or_else(us)?;
    let date = Date::new(year, i8::try_from(month).ok()?, i8::try_from(day).ok()?).ok()?;
    Some((date, rest))
}

/// `H:MM[:SS[.fff]] [AM|PM]`, the whole of `s`.
fn time_of_day(s: &str) -> Option<Time> {
    let (hour, rest) = take_digits(s, 1, 2)?;
    let (minute, mut rest) = take_digits(rest.strip_prefix(':')?, 2, 2)?;
    let (mut second, mut nanos) = (0, 0);
    if let Some(after) = rest.strip_prefix(':') {
        (second, rest) = take_digits(after, 2, 2)?;
        if let Some(after) = rest.strip_prefix('.') {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            let (frac, after) = after.split_at_checked(n)?;
            if frac.is_empty() || frac.len() > 9 {
                return None;
            }
            nanos = frac.parse::<i32>().ok()? * 10_i32.pow(9 - frac.len() as u32);
            rest = after;
        }
    }
    let rest = rest.trim();
    let am_pm = ["am", "a.m.", "pm", "p.m."]
        .iter()
        .position(|m| rest.eq_ignore_ascii_case(m));
    let hour = match am_pm {
        None if rest.is_empty() => hour,
        None => return None,
        Some(_) if !(1..=12).contains(&hour) => return None,
        Some(i) => hour % 12 + if i >= 2 { 12 } else { 0 },
    };
    let part = |n: i16| i8::try_from(n).ok();
    Time::new(part(hour)?, part(minute)?, part(second)?, nanos).ok()
}

fn legacy_date(v: &Val) -> Val {
    let date = as_str(v).and_then(|s| {
        let (date, rest) = date_prefix(s.trim())?;
        let time_follows = rest
            .strip_prefix(['T', 't', ' '])
            .is_some_and(|t| t.trim_start().starts_with(|c: char| c.is_ascii_digit()));
        (rest.is_empty() || time_follows).then(|| date.to_string())
    });
    date.map_or(Val::Null, Val::from)
}

/// The zone of that IANA name. A mapping names one zone for all its records: each thread keeps
/// the last one it looked up rather than asking the database per record.
fn zone_named(name: &str) -> Option<jiff::tz::TimeZone> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Box<str>, jiff::tz::TimeZone)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((n, zone)) = last.as_ref()
            && **n == *name
        {
            return Some(zone.clone());
        }
        let zone = jiff::tz::db().get(name).ok()?;
        *last = Some((name.into(), zone.clone()));
        Some(zone)
    })
}

/// Whether `s` could be a timestamp with an offset: one needs `Z` or a sign (`+`, `-`, or
/// the non-ASCII `−`) after its date. Wall-clock times skip the (failing) timestamp parse.
fn may_have_offset(s: &str) -> bool {
    s.bytes()
        .skip(10)
        .any(|b| matches!(b, b'Z' | b'z' | b'+' | b'-') || !b.is_ascii())
}

fn legacy_datetime(v: Val, tz: Val) -> jaq_core::ValR<Val> {
    let name = as_str(&tz).ok_or_else(|| {
        jaq_core::Error::str(format_args!(
            "legacy_datetime: the time zone must be a name such as \"America/Los_Angeles\", not {tz}"
        ))
    })?;
    let zone = zone_named(name).ok_or_else(|| {
        jaq_core::Error::str(format_args!("legacy_datetime: unknown time zone {tz}"))
    })?;
    let Some(s) = as_str(&v).map(str::trim) else {
        return Ok(Val::Null);
    };
    if may_have_offset(s) && !s.contains('[') && s.parse::<jiff::Timestamp>().is_ok() {
        return Ok(Val::from(s.to_string()));
    }
    let wall_clock = date_prefix(s).and_then(|(date, rest)| {
        let rest = rest.strip_prefix(['T', 't', ' '])?.trim_start();
        Some(DateTime::from_parts(date, time_of_day(rest)?))
    });
    let formatted = wall_clock
        .and_then(|dt| dt.to_zoned(zone).ok())
        .and_then(|zoned| jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%.f%:z", &zoned).ok());
    Ok(formatted.map_or(Val::Null, Val::from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval_with(program: &str, input: Value, vars: &JqVars) -> Value {
        let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
        jq.run_one(&JqValue::from_json(&input), vars)
            .unwrap_or_else(|e| panic!("{program} on {input}: {e}"))
            .to_json()
    }

    fn eval(program: &str, input: Value) -> Value {
        eval_with(program, input, &JqVars::default())
    }

    fn run_err(program: &str, input: Value) -> String {
        let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
        match jq.run(&JqValue::from_json(&input), &JqVars::default()) {
            Ok(out) => panic!("{program} should fail, gave {} values", out.len()),
            Err(e) => e.0,
        }
    }

    /// Runs `helper` on each input and compares with the expected output.
    fn check(helper: &str, cases: &[(Value, Value)]) {
        let jq = Jq::compile(helper).unwrap_or_else(|e| panic!("{helper}: {e}"));
        for (input, expected) in cases {
            let got = jq
                .run_one(&JqValue::from_json(input), &JqVars::default())
                .unwrap_or_else(|e| panic!("{helper} on {input}: {e}"))
                .to_json();
            assert_eq!(&got, expected, "{helper} on {input}");
        }
    }

    #[test]
    fn dollars() {
        check(
            "dollars",
            &[
                (json!("$24,990"), json!(24990)),
                (json!("24990.00"), json!(24990)),
                (json!("$24,990.60"), json!(24991)),
                (json!("$24,990.50"), json!(24991)),
                (json!("$24,990.49"), json!(24990)),
                (json!(" $ 1,200 "), json!(1200)),
                (json!("USD 1,200"), json!(1200)),
                (json!("1200 usd"), json!(1200)),
                (json!("-$5.50"), json!(-6)),
                (json!("$-5"), json!(-5)),
                (json!(".99"), json!(1)),
                (json!(24990), json!(24990)),
                (json!(24990.5), json!(24991)),
                (json!(24990.4), json!(24990)),
                (json!(""), Value::Null),
                (json!("Call for price"), Value::Null),
                (json!("$"), Value::Null),
                (json!("24,99"), Value::Null),
                (json!("-$-5"), Value::Null),
                (json!("1e5"), Value::Null),
                (Value::Null, Value::Null),
                (json!(true), Value::Null),
                (json!([1]), Value::Null),
                (json!({"a": 1}), Value::Null),
            ],
        );
    }

    #[test]
    fn miles() {
        check(
            "miles",
            &[
                (json!("12,345 mi"), json!(12345)),
                (json!("12345"), json!(12345)),
                (json!("12,345 miles"), json!(12345)),
                (json!("12,345 Mi."), json!(12345)),
                (json!("1 mile"), json!(1)),
                (json!("12345mi"), json!(12345)),
                (json!("12,345.6"), json!(12346)),
                (json!(12345), json!(12345)),
                (json!(12345.4), json!(12345)),
                (json!("0"), json!(0)),
                (json!(""), Value::Null),
                (json!("   "), Value::Null),
                (json!("unknown"), Value::Null),
                (json!("-5 mi"), Value::Null),
                (json!(-5), Value::Null),
                (Value::Null, Value::Null),
            ],
        );
    }

    #[test]
    fn int() {
        check(
            "int",
            &[
                (json!("2022"), json!(2022)),
                (json!(" 2022 "), json!(2022)),
                (json!("28"), json!(28)),
                (json!("-3"), json!(-3)),
                (json!("1,234"), json!(1234)),
                (json!("2.9"), json!(2)),
                (json!(2022), json!(2022)),
                (json!(2.5), json!(2)),
                (json!(-2.5), json!(-2)),
                (json!(""), Value::Null),
                (json!("abc"), Value::Null),
                (json!("20 22"), Value::Null),
                (json!("99999999999999999999"), Value::Null),
                (Value::Null, Value::Null),
                (json!(false), Value::Null),
            ],
        );
        // Results are real integers in jq too.
        assert_eq!(eval(r#""2022" | int | . + 1"#, Value::Null), json!(2023));
    }

    #[test]
    fn num() {
        check(
            "num",
            &[
                (json!("239"), json!(239)),
                (json!("61.5"), json!(61.5)),
                (json!("239.00"), json!(239)),
                (json!(" 1,234.5 "), json!(1234.5)),
                (json!("-0.25"), json!(-0.25)),
                (json!(".5"), json!(0.5)),
                (json!(61.5), json!(61.5)),
                (json!(7), json!(7)),
                (json!(""), Value::Null),
                (json!("  "), Value::Null),
                (json!("n/a"), Value::Null),
                (json!("."), Value::Null),
                (json!("1.2.3"), Value::Null),
                (Value::Null, Value::Null),
            ],
        );
    }

    #[test]
    fn nonempty() {
        check(
            "nonempty",
            &[
                (json!(" EX-L "), json!("EX-L")),
                (json!("EX"), json!("EX")),
                (json!(""), Value::Null),
                (json!(" \t\n"), Value::Null),
                (json!(0), json!(0)),
                (json!(false), json!(false)),
                (Value::Null, Value::Null),
                (json!([]), json!([])),
            ],
        );
    }

    #[test]
    fn split_list() {
        check(
            r#"split_list("|")"#,
            &[
                (json!("A|B| C |"), json!(["A", "B", "C"])),
                (json!("A"), json!(["A"])),
                (json!("|"), json!([])),
                (json!(""), json!([])),
                (Value::Null, json!([])),
                (json!([" A ", "", null, "B"]), json!(["A", "B"])),
                (json!(5), json!([5])),
            ],
        );
        check(
            r#"split_list(", ")"#,
            &[(
                json!("Sunroof, Heated Seats"),
                json!(["Sunroof", "Heated Seats"]),
            )],
        );
        assert!(run_err(r#"split_list("")"#, json!("a,b")).contains("separator"));
    }

    #[test]
    fn legacy_date() {
        check(
            "legacy_date",
            &[
                (json!("03/15/2026"), json!("2026-03-15")),
                (json!("3/5/2026"), json!("2026-03-05")),
                (json!("2026-03-15"), json!("2026-03-15")),
                (json!("2026-03-15 10:00:00"), json!("2026-03-15")),
                (json!("2026-03-15T10:00:00Z"), json!("2026-03-15")),
                (json!("3/15/2026 10:00 AM"), json!("2026-03-15")),
                (json!(" 2026-03-15 "), json!("2026-03-15")),
                (json!("02/30/2026"), Value::Null),
                (json!("2026-13-01"), Value::Null),
                (json!("3/15/26"), Value::Null),
                (json!("15.03.2026"), Value::Null),
                (json!("2026-03-15garbage"), Value::Null),
                (json!("2026-3-15"), Value::Null),
                (json!("March 15, 2026"), Value::Null),
                (json!(""), Value::Null),
                (json!(20260315), Value::Null),
                (Value::Null, Value::Null),
            ],
        );
    }

    #[test]
    fn every_timestamp_jiff_reads_passes_the_offset_precheck() {
        let stamps = [
            "2026-11-30T14:05:00Z",
            "2026-11-30t14:05:00z",
            "2026-11-30T14:05:00-05:00",
            "2026-11-30T14:05:00+0530",
            "2026-11-30T14:05:00.123456789+05:30",
            "2026-11-30 14:05Z",
            "20261130T140500Z",
            "20261130T1405-05",
            "+002026-11-30T14:05:00Z",
            "2026-11-30T14:05:00\u{2212}05:00",
            "2026-11-30T14:05:00-05:00[America/New_York]",
        ];
        for s in stamps {
            if s.parse::<jiff::Timestamp>().is_ok() {
                assert!(may_have_offset(s), "{s}");
            }
        }
        assert!("2026-11-30T14:05:00Z".parse::<jiff::Timestamp>().is_ok());
        assert!(!may_have_offset("2026-11-30 14:05:00"));
        assert!(!may_have_offset("11/30/2026 2:05 PM"));
    }

    #[test]
    fn legacy_datetime() {
        check(
            r#"legacy_datetime("America/Los_Angeles")"#,
            &[
                (
                    json!("2026-11-30 14:05:00"),
                    json!("2026-11-30T14:05:00-08:00"),
                ),
                (
                    json!("2026-11-30T14:05:00"),
                    json!("2026-11-30T14:05:00-08:00"),
                ),
                (
                    json!("2026-11-30T14:05"),
                    json!("2026-11-30T14:05:00-08:00"),
                ),
                (
                    json!("11/30/2026 2:05 PM"),
                    json!("2026-11-30T14:05:00-08:00"),
                ),
                (
                    json!("11/30/2026 2:05:00 pm"),
                    json!("2026-11-30T14:05:00-08:00"),
                ),
                (
                    json!("11/30/2026 12:30 AM"),
                    json!("2026-11-30T00:30:00-08:00"),
                ),
                (
                    json!("11/30/2026 12:30 PM"),
                    json!("2026-11-30T12:30:00-08:00"),
                ),
                // Summer time.
                (
                    json!("2026-07-01 14:05:00"),
                    json!("2026-07-01T14:05:00-07:00"),
                ),
                (json!("7/1/2026 09:00"), json!("2026-07-01T09:00:00-07:00")),
                (
                    json!("2026-07-01 14:05:00.250"),
                    json!("2026-07-01T14:05:00.25-07:00"),
                ),
                // 2026-03-08 02:30 does not exist in Los Angeles: moved forward.
                (
                    json!("2026-03-08 02:30:00"),
                    json!("2026-03-08T03:30:00-07:00"),
                ),
                // 2026-11-01 01:30 happens twice: the earlier one.
                (
                    json!("2026-11-01 01:30:00"),
                    json!("2026-11-01T01:30:00-07:00"),
                ),
                // Already with an offset: unchanged.
                (
                    json!("2026-11-30T14:05:00-05:00"),
                    json!("2026-11-30T14:05:00-05:00"),
                ),
                (json!("2026-11-30T22:05:00Z"), json!("2026-11-30T22:05:00Z")),
                (json!("2026-11-30"), Value::Null),
                (json!("11/30/2026 13:05 PM"), Value::Null),
                (json!("2026-11-30 25:00"), Value::Null),
                (json!("tomorrow at noon"), Value::Null),
                (json!(""), Value::Null),
                (json!(1764540300), Value::Null),
                (Value::Null, Value::Null),
            ],
        );
        assert_eq!(
            eval(
                r#"legacy_datetime("Europe/Paris")"#,
                json!("2026-07-01 14:05")
            ),
            json!("2026-07-01T14:05:00+02:00")
        );
        let dealer = JqVars {
            dealer: JqValue::from_json(&json!({"timezone": "UTC"})),
            ..JqVars::default()
        };
        assert_eq!(
            eval_with(
                "legacy_datetime($dealer.timezone)",
                json!("2026-07-01 14:05"),
                &dealer
            ),
            json!("2026-07-01T14:05:00+00:00")
        );
        assert!(
            run_err(r#"legacy_datetime("America/Los_Angles")"#, json!("x"))
                .contains("unknown time zone")
        );
        assert!(run_err("legacy_datetime(null)", json!("x")).contains("time zone must be"));
        // The zone cache keys by name: a second zone on the same thread is its own.
        assert_eq!(
            eval(
                r#"legacy_datetime("Asia/Tokyo")"#,
                json!("2026-07-01 14:05")
            ),
            json!("2026-07-01T14:05:00+09:00")
        );
        // Minimal containers have no /usr/share/zoneinfo; the gateway carries its own.
        assert!(
            jiff::tz::TimeZoneDatabase::bundled()
                .get("America/Los_Angeles")
                .is_ok()
        );
    }

    #[test]
    fn compact() {
        check(
            "compact",
            &[
                (
                    json!({"a": 1, "b": null, "c": "", "d": [], "e": {"f": null}, "g": [null, 1], "h": 0, "i": false}),
                    json!({"a": 1, "e": {}, "g": [null, 1], "h": 0, "i": false}),
                ),
                (
                    json!({"vehicles": [{"vin": "X", "trim": null}], "total": 1}),
                    json!({"vehicles": [{"vin": "X"}], "total": 1}),
                ),
                (json!([{"a": null}, "", null]), json!([{}, "", null])),
                (json!("x"), json!("x")),
                (Value::Null, Value::Null),
            ],
        );
        // Values are immutable: compacting a shared object or array leaves the original alone.
        assert_eq!(
            eval(
                "[compact, ., (.x | compact), .x]",
                json!({"a": null, "x": [{"b": null, "c": 1}]})
            ),
            json!([
                {"x": [{"c": 1}]},
                {"a": null, "x": [{"b": null, "c": 1}]},
                [{"c": 1}],
                [{"b": null, "c": 1}]
            ])
        );
        // Key order is kept.
        let out = eval("compact", json!({"z": 1, "a": null, "m": 2}));
        let keys: Vec<_> = out
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["z", "m"]);
    }

    #[test]
    fn lookup() {
        let vars = JqVars {
            tables: JqValue::from_json(&json!({
                "condition_in": {"Certified Pre-Owned": "cpo", "New": "new", "1": "one"}
            })),
            ..JqVars::default()
        };
        let program = "lookup($tables.condition_in)";
        assert_eq!(
            eval_with(program, json!("Certified Pre-Owned"), &vars),
            json!("cpo")
        );
        assert_eq!(eval_with(program, json!(" New "), &vars), json!("new"));
        assert_eq!(eval_with(program, json!(1), &vars), json!("one"));
        assert_eq!(eval_with(program, json!("Used"), &vars), Value::Null);
        assert_eq!(eval_with(program, Value::Null, &vars), Value::Null);
        let typo = Jq::compile("lookup($tables.conditon_in)").unwrap_or_else(|e| panic!("{e}"));
        let err = typo
            .run_one(&JqValue::from_json(&json!("New")), &vars)
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(err.contains("the table is null"), "{err}");
    }

    /// Every output (or the error) of `jq` on `input`, variants and key order included.
    fn outputs_of(jq: &Jq, input: &JqValue, vars: &JqVars) -> String {
        format!("{:?}", jq.run(input, vars))
    }

    /// The jq definitions `nonempty` and `lookup` had before they were native.
    const HELPERS_IN_JQ: &str = r#"
        def nonempty_jq: if isstring then trim | if . == "" then null end else . end;
        def lookup_jq($table):
          if $table | isobject | not then
            error("lookup: the table is \($table | type), not an object (is its name right?)")
          elif . == null then null
          else $table[if isstring then trim else tostring end] end;
    "#;

    #[test]
    fn json_text_parses_to_the_value_from_json_gives() {
        let texts = [
            "null",
            "true",
            "0",
            "-0",
            "1.0",
            "-1.5e3",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "123456789012345678901234567890",
            r#""é \u00e9 \ud83d\ude97 \n""#,
            "[]",
            "{}",
            r#"{"b": 1, "a": [1, {"c": null}], "b": 2, "": "x"}"#,
            r#"{"Items": [{"VIN": "1HG", "Price": "$24,990", "Odometer": 12345.0}], "TotalCount": 1}"#,
        ];
        for text in texts {
            let parsed: Value = serde_json::from_str(text).expect("JSON");
            let direct = JqValue::from_json_slice(text.as_bytes()).expect("JSON");
            assert_eq!(
                format!("{direct:?}"),
                format!("{:?}", JqValue::from_json(&parsed)),
                "{text}"
            );
        }
        assert!(JqValue::from_json_slice(b"{\"a\": }").is_err());
        assert!(JqValue::from_json_slice(b"[1] x").is_err());
    }

    #[test]
    fn native_helpers_match_their_jq_definitions() {
        let inputs = [
            r#"" EX-L ""#,
            r#""EX""#,
            r#""""#,
            r#"" \t\n""#,
            r#""\u00a0\u2003x\u3000\u0085""#,
            r#""\u200bx\u200b""#,
            // One side trimmed only, by ASCII and by other White_Space (the ASCII fast path).
            r#""x\u000b""#,
            r#""\u000cx""#,
            r#""a""#,
            r#""x\u0085""#,
            r#""\u2003x""#,
            r#"" New ""#,
            r#""Certified Pre-Owned""#,
            r#""1""#,
            "null",
            "0",
            "1",
            "1.5",
            "1.0",
            "-0",
            "nan",
            "false",
            "true",
            "[]",
            "[1]",
            "{}",
            r#"{"a": 1}"#,
            r#"" x " | tobytes"#,
            // Strings that are not valid UTF-8.
            "[32, 255, 32, 97, 32] | tobytes | tostring",
            "[32, 97, 32, 255] | tobytes | tostring",
            "[255, 226, 128, 128] | tobytes | tostring",
            "[226, 128] | tobytes | tostring",
        ];
        let table = r#"{"New": "new", "1": "one", "1.5": "x", "1.0": "y", "-0": "z",
            "true": "t", "false": "f", "[1]": "arr", "{\"a\":1}": "obj", "[]": "e",
            "{}": "o", "EX": "ex", "x": "ex", "null": "n"}"#;
        let tables = [table, "{}", "null", r#""t""#, "[]", "5", "true"];
        let vars = JqVars::default();
        let input = JqValue::null();
        for value in inputs {
            let mut pairs = vec![(
                format!("{value} | nonempty"),
                format!("{HELPERS_IN_JQ} {value} | nonempty_jq"),
            )];
            for table in tables {
                pairs.push((
                    format!("{value} | lookup({table})"),
                    format!("{HELPERS_IN_JQ} {value} | lookup_jq({table})"),
                ));
            }
            for (native, in_jq) in pairs {
                let compiled = |p: &str| Jq::compile(p).unwrap_or_else(|e| panic!("{p}: {e}"));
                let (native_jq, in_jq_jq) = (compiled(&native), compiled(&in_jq));
                assert_eq!(
                    outputs_of(&native_jq, &input, &vars),
                    outputs_of(&in_jq_jq, &input, &vars),
                    "{native}"
                );
            }
        }
        // A stream of tables is a stream of lookups, as with a `$table` parameter.
        assert_eq!(
            eval(r#""a" | [lookup({a: 1}, {a: 2})]"#, Value::Null),
            json!([1, 2])
        );
    }

    /// `code` compiled the way jaq's loader reads it, without the object rewrite.
    fn as_written(code: &str) -> Jq {
        let filter = compile_as_written(code).unwrap_or_else(|e| panic!("{code}: {e}"));
        Jq {
            inner: Arc::new(Compiled {
                code: code.into(),
                filter,
                plan: None,
            }),
        }
    }

    #[test]
    fn object_literals_built_left_to_right_give_the_same_outputs() {
        let programs = [
            "{a: 1, b: 2, c: 3}",
            "{a: 1, b: 2, c: 3} | keys_unsorted",
            "{a: (1, 2), b: (3, 4), c: (5, 6)}",
            "{a: (1, 2), b: (3, 4)}",
            "{a: 1, b: 2, a: 3, c: 4, b: 5}",
            r#"{("x", "y"): 1, z: 2, w: (3, 4), x: 0}"#,
            r#"{a: 1, b: error("boom"), c: 3}"#,
            r#"{a: error("first"), b: error("second"), c: 1}"#,
            r#"{a: (1, error("late")), b: 2, c: (3, 4)}"#,
            r#"[.[] | try {a: 1, b: (1, error("x"), 2), c: .} catch "caught \(.)"]"#,
            "{a: empty, b: 1, c: 2}",
            "[limit(5; {a: range(10), b: (1, 2), c: 3})]",
            "first({a: range(3), b: range(3), c: range(3)})",
            "{(1): 2, a: 1, b: 2}",
            "{a: 1, b: 2, (null): 3}",
            "{a, b, c}",
            r#". as $x | {$x, y: 1, "z": 2, "w\(1)": 3, (@base64 "k"): 4}"#,
            "{a: {b: 1, c: 2, d: 3}, e: [{f: 1, g: 2, h: 3}], i: \"\\({j: 1, k: 2, l: 3})\"}",
            "def f: {a: 1, b: 2, c: 3}; def g($x): {x: $x, y: f, z: 0}; g(1, 2)",
            "reduce range(3) as $i ({}; . + {($i | tostring): $i, a: 1, b: 2})",
            "[foreach range(3) as $i ({}; {n: $i, a: ., b: 2}; {out: ., i: $i, k: 1})]",
            "{a: 1, b: 2} as {a: $a, (\"b\"): $b} | {a: $a, b: $b, c: ($a + $b)}",
            ". as {({a: 1, b: 2, c: 3} | keys_unsorted[0]): $v} | $v",
            "[label $out | {a: (1, 2), b: (if .a == 2 then break $out else 3 end), c: 3}]",
            "label $out | {a: 1, b: break $out, c: 3}",
            "path({a: 1, b: 2, c: 3})",
            "-{a: 1, b: 2, c: 3}",
            "{a: 1, b: 2, c: 3} | .b |= . + 1",
            "{a: 1, b: 2, c: 3} == {c: 3, b: 2, a: 1}",
            "if {a: 1, b: 2, c: 3} then {x: 1, y: 2, z: 3} else 2 end",
            ".[{a: \"a\", b: 2, c: 3} | .a]",
            "[.[1:{a: 1, b: 2, c: 3} | length]]",
            ".zz? // {a: 1, b: 2, c: 3}",
            "{a: $request, b: $tables, c: $dealer, d: $lead}",
            "[{a: .[], b: 1, c: 2}]",
            "{a: 1, b: 2, c: 3} | compact | to_entries",
        ];
        let vars = JqVars {
            request: JqValue::from_json(&json!({"r": 1})),
            tables: JqValue::from_json(&json!({"t": 2})),
            dealer: JqValue::from_json(&json!({"d": 3})),
            lead: JqValue::null(),
        };
        let inputs = [json!({"a": 1, "b": [2], "c": null}), json!([1, 2, 3])];
        for program in programs {
            let rewritten = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
            let plain = as_written(program);
            for input in &inputs {
                let input = JqValue::from_json(input);
                assert_eq!(
                    outputs_of(&rewritten, &input, &vars),
                    outputs_of(&plain, &input, &vars),
                    "{program}"
                );
            }
        }

        let (rewritten, plain) = (Jq::compile(ITEM), as_written(ITEM));
        let rewritten = rewritten.unwrap_or_else(|e| panic!("{e}"));
        for i in 0..3 {
            let record = JqValue::from_json(&dms_record(i));
            assert_eq!(
                outputs_of(&rewritten, &record, &tables()),
                outputs_of(&plain, &record, &tables())
            );
        }
    }

    #[test]
    fn programs_the_rewrite_does_not_take_compile_as_written() {
        assert!(compile_left_assoc(ITEM).is_some());
        assert!(compile_left_assoc("def f: {a: 1, b: 2, c: 3}; f | compact").is_some());
        assert!(compile_left_assoc("frobnicate").is_none());
        // Mentions the name the rewritten program is loaded under.
        assert_eq!(
            eval(
                "def aap_gateway_main: {a: 1, b: 2, c: 3}; aap_gateway_main",
                Value::Null
            ),
            json!({"a": 1, "b": 2, "c": 3})
        );
        // Module directives: not supported, and reported as before.
        let err = Jq::compile(r#"include "x"; {a: 1, b: 2, c: 3}"#).err();
        assert!(err.is_some_and(|e| e.message.contains("module loading not supported")));
    }

    #[test]
    fn case_helpers() {
        check(
            "lower",
            &[
                (json!("HONDA Élan"), json!("honda élan")),
                (json!(5), json!(5)),
            ],
        );
        check(
            "upper",
            &[
                (json!("honda élan"), json!("HONDA ÉLAN")),
                (Value::Null, Value::Null),
            ],
        );
        check(
            "title",
            &[
                (json!("HONDA CIVIC EX-L 4WD"), json!("Honda Civic Ex-L 4WD")),
                (
                    json!("  mercedes-benz  c/k "),
                    json!("  Mercedes-Benz  C/K "),
                ),
                (json!("F-150"), json!("F-150")),
                (json!(1), json!(1)),
            ],
        );
    }

    /// The choices an unknown function's message lists.
    const HELPERS_LISTED: &str = "besides jq's builtins the gateway's helpers are nonempty/0, lookup/1, dollars/0, miles/0, int/0, num/0, legacy_date/0, legacy_datetime/1, lower/0, upper/0, title/0, compact/0, split_list/1";

    #[test]
    fn compile_errors_are_located() {
        let program = "{\n  vin: .VIN,\n  make: (.Make | frobnicate),\n}";
        let err = Jq::compile(program)
            .err()
            .map(|e| (e.line, e.col, e.to_string()));
        assert_eq!(
            err,
            Some((
                3,
                18,
                format!("3:18: undefined function `frobnicate/0`; {HELPERS_LISTED}")
            ))
        );

        let err = Jq::compile("{\n  a: $nope\n}")
            .err()
            .map(|e| (e.line, e.col, e.message));
        assert_eq!(err, Some((2, 6, "undefined variable `$nope`".to_string())));

        // Columns count characters, not bytes.
        let err = Jq::compile(r#""é" | nope(1)"#)
            .err()
            .map(|e| (e.line, e.col));
        assert_eq!(err, Some((1, 7)));

        let err = Jq::compile(".a |\n  if . then 1").err();
        let err = err.map(|e| (e.line, e.message)).unwrap_or_default();
        assert_eq!(err.0, 2);
        assert!(err.1.contains("expected else or end"), "{}", err.1);

        let err = Jq::compile(".a |\n  (.b")
            .err()
            .map(|e| (e.line, e.col, e.message));
        assert_eq!(err, Some((2, 3, "unclosed `(`".to_string())));

        let err = Jq::compile(".a &\n .b")
            .err()
            .map(|e| (e.line, e.col, e.message));
        assert_eq!(err, Some((1, 4, "expected token".to_string())));

        let err = Jq::compile(".a |")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert_eq!(err, "expected term, found end of program");

        let err = Jq::compile("foo | bar")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert_eq!(
            err,
            format!("undefined function `foo/0`; {HELPERS_LISTED} (and 1 more error)")
        );

        assert!(Jq::compile(r#"import "x" as x; ."#).is_err());
    }

    #[test]
    fn variables_are_visible() {
        let vars = JqVars {
            request: JqValue::from_json(&json!({"vin": "V1"})),
            tables: JqValue::from_json(&json!({"t": {"a": 1}})),
            dealer: JqValue::from_json(&json!({"name": "Demo Motors"})),
            lead: JqValue::null(),
        };
        assert_eq!(
            eval_with(
                "[$request.vin, $tables.t.a, $dealer.name, .]",
                json!(7),
                &vars
            ),
            json!(["V1", 1, "Demo Motors", 7])
        );
    }

    #[test]
    fn run_counts_outputs() {
        let jq = |p: &str| Jq::compile(p).unwrap_or_else(|e| panic!("{e}"));
        let (input, vars) = (JqValue::null(), JqVars::default());
        let err = |r: Result<JqValue, JqRunError>| r.err().map(|e| e.0).unwrap_or_default();
        assert_eq!(err(jq("empty").run_one(&input, &vars)), "produced no value");
        assert_eq!(
            err(jq("1, 2").run_one(&input, &vars)),
            "produced 2 values, expected one"
        );
        let all = jq("1, 2, 3").run(&input, &vars).map(|v| v.len()).ok();
        assert_eq!(all, Some(3));
        let endless = jq("repeat(1)").run(&input, &vars).err().map(|e| e.0);
        assert_eq!(endless.as_deref(), Some("produced more than 100000 values"));
        assert_eq!(
            jq("limit(3; repeat(1))")
                .run(&input, &vars)
                .map(|v| v.len())
                .ok(),
            Some(3)
        );
    }

    #[test]
    fn run_bool_is_jq_truthiness_of_the_first_output() {
        let b = |p: &str, input: Value| {
            Jq::compile(p)
                .unwrap_or_else(|e| panic!("{e}"))
                .run_bool(&JqValue::from_json(&input), &JqVars::default())
                .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(b(
            ".Fault.Code == \"NotFound\"",
            json!({"Fault": {"Code": "NotFound"}})
        ));
        assert!(!b(".Fault.Code == \"NotFound\"", json!({})));
        assert!(b(".x", json!({"x": 0})));
        assert!(!b(".x", json!({"x": null})));
        assert!(!b("empty", Value::Null));
        // Only the first output is computed.
        assert!(b("true, error(\"not reached\")", Value::Null));
    }

    #[test]
    fn runtime_errors_are_messages() {
        assert_eq!(
            run_err("tonumber", Value::Null),
            "cannot use null as string"
        );
        assert!(run_err("tonumber", json!("garbage")).contains("cannot parse"));
        assert!(run_err(".a", json!(5)).contains("cannot index"));
        assert_eq!(run_err(r#"error("boom")"#, Value::Null), "boom");
        assert_eq!(run_err(r#"error({code: 1})"#, Value::Null), r#"{"code":1}"#);
        // `halt` would exit the process through jaq's own helper: it must be a plain error.
        assert!(run_err("halt", Value::Null).contains("halt(0)"));
        assert!(run_err(r#""x" | halt_error"#, Value::Null).contains("halt(5)"));
        assert!(run_err("env", Value::Null).contains("not available"));
    }

    #[test]
    fn json_round_trip() {
        let v = json!({"s": "é", "i": -3, "u": u64::MAX, "f": 1.5, "b": true, "n": null, "a": [1, {"k": []}]});
        assert_eq!(JqValue::from_json(&v).to_json(), v);
        assert_eq!(
            eval(
                "[1.0, 3 / 1, 2.5, 0 / 0, 1e1000, 100000000000000000000]",
                Value::Null
            ),
            json!([1, 3, 2.5, null, null, 1e20])
        );
        assert_eq!(eval("{(1 | tostring): 2}", Value::Null), json!({"1": 2}));
    }

    fn dms_record(i: usize) -> Value {
        json!({
            "VIN": format!("1HGCY2F57RA{i:06}"),
            "StockNumber": format!("T{i}"),
            "ModelYear": "2022",
            "Make": "Honda",
            "Type": "Certified Pre-Owned",
            "InternetPrice": "$24,990",
            "Odometer": "12,345 mi",
            "Features": "A|B",
            "DealerCost": "$20,000"
        })
    }

    const ITEM: &str = r#"{vin: .VIN, stock: .StockNumber, year: (.ModelYear|int), make: .Make,
        condition: (.Type|lookup($tables.condition_in)), price: (.InternetPrice|dollars),
        mileage: (.Odometer|miles), features: (.Features|split_list("|")),
        trim: (.Trim|nonempty)} | compact"#;

    fn tables() -> JqVars {
        JqVars {
            tables: JqValue::from_json(&json!({"condition_in": {"Certified Pre-Owned": "cpo"}})),
            ..JqVars::default()
        }
    }

    #[test]
    fn realistic_mapping() {
        let out = eval_with(ITEM, dms_record(1), &tables());
        assert_eq!(
            out,
            json!({
                "vin": "1HGCY2F57RA000001",
                "stock": "T1",
                "year": 2022,
                "make": "Honda",
                "condition": "cpo",
                "price": 24990,
                "mileage": 12345,
                "features": ["A", "B"]
            })
        );
        let keys: Vec<_> = out
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            [
                "vin",
                "stock",
                "year",
                "make",
                "condition",
                "price",
                "mileage",
                "features"
            ]
        );
    }

    /// Timing, not an assertion: `cargo test --release mapping::extract -- --nocapture timing`.
    #[test]
    fn timing() {
        let page = json!({"TotalCount": 20, "Items": (0..20).map(dms_record).collect::<Vec<_>>()});
        let vars = tables();
        let started = std::time::Instant::now();
        let (items, item) = (Jq::compile(".Items[]"), Jq::compile(ITEM));
        let compile = started.elapsed() / 2;
        let (Ok(items), Ok(item)) = (items, item) else {
            panic!("compile")
        };

        let started = std::time::Instant::now();
        let page = JqValue::from_json(&page);
        let records = items.run(&page, &vars).unwrap_or_default();
        let convert = started.elapsed();
        assert_eq!(records.len(), 20);

        let started = std::time::Instant::now();
        let mut produced = 0;
        for i in 0..1_000 {
            let out = item.run_one(&records[i % records.len()], &vars);
            produced += usize::from(out.is_ok_and(|v| !v.to_json().is_null()));
        }
        let runs = started.elapsed();
        assert_eq!(produced, 1_000);
        eprintln!(
            "jq timing: compile {compile:?} per program; 20-item page to JqValue + items \
             split: {convert:?}; 1,000 item mappings incl. to_json: {runs:?} ({:?} each)",
            runs / 1_000
        );
    }
}
