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
use std::sync::atomic::{AtomicUsize, Ordering};

use jaq_core::load::{lex, parse};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use jaq_core::{ValR, ValT as _};
use jaq_json::{Map, Val};

use super::GLOBAL_VARS;

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
    record: Option<Record>,
}

/// A root `{k: v, …}` or `{k: v, …} | compact` whose keys are distinct literal strings: the
/// object can be built as JSON straight away ([`Plan::eval_record_json`]), skipping jaq's
/// hashed object, its compaction and its conversion.
struct Record {
    keys: Box<[Box<str>]>,
    compact: bool,
}

/// Variable slots: the globals first (in [`GLOBAL_VARS`] order), then one slot per binding
/// depth. A binding saves the slot's previous value and restores it when its scope ends, so a
/// sink called from inside a binding can run terms that bind the same slot.
pub(super) struct Env {
    vars: Vec<Val>,
}

impl Plan {
    /// A fresh environment with the global variables bound.
    pub(super) fn env(&self, globals: [Val; 4]) -> Env {
        let mut vars = Vec::with_capacity(self.slots);
        vars.extend(globals);
        vars.resize(self.slots.max(GLOBAL_VARS.len()), Val::Null);
        Env { vars }
    }

    /// Whether the root is a [`Record`].
    pub(super) fn is_record(&self) -> bool {
        self.record.is_some()
    }

    /// The program's one output as a JSON object, for a [`Record`] root; `None` for any
    /// other. The same object (keys in order, values converted as `JqValue::to_json` does) and
    /// the same first error as running the plan and converting its output.
    pub(super) fn eval_record_json(
        &self,
        input: &Val,
        env: &mut Env,
    ) -> Option<Result<serde_json::Map<String, serde_json::Value>, Error>> {
        let record = self.record.as_ref()?;
        let entries = record_entries(&self.root)?;
        let mut map = serde_json::Map::with_capacity(entries.len());
        for ((_, value), key) in entries.iter().zip(&record.keys) {
            let v = match value.eval1(input, env) {
                Ok(v) => v,
                Err(e) => return Some(Err(e)),
            };
            // `compact` compacts a field's value and then drops it when blank; compacting
            // never makes a value blank, so the check can come first.
            let v = if record.compact {
                if super::is_blank(&v) {
                    continue;
                }
                super::compact(v)
            } else {
                v
            };
            map.insert(key.to_string(), super::val_to_json(&v));
        }
        Some(Ok(map))
    }

