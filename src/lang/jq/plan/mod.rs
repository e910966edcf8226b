//! Native plans: the common subset of jq, compiled from jaq's syntax tree into a tree of
//! [`Node`]s that runs straight on jaq's [`Val`], without jaq's interpreter.
//!
//! Why: a mapping's `item` program is a 30-entry object literal of small pipelines, run once per
//! record. In jaq every step allocates boxed iterators and contexts; most of a search's CPU went
//! there. A plan evaluates a term that always gives exactly one output (nearly all of a mapping)
//! as a plain function call ([`Node::eval1`]), and anything else as a stream pushed into a sink
//! ([`Node::run`]).
//!
//! Semantics are jaq's, step for step: the same value operations (`Val`'s `+`, comparisons,
//! `index`, `values`), the same order of outputs, and the same error a term gives when several
//! parts fail (mirroring how jaq runs `l + r`, paths, `//`, `try`, …; see the comments on each
//! case). [`compile`] returns `None` for anything outside the subset and the program then runs
//! in jaq (see `Jq::is_native`). The helpers are the same Rust functions jaq calls.
//!
//! Where jaq differs from jq, the plan follows jaq: `l // r` passes the errors of `l` on (only
//! `null` and `false` are absent), and an object is indexed with any key (`{"a":1}[0]` is `null`).
//!
//! The subset: `.`, paths (`.a`, `.[e]`, `.[]`, each optionally `?`; no slices, no `..`), literals,
//! `$request` `$tables` `$dealer` `$lead` and `as $x` bindings, `|`, `,`, `//`, `and`, `or`,
//! arithmetic, comparisons, unary `-`, `if`, `try`/`?`, arrays, object literals and string
//! interpolation whose parts give one value each, local `def`s without filter parameters, and
//! calls of `empty`, `null`, `true`, `false`, `not`, `select`, `map`, `error`, `type`,
//! `tostring`, `flatten` and the mapping helpers.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytestring::ByteString;

use jaq_core::load::{lex, parse};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use jaq_core::{ValR, ValT as _};
use jaq_json::{Map, Rc, Val};

use super::GLOBAL_VARS;
use super::tape::At;
use crate::protocol::vehicle::{self, Field, Shape, Text};

mod compile;
mod eval;
#[cfg(test)]
mod tests;
mod text;

pub(super) use self::compile::compile;
use self::compile::*;

type Term<'s> = parse::Term<&'s str>;
type Error = jaq_core::Error<Val>;
type Flow = ControlFlow<()>;

/// Receives the outputs of a streaming term; `Break` stops the producer.
type Sink<'a> = dyn FnMut(&mut Env, ValR<Val>) -> Flow + 'a;

/// A compiled native plan: the root term and how many variable slots it needs.
pub(super) struct Plan {
    root: Node,
    slots: usize,
    /// Set when the root builds one object from literal keys (a mapping's `item`).
    record: Option<RecordPlan>,
}

/// A root `{k: v, …}` or `{k: v, …} | compact` whose keys are distinct literal strings: the
/// object can be built as a [`vehicle::Record`] straight away ([`Plan::eval_record`]),
/// skipping jaq's hashed object, its compaction and its conversion.
struct RecordPlan {
    /// The keys, shared by every object built.
    shape: Arc<Shape>,
    compact: bool,
    /// Each field's flattened form, where it has one ([`text::Straight`]).
    straight: Box<[Option<text::Straight>]>,
    /// How many constant arguments the flattened fields keep in `Env::consts`.
    consts: usize,
    /// Whether each field's value reads only literals and the global variables
    /// (`status: "available"`, `dealer_id: $dealer.id`): the same for every record.
    invariant: Box<[bool]>,
}

