//! The string columns of an [`Inventory`](super::Inventory): one buffer per column instead of a
//! string per listing, and [`Interned`] text that listings share.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// One optional string per listing, all in one buffer (no allocation per listing).
#[derive(Debug, Clone, Default)]
pub(super) struct StrColumn {
    text: String,
    /// Per listing: the byte range in `text`; [`StrColumn::ABSENT`] for none.
    spans: Vec<(u32, u32)>,
}

impl StrColumn {
    const ABSENT: (u32, u32) = (u32::MAX, u32::MAX);

    /// Adds the next listing's string. (Past 4 GiB of text a string counts as absent: no feed
    /// gets there under `max_response_bytes`.)
    pub(super) fn push(&mut self, s: Option<&str>) {
        let span = s.and_then(|s| {
            let start = u32::try_from(self.text.len()).ok()?;
            let end = u32::try_from(self.text.len() + s.len())
                .ok()
                .filter(|&end| end < u32::MAX)?;
            self.text.push_str(s);
            Some((start, end))
        });
        self.spans.push(span.unwrap_or(Self::ABSENT));
    }

    pub(super) fn get(&self, i: usize) -> Option<&str> {
        let &(start, end) = self.spans.get(i)?;
        if (start, end) == Self::ABSENT {
            return None;
        }
        self.text.get(start as usize..end as usize)
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.spans.shrink_to_fit();
    }

    /// An empty column with room for about what `like` holds and `listings` strings.
    pub(super) fn sized_like(like: &StrColumn, listings: usize) -> StrColumn {
        StrColumn {
            text: String::with_capacity(room(like.text.len())),
            spans: Vec::with_capacity(listings),
        }
    }

    /// Number of strings (absent ones included).
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }
}

/// `n` and a little more: what a refresh reserves for a column that held `n` before, instead of
/// growing it by doubling, which would hold up to twice its size while the copy it replaces is
/// still in memory.
pub(super) fn room(n: usize) -> usize {
    n + n / 32
}

/// One text per listing, each distinct text stored once: listings that share a text (a trim's
/// list of features, a description written from a template) share its bytes.
#[derive(Debug, Clone)]
pub(super) struct Interned {
    /// The distinct texts; a text's id is its index.
    texts: StrColumn,
    /// Per listing: the id of its text.
    ids: Ids,
}

impl Interned {
    /// Per distinct text: whether it contains `term`. (A listing's entry is
    /// `hits[ids[listing]]`: each distinct text is searched once, however many listings share
    /// it.)
    pub(super) fn containing(&self, term: &str) -> Vec<bool> {
        (0..self.texts.len())
            .map(|id| self.texts.get(id).is_some_and(|text| text.contains(term)))
            .collect()
    }

    /// Per listing: the id of its text (an index into [`Interned::containing`]).
    pub(super) fn ids(&self) -> &Ids {
        &self.ids
    }
}

