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
#[derive(Debug, Clone, Default)]
pub(super) struct Interned {
    /// The distinct texts; a text's id is its index.
    texts: StrColumn,
    /// Per listing: the id of its text.
    ids: Box<[u32]>,
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
    pub(super) fn ids(&self) -> &[u32] {
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
        Interned {
            texts,
            ids: ids.into_boxed_slice(),
        }
    }
}
