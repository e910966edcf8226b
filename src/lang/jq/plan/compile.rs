//! From jaq's syntax tree to a plan: the subset's terms become [`Node`]s, local `def`s are
//! inlined, and anything outside the subset gives `None`.

use super::*;

/// Deepest nesting of `def` calls inlined before giving up (recursive definitions).
pub(super) const MAX_INLINE: usize = 32;

/// Compiles the parsed program, or `None` when some part of it is outside the subset.
pub(in crate::lang::jq) fn compile(term: &Term<'_>) -> Option<Plan> {
    let mut c = Compiler {
        max_slots: GLOBAL_VARS.len(),
        inline_depth: 0,
    };
    let scope = Bindings {
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
pub(super) fn record_entries(root: &Node) -> Option<&[(Node, Node)]> {
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

pub(super) fn record_shape(root: &Node) -> Option<RecordPlan> {
    let entries = record_entries(root)?;
    let mut keys: Vec<String> = Vec::with_capacity(entries.len());
    for (key, _) in entries {
        // A computed key keeps the general path: its position and value follow jaq's object
        // rules there.
        let Kind::Lit(Val::TStr(bytes)) = &key.kind else {
            return None;
        };
        keys.push(std::str::from_utf8(bytes).ok()?.to_owned());
    }
    // A repeated key, or more than one bit per field in `Plan::eval_record` can count, keeps
    // the general path too.
    let shape = Shape::new(keys)?;
    let mut consts = 0;
    let straight = entries
        .iter()
        .map(|(_, value)| super::text::Straight::of(value, &mut consts))
        .collect();
    let invariant = entries
        .iter()
        .map(|(_, value)| super::text::reads_only_globals(value))
        .collect();
    Some(RecordPlan {
        shape: std::sync::Arc::new(shape),
        compact: !matches!(root.kind, Kind::Obj(_)),
        straight,
        consts,
        invariant,
    })
}

pub(super) struct Compiler {
    max_slots: usize,
    inline_depth: usize,
}

/// What a term can see: variables by slot (`None`: a slot used by an enclosing caller, not
/// visible by name), local definitions, and the filter names a definition's `$` parameters
/// also bind in jq (calls of those are left to jaq).
#[derive(Clone)]
pub(super) struct Bindings<'s, 't> {
    vars: Vec<Option<&'s str>>,
    defs: Vec<LocalDef<'s, 't>>,
    params: Vec<&'s str>,
}

#[derive(Clone)]
pub(super) struct LocalDef<'s, 't> {
    def: &'t parse::Def<&'s str>,
    /// The variables and definitions visible where it was defined (including itself).
    vars: usize,
    defs: usize,
    params: usize,
}

/// `$x`: the innermost binding of that name.
pub(super) fn var(x: &str, s: &Bindings<'_, '_>) -> Option<Node> {
    let slot = s.vars.iter().rposition(|v| *v == Some(x))?;
    Some(node(Kind::Var(slot), true))
}

pub(super) fn path_kind(f: Box<Node>, parts: Box<[(PathPart, Opt)]>) -> Kind {
    let hints = parts.iter().map(|_| AtomicUsize::new(0)).collect();
    Kind::Path(f, parts, hints)
}

pub(super) fn node(kind: Kind, one: bool) -> Node {
    Node { kind, one }
}

pub(super) fn lit(v: Val) -> Node {
    node(Kind::Lit(v), true)
}

impl Compiler {
    pub(super) fn boxed(&mut self, t: &Term<'_>, s: &Bindings<'_, '_>) -> Option<Box<Node>> {
        self.term(t, s).map(Box::new)
    }

    pub(super) fn term<'s, 't>(&mut self, t: &'t Term<'s>, s: &Bindings<'s, 't>) -> Option<Node> {
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
    pub(super) fn string<'s, 't>(
        &mut self,
        parts: &'t [lex::StrPart<&'s str, Term<'s>>],
        s: &Bindings<'s, 't>,
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
    pub(super) fn object<'s, 't>(
        &mut self,
        entries: &'t [(Term<'s>, Option<Term<'s>>)],
        s: &Bindings<'s, 't>,
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

    pub(super) fn call<'s, 't>(
        &mut self,
        name: &'s str,
        args: &'t [Term<'s>],
        s: &Bindings<'s, 't>,
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
    pub(super) fn inline<'s, 't>(
        &mut self,
        i: usize,
        args: &'t [Term<'s>],
        s: &Bindings<'s, 't>,
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
        let mut body_scope = Bindings {
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
