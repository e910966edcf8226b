//! A record's fields as text where they are text: `.Make | nonempty | lower` on a record read
//! off a tape runs on the string in the reply's body and gives the `String` of the JSON output,
//! without a jaq string value in between (a boxed, reference-counted buffer per step).
//!
//! Only pipelines of a literal path into helpers whose arguments do not read `.` take this way,
//! and only while the value is a string; a helper without a text version, a value that is not
//! a string, or any other term, runs as [`Node::eval1`] does. The helpers' text versions are the
//! functions their value versions call on a string, so the outputs and errors are the same.

use bytes::Bytes;
use bytestring::ByteString;

use super::eval::is_literal;
use super::*;
use crate::lang::jq::helpers::{
    self, as_str, int_str, legacy_date_str, legacy_datetime_str, lookup_str, miles_str, num_str,
    parse_dollars, split_pieces, text_format, title,
};

/// A value on its way through a pipeline: text (borrowed from the input while unchanged), a
/// table's text (shared, as a record's field takes it), an array of texts (a list on the tape,
/// or `split_list`'s pieces), or any value.
pub(super) enum Out<'i> {
    Str(Cow<'i, str>),
    Shared(ByteString),
    List(Vec<Cow<'i, str>>),
    Val(Val),
}

impl Out<'_> {
    /// A value as it goes on: a string that is valid UTF-8 shared, not boxed for jaq.
    fn of_ref(v: &Val) -> Out<'static> {
        if let Val::TStr(b) = v
            && let Ok(text) = ByteString::try_from(Bytes::clone(b))
        {
            return Out::Shared(text);
        }
        Out::Val(v.clone())
    }

    fn into_val(self) -> Val {
        match self {
            Out::Str(s) => Val::from(s.into_owned()),
            Out::Shared(s) => Val::utf8_str(s.into_bytes()),
            Out::List(items) => items
                .into_iter()
                .map(|s| Val::from(s.into_owned()))
                .collect(),
            Out::Val(v) => v,
        }
    }
}

/// A record's field of the commonest shape, `.Key | f | g …`: one key of the record, read off
/// its tape, then helpers whose arguments do not read the input. Flattened at load, such a
/// field costs the key's lookup and the helpers' calls instead of a walk down the term's tree
/// (pipes, paths, calls) for each record. Like that walk, it calls the helpers' text versions
/// while the value is text and their value versions from the first value that is not (a
/// number, a missing key's `null`, what `nonempty` makes of a blank). It gives what
/// [`Node::eval_text`] gives, or `None` where that walk must run instead: an input that is not
/// an object, and any error (the walk gives the same one).
///
/// `[.Key | f | …]` (a DMS's one photo as a list of photos) is the same pipeline with its one
/// output put in an array, as text while it is text.
pub(super) struct Straight {
    key: Bytes,
    hint: AtomicUsize,
    steps: Box<[(Fun, Option<Arg>)]>,
    list: bool,
    /// Not a list, and every step is `nonempty`: a text stays a slice of the reply
    /// ([`Straight::span`]).
    trims: bool,
}

impl Straight {
    /// The flattened form of a record's field, when it has that shape. Its arguments that read
    /// only literals and global variables take the next slots of `consts`.
    pub(super) fn of(value: &Node, consts: &mut usize) -> Option<Straight> {
        // `[f]` is an array of all of `f`'s outputs; a pipeline of this shape gives one.
        let (value, list) = match &value.kind {
            Kind::Arr(Some(inner)) => (&**inner, true),
            _ => (value, false),
        };
        let mut terms = Vec::new();
        pipeline(value, &mut terms);
        let (first, rest) = terms.split_first()?;
        let Kind::Path(f, parts, _) = &first.kind else {
            return None;
        };
        let [
            (
                PathPart::Index(Node {
                    kind: Kind::Lit(Val::TStr(key)),
                    ..
                }),
                _,
            ),
        ] = &parts[..]
        else {
            return None;
        };
        if !matches!(f.kind, Kind::Id) {
            return None;
        }
        // (A field that turns out not to have this shape may leave slots unused: harmless.)
        let steps: Box<[(Fun, Option<Arg>)]> = rest
            .iter()
            .map(|term| match &term.kind {
                Kind::Call(fun, args) if args.len() <= 1 => {
                    let arg = match args.first() {
                        Some(arg) => Some(Arg::of(copy_of_constant(arg)?, consts)),
                        None => None,
                    };
                    Some((*fun, arg))
                }
                _ => None,
            })
            .collect::<Option<_>>()?;
        let trims = !list && steps.iter().all(|(fun, _)| matches!(fun, Fun::Nonempty));
        Some(Straight {
            key: Bytes::clone(key),
            hint: AtomicUsize::new(0),
            steps,
            list,
            trims,
        })
    }

