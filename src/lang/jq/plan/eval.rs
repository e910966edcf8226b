//! Running a plan on a value: one output as a plain call ([`Node::eval1`]), a stream into a
//! sink ([`Node::run`]), with jaq's semantics step for step.

use super::*;

/// Binds `slot` to `v` while `f` runs, then restores what it held.
pub(super) fn with_var<T>(env: &mut Env, slot: usize, v: Val, f: impl FnOnce(&mut Env) -> T) -> T {
    let old = std::mem::replace(&mut env.vars[slot], v);
    let out = f(env);
    env.vars[slot] = old;
    out
}

/// `v[idx]`, as jaq's `ValT::index`, without cloning `v` for the common object lookup.
/// [`index`] by a literal key, looking first at the position where the key was last found:
/// the records of a list are alike, so this nearly always spares hashing the key. A key is in
/// an object once, so the hit is the entry `get` finds.
pub(super) fn index_hinted(v: &Val, key: &Val, hint: &AtomicUsize) -> ValR<Val> {
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

/// [`index_literals`] on a value on a tape: string keys walk the tape, and only the value
/// found (or the first that is not an object) becomes a value. The same value or error.
fn keys_on_tape(at: At<'_>, parts: &[(PathPart, Opt)], hints: &[AtomicUsize]) -> ValR<Val> {
    match walk_tape(at, parts, hints) {
        Ok(at) => Ok(at.to_val()),
        Err(found) => found,
    }
}

/// [`keys_on_tape`]: `Ok` at the value reached on the tape, or `Err` with the outcome when a
/// step left the tape (a missing key, a value that is not an object, a key that is not text).
pub(super) fn walk_tape<'t>(
    mut at: At<'t>,
    parts: &[(PathPart, Opt)],
    hints: &[AtomicUsize],
) -> Result<At<'t>, ValR<Val>> {
    for (n, ((part, _), hint)) in parts.iter().zip(hints).enumerate() {
        let PathPart::Index(Node {
            kind: Kind::Lit(Val::TStr(key)),
            ..
        }) = part
        else {
            // Another literal (a number): index the value reached.
            return Err(index_literals(
                Cow::Owned(at.to_val()),
                &parts[n..],
                &hints[n..],
            ));
        };
        match at.get(key, hint) {
            Some(Some(value)) => at = value,
            Some(None) => {
                let rest = n + 1;
                return Err(index_literals(
                    Cow::Owned(Val::Null),
                    &parts[rest..],
                    &hints[rest..],
                ));
            }
            // Not an object: indexing the value gives the answer (or the error).
            None => {
                return Err(index_literals(
                    Cow::Owned(at.to_val()),
                    &parts[n..],
                    &hints[n..],
                ));
            }
        }
    }
    Ok(at)
}

/// Whether a path part is an index by a literal (`.a`, `.["a"]`, `.[0]`).
pub(super) fn is_literal((part, _): &(PathPart, Opt)) -> bool {
    matches!(
        part,
        PathPart::Index(Node {
            kind: Kind::Lit(_),
            ..
        })
    )
}

/// `v` indexed by the literal keys of `parts` in turn (each hinted).
pub(super) fn index_literals(
    mut v: Cow<'_, Val>,
    parts: &[(PathPart, Opt)],
    hints: &[AtomicUsize],
) -> ValR<Val> {
    for ((part, _), hint) in parts.iter().zip(hints) {
        if let PathPart::Index(Node {
            kind: Kind::Lit(k), ..
        }) = part
        {
            v = Cow::Owned(index_hinted(&v, k, hint)?);
        }
    }
    Ok(v.into_owned())
}

pub(super) fn index(v: &Val, idx: &Val) -> ValR<Val> {
    match v {
        Val::Obj(o) => Ok(o.get(idx).cloned().unwrap_or(Val::Null)),
        Val::Null => Ok(Val::Null),
        _ => v.clone().index(idx),
    }
}

impl Node {
    /// The output of a term that always gives exactly one (`self.one`).
    pub(super) fn eval1<I: Input + ?Sized>(&self, input: &I, env: &mut Env) -> ValR<Val> {
        debug_assert!(self.one);
        match &self.kind {
            Kind::Id => Ok(input.whole().clone()),
            Kind::Lit(v) => Ok(v.clone()),
            Kind::Var(slot) => Ok(env.vars[*slot].clone()),
            Kind::Path(f, parts, hints) => {
                // jaq runs `f` first (its error wins), then all index terms (the first error
                // among them wins), then applies the parts in turn.
                // Literal keys (`.a.b`, `$tables.t`) cannot fail: no need to compute them first.
                if parts.iter().all(is_literal) {
                    let v = match &f.kind {
                        Kind::Id => match input.tape() {
                            Some(at) => return keys_on_tape(at, parts, hints),
                            None => Cow::Borrowed(input.whole()),
                        },
                        Kind::Var(slot) => Cow::Borrowed(&env.vars[*slot]),
                        _ => Cow::Owned(f.eval1(input, env)?),
                    };
                    return index_literals(v, parts, hints);
                }
                let mut v = match &f.kind {
                    Kind::Id => Cow::Borrowed(input.whole()),
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
            Kind::Arr(Some(f)) if f.one => Ok(Val::Arr(Rc::new(vec![f.eval1(input, env)?]))),
            Kind::Arr(Some(f)) => {
                let mut items = Vec::new();
                let mut error = None;
                let _ = f.run(input.whole(), env, &mut |_, y| match y {
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
                fun.call(input.whole().clone(), arg)
            }
            Kind::Empty | Kind::Comma(..) | Kind::Try(..) => {
                unreachable!("terms with other than one output are streamed")
            }
        }
    }

    /// [`Node::eval1`] on an input nothing else needs: a helper then gets it without a copy
    /// (`{…} | compact` compacts the object just built in place).
    pub(super) fn eval1_owned(&self, input: Val, env: &mut Env) -> ValR<Val> {
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
    pub(super) fn run(&self, input: &Val, env: &mut Env, sink: &mut Sink<'_>) -> Flow {
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
    pub(super) fn run_path(
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

pub(super) fn apply_parts(
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