impl RecordPlan {
    /// A field's value as the record holds it; `None` when `compact` drops it (blank). `text`
    /// makes a text borrowed from the input a span of the input's reply.
    fn field<'i>(&self, out: text::Out<'i>, text: impl Fn(Cow<'i, str>) -> Text) -> Option<Field> {
        Some(match out {
            // Text is what `is_blank`, `compact` and `val_to_json` make of a string.
            text::Out::Str(s) if self.compact && s.is_empty() => return None,
            text::Out::Str(s) => Field::Text(text(s)),
            text::Out::Shared(s) if self.compact && s.is_empty() => return None,
            text::Out::Shared(s) => Field::Text(Text::Shared(s)),
            // An array of texts: `compact` keeps its items and drops it when empty.
            text::Out::List(items) if self.compact && items.is_empty() => return None,
            text::Out::List(items) => Field::List(items.into_iter().map(text).collect()),
            // `compact` compacts a field's value and then drops it when blank; compacting
            // never makes a value blank, so the check can come first.
            text::Out::Val(v) if self.compact => {
                if super::is_blank(&v) {
                    return None;
                }
                field_of(super::compact(v))
            }
            text::Out::Val(v) => field_of(v),
        })
    }
}

/// Variable slots: the globals first (in [`GLOBAL_VARS`] order), then one slot per binding
/// depth. A binding saves the slot's previous value and restores it when its scope ends, so a
/// sink called from inside a binding can run terms that bind the same slot.
pub(super) struct Env {
    vars: Vec<Val>,
    /// The values of a record's constant helper arguments (`lookup($tables.fuel_in)`), each
    /// worked out for the first record and kept for the rest ([`text::Straight`]).
    consts: Vec<Option<Val>>,
    /// The fields of `RecordPlan::invariant` by position, each made for the first record of a page
    /// (`Some(None)`: blank).
    fields: Vec<Option<Option<Field>>>,
}

impl Plan {
    /// A fresh environment with the global variables bound.
    pub(super) fn env(&self, globals: [Val; 4]) -> Env {
        let mut vars = Vec::with_capacity(self.slots);
        vars.extend(globals);
        vars.resize(self.slots.max(GLOBAL_VARS.len()), Val::Null);
        let (consts, fields) = self.record.as_ref().map_or((0, 0), |r| {
            let any_invariant = r.invariant.contains(&true);
            (r.consts, if any_invariant { r.invariant.len() } else { 0 })
        });
        Env {
            vars,
            consts: vec![None; consts],
            fields: vec![None; fields],
        }
    }

    /// Whether the root is a [`RecordPlan`].
    pub(super) fn is_record(&self) -> bool {
        self.record.is_some()
    }

    /// The program's one output as a JSON object, for a [`RecordPlan`] root; `None` for any
    /// other. The same object (keys in order, values converted as `JqValue::to_json` does) and
    /// the same first error as running the plan and converting its output.
    pub(super) fn eval_record_json<I: Input + ?Sized>(
        &self,
        input: &I,
        env: &mut Env,
    ) -> Option<Result<serde_json::Map<String, serde_json::Value>, Error>> {
        Some(self.eval_record(input, env)?.map(vehicle::Record::into_map))
    }