/// Builds an [`Interned`] column one listing at a time.
#[derive(Debug, Default)]
pub(super) struct InternedBuilder {
    texts: StrColumn,
    ids: Vec<u32>,
    /// Ids of the texts so far, by the hash of their text: only while building, and without
    /// a copy of any text.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl InternedBuilder {
    /// An empty builder with room for `listings` and about what `like` holds.
    pub(super) fn sized_like(like: &Interned, listings: usize) -> InternedBuilder {
        let distinct = like.texts.len();
        InternedBuilder {
            texts: StrColumn::sized_like(&like.texts, room(distinct)),
            ids: Vec::with_capacity(listings),
            index: HashTable::with_capacity(room(distinct)),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Adds the next listing's text.
    pub(super) fn push(&mut self, text: &str) {
        let hash = self.hasher.hash_one(text);
        let texts = &mut self.texts;
        let hasher = &self.hasher;
        let id = match self
            .index
            .find(hash, |&id| texts.get(id as usize) == Some(text))
        {
            Some(&id) => id,
            None => {
                // As many ids as listings at most, and listing indices are `u32`s.
                let id = texts.len() as u32;
                texts.push(Some(text));
                self.index.insert_unique(hash, id, |&id| {
                    hasher.hash_one(texts.get(id as usize).unwrap_or(""))
                });
                id
            }
        };
        self.ids.push(id);
    }

    pub(super) fn finish(self) -> Interned {
        let InternedBuilder { mut texts, ids, .. } = self;
        texts.shrink_to_fit();
        let max = u32::try_from(texts.len()).unwrap_or(u32::MAX);
        Interned {
            texts,
            ids: Ids::narrowest(ids, max),
        }
    }
}

/// Per listing, an id into some table, stored in the narrowest of `u8`, `u16` and `u32` that
/// holds the largest: most term columns (makes, years, conditions, colours) have fewer than 256
/// values, and a search reads a whole column per filter.
#[derive(Debug, Clone)]
pub(super) enum Ids {
    U8(Box<[u8]>),
    U16(Box<[u16]>),
    U32(Box<[u32]>),
}

/// An id of one of [`Ids`]'s widths.
trait Id: Copy {
    fn index(self) -> usize;
}

impl Id for u8 {
    fn index(self) -> usize {
        usize::from(self)
    }
}

impl Id for u16 {
    fn index(self) -> usize {
        usize::from(self)
    }
}

impl Id for u32 {
    fn index(self) -> usize {
        self as usize
    }
}

/// Calls `$f` with the ids as a slice of their own width (one loop compiled per width).
macro_rules! each_width {
    ($ids:expr, $f:ident ( $($arg:expr),* )) => {
        match $ids {
            Ids::U8(ids) => $f(ids, $($arg),*),
            Ids::U16(ids) => $f(ids, $($arg),*),
            Ids::U32(ids) => $f(ids, $($arg),*),
        }
    };
}

impl Ids {
    /// `ids`, each at most `max`, in the narrowest width that holds `max`.
    pub(super) fn narrowest(ids: Vec<u32>, max: u32) -> Ids {
        /// `ids` as `T`s (an id over `max`, which none is, as `max`).
        fn narrowed<T: TryFrom<u32> + Copy>(ids: &[u32], max: T) -> Box<[T]> {
            ids.iter()
                .map(|&id| T::try_from(id).unwrap_or(max))
                .collect()
        }
        if let Ok(max) = u8::try_from(max) {
            Ids::U8(narrowed(&ids, max))
        } else if let Ok(max) = u16::try_from(max) {
            Ids::U16(narrowed(&ids, max))
        } else {
            Ids::U32(ids.into_boxed_slice())
        }
    }

    /// Listing `i`'s id.
    pub(super) fn get(&self, i: usize) -> Option<usize> {
        fn get<T: Id>(ids: &[T], i: usize) -> Option<usize> {
            ids.get(i).map(|&id| id.index())
        }
        each_width!(self, get(i))
    }

    /// `matched[i] &= table[id of i]` (an id past `table` is `false`).
    pub(super) fn and_into(&self, matched: &mut [bool], table: &[bool]) {
        fn and<T: Id>(ids: &[T], matched: &mut [bool], table: &[bool]) {
            for (m, &id) in matched.iter_mut().zip(ids) {
                *m &= table.get(id.index()).copied().unwrap_or(false);
            }
        }
        each_width!(self, and(matched, table))
    }

    /// `any[i] |= table[id of i]` (an id past `table` is `false`).
    pub(super) fn or_into(&self, any: &mut [bool], table: &[bool]) {
        fn or<T: Id>(ids: &[T], any: &mut [bool], table: &[bool]) {
            for (a, &id) in any.iter_mut().zip(ids) {
                *a |= table.get(id.index()).copied().unwrap_or(false);
            }
        }
        each_width!(self, or(any, table))
    }

    /// Per id below `slots`: how many listings with it are `matched`.
    pub(super) fn count(&self, matched: &[bool], slots: usize) -> Vec<usize> {
        fn count<T: Id>(ids: &[T], matched: &[bool], slots: usize) -> Vec<usize> {
            // Four interleaved counter sets, so that runs of one value do not serialize on a
            // single counter.
            let mut lanes = vec![0usize; 4 * slots];
            for (ids, matched) in ids.chunks_exact(4).zip(matched.chunks_exact(4)) {
                for (lane, (&id, &m)) in ids.iter().zip(matched).enumerate() {
                    if let Some(count) = lanes.get_mut(lane * slots + id.index()) {
                        *count += usize::from(m);
                    }
                }
            }
            let rest = ids.len() - ids.len() % 4;
            for (&id, &m) in ids.iter().zip(matched).skip(rest) {
                if let Some(count) = lanes.get_mut(id.index()) {
                    *count += usize::from(m);
                }
            }
            (0..slots)
                .map(|id| (0..4).map(|lane| lanes[lane * slots + id]).sum())
                .collect()
        }
        each_width!(self, count(matched, slots))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same ids held at each width answer every question as a plain `u32` list does.
    #[test]
    fn ids_answer_alike_at_every_width() {
        let ids: Vec<u32> = [0u32, 3, 1, 3, 2, 0, 3, 1, 1].to_vec();
        let table = [true, false, true, false];
        let matched = [true, true, false, true, true, true, false, true, true];
        let naive_and: Vec<bool> = ids
            .iter()
            .zip(matched)
            .map(|(&id, m)| m && table[id as usize])
            .collect();
        let naive_count: Vec<usize> = (0..4)
            .map(|slot| {
                ids.iter()
                    .zip(matched)
                    .filter(|&(&id, m)| m && id == slot)
                    .count()
            })
            .collect();
        for (max, width) in [(3, "u8"), (255, "u8"), (256, "u16"), (70_000, "u32")] {
            let held = Ids::narrowest(ids.clone(), max);
            let kind = match held {
                Ids::U8(_) => "u8",
                Ids::U16(_) => "u16",
                Ids::U32(_) => "u32",
            };
            assert_eq!(kind, width, "max {max}");
            let got: Vec<u32> = (0..ids.len())
                .filter_map(|i| held.get(i).map(|id| id as u32))
                .collect();
            assert_eq!(got, ids, "{width}");
            let mut and = matched;
            held.and_into(&mut and, &table);
            assert_eq!(and.to_vec(), naive_and, "{width}");
            let mut any = [false; 9];
            held.or_into(&mut any, &table);
            let naive_or: Vec<bool> = ids.iter().map(|&id| table[id as usize]).collect();
            assert_eq!(any.to_vec(), naive_or, "{width}");
            assert_eq!(held.count(&matched, 4), naive_count, "{width}");
        }
    }
}
