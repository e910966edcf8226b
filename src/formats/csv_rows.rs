//! CSV bodies: read whole into row objects, or row by row as they arrive (feeds).

use std::borrow::Cow;
use std::collections::HashMap;

use encoding_rs::UTF_8;
use serde_json::{Map, Value};

use super::Declared;
use super::charsets::{Charset, UTF8_BOM, choose, to_utf8};

/// A CSV document in UTF-8 (transcoded once if its charset is another), ready to be read row by
/// row ([`CsvText::rows`]) without ever being held as one value: a feed of 50,000 rows as one
/// `Value` takes about ten times its size. The rows are the objects [`Format::decode_with`]
/// gives for `Format::Csv`, with the same charset rules and the same errors.
#[derive(Debug)]
pub struct CsvText<'b> {
    text: Cow<'b, [u8]>,
    charset: Charset,
}

impl<'b> CsvText<'b> {
    /// Chooses the charset as the module doc says and makes the body UTF-8.
    pub fn new(body: &'b [u8], declared: Declared<'_>) -> Result<CsvText<'b>, String> {
        let (text, charset) = to_utf8(body, false, declared)?;
        Ok(CsvText { text, charset })
    }

    /// Reads the header row; the data rows follow through [`CsvRows::next_into`].
    pub fn rows(&self) -> Result<CsvRows<&[u8]>, String> {
        self.rows_with(&CsvDialect::default())
    }

    /// [`CsvText::rows`] in another dialect.
    pub fn rows_with(&self, dialect: &CsvDialect) -> Result<CsvRows<&[u8]>, String> {
        CsvRows::new(&*self.text, self.charset, dialect)
    }
}

/// How a CSV export is written, where it differs from RFC 4180 (exports from outside the US, RV
/// and marine systems: `;` between fields, decimal commas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvDialect {
    /// The field separator (one byte).
    pub delimiter: u8,
    /// The quote character (one byte).
    pub quote: u8,
    /// Numbers are written with a decimal comma (`12.499,50`): a field that holds one is
    /// rewritten with a decimal point and no grouping (`12499.50`) before it is mapped.
    pub decimal_comma: bool,
}

impl Default for CsvDialect {
    fn default() -> Self {
        CsvDialect {
            delimiter: b',',
            quote: b'"',
            decimal_comma: false,
        }
    }
}

/// The CSV document `source` yields, read as it arrives: the same rows and errors as
/// [`CsvText`] gives for the whole body, without holding it. The charset is chosen as the module
/// doc says from `declared` and the first bytes (a byte order mark); a document in another
/// charset than UTF-8 is read whole and transcoded first, as [`CsvText`] does.
pub fn csv_stream<'r, R>(
    source: R,
    declared: Declared<'_>,
) -> Result<CsvRows<Box<dyn std::io::Read + 'r>>, String>
where
    R: std::io::Read + 'r,
{
    csv_stream_with(source, declared, &CsvDialect::default())
}

/// [`csv_stream`] in another dialect.
pub fn csv_stream_with<'r, R>(
    source: R,
    declared: Declared<'_>,
    dialect: &CsvDialect,
) -> Result<CsvRows<Box<dyn std::io::Read + 'r>>, String>
where
    R: std::io::Read + 'r,
{
    use std::io::{BufRead, BufReader, Read};
    let mut source = BufReader::with_capacity(64 * 1024, source);
    // Enough of the start to see a byte order mark (the longest is UTF-8's three bytes).
    let mut head = Vec::new();
    while head.len() < UTF8_BOM.len() {
        let available = source
            .fill_buf()
            .map_err(|e| format!("body unreadable ({e})"))?;
        if available.is_empty() {
            break;
        }
        let take = available.len().min(UTF8_BOM.len() - head.len());
        head.extend_from_slice(&available[..take]);
        source.consume(take);
    }
    let charset = choose(&head, false, declared)?;
    if charset.encoding != UTF_8 {
        let mut body = head;
        source
            .read_to_end(&mut body)
            .map_err(|e| format!("body unreadable ({e})"))?;
        let text = CsvText::new(&body, declared)?;
        let owned = text.text.into_owned();
        return CsvRows::new(Box::new(std::io::Cursor::new(owned)), text.charset, dialect);
    }
    let start = head.strip_prefix(UTF8_BOM).unwrap_or(&head).to_vec();
    CsvRows::new(
        Box::new(std::io::Cursor::new(start).chain(source)),
        charset,
        dialect,
    )
}