    /// The commonest field of all, `.Key` or `.Key | nonempty`, when the key holds text that is
    /// not blank: the text, trimmed, as [`Straight::eval`] would give it. Apart from `eval` so
    /// that the text stays in registers on its way into the record; `None` where `eval` must run.
    #[inline]
    pub(super) fn span<'i, I: Input + ?Sized>(&self, input: &'i I) -> Option<&'i str> {
        if !self.trims {
            return None;
        }
        let text = input.tape()?.get(&self.key, &self.hint)??.as_str()?;
        let text = if self.steps.is_empty() {
            text
        } else {
            helpers::trim_str(text)
        };
        (!text.is_empty()).then_some(text)
    }

    pub(super) fn eval<'i, I: Input + ?Sized>(
        &self,
        input: &'i I,
        env: &mut Env,
    ) -> Option<Out<'i>> {
        // As `eval_text` reads a path of one key on a tape.
        let mut out = match input.tape()?.get(&self.key, &self.hint)? {
            Some(at) => match at.as_str() {
                Some(text) => Out::Str(Cow::Borrowed(text)),
                None => texts(at).map_or_else(|| Out::Val(at.to_val()), Out::List),
            },
            None => Out::Val(Val::Null),
        };
        for (fun, arg) in &self.steps {
            // The argument would run on the value; it does not read it.
            let arg = match arg {
                Some(arg) => Some(arg.value(env)?),
                None => None,
            };
            // As `apply_text`: text while it is text, then the value path (`eval1_owned`).
            out = match out {
                Out::Str(s) => fun.call_text(s, arg.as_deref()).ok()?,
                other => Out::Val(fun.call(other.into_val(), arg.map(Cow::into_owned)).ok()?),
            };
        }
        if self.list {
            out = match out {
                Out::Str(s) => Out::List(vec![s]),
                other => Out::Val(std::iter::once(other.into_val()).collect()),
            };
        }
        Some(out)
    }
}

/// A helper's argument in a [`Straight`] field, and its slot in `Env::consts` when its value
/// is the same for every record (it reads only literals and the global variables).
struct Arg {
    node: Node,
    slot: Option<usize>,
}

impl Arg {
    /// A copy of a constant term, with the next slot of `consts` when it reads only literals
    /// and global variables.
    fn of(node: Node, consts: &mut usize) -> Arg {
        let slot = reads_only_globals(&node).then(|| {
            *consts += 1;
            *consts - 1
        });
        Arg { node, slot }
    }

    /// The argument's value (`None` on an error: the field's walk gives it); a constant one
    /// worked out once per page.
    fn value<'e>(&self, env: &'e mut Env) -> Option<Cow<'e, Val>> {
        let Some(slot) = self.slot else {
            return self.node.eval1(&Val::Null, env).ok().map(Cow::Owned);
        };
        if env.consts[slot].is_none() {
            let value = self.node.eval1(&Val::Null, env).ok()?;
            env.consts[slot] = Some(value);
        }
        env.consts[slot].as_ref().map(Cow::Borrowed)
    }
}

/// Whether a term reads only literals and the global variables (a literal, a global variable,
/// or a path of literal keys from one): its value is the same for every record of a page.
pub(super) fn reads_only_globals(node: &Node) -> bool {
    match &node.kind {
        Kind::Lit(_) => true,
        Kind::Var(slot) => *slot < GLOBAL_VARS.len(),
        Kind::Path(f, parts, _) => parts.iter().all(is_literal) && reads_only_globals(f),
        _ => false,
    }
}

