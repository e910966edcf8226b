//! Compiling a mapping's jq: the prelude, jaq's loader and compiler with the native helpers,
//! object literals rewritten to build left to right, and located compile errors.

use super::*;

pub(super) type Def = parse::Def<&'static str>;

/// Definitions every program can call: jq's standard library (the helpers are native).
/// Parsed once; cloned into each compile.
pub(super) static PRELUDE: LazyLock<Vec<Def>> = LazyLock::new(|| {
    jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .collect()
});

/// Lets the `'static` prelude live alongside a program text of any lifetime.
pub(super) fn shorten<'s>(def: Def) -> parse::Def<&'s str> {
    def
}

/// Compiles `code` as jaq's loader parses it; errors are located in `code`.
pub(super) fn compile_as_written(code: &str) -> Result<jaq_core::Filter<Data>, JqCompileError> {
    let arena = Arena::default();
    let loader = Loader::new(PRELUDE.iter().cloned().map(shorten));
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| load_error(code, errs))?;
    compile_modules(modules).map_err(|errs| undefined_error(code, errs))
}

pub(super) fn compile_modules(
    modules: load::Modules<&str, ()>,
) -> Result<jaq_core::Filter<Data>, jaq_core::compile::Errors<&str, ()>> {
    Compiler::default()
        .with_funs(funs())
        .with_global_vars(GLOBAL_VARS)
        .compile(modules)
}

/// The name under which [`compile_left_assoc`] hands the rewritten program to the loader.
pub(super) const MAIN: &str = "aap_gateway_main";

/// Compiles `code` with its object literals left-associated ([`objects_left_assoc`]); `None`
/// when it does not compile (the caller then compiles it as written, for the error), uses
/// module directives (`import`, `include`) or mentions [`MAIN`].
///
/// jaq's loader takes the main program only as text, but its prelude as parsed definitions:
/// the rewritten program becomes the last prelude definition, `MAIN`, and the main program
/// calls it. A program's top-level `def`s are local definitions of its main term either way.
pub(super) fn compile_left_assoc(code: &str) -> Option<jaq_core::Filter<Data>> {
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
pub(super) fn objects_left_assoc<S>(term: &mut parse::Term<S>) {
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
pub(super) fn pattern_objects_left_assoc<S>(pattern: &mut parse::Pattern<S>) {
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
pub(super) fn funs() -> impl Iterator<Item = native::Fun<Data>> {
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

pub(super) fn env_disabled(_: Cv<'_, Data>) -> ValXs<'_, Val> {
    bome(Err(jaq_core::Error::str(
        "env is not available in mappings",
    )))
}

/// The helpers (see the module documentation for what they do). All are native: number and
/// date parsing need exact decimal rounding and a time zone database, and in jq `compact` and
/// `split_list` cost 30–150 µs per record (`with_entries`, `map`), `nonempty` and `lookup` 2–4 µs
/// per call (jaq's `isstring`, `isobject` and `type` are chains of comparisons).
pub(super) fn helper_funs<D: for<'a> DataT<V<'a> = Val>>() -> impl Iterator<Item = native::Fun<D>> {
    let funs: [native::Filter<RunPtr<D>>; 17] = [
        ("nonempty", v(0), |cv| bome(nonempty(cv.1))),
        ("lookup", v(1), |cv| unary(cv, lookup)),
        ("dollars", v(0), |cv| bome(dollars(&cv.1, None))),
        ("dollars", v(1), |cv| {
            unary(cv, |v, f| dollars(&v, Some(&f)))
        }),
        ("miles", v(0), |cv| bome(miles(&cv.1, None))),
        ("miles", v(1), |cv| unary(cv, |v, f| miles(&v, Some(&f)))),
        ("int", v(0), |cv| bome(int(&cv.1, None))),
        ("int", v(1), |cv| unary(cv, |v, f| int(&v, Some(&f)))),
        ("num", v(0), |cv| bome(num(&cv.1, None))),
        ("num", v(1), |cv| unary(cv, |v, f| num(&v, Some(&f)))),
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
pub(super) fn helper_names() -> Vec<String> {
    helper_funs::<Data>()
        .map(|(name, arity, _)| format!("{name}/{}", arity.len()))
        .collect()
}

pub(super) fn load_error(code: &str, errs: load::Errors<&str, ()>) -> JqCompileError {
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

pub(super) fn lex_expected(expect: &lex::Expect<&str>) -> &'static str {
    match expect {
        lex::Expect::Digit => "digit",
        lex::Expect::Ident => "identifier",
        lex::Expect::Escape => "string escape sequence",
        lex::Expect::Unicode => "4-digit hexadecimal code point",
        lex::Expect::Token => "token",
        _ => "closing delimiter",
    }
}

pub(super) fn undefined_error(
    code: &str,
    errs: jaq_core::compile::Errors<&str, ()>,
) -> JqCompileError {
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
pub(super) fn located(code: &str, mut found: Vec<(bool, Option<usize>, String)>) -> JqCompileError {
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

pub(super) fn same_text(a: &str, b: &str) -> bool {
    std::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()
}

/// Byte offset of `part` within `whole`, when `part` is a slice of it.
pub(super) fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let (base, start) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    let offset = start.checked_sub(base)?;
    (offset + part.len() <= whole.len()).then_some(offset)
}