impl<R: std::io::Read> CsvRows<R> {
    fn new(source: R, charset: Charset, dialect: &CsvDialect) -> Result<CsvRows<R>, String> {
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(dialect.delimiter)
            .quote(dialect.quote)
            .flexible(true)
            // Fields are trimmed as they are read (`CsvRow::entries`): `Trim::All` would
            // rebuild every record to trim it.
            .trim(csv::Trim::Headers)
            .from_reader(source);
        let headers = reader
            .headers()
            .map_err(|e| unreadable(charset, "CSV header row".to_owned(), e))?;
        let mut columns: Vec<(String, Vec<usize>)> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, name) in headers.iter().enumerate() {
            match seen.get(name).and_then(|&at| columns.get_mut(at)) {
                Some((_, at)) => at.push(i),
                None => {
                    seen.insert(name, columns.len());
                    columns.push((name.to_owned(), vec![i]));
                }
            }
        }
        drop(seen);
        Ok(CsvRows {
            reader,
            columns: CsvColumns(columns),
            charset,
            read: 0,
            decimal_comma: dialect.decimal_comma,
            scratch: csv::StringRecord::new(),
        })
    }
}

/// The rows of a CSV document, one at a time.
pub struct CsvRows<R> {
    reader: csv::Reader<R>,
    columns: CsvColumns,
    charset: Charset,
    /// Data rows read so far.
    read: usize,
    /// [`CsvDialect::decimal_comma`].
    decimal_comma: bool,
    /// The record as read, before its numbers are rewritten (decimal commas only).
    scratch: csv::StringRecord,
}

impl<R> std::fmt::Debug for CsvRows<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvRows")
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl<R: std::io::Read> CsvRows<R> {
    /// The header: what turns a record into its row object ([`CsvColumns::row`]).
    pub fn columns(&self) -> &CsvColumns {
        &self.columns
    }

    /// Reads the next record into `record` (a buffer reused across rows); `false` at the end.
    pub fn next_into(&mut self, record: &mut csv::StringRecord) -> Result<bool, String> {
        // Records are counted as the error names them (a quoted field may span lines): the
        // header row is 1.
        let number = self.read + 2;
        let target = if self.decimal_comma {
            &mut self.scratch
        } else {
            &mut *record
        };
        let more = self
            .reader
            .read_record(target)
            .map_err(|e| unreadable(self.charset, format!("CSV row {number}"), e))?;
        self.read += usize::from(more);
        if more && self.decimal_comma {
            record.clear();
            let mut number = String::new();
            for field in &self.scratch {
                match decimal_comma_number(field, &mut number) {
                    true => record.push_field(&number),
                    false => record.push_field(field),
                }
            }
        }
        Ok(more)
    }
}