    /// Pushes the outputs of the program on `input` into `sink`, in jaq's order.
    pub(super) fn run(&self, input: &Val, env: &mut Env, sink: &mut Sink<'_>) -> Flow {
        self.root.run(input, env, sink)
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
            ("dollars", 0) => Fun::Dollars,
            ("miles", 0) => Fun::Miles,
            ("int", 0) => Fun::Int,
            ("num", 0) => Fun::Num,
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
        let arg = || arg.unwrap_or(Val::Null);
        Ok(match self {
            Fun::Type => Val::from(type_name(&v).to_string()),
            Fun::ToString => v.into_string(),
            Fun::Flatten => flatten(v),
            Fun::Nonempty => nonempty(v)?,
            Fun::Lookup => lookup(v, arg())?,
            Fun::Dollars => dollars(&v),
            Fun::Miles => miles(&v),
            Fun::Int => int(&v),
            Fun::Num => num(&v),
            Fun::LegacyDate => legacy_date(&v),
            Fun::LegacyDatetime => legacy_datetime(v, arg())?,
            Fun::Lower => map_str(v, str::to_lowercase),
            Fun::Upper => map_str(v, str::to_uppercase),
            Fun::Title => map_str(v, title),
            Fun::Compact => compact(v),
            Fun::SplitList => split_list(v, arg())?,
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

// ---------------------------------------------------------------------------------------------
// Compilation

/// Deepest nesting of `def` calls inlined before giving up (recursive definitions).
const MAX_INLINE: usize = 32;

/// Compiles the parsed program, or `None` when some part of it is outside the subset.
pub(super) fn compile(term: &Term<'_>) -> Option<Plan> {
    let mut c = Compiler {
        max_slots: GLOBAL_VARS.len(),
        inline_depth: 0,
    };
    let scope = Scope {
        vars: GLOBAL_VARS.iter().map(|v| Some(*v)).collect(),
        defs: Vec::new(),
        params: Vec::new(),
    };
    let root = c.term(term, &scope)?;
    Some(Plan {
        record: record_shape(&root),
        root,
        slots: c.max_slots,
    })
}

/// The entries of a root object literal, alone or piped into `compact`.
fn record_entries(root: &Node) -> Option<&[(Node, Node)]> {
    match &root.kind {
        Kind::Obj(entries) => Some(entries),
        Kind::Pipe(l, r) if matches!(&r.kind, Kind::Call(Fun::Compact, args) if args.is_empty()) => {
            match &l.kind {
                Kind::Obj(entries) => Some(entries),
                _ => None,
            }
        }
        _ => None,
    }
}

fn record_shape(root: &Node) -> Option<Record> {
    let entries = record_entries(root)?;
    let mut keys: Vec<Box<str>> = Vec::with_capacity(entries.len());
    for (key, _) in entries {
        // A computed or repeated key keeps the general path: its position and value follow
        // jaq's object rules there.
        let Kind::Lit(Val::TStr(bytes)) = &key.kind else {
            return None;
        };
        let key = std::str::from_utf8(bytes).ok()?;
        if keys.iter().any(|k| &**k == key) {
            return None;
        }
        keys.push(key.into());
    }
    Some(Record {
        keys: keys.into(),
        compact: !matches!(root.kind, Kind::Obj(_)),
    })
}

struct Compiler {
    max_slots: usize,
    inline_depth: usize,
}

/// What a term can see: variables by slot (`None`: a slot used by an enclosing caller, not
/// visible by name), local definitions, and the filter names a definition's `$` parameters
/// also bind in jq (calls of those are left to jaq).
#[derive(Clone)]
struct Scope<'s, 't> {
    vars: Vec<Option<&'s str>>,
    defs: Vec<LocalDef<'s, 't>>,
    params: Vec<&'s str>,
}

#[derive(Clone)]
struct LocalDef<'s, 't> {
    def: &'t parse::Def<&'s str>,
    /// The variables and definitions visible where it was defined (including itself).
    vars: usize,
    defs: usize,
    params: usize,
}

/// `$x`: the innermost binding of that name.
fn var(x: &str, s: &Scope<'_, '_>) -> Option<Node> {
    let slot = s.vars.iter().rposition(|v| *v == Some(x))?;
    Some(node(Kind::Var(slot), true))
}

fn path_kind(f: Box<Node>, parts: Box<[(PathPart, Opt)]>) -> Kind {
    let hints = parts.iter().map(|_| AtomicUsize::new(0)).collect();
    Kind::Path(f, parts, hints)
}

fn node(kind: Kind, one: bool) -> Node {
    Node { kind, one }
}

fn lit(v: Val) -> Node {
    node(Kind::Lit(v), true)
}

impl Compiler {
    fn boxed(&mut self, t: &Term<'_>, s: &Scope<'_, '_>) -> Option<Box<Node>> {
        self.term(t, s).map(Box::new)
    }

    fn term<'s, 't>(&mut self, t: &'t Term<'s>, s: &Scope<'s, 't>) -> Option<Node> {
        use parse::BinaryOp as B;
        Some(match t {
            Term::Id => node(Kind::Id, true),
            Term::Num(n) => lit(match n.parse::<isize>() {
                Ok(i) => Val::from(i),
                Err(_) => Val::from_num(n).ok()?,
            }),
            Term::Str(None, parts) => self.string(parts, s)?,
            Term::Arr(None) => node(Kind::Arr(None), true),
            Term::Arr(Some(f)) => node(Kind::Arr(Some(self.boxed(f, s)?)), true),
            Term::Obj(entries) => self.object(entries, s)?,
            Term::Neg(f) => {
                let f = self.boxed(f, s)?;
                let one = f.one;
                node(Kind::Neg(f), one)
            }
            Term::BinOp(l, op, r) => {
                let l = self.boxed(l, s)?;
                if let B::Pipe(Some(pattern)) = op {
                    let parse::Pattern::Var(x) = pattern else {
                        return None;
                    };
                    let slot = s.vars.len();
                    self.max_slots = self.max_slots.max(slot + 1);
                    let mut inner = s.clone();
                    inner.vars.push(Some(*x));
                    let r = self.boxed(r, &inner)?;
                    let one = l.one && r.one;
                    return Some(node(Kind::Bind(l, slot, r), one));
                }
                let r = self.boxed(r, s)?;
                let one = l.one && r.one;
                let kind = match op {
                    B::Pipe(_) => Kind::Pipe(l, r),
                    B::Comma => return Some(node(Kind::Comma(l, r), false)),
                    B::Alt => Kind::Alt(l, r),
                    B::Or => Kind::Logic(l, true, r),
                    B::And => Kind::Logic(l, false, r),
                    B::Math(op) => Kind::Math(l, *op, r),
                    B::Cmp(op) => Kind::Cmp(l, *op, r),
                    B::Assign | B::Update | B::UpdateMath(_) | B::UpdateAlt => return None,
                };
                node(kind, one)
            }
            Term::IfThenElse(branches, else_) => {
                let mut acc = match else_ {
                    Some(e) => self.term(e, s)?,
                    None => node(Kind::Id, true),
                };
                for (cond, then) in branches.iter().rev() {
                    let cond = self.boxed(cond, s)?;
                    let then = self.boxed(then, s)?;
                    let one = cond.one && then.one && acc.one;
                    acc = node(Kind::Ite(cond, then, Box::new(acc)), one);
                }
                acc
            }
            Term::TryCatch(f, catch) => {
                let f = self.boxed(f, s)?;
                let catch = match catch {
                    Some(c) => Some(self.boxed(c, s)?),
                    None => None,
                };
                node(Kind::Try(f, catch), false)
            }
            Term::Def(defs, body) => {
                let mut inner = s.clone();
                for def in defs {
                    inner.defs.push(LocalDef {
                        def,
                        vars: s.vars.len(),
                        defs: inner.defs.len() + 1,
                        params: s.params.len(),
                    });
                }
                self.term(body, &inner)?
            }
            Term::Call(name, args) => self.call(name, args, s)?,
            Term::Var(x) => var(x, s)?,
            Term::Path(f, path) => {
                let f = self.boxed(f, s)?;
                let mut one = f.one;
                let mut parts = Vec::with_capacity(path.0.len());
                for (part, opt) in &path.0 {
                    let part = match part {
                        Part::Index(i) => PathPart::Index(self.term(i, s)?),
                        Part::Range(None, None) => PathPart::Iter,
                        Part::Range(..) => return None,
                    };
                    one &= matches!(opt, Opt::Essential)
                        && matches!(&part, PathPart::Index(i) if i.one);
                    parts.push((part, *opt));
                }
                node(path_kind(f, parts.into()), one)
            }
            Term::Str(Some(_), _)
            | Term::Recurse
            | Term::Label(..)
            | Term::Break(_)
            | Term::Fold(..) => return None,
        })
    }

    /// String literals and interpolation. jaq sums the parts to the right
    /// (`p1 + (p2 + …)`), each interpolated term piped into `tostring`; so does the plan.
    fn string<'s, 't>(
        &mut self,
        parts: &'t [lex::StrPart<&'s str, Term<'s>>],
        s: &Scope<'s, 't>,
    ) -> Option<Node> {
        let mut nodes = Vec::with_capacity(parts.len());
        for part in parts {
            nodes.push(match part {
                lex::StrPart::Str(text) => lit(Val::from(text.to_string())),
                lex::StrPart::Char(c) => lit(Val::from(c.to_string())),
                lex::StrPart::Term(f) => {
                    let f = self.term(f, s)?;
                    let one = f.one;
                    let tostring = node(Kind::Call(Fun::ToString, Box::new([])), true);
                    node(Kind::Pipe(Box::new(f), Box::new(tostring)), one)
                }
            });
        }
        if !nodes.iter().all(|n| n.one) {
            return None;
        }
        let mut rev = nodes.into_iter().rev();
        let last = rev.next().unwrap_or_else(|| lit(Val::from(String::new())));
        Some(rev.fold(last, |acc, part| {
            node(Kind::Math(Box::new(part), Math::Add, Box::new(acc)), true)
        }))
    }

    /// Object literals whose keys and values give one output each (else jaq runs it).
    fn object<'s, 't>(
        &mut self,
        entries: &'t [(Term<'s>, Option<Term<'s>>)],
        s: &Scope<'s, 't>,
    ) -> Option<Node> {
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let (k, v) = match (k, v) {
                // `{$x}`
                (Term::Var(x), None) => (lit(Val::from(x.get(1..)?.to_string())), var(x, s)?),
                // `{a}`, `{"a"}`, `{(f)}`: `{k: .[k]}`
                (k, None) => {
                    let key = self.term(k, s)?;
                    let index = self.term(k, s)?;
                    let one = index.one;
                    let part = [(PathPart::Index(index), Opt::Essential)];
                    let path = path_kind(Box::new(node(Kind::Id, true)), Box::new(part));
                    (key, node(path, one))
                }
                (k, Some(v)) => (self.term(k, s)?, self.term(v, s)?),
            };
            if !(k.one && v.one) {
                return None;
            }
            out.push((k, v));
        }
        Some(node(Kind::Obj(out.into()), true))
    }

    fn call<'s, 't>(
        &mut self,
        name: &'s str,
        args: &'t [Term<'s>],
        s: &Scope<'s, 't>,
    ) -> Option<Node> {
        if name.contains("::") || (args.is_empty() && s.params.contains(&name)) {
            return None;
        }
        let local = s
            .defs
            .iter()
            .rposition(|d| d.def.name == name && d.def.args.len() == args.len());
        if let Some(i) = local {
            return self.inline(i, args, s);
        }
        let mut arg = |i: usize| -> Option<Box<Node>> { self.boxed(args.get(i)?, s) };
        Some(match (name, args.len()) {
            ("empty", 0) => node(Kind::Empty, false),
            ("null", 0) => lit(Val::Null),
            ("true", 0) => lit(Val::from(true)),
            ("false", 0) => lit(Val::from(false)),
            // `def not: if . then false else true end;`
            ("not", 0) => {
                let (t, f) = (lit(Val::from(false)), lit(Val::from(true)));
                let id = node(Kind::Id, true);
                node(Kind::Ite(Box::new(id), Box::new(t), Box::new(f)), true)
            }
            // `def select(f): if f then . else empty end;`
            ("select", 1) => {
                let cond = arg(0)?;
                let (id, empty) = (node(Kind::Id, true), node(Kind::Empty, false));
                node(Kind::Ite(cond, Box::new(id), Box::new(empty)), false)
            }
            // `def map(f): [.[] | f];`
            ("map", 1) => {
                let f = arg(0)?;
                let each = [(PathPart::Iter, Opt::Essential)];
                let each = node(
                    path_kind(Box::new(node(Kind::Id, true)), each.into()),
                    false,
                );
                let body = node(Kind::Pipe(Box::new(each), f), false);
                node(Kind::Arr(Some(Box::new(body))), true)
            }
            // `def error: error_empty as $x | .;`
            ("error", 0) => node(Kind::Error(Box::new(node(Kind::Id, true))), true),
            // `def error(msgs): (msgs | error_empty) as $x | .;`
            ("error", 1) => {
                let msgs = arg(0)?;
                let one = msgs.one;
                node(Kind::Error(msgs), one)
            }
            _ => {
                let fun = Fun::by_name(name, args.len())?;
                let args = (0..args.len()).map(&mut arg).collect::<Option<Vec<_>>>()?;
                if args.len() > 1 || !args.iter().all(|a| a.one) {
                    return None;
                }
                let args = args.into_iter().map(|a| *a).collect();
                node(Kind::Call(fun, args), true)
            }
        })
    }

    /// A call of a local definition, inlined: `def f($a; $b): body;` called as `f(x; y)` is
    /// `x as $a | y as $b | body`, with `body` seeing what was visible where `f` was defined.
    fn inline<'s, 't>(
        &mut self,
        i: usize,
        args: &'t [Term<'s>],
        s: &Scope<'s, 't>,
    ) -> Option<Node> {
        let local = s.defs.get(i)?.clone();
        let value_params = local.def.args.iter().all(|a| a.starts_with('$'));
        if !value_params || self.inline_depth >= MAX_INLINE {
            return None;
        }
        // The arguments run in the caller's scope; each binding takes the next slot.
        let mut arg_nodes = Vec::with_capacity(args.len());
        let mut caller = s.clone();
        for arg in args {
            arg_nodes.push(self.term(arg, &caller)?);
            caller.vars.push(None);
        }
        let mut body_scope = Scope {
            vars: s.vars.get(..local.vars)?.to_vec(),
            defs: s.defs.get(..local.defs)?.to_vec(),
            params: s.params.get(..local.params)?.to_vec(),
        };
        body_scope.vars.resize(s.vars.len(), None);
        for name in &local.def.args {
            body_scope.vars.push(Some(name));
            body_scope.params.push(name.get(1..)?);
        }
        let depth = s.vars.len() + args.len();
        self.max_slots = self.max_slots.max(depth);
        self.inline_depth += 1;
        let body = self.term(&local.def.body, &body_scope);
        self.inline_depth -= 1;
        let mut acc = body?;
        for (k, arg) in arg_nodes.into_iter().enumerate().rev() {
            let one = arg.one && acc.one;
            acc = node(
                Kind::Bind(Box::new(arg), s.vars.len() + k, Box::new(acc)),
                one,
            );
        }
        Some(acc)
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/// Binds `slot` to `v` while `f` runs, then restores what it held.
fn with_var<T>(env: &mut Env, slot: usize, v: Val, f: impl FnOnce(&mut Env) -> T) -> T {
    let old = std::mem::replace(&mut env.vars[slot], v);
    let out = f(env);
    env.vars[slot] = old;
    out
}

/// `v[idx]`, as jaq's `ValT::index`, without cloning `v` for the common object lookup.
/// [`index`] by a literal key, looking first at the position where the key was last found:
/// the records of a list are alike, so this nearly always spares hashing the key. A key is in
/// an object once, so the hit is the entry `get` finds.
fn index_hinted(v: &Val, key: &Val, hint: &AtomicUsize) -> ValR<Val> {
    let Val::Obj(o) = v else {
        return index(v, key);
    };
    if let Some((k, found)) = o.get_index(hint.load(Ordering::Relaxed))
        && k == key
    {
        return Ok(found.clone());
    }
    Ok(match o.get_full(key) {
        Some((at, _, found)) => {
            hint.store(at, Ordering::Relaxed);
            found.clone()
        }
        None => Val::Null,
    })
}

fn index(v: &Val, idx: &Val) -> ValR<Val> {
    match v {
        Val::Obj(o) => Ok(o.get(idx).cloned().unwrap_or(Val::Null)),
        Val::Null => Ok(Val::Null),
        _ => v.clone().index(idx),
    }
}

impl Node {
    /// The output of a term that always gives exactly one (`self.one`).
    fn eval1(&self, input: &Val, env: &mut Env) -> ValR<Val> {
        debug_assert!(self.one);
        match &self.kind {
            Kind::Id => Ok(input.clone()),
            Kind::Lit(v) => Ok(v.clone()),
            Kind::Var(slot) => Ok(env.vars[*slot].clone()),
            Kind::Path(f, parts, hints) => {
                // jaq runs `f` first (its error wins), then all index terms (the first error
                // among them wins), then applies the parts in turn.
                // Literal keys (`.a.b`, `$tables.t`) cannot fail: no need to compute them first.
                let literal = |(part, _): &(PathPart, Opt)| {
                    matches!(
                        part,
                        PathPart::Index(Node {
                            kind: Kind::Lit(_),
                            ..
                        })
                    )
                };
                if parts.iter().all(literal) {
                    let mut v = match &f.kind {
                        Kind::Id => Cow::Borrowed(input),
                        Kind::Var(slot) => Cow::Borrowed(&env.vars[*slot]),
                        _ => Cow::Owned(f.eval1(input, env)?),
                    };
                    for ((part, _), hint) in parts.iter().zip(hints) {
                        if let PathPart::Index(Node {
                            kind: Kind::Lit(k), ..
                        }) = part
                        {
                            v = Cow::Owned(index_hinted(&v, k, hint)?);
                        }
                    }
                    return Ok(v.into_owned());
                }
                let mut v = match &f.kind {
                    Kind::Id => Cow::Borrowed(input),
                    _ => Cow::Owned(f.eval1(input, env)?),
                };
                let mut idx = Vec::with_capacity(parts.len());
                for (part, _) in parts.iter() {
                    if let PathPart::Index(i) = part {
                        idx.push(match &i.kind {
                            Kind::Lit(k) => Cow::Borrowed(k),
                            _ => Cow::Owned(i.eval1(input, env)?),
                        });
                    }
                }
                for i in &idx {
                    v = Cow::Owned(index(&v, i)?);
                }
                Ok(v.into_owned())
            }
            Kind::Pipe(l, r) => {
                let y = l.eval1(input, env)?;
                r.eval1_owned(y, env)
            }
            Kind::Bind(l, slot, r) => {
                let y = l.eval1(input, env)?;
                with_var(env, *slot, y, |env| r.eval1(input, env))
            }
            // `//` keeps errors of `l` as jaq does: only `null` and `false` are absent.
            Kind::Alt(l, r) => match l.eval1(input, env) {
                Ok(y) if !y.as_bool() => r.eval1(input, env),
                other => other,
            },
            Kind::Logic(l, stop, r) => {
                if l.eval1(input, env)?.as_bool() == *stop {
                    Ok(Val::from(*stop))
                } else {
                    Ok(Val::from(r.eval1(input, env)?.as_bool()))
                }
            }
            // `l op r` runs `r` for each output of `l`; an error of `l` wins.
            Kind::Math(l, op, r) => {
                let x = l.eval1(input, env)?;
                Ok(op.run(x, r.eval1(input, env)?)?)
            }
            Kind::Cmp(l, op, r) => {
                let x = l.eval1(input, env)?;
                Ok(Val::from(op.run(&x, &r.eval1(input, env)?)))
            }
            Kind::Neg(f) => Ok((-f.eval1(input, env)?)?),
            Kind::Arr(None) => Ok(Val::Arr(Default::default())),
            Kind::Arr(Some(f)) => {
                let mut items = Vec::new();
                let mut error = None;
                let _ = f.run(input, env, &mut |_, y| match y {
                    Ok(y) => {
                        items.push(y);
                        Flow::Continue(())
                    }
                    Err(e) => {
                        error = Some(e);
                        Flow::Break(())
                    }
                });
                match error {
                    Some(e) => Err(e),
                    None => Ok(items.into_iter().collect()),
                }
            }
            // `{k1: v1, …}` is `{k1: v1} + …` in jaq: keys and values in order, first error wins,
            // a later key takes its first position and its last value.
            Kind::Obj(entries) => {
                let mut map = Map::default();
                map.reserve(entries.len());
                for (k, v) in entries.iter() {
                    let k = k.eval1(input, env)?;
                    let v = v.eval1(input, env)?;
                    map.insert(k, v);
                }
                Ok(Val::obj(map))
            }
            Kind::Ite(cond, then, else_) => {
                if cond.eval1(input, env)?.as_bool() {
                    then.eval1(input, env)
                } else {
                    else_.eval1(input, env)
                }
            }
            Kind::Error(msgs) => Err(match msgs.eval1(input, env) {
                Ok(m) => Error::new(m),
                Err(e) => e,
            }),
            // The helpers take at most one argument.
            Kind::Call(fun, args) => {
                let arg = match args.first() {
                    Some(a) => Some(a.eval1(input, env)?),
                    None => None,
                };
                fun.call(input.clone(), arg)
            }
            Kind::Empty | Kind::Comma(..) | Kind::Try(..) => {
                unreachable!("terms with other than one output are streamed")
            }
        }
    }

    /// [`Node::eval1`] on an input nothing else needs: a helper then gets it without a copy
    /// (`{…} | compact` compacts the object just built in place).
    fn eval1_owned(&self, input: Val, env: &mut Env) -> ValR<Val> {
        match &self.kind {
            // As in `eval1`: the argument first (on the same input), then the helper.
            Kind::Call(fun, args) => {
                let arg = match args.first() {
                    Some(a) => Some(a.eval1(&input, env)?),
                    None => None,
                };
                fun.call(input, arg)
            }
            _ => self.eval1(&input, env),
        }
    }

    /// Pushes the outputs of the term into `sink`, in jaq's order; errors are outputs too and
    /// do not end the stream (jaq's consumers decide that).
    fn run(&self, input: &Val, env: &mut Env, sink: &mut Sink<'_>) -> Flow {
        if self.one {
            let y = self.eval1(input, env);
            return sink(env, y);
        }
        match &self.kind {
            Kind::Empty => Flow::Continue(()),
            Kind::Comma(l, r) => {
                l.run(input, env, sink)?;
                r.run(input, env, sink)
            }
            Kind::Pipe(l, r) => l.run(input, env, &mut |env, y| match y {
                Ok(y) => r.run(&y, env, sink),
                Err(e) => sink(env, Err(e)),
            }),
            Kind::Bind(l, slot, r) => l.run(input, env, &mut |env, y| match y {
                Ok(y) => with_var(env, *slot, y, |env| r.run(input, env, sink)),
                Err(e) => sink(env, Err(e)),
            }),
            // Outputs of `l` that are errors or true; if there are none, those of `r`.
            Kind::Alt(l, r) => {
                let mut any = false;
                l.run(input, env, &mut |env, y| {
                    if y.as_ref().map_or(true, |y| y.as_bool()) {
                        any = true;
                        sink(env, y)
                    } else {
                        Flow::Continue(())
                    }
                })?;
                if any {
                    Flow::Continue(())
                } else {
                    r.run(input, env, sink)
                }
            }
            Kind::Logic(l, stop, r) => l.run(input, env, &mut |env, x| match x {
                Ok(x) if x.as_bool() == *stop => sink(env, Ok(Val::from(*stop))),
                Ok(_) => r.run(input, env, &mut |env, y| {
                    sink(env, y.map(|y| Val::from(y.as_bool())))
                }),
                Err(e) => sink(env, Err(e)),
            }),
            Kind::Math(l, op, r) => l.run(input, env, &mut |env, x| {
                r.run(input, env, &mut |env, y| {
                    let z = match (x.clone(), y) {
                        (Ok(x), Ok(y)) => op.run(x, y),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    };
                    sink(env, z)
                })
            }),
            Kind::Cmp(l, op, r) => l.run(input, env, &mut |env, x| {
                r.run(input, env, &mut |env, y| {
                    let z = match (&x, y) {
                        (Ok(x), Ok(y)) => Ok(Val::from(op.run(x, &y))),
                        (Err(e), _) => Err(e.clone()),
                        (_, Err(e)) => Err(e),
                    };
                    sink(env, z)
                })
            }),
            Kind::Neg(f) => f.run(input, env, &mut |env, y| sink(env, y.and_then(|y| -y))),
            Kind::Ite(cond, then, else_) => cond.run(input, env, &mut |env, c| match c {
                Ok(c) if c.as_bool() => then.run(input, env, sink),
                Ok(_) => else_.run(input, env, sink),
                Err(e) => sink(env, Err(e)),
            }),
            // `try f catch c`: the outputs of `f` up to its first error, then `c` on that error.
            Kind::Try(f, catch) => {
                let mut caught = None;
                let flow = f.run(input, env, &mut |env, y| match y {
                    Ok(y) => sink(env, Ok(y)),
                    Err(e) => {
                        caught = Some(e);
                        Flow::Break(())
                    }
                });
                match (caught, catch) {
                    (Some(e), Some(c)) => c.run(&e.into_val(), env, sink),
                    (Some(_), None) => Flow::Continue(()),
                    (None, _) => flow,
                }
            }
            Kind::Error(msgs) => msgs.run(input, env, &mut |env, m| {
                sink(env, Err(m.map_or_else(|e| e, Error::new)))
            }),
            Kind::Path(f, parts, _) => self.run_path(f, parts, input, env, sink),
            Kind::Id
            | Kind::Lit(_)
            | Kind::Var(_)
            | Kind::Arr(_)
            | Kind::Obj(_)
            | Kind::Call(..) => unreachable!("always one output"),
        }
    }

    /// `f` followed by path parts (jaq's `Ast::Path`): for each output of `f`, for each
    /// combination of the index terms' outputs (the first part varying slowest; an error among
    /// them is the output), the parts applied in turn; a `?` part drops its own errors.
    fn run_path(
        &self,
        f: &Node,
        parts: &[(PathPart, Opt)],
        input: &Val,
        env: &mut Env,
        sink: &mut Sink<'_>,
    ) -> Flow {
        let mut indices: Vec<Vec<ValR<Val>>> = Vec::with_capacity(parts.len());
        for (part, _) in parts {
            let mut outs = Vec::new();
            if let PathPart::Index(i) = part {
                let _ = i.run(input, env, &mut |_, y| {
                    outs.push(y);
                    Flow::Continue(())
                });
            }
            indices.push(outs);
        }
        let mut combos: Vec<Result<Vec<Option<Val>>, Error>> = vec![Ok(Vec::new())];
        for ((part, _), outs) in parts.iter().zip(&indices) {
            combos = match part {
                PathPart::Iter => combos
                    .into_iter()
                    .map(|c| {
                        c.map(|mut c| {
                            c.push(None);
                            c
                        })
                    })
                    .collect(),
                PathPart::Index(_) => combos
                    .into_iter()
                    .flat_map(|c| {
                        outs.iter().map(move |o| match (&c, o) {
                            (Err(e), _) => Err(e.clone()),
                            (Ok(_), Err(e)) => Err(e.clone()),
                            (Ok(c), Ok(o)) => {
                                let mut c = c.clone();
                                c.push(Some(o.clone()));
                                Ok(c)
                            }
                        })
                    })
                    .collect(),
            };
        }
        f.run(input, env, &mut |env, y| {
            let y = match y {
                Ok(y) => y,
                Err(e) => return sink(env, Err(e)),
            };
            for combo in &combos {
                match combo {
                    Err(e) => sink(env, Err(e.clone()))?,
                    Ok(keys) => apply_parts(y.clone(), parts, keys, env, sink)?,
                }
            }
            Flow::Continue(())
        })
    }
}

fn apply_parts(
    v: Val,
    parts: &[(PathPart, Opt)],
    keys: &[Option<Val>],
    env: &mut Env,
    sink: &mut Sink<'_>,
) -> Flow {
    let (Some(((_, opt), rest)), Some((key, keys))) = (parts.split_first(), keys.split_first())
    else {
        return sink(env, Ok(v));
    };
    let essential = matches!(opt, Opt::Essential);
    let mut each = |env: &mut Env, y: ValR<Val>| match y {
        Ok(y) => apply_parts(y, rest, keys, env, sink),
        Err(_) if !essential => Flow::Continue(()),
        Err(e) => sink(env, Err(e)),
    };
    match key {
        Some(k) => {
            let y = index(&v, k);
            each(env, y)
        }
        None => {
            for y in v.values() {
                each(env, y)?;
            }
            Flow::Continue(())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::{Jq, JqValue, JqVars};

    fn vars() -> JqVars {
        JqVars {
            request: JqValue::from_json(&json!({"filters": {"make": ["Toyota"]}, "n": 2})),
            tables: JqValue::from_json(&json!({"t": {"A": "a", "1": "one"}})),
            dealer: JqValue::from_json(&json!({"id": "d1"})),
            lead: JqValue::from_json(&json!({"reference": "L-1"})),
        }
    }

    /// Runs `program` natively (it must be) and in jaq, demands the same outputs or the same
    /// error, and returns them.
    fn run(program: &str, input: Value) -> Result<Vec<Value>, String> {
        let native = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(native.is_native(), "{program} should be native");
        let jaq = Jq::compile_interpreted(program).unwrap();
        let input = JqValue::from_json(&input);
        let vars = vars();
        let outputs = |jq: &Jq| {
            jq.run(&input, &vars)
                .map(|out| out.iter().map(JqValue::to_json).collect::<Vec<_>>())
                .map_err(|e| e.0)
        };
        let (got, want) = (outputs(&native), outputs(&jaq));
        assert_eq!(got, want, "{program} on {input:?}: native vs jaq");
        let (b_native, b_jaq) = (native.run_bool(&input, &vars), jaq.run_bool(&input, &vars));
        assert_eq!(
            b_native.map_err(|e| e.0),
            b_jaq.map_err(|e| e.0),
            "run_bool of {program}"
        );
        got
    }

    fn one(program: &str, input: Value) -> Value {
        match run(program, input) {
            Ok(mut out) if out.len() == 1 => out.remove(0),
            other => panic!("{program}: expected one value, got {other:?}"),
        }
    }

    fn fails(program: &str, input: Value) -> String {
        run(program, input).expect_err(program)
    }

    #[test]
    fn identity_and_literals() {
        assert_eq!(one(".", json!({"a": 1})), json!({"a": 1}));
        assert_eq!(one("1", json!(null)), json!(1));
        assert_eq!(one("1.5", json!(null)), json!(1.5));
        assert_eq!(one("\"x\\n\\u00e9\"", json!(null)), json!("x\né"));
        assert_eq!(one("null", json!(1)), json!(null));
        assert_eq!(one("[true, false]", json!(1)), json!([true, false]));
    }

    #[test]
    fn paths_index_objects_and_arrays_and_null_propagates() {
        let rec = json!({"a": {"b": [10, 20]}, "k y": 3});
        assert_eq!(one(".a.b", rec.clone()), json!([10, 20]));
        assert_eq!(one(".a.b[1]", rec.clone()), json!(20));
        assert_eq!(one(".a.b[-1]", rec.clone()), json!(20));
        assert_eq!(one(".a.b[5]", rec.clone()), json!(null));
        assert_eq!(one(".[\"k y\"]", rec.clone()), json!(3));
        assert_eq!(one(".missing.deeper", rec.clone()), json!(null));
        assert_eq!(one(".a[\"b\"][0]", rec), json!(10));
    }

    #[test]
    fn indexing_a_scalar_is_an_error_unless_optional() {
        assert_eq!(fails(".a", json!(5)), "cannot index 5 with \"a\"");
        assert!(fails(".a.b", json!({"a": "text"})).contains("cannot index"));
        assert!(fails(".[\"a\"]", json!([1])).contains("cannot index"));
        // jaq looks any key up in an object: a number finds nothing.
        assert_eq!(one(".[0]", json!({"a": 1})), json!(null));
        assert_eq!(run(".a?", json!(5)), Ok(vec![]));
        assert_eq!(run(".a?.b", json!({"a": {"b": 1}})), Ok(vec![json!(1)]));
        assert_eq!(run("[.[]?]", json!(5)), Ok(vec![json!([])]));
    }

    #[test]
    fn iteration_and_comma_stream_in_order() {
        assert_eq!(run(".[]", json!([1, 2])), Ok(vec![json!(1), json!(2)]));
        assert_eq!(
            run(".[]", json!({"a": 1, "b": 2})),
            Ok(vec![json!(1), json!(2)])
        );
        assert_eq!(
            run(".a, .b", json!({"a": 1, "b": 2})),
            Ok(vec![json!(1), json!(2)])
        );
        assert_eq!(
            run(".[].x", json!([{"x": 1}, {"x": 2}])),
            Ok(vec![json!(1), json!(2)])
        );
        assert_eq!(
            fails(".[]", json!(3)),
            "cannot use 3 as iterable (array or object)"
        );
        assert_eq!(
            run("(1, 2) + (10, 20)", json!(null)),
            Ok(vec![json!(11), json!(21), json!(12), json!(22)])
        );
        assert_eq!(run("[.[] | . * 2]", json!([1, 2])), Ok(vec![json!([2, 4])]));
    }

    #[test]
    fn alternative_replaces_null_and_false_but_not_errors() {
        assert_eq!(one(".a // 1", json!({"a": null})), json!(1));
        assert_eq!(one(".a // 1", json!({"a": false})), json!(1));
        assert_eq!(one(".a // 1", json!({"a": 0})), json!(0));
        assert_eq!(one(".a // .b // 3", json!({})), json!(3));
        assert_eq!(
            run("(.[] // 9)", json!([null, 1, false, 2])),
            Ok(vec![json!(1), json!(2)])
        );
        assert_eq!(run("(empty // 9)", json!(null)), Ok(vec![json!(9)]));
        // jaq keeps the errors of the left side (jq would drop them); `?` drops them.
        assert_eq!(fails(".a // 1", json!(5)), "cannot index 5 with \"a\"");
        assert_eq!(run("(.a? // 1)", json!(5)), Ok(vec![json!(1)]));
    }

    #[test]
    fn comparisons_and_logic() {
        assert_eq!(one(".a == \"x\"", json!({"a": "x"})), json!(true));
        assert_eq!(one(".a != 1", json!({"a": 1.0})), json!(false));
        assert_eq!(
            one("[1 < 2, \"a\" < \"b\", null < false, [] < {}]", json!(0)),
            json!([true, true, true, true])
        );
        assert_eq!(one(".a and .b", json!({"a": 1, "b": null})), json!(false));
        assert_eq!(one(".a or .b", json!({"a": null, "b": 0})), json!(true));
        assert_eq!(one("false and error(\"never\")", json!(0)), json!(false));
        assert_eq!(one(".a | not", json!({"a": null})), json!(true));
    }

    #[test]
    fn arithmetic_keeps_jaq_number_formatting() {
        assert_eq!(one(".a + 1", json!({"a": 2})), json!(3));
        assert_eq!(one(".a * 2", json!({"a": 1.25})), json!(2.5));
        assert_eq!(one("1 / 4", json!(0)), json!(0.25));
        assert_eq!(one("7 % 3", json!(0)), json!(1));
        assert_eq!(one("-.a", json!({"a": 3})), json!(-3));
        assert_eq!(one(".a + .b", json!({"a": "x", "b": "y"})), json!("xy"));
        assert_eq!(one(".a + null", json!({"a": [1]})), json!([1]));
        assert_eq!(one("{a: 1} + {b: 2}", json!(0)), json!({"a": 1, "b": 2}));
        assert!(fails(".a + 1", json!({"a": "x"})).contains("cannot"));
        assert!(fails("-.a", json!({"a": "x"})).contains("cannot"));
        // The first error wins.
        assert_eq!(fails("error(\"l\") + error(\"r\")", json!(0)), "l");
    }

    #[test]
    fn if_then_elif_else() {
        let p = "if .a == 1 then \"one\" elif .a == 2 then \"two\" else \"many\" end";
        assert_eq!(one(p, json!({"a": 1})), json!("one"));
        assert_eq!(one(p, json!({"a": 2})), json!("two"));
        assert_eq!(one(p, json!({"a": 3})), json!("many"));
        assert_eq!(
            one("if .a then 1 end", json!({"a": false})),
            json!({"a": false})
        );
        assert_eq!(
            run("if (true, false) then 1 else 2 end", json!(0)),
            Ok(vec![json!(1), json!(2)])
        );
    }

    #[test]
    fn object_literals_keep_key_order_and_last_value() {
        assert_eq!(
            one(
                "{b: .x, a: 1, \"c d\": 2, (.k): 3, $dealer, x}",
                json!({"x": 0, "k": "kk"})
            ),
            json!({"b": 0, "a": 1, "c d": 2, "kk": 3, "dealer": {"id": "d1"}, "x": 0})
        );
        let order = one("{b: 1, a: 2, b: 3}", json!(0));
        assert_eq!(order, json!({"b": 3, "a": 2}));
        let keys: Vec<_> = order.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["b", "a"]);
        assert_eq!(
            fails("{a: 1, b: error(\"x\"), c: error(\"y\")}", json!(0)),
            "x"
        );
        assert_eq!(one("{}", json!(0)), json!({}));
    }

    #[test]
    fn string_interpolation() {
        assert_eq!(
            one("\"\\(.a)-\\(.b)!\"", json!({"a": "x", "b": 2})),
            json!("x-2!")
        );
        assert_eq!(
            one("\"v=\\(.)\"", json!({"a": [1, null]})),
            json!("v={\"a\":[1,null]}")
        );
        assert_eq!(
            one("$lead.reference + \"-appt\"", json!(0)),
            json!("L-1-appt")
        );
    }

    #[test]
    fn variables_and_bindings() {
        assert_eq!(one("$request.filters.make[0]", json!(0)), json!("Toyota"));
        assert_eq!(one("$tables.t[.k]", json!({"k": "A"})), json!("a"));
        assert_eq!(
            one(
                ".a as $x | .b as $y | [$x, $y, .c]",
                json!({"a": 1, "b": 2, "c": 3})
            ),
            json!([1, 2, 3])
        );
        assert_eq!(
            one(".a as $x | (.b as $x | $x) + $x", json!({"a": 1, "b": 10})),
            json!(11)
        );
        assert_eq!(
            run(".[] as $x | $x * 10", json!([1, 2])),
            Ok(vec![json!(10), json!(20)])
        );
    }

    #[test]
    fn local_definitions_are_inlined() {
        assert_eq!(one("def f: .a + 1; f", json!({"a": 1})), json!(2));
        assert_eq!(
            one(
                "def f($k): .[$k]; def g: f(\"b\"); [f(\"a\"), g]",
                json!({"a": 1, "b": 2})
            ),
            json!([1, 2])
        );
        assert_eq!(
            one("def f($x): $x + 1; 5 as $x | f(10) + $x", json!(0)),
            json!(16)
        );
        assert_eq!(one("def type: 7; type", json!(0)), json!(7));
    }

    #[test]
    fn try_and_errors() {
        assert_eq!(run("try error(\"x\")", json!(0)), Ok(vec![]));
        assert_eq!(one("try error(\"x\") catch .", json!(0)), json!("x"));
        assert_eq!(one("try .a catch \"bad\"", json!(3)), json!("bad"));
        assert_eq!(
            run(
                "[.[] | try (if . == 2 then error(\"e\") else . end)]",
                json!([1, 2, 3])
            ),
            Ok(vec![json!([1, 3])])
        );
        assert_eq!(fails("error(\"boom\")", json!(0)), "boom");
        assert_eq!(fails("error({a: 1})", json!(0)), "{\"a\":1}");
        assert_eq!(fails("error", json!("it")), "it");
    }

    #[test]
    fn builtins() {
        assert_eq!(
            one("[.[] | type]", json!([null, true, 1, "s", [], {}])),
            json!(["null", "boolean", "number", "string", "array", "object"])
        );
        assert_eq!(one("map(. + 1)", json!([1, 2])), json!([2, 3]));
        assert_eq!(
            one("map(select(. != null))", json!([1, null, 2])),
            json!([1, 2])
        );
        assert_eq!(
            one("[.[] | tostring]", json!([1, "a", null, [1]])),
            json!(["1", "a", "null", "[1]"])
        );
        assert_eq!(
            one("flatten", json!([1, [2, [3, []]], null])),
            json!([1, 2, 3, null])
        );
        assert_eq!(run("empty", json!(0)), Ok(vec![]));
        assert!(fails("map(.)", json!(1)).contains("as iterable"));
    }

    #[test]
    fn helpers() {
        let rec = json!({"p": "$24,990.60", "m": "12,345 mi", "y": " 2022 ", "n": "  ", "t": "A",
            "f": "A| B ||", "d": "03/15/2026", "u": "2026-11-30 14:05:00", "s": "HONDA CIVIC"});
        assert_eq!(
            one(
                "{p: (.p | dollars), m: (.m | miles), y: (.y | int), z: (.y | num), n: (.n | nonempty), \
                 t: (.t | lookup($tables.t)), f: (.f | split_list(\"|\")), d: (.d | legacy_date), \
                 u: (.u | legacy_datetime(\"America/Los_Angeles\")), s: (.s | title), l: (.s | lower), \
                 U: (.t | upper)} | compact",
                rec
            ),
            json!({"p": 24991, "m": 12345, "y": 2022, "z": 2022, "t": "a", "f": ["A", "B"],
                "d": "2026-03-15", "u": "2026-11-30T14:05:00-08:00", "s": "Honda Civic",
                "l": "honda civic", "U": "A"})
        );
        assert!(fails(".t | lookup($tables.missing)", json!({"t": "A"})).contains("not an object"));
        assert!(
            fails(".u | legacy_datetime(\"Nowhere/Zone\")", json!({"u": "x"}))
                .contains("unknown time zone")
        );
    }

    #[test]
    fn outside_the_subset_runs_in_jaq() {
        for program in [
            ".a = 1",
            ".a |= . + 1",
            "reduce .[] as $x (0; . + $x)",
            "..",
            ".[1:]",
            "@base64",
            "length",
            "def f(g): g; f(.)",
            "def f: f; f",
            "{a: (1, 2)}",
            ". as [$a] | $a",
            "label $out | 1",
        ] {
            let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
            assert!(
                !jq.is_native() || program == "def f: f; f",
                "{program} should fall back"
            );
        }
    }
}