/// The terms of `l | r | …` in order.
fn pipeline<'n>(node: &'n Node, out: &mut Vec<&'n Node>) {
    match &node.kind {
        Kind::Pipe(l, r) => {
            pipeline(l, out);
            pipeline(r, out);
        }
        _ => out.push(node),
    }
}

/// A copy of a term that does not read its input ([`reads_no_input`]: a literal, a variable, a
/// path of literal keys from one), with hints of its own.
fn copy_of_constant(node: &Node) -> Option<Node> {
    let kind = match &node.kind {
        Kind::Lit(v) => Kind::Lit(v.clone()),
        Kind::Var(slot) => Kind::Var(*slot),
        Kind::Path(f, parts, _) if parts.iter().all(is_literal) => {
            let parts: Box<[(PathPart, Opt)]> = parts
                .iter()
                .map(|(part, opt)| match part {
                    PathPart::Index(key) => Some((PathPart::Index(copy_of_constant(key)?), *opt)),
                    PathPart::Iter => None,
                })
                .collect::<Option<_>>()?;
            let hints = parts.iter().map(|_| AtomicUsize::new(0)).collect();
            Kind::Path(Box::new(copy_of_constant(f)?), parts, hints)
        }
        _ => return None,
    };
    Some(Node {
        kind,
        one: node.one,
    })
}

/// The texts of an array on a tape whose items are all strings.
fn texts(at: At<'_>) -> Option<Vec<Cow<'_, str>>> {
    at.items()?
        .map(|item| item.as_str().map(Cow::Borrowed))
        .collect()
}

impl Node {
    /// [`Node::eval1`], as text when the term is a pipeline of a path into helpers and its
    /// value is a string.
    pub(super) fn eval_text<'i, I: Input + ?Sized>(
        &self,
        input: &'i I,
        env: &mut Env,
    ) -> Result<Out<'i>, Error> {
        match &self.kind {
            Kind::Path(f, parts, hints)
                if matches!(f.kind, Kind::Id) && parts.iter().all(is_literal) =>
            {
                let Some(at) = input.tape() else {
                    return self.eval1(input, env).map(Out::Val);
                };
                match eval::walk_tape(at, parts, hints) {
                    Ok(at) => Ok(match at.as_str() {
                        Some(s) => Out::Str(Cow::Borrowed(s)),
                        None => texts(at).map_or_else(|| Out::Val(at.to_val()), Out::List),
                    }),
                    Err(found) => found.map(Out::Val),
                }
            }
            Kind::Pipe(l, r) => {
                let x = l.eval_text(input, env)?;
                r.apply_text(x, env)
            }
            _ => self.eval1(input, env).map(Out::Val),
        }
    }

    /// `x | self`, as [`Node::eval1_owned`] on `x`'s value.
    fn apply_text<'i>(&self, x: Out<'i>, env: &mut Env) -> Result<Out<'i>, Error> {
        let s = match x {
            Out::Str(s) => s,
            other => return self.eval1_owned(other.into_val(), env).map(Out::Val),
        };
        match &self.kind {
            Kind::Call(fun, args) if args.iter().all(reads_no_input) => {
                // The argument would run on `x`; it does not read it.
                let arg = match args.first() {
                    Some(a) => Some(a.eval1(&Val::Null, env)?),
                    None => None,
                };
                fun.call_text(s, arg.as_ref())
            }
            Kind::Pipe(a, b) => {
                let y = a.apply_text(Out::Str(s), env)?;
                b.apply_text(y, env)
            }
            _ => self.eval1_owned(Out::Str(s).into_val(), env).map(Out::Val),
        }
    }
}