/// Rewrites `field` into `out` when it is a number written with a decimal comma — digits, `.`
/// (or an apostrophe or no-break space) between groups of three, an optional `,` and decimals,
/// an optional sign, and any text before or after that holds no digit (`€ 12.499,50`,
/// `1.250 h`) — as `12499.50`, text kept. A date (`07.12.2026`), a plain word or anything else
/// is left as it is (`false`). Plain spaces are not group separators: phone numbers have them.
fn decimal_comma_number(field: &str, out: &mut String) -> bool {
    let trimmed = field.trim_matches(|c: char| c.is_ascii_whitespace());
    let Some(start) = trimmed.find(|c: char| c.is_ascii_digit() || c == '-' || c == '+') else {
        return false;
    };
    let end = trimmed
        .rfind(|c: char| c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    if end <= start {
        return false;
    }
    let (prefix, core, suffix) = (&trimmed[..start], &trimmed[start..end], &trimmed[end..]);
    let (sign, digits) = match core.strip_prefix(['-', '+']) {
        Some(rest) => (&core[..1], rest),
        None => ("", core),
    };
    let (whole, decimals) = match digits.split_once(',') {
        Some((whole, decimals)) => (whole, Some(decimals)),
        None => (digits, None),
    };
    let is_group_separator = |c: char| matches!(c, '.' | '\'' | '\u{a0}' | '\u{202f}');
    let groups: Vec<&str> = whole.split(is_group_separator).collect();
    let grouped = groups.len() > 1;
    let whole_ok = !groups[0].is_empty()
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()))
        && (!grouped || (groups[0].len() <= 3 && groups[1..].iter().all(|g| g.len() == 3)));
    let decimals_ok =
        decimals.is_none_or(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    if !whole_ok || !decimals_ok || (!grouped && decimals.is_none()) {
        // A plain integer needs no rewriting.
        return false;
    }
    out.clear();
    out.push_str(prefix);
    out.push_str(sign);
    groups.iter().for_each(|g| out.push_str(g));
    if let Some(decimals) = decimals {
        out.push('.');
        out.push_str(decimals);
    }
    out.push_str(suffix);
    true
}

fn unreadable(charset: Charset, what: String, e: csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Utf8 { .. } => format!(
            "{what} is not valid UTF-8 ({charset}); if the export is Latin-1 or from Excel, set \
             `charset: windows-1252` in the mapping"
        ),
        _ => format!("{what} unreadable ({e})"),
    }
}

/// A CSV header: the object keys and the columns each one reads.
#[derive(Debug, Clone)]
pub struct CsvColumns(Vec<(String, Vec<usize>)>);

impl CsvColumns {
    /// The object keys, in order (each name once).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// How many fields the header row has (a name written twice counts twice).
    pub fn width(&self) -> usize {
        self.0.iter().map(|(_, at)| at.len()).sum()
    }

    /// `record` as the object it stands for.
    pub fn row<'a>(&'a self, record: &'a csv::StringRecord) -> CsvRow<'a> {
        CsvRow {
            columns: self,
            record,
        }
    }
}

/// One CSV row as the object it stands for: header name → the row's (trimmed) field.
#[derive(Debug)]
pub struct CsvRow<'a> {
    columns: &'a CsvColumns,
    record: &'a csv::StringRecord,
}

impl CsvRow<'_> {
    /// The object's entries in order. A header name that repeats keeps the place of its first
    /// column and the field of its last column the row reaches (as inserting the row's fields
    /// one by one into an object would); a short row lacks the names of its missing columns.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        let names = &self.columns.0;
        self.entries()
            .map(|(at, field)| (names[at].0.as_str(), field))
    }

    /// [`CsvRow::fields`] with each name given by its place in [`CsvColumns::names`]; the
    /// fields are slices of [`CsvRow::text`].
    pub fn entries(&self) -> impl Iterator<Item = (usize, &str)> {
        self.columns
            .0
            .iter()
            .enumerate()
            .filter_map(|(n, (_, at))| {
                let last = at.iter().rev().find_map(|&i| self.record.get(i))?;
                // As csv's `Trim::All`: ASCII white space.
                Some((n, last.trim_matches(|c: char| c.is_ascii_whitespace())))
            })
    }

    /// The row's fields, one after the other.
    pub fn text(&self) -> &str {
        self.record.as_slice()
    }
}

pub(super) fn decode_csv(body: &[u8], charset: Charset) -> Result<Value, String> {
    let text = CsvText {
        text: Cow::Borrowed(body),
        charset,
    };
    let mut rows = text.rows()?;
    let mut record = csv::StringRecord::new();
    let mut out = Vec::new();
    while rows.next_into(&mut record)? {
        let object: Map<String, Value> = rows
            .columns()
            .row(&record)
            .fields()
            .map(|(name, field)| (name.to_owned(), Value::String(field.to_owned())))
            .collect();
        out.push(Value::Object(object));
    }
    Ok(Value::Array(out))
}