    /// [`Plan::eval_record_json`] as a [`vehicle::Record`]: the keys shared, and texts the
    /// input's reply holds unchanged sliced from it.
    pub(super) fn eval_record<I: Input + ?Sized>(
        &self,
        input: &I,
        env: &mut Env,
    ) -> Option<Result<vehicle::Record, Error>> {
        let record = self.record.as_ref()?;
        let entries = record_entries(&self.root)?;
        let body = input.body();
        let text = |s: Cow<'_, str>| match (s, body) {
            (Cow::Borrowed(s), Some(body)) => Text::in_body(s, body),
            (s, _) => Text::Owned(s.into_owned()),
        };
        let mut values = Vec::with_capacity(entries.len());
        // Which fields `compact` drops (blank ones), one bit each (`Shape` holds at most 64).
        let mut blank = 0u64;
        let fields = entries.iter().zip(&record.straight).zip(&record.invariant);
        for (i, (((_, value), straight), invariant)) in fields.enumerate() {
            let straight = straight.as_ref();
            if let Some(s) = straight.and_then(|s| s.span(input)) {
                values.push(Field::Text(text(Cow::Borrowed(s))));
                continue;
            }
            let field = if *invariant {
                // The same for every record of the page: made for the first, copied after.
                match &env.fields[i] {
                    Some(field) => field.clone(),
                    None => {
                        let field = match value.eval_text(input, env) {
                            Ok(out) => record.field(out, text),
                            Err(e) => return Some(Err(e)),
                        };
                        env.fields[i] = Some(field.clone());
                        field
                    }
                }
            } else {
                let out = match straight.and_then(|s| s.eval(input, env)) {
                    Some(out) => Ok(out),
                    None => value.eval_text(input, env),
                };
                match out {
                    Ok(out) => record.field(out, text),
                    Err(e) => return Some(Err(e)),
                }
            };
            match field {
                Some(field) => values.push(field),
                None => blank |= 1 << i,
            }
        }
        Some(Ok(vehicle::Record::new(
            Arc::clone(&record.shape),
            blank,
            body.cloned().unwrap_or_default(),
            values,
        )))
    }

    /// The keys of a program that is only a path of literal string keys from `.` (`.Items`,
    /// `.data.vehicles`): what a reply read lazily can answer by walking its tape.
    pub(super) fn literal_path(&self) -> Option<Box<[bytes::Bytes]>> {
        let Kind::Path(f, parts, _) = &self.root.kind else {
            return None;
        };
        if !matches!(f.kind, Kind::Id) {
            return None;
        }
        parts
            .iter()
            .map(|(part, _)| match part {
                PathPart::Index(Node {
                    kind: Kind::Lit(Val::TStr(key)),
                    ..
                }) => Some(bytes::Bytes::clone(key)),
                _ => None,
            })
            .collect()
    }

    /// Pushes the outputs of the program on `input` into `sink`, in jaq's order.
    pub(super) fn run(&self, input: &Val, env: &mut Env, sink: &mut Sink<'_>) -> Flow {
        self.root.run(input, env, sink)
    }
}

/// A value of a record's field, as `val_to_json` makes it: strings (a table's, mostly) shared,
/// not copied; numbers without a JSON value around them.
fn field_of(v: Val) -> Field {
    match v {
        Val::TStr(b) | Val::BStr(b) => Field::Text(super::shared_text(*b)),
        Val::Num(n) => match super::num_to_json(&n) {
            serde_json::Value::Number(n) => Field::Num(n),
            other => Field::Json(Box::new(other)),
        },
        other => Field::Json(Box::new(super::val_to_json(&other))),
    }
}

/// What a term that gives one output runs on ([`Node::eval1`]): a value, or a record of a reply
/// read lazily (`extract::RecordPlan`), which is made a value only when a term needs all of it.
pub(super) trait Input {
    /// The whole input as a value.
    fn whole(&self) -> &Val;

    /// The input on a reply's tape, where paths of literal keys are read without making the
    /// whole input a value.
    fn tape(&self) -> Option<At<'_>>;

    /// The reply's text the tape's strings are slices of.
    fn body(&self) -> Option<&ByteString> {
        None
    }
}

impl Input for Val {
    fn whole(&self) -> &Val {
        self
    }

    fn tape(&self) -> Option<At<'_>> {
        None
    }
}

impl Input for super::DocRecord<'_> {
    fn whole(&self) -> &Val {
        self.value()
    }

    fn tape(&self) -> Option<At<'_>> {
        Some(self.at)
    }

    fn body(&self) -> Option<&ByteString> {
        Some(self.at.body())
    }
}

/// A term of the plan. `one` says it always gives exactly one output (a value or an error).
struct Node {
    kind: Kind,
    one: bool,
}