impl Fun {
    /// [`Fun::call`] on a string.
    fn call_text<'s>(self, s: Cow<'s, str>, arg: Option<&Val>) -> Result<Out<'s>, Error> {
        // (A `null` made only for a call without its argument: dropping one per call showed.)
        let null;
        let given = match arg {
            Some(arg) => arg,
            None => {
                null = Val::Null;
                &null
            }
        };
        Ok(match self {
            Fun::Nonempty => match trim(s) {
                t if t.is_empty() => Out::Val(Val::Null),
                t => Out::Str(t),
            },
            Fun::Lower => Out::Str(lower(s)),
            Fun::Upper => Out::Str(upper(s)),
            Fun::Title => Out::Str(Cow::Owned(title(&s))),
            Fun::Dollars => Out::Val(parse_dollars(&s, text_format("dollars", arg)?)?),
            Fun::Miles => Out::Val(miles_str(&s, text_format("miles", arg)?)?),
            Fun::Int => Out::Val(int_str(&s, text_format("int", arg)?)?),
            Fun::Num => Out::Val(num_str(&s, text_format("num", arg)?)?),
            Fun::LegacyDate => text_or_null(legacy_date_str(&s)),
            Fun::LegacyDatetime => text_or_null(legacy_datetime_str(Some(&s), given)?),
            Fun::Lookup => lookup_str(&s, given)?.map_or(Out::Val(Val::Null), Out::of_ref),
            // The pieces as `split_list` cuts and cleans them; any other separator gets its
            // error there.
            Fun::SplitList => match as_str(given).filter(|sep| !sep.is_empty()) {
                Some(sep) => Out::List(split_text(&s, sep)),
                None => Out::Val(other_call(self, s, arg.cloned())?),
            },
            other => Out::Val(other_call(other, s, arg.cloned())?),
        })
    }
}

/// `lower` of a text: what `str::to_lowercase` gives.
#[inline]
pub(super) fn lower(s: Cow<'_, str>) -> Cow<'_, str> {
    ascii_or(
        s,
        u8::is_ascii_uppercase,
        str::make_ascii_lowercase,
        str::to_lowercase,
    )
}

/// `upper` of a text: what `str::to_uppercase` gives.
#[inline]
pub(super) fn upper(s: Cow<'_, str>) -> Cow<'_, str> {
    ascii_or(
        s,
        u8::is_ascii_lowercase,
        str::make_ascii_uppercase,
        str::to_uppercase,
    )
}

/// `s` changed by `full` (`str::to_lowercase`), or for ASCII text the same done in place by
/// `ascii`, and not at all (not even copied) when no byte is `changes`.
#[inline]
fn ascii_or<'s>(
    s: Cow<'s, str>,
    changes: impl Fn(&u8) -> bool,
    ascii: impl FnOnce(&mut str),
    full: impl FnOnce(&str) -> String,
) -> Cow<'s, str> {
    if !s.is_ascii() {
        return Cow::Owned(full(&s));
    }
    if !s.bytes().any(|b| changes(&b)) {
        return s;
    }
    let mut s = s.into_owned();
    ascii(&mut s);
    Cow::Owned(s)
}

fn other_call(fun: Fun, s: Cow<'_, str>, arg: Option<Val>) -> Result<Val, Error> {
    fun.call(Val::from(s.into_owned()), arg)
}

/// `split_list`'s pieces of a text ([`split_pieces`]), borrowed from the input while it is.
fn split_text<'i>(s: &Cow<'i, str>, sep: &str) -> Vec<Cow<'i, str>> {
    let mut items = Vec::new();
    match s {
        Cow::Borrowed(s) => split_pieces(s, sep, |p| items.push(Cow::Borrowed(p))),
        Cow::Owned(s) => split_pieces(s, sep, |p| items.push(Cow::Owned(p.to_owned()))),
    }
    items
}

fn text_or_null<'i>(s: Option<String>) -> Out<'i> {
    s.map_or(Out::Val(Val::Null), |s| Out::Str(Cow::Owned(s)))
}

/// jq's `trim` of a string: `White_Space` at both ends (what `helpers::trim_white_space` removes
/// from valid UTF-8).
fn trim(s: Cow<'_, str>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(helpers::trim_str(b)),
        Cow::Owned(o) if helpers::trim_str(&o).len() == o.len() => Cow::Owned(o),
        Cow::Owned(o) => Cow::Owned(o.trim().to_owned()),
    }
}

/// Whether a term's value does not depend on its input: a literal, a variable, or a path of
/// literal keys from one (`$tables.condition_in`).
fn reads_no_input(node: &Node) -> bool {
    match &node.kind {
        Kind::Lit(_) | Kind::Var(_) => true,
        Kind::Path(f, parts, _) => reads_no_input(f) && parts.iter().all(is_literal),
        _ => false,
    }
}