enum Kind {
    Id,
    Empty,
    Lit(Val),
    Var(usize),
    /// `f` then its parts; one position hint per part (see [`index_hinted`]).
    Path(Box<Node>, Box<[(PathPart, Opt)]>, Box<[AtomicUsize]>),
    Pipe(Box<Node>, Box<Node>),
    /// `l as $x | r`, with `$x` in the given slot.
    Bind(Box<Node>, usize, Box<Node>),
    Comma(Box<Node>, Box<Node>),
    Alt(Box<Node>, Box<Node>),
    /// `l or r` (`true`) and `l and r` (`false`): the value of `l` that decides alone.
    Logic(Box<Node>, bool, Box<Node>),
    Math(Box<Node>, Math, Box<Node>),
    Cmp(Box<Node>, Cmp, Box<Node>),
    Neg(Box<Node>),
    Arr(Option<Box<Node>>),
    /// Entries whose key and value give one output each.
    Obj(Box<[(Node, Node)]>),
    Ite(Box<Node>, Box<Node>, Box<Node>),
    Try(Box<Node>, Option<Box<Node>>),
    /// `error(f)`: each output of `f` becomes an error.
    Error(Box<Node>),
    /// A builtin or helper on `.`, with arguments that give one output each.
    Call(Fun, Box<[Node]>),
}

enum PathPart {
    Index(Node),
    Iter,
}

#[derive(Clone, Copy)]
enum Fun {
    Type,
    ToString,
    Flatten,
    Nonempty,
    Lookup,
    Dollars,
    Miles,
    Int,
    Num,
    LegacyDate,
    LegacyDatetime,
    Lower,
    Upper,
    Title,
    Compact,
    SplitList,
}

impl Fun {
    fn by_name(name: &str, arity: usize) -> Option<Fun> {
        Some(match (name, arity) {
            ("type", 0) => Fun::Type,
            ("tostring", 0) => Fun::ToString,
            ("flatten", 0) => Fun::Flatten,
            ("nonempty", 0) => Fun::Nonempty,
            ("lookup", 1) => Fun::Lookup,
            ("dollars", 0 | 1) => Fun::Dollars,
            ("miles", 0 | 1) => Fun::Miles,
            ("int", 0 | 1) => Fun::Int,
            ("num", 0 | 1) => Fun::Num,
            ("legacy_date", 0) => Fun::LegacyDate,
            ("legacy_datetime", 1) => Fun::LegacyDatetime,
            ("lower", 0) => Fun::Lower,
            ("upper", 0) => Fun::Upper,
            ("title", 0) => Fun::Title,
            ("compact", 0) => Fun::Compact,
            ("split_list", 1) => Fun::SplitList,
            _ => return None,
        })
    }

    /// The same Rust functions jaq's natives call (`helper_funs`, `jaq_std`); `arg` is the
    /// value of the argument of those that take one.
    fn call(self, v: Val, arg: Option<Val>) -> ValR<Val> {
        use super::{
            compact, dollars, int, legacy_date, legacy_datetime, lookup, map_str, miles, nonempty,
            num, split_list, title, type_name,
        };
        Ok(match self {
            Fun::Type => Val::from(type_name(&v).to_string()),
            Fun::ToString => v.into_string(),
            Fun::Flatten => flatten(v),
            Fun::Nonempty => nonempty(v)?,
            Fun::Lookup => lookup(v, arg.unwrap_or(Val::Null))?,
            Fun::Dollars => dollars(&v, arg.as_ref())?,
            Fun::Miles => miles(&v, arg.as_ref())?,
            Fun::Int => int(&v, arg.as_ref())?,
            Fun::Num => num(&v, arg.as_ref())?,
            Fun::LegacyDate => legacy_date(&v),
            Fun::LegacyDatetime => legacy_datetime(v, arg.unwrap_or(Val::Null))?,
            Fun::Lower => map_str(v, str::to_lowercase),
            Fun::Upper => map_str(v, str::to_uppercase),
            Fun::Title => map_str(v, title),
            Fun::Compact => compact(v),
            Fun::SplitList => split_list(v, arg.unwrap_or(Val::Null))?,
        })
    }
}

/// jaq's `flatten`, `[recurse(arrays[]) | select(isarray | not)]`: the non-array leaves, in order.
fn flatten(v: Val) -> Val {
    fn leaves(v: Val, out: &mut Vec<Val>) {
        match v {
            Val::Arr(a) => a.iter().for_each(|x| leaves(x.clone(), out)),
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    leaves(v, &mut out);
    out.into_iter().collect()
}
