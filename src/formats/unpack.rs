//! Compressed exports: a feed document that arrives as a gzip file or a zip archive (a bucket
//! serving `inventory.json.gz` as `application/gzip`, with no `Content-Encoding`), recognised by
//! its first bytes and unpacked as it is read, within a size cap and a ratio cap.
//!
//! Sits in `formats/` beside the charsets: the feed runtime hands it the document as it arrives
//! and reads the unpacked bytes from it; it uses nothing of the crate. `Content-Encoding: gzip`
//! stays the HTTP client's business (decoded before the body gets here): this is for a *file*
//! that is compressed, which no header announces reliably — the magic bytes decide.
//!
//! Memory: a gzip file is unpacked as a stream (a streamed CSV feed never holds the document,
//! packed or not). A zip archive needs its central directory, at the end: the *packed* archive
//! is held (bounded by the transport's own size limit), its member is unpacked as a stream.
//!
//! Bombs: the unpacked bytes are counted as they are read. Past `max_bytes`, or past `max_ratio`
//! unpacked bytes per packed byte once [`RATIO_FLOOR`] bytes are out, reading fails with an
//! error naming the file, the cap and where it tripped; the feed then keeps its previous copy.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

/// The first bytes of a gzip file (RFC 1952).
const GZIP_MAGIC: &[u8] = b"\x1f\x8b";
/// The first bytes of a zip archive: a local file header, or the end of an empty archive.
const ZIP_MAGIC: [&[u8]; 2] = [b"PK\x03\x04", b"PK\x05\x06"];
/// Enough of the start to tell the packings apart.
const HEAD: usize = 4;

/// Below this many unpacked bytes a document is never refused for its ratio: a small file of
/// repeated values legitimately packs hundreds of times.
pub const RATIO_FLOOR: u64 = 1 << 20;

/// The default of [`Unpack::max_ratio`]: CSV, JSON and XML exports pack 5 to 20 times; a
/// decompression bomb, a thousand times and more.
pub const DEFAULT_MAX_RATIO: u64 = 100;

/// How a compressed document is unpacked (a feed mapping's `unpack:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpack {
    /// Zip archives: the member to read (its path in the archive); `None`: the archive's only
    /// file.
    pub member: Option<String>,
    /// Most bytes the document may unpack to.
    pub max_bytes: u64,
    /// Most unpacked bytes per packed byte (checked past [`RATIO_FLOOR`]).
    pub max_ratio: u64,
}

/// What a document's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    Plain,
    Gzip,
    Zip,
}

impl Packing {
    /// The packing of a document starting with `head` (a plain document may be shorter than
    /// the magic bytes).
    pub fn sniff(head: &[u8]) -> Packing {
        if head.starts_with(GZIP_MAGIC) {
            Packing::Gzip
        } else if ZIP_MAGIC.iter().any(|magic| head.starts_with(magic)) {
            Packing::Zip
        } else {
            Packing::Plain
        }
    }
}

/// Whether a `Content-Type` names a zip archive (a body that says so and is not one is an
/// error, not a document to parse as text).
fn says_zip(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return false;
    };
    let essence = content_type.split(';').next().unwrap_or("").trim();
    ["application/zip", "application/x-zip-compressed"]
        .iter()
        .any(|zip| essence.eq_ignore_ascii_case(zip))
}

/// Calls `read` with the document `source` yields, unpacked if its first bytes say it is
/// packed, and returns what `read` returns. An unpacking failure met while `read` reads (a
/// cap, a corrupt stream) reaches `read` as an I/O error whose message says so; one met before
/// (an unreadable archive, no such member) is this function's error. `content_type`: the
/// reply's, if any.
pub fn unpacked<R, T>(
    mut source: R,
    content_type: Option<&str>,
    unpack: &Unpack,
    read: impl FnOnce(&mut dyn Read) -> T,
) -> Result<T, String>
where
    R: Read,
{
    let mut head = Vec::with_capacity(HEAD);
    (&mut source)
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .map_err(|e| format!("body unreadable ({e})"))?;
    let packing = Packing::sniff(&head);
    let mut whole = io::Cursor::new(head).chain(source);
    match packing {
        Packing::Plain if says_zip(content_type) => Err(
            "the Content-Type says zip but the body is not a zip archive (it does not start \
             with `PK`)"
                .to_owned(),
        ),
        Packing::Plain => Ok(read(&mut whole)),
        Packing::Gzip => {
            let packed = Rc::new(Cell::new(0));
            let counted = Counted {
                inner: whole,
                count: Rc::clone(&packed),
            };
            let mut guarded = Guarded {
                inner: flate2::read::MultiGzDecoder::new(counted),
                packed: Packed::Counted(packed),
                unpacked: 0,
                unpack,
                what: "the gzip file".to_owned(),
            };
            Ok(read(&mut guarded))
        }
        Packing::Zip => {
            let mut archive = Vec::new();
            whole
                .read_to_end(&mut archive)
                .map_err(|e| format!("body unreadable ({e})"))?;
            unzipped(archive, unpack, read)
        }
    }
}

/// The whole document `body` unpacked (`None`: it is plain, read it as it is).
pub fn unpacked_whole(
    body: &[u8],
    content_type: Option<&str>,
    unpack: &Unpack,
) -> Result<Option<Vec<u8>>, String> {
    if Packing::sniff(body) == Packing::Plain && !says_zip(content_type) {
        return Ok(None);
    }
    let read = |document: &mut dyn Read| {
        let mut out = Vec::new();
        document.read_to_end(&mut out).map(|_| out)
    };
    unpacked(body, content_type, unpack, read)?
        .map(Some)
        .map_err(|e| e.to_string())
}

/// [`unpacked`] for a zip archive of which a second file is read too, before the document:
/// `side` (a file joined to the units, `join.member` of a feed mapping) through `read_side`,
/// then the document through `read`, given what `read_side` returned. Each file is held to
/// `unpack`'s caps on its own. A document that is not a zip archive is an error naming what it
/// is.
pub fn unpacked_with_member<R, S, T>(
    mut source: R,
    unpack: &Unpack,
    side: &str,
    read_side: impl FnOnce(&mut dyn Read) -> S,
    read: impl FnOnce(S, &mut dyn Read) -> T,
) -> Result<T, String>
where
    R: Read,
{
    let mut archive = Vec::new();
    source
        .read_to_end(&mut archive)
        .map_err(|e| format!("body unreadable ({e})"))?;
    let what = match Packing::sniff(&archive) {
        Packing::Zip => None,
        Packing::Gzip => Some("a gzip file"),
        Packing::Plain => Some("not packed"),
    };
    if let Some(what) = what {
        return Err(format!(
            "`join.member` names a file of a zip archive, but the document is {what}"
        ));
    }
    let (mut archive, files, size) = opened(archive)?;
    if !files.iter().any(|f| f == side) {
        return Err(format!(
            "the zip archive has no member `{side}` (`join.member`); it holds {}",
            listed(&files)
        ));
    }
    let side = member(&mut archive, side, size, unpack, read_side)?;
    let document = choose(unpack, &files)?;
    member(&mut archive, &document, size, unpack, |document| {
        read(side, document)
    })
}

type Archive = zip::ZipArchive<io::Cursor<Vec<u8>>>;

/// The archive, its files (not folders) and its packed size.
fn opened(archive: Vec<u8>) -> Result<(Archive, Vec<String>, u64), String> {
    let size = archive.len() as u64;
    let archive = zip::ZipArchive::new(io::Cursor::new(archive))
        .map_err(|e| format!("the zip archive is unreadable ({e})"))?;
    let files: Vec<String> = archive
        .file_names()
        .filter_map(Result::ok)
        .filter(|name| !name.ends_with('/'))
        .map(|name| name.into_owned())
        .collect();
    Ok((archive, files, size))
}

/// Reads the member of a zip archive the mapping names (or its only file) through `read`.
fn unzipped<T>(
    archive: Vec<u8>,
    unpack: &Unpack,
    read: impl FnOnce(&mut dyn Read) -> T,
) -> Result<T, String> {
    let (mut archive, files, size) = opened(archive)?;
    let name = choose(unpack, &files)?;
    member(&mut archive, &name, size, unpack, read)
}

/// The member `unpack` names, or the archive's only file.
fn choose(unpack: &Unpack, files: &[String]) -> Result<String, String> {
    Ok(match (&unpack.member, files) {
        (Some(member), _) if files.iter().any(|f| f == member) => member.clone(),
        (Some(member), _) => {
            return Err(format!(
                "the zip archive has no member `{member}` (`unpack.member`); it holds {}",
                listed(files)
            ));
        }
        (None, [only]) => only.clone(),
        (None, []) => return Err("the zip archive holds no file".to_owned()),
        (None, _) => {
            return Err(format!(
                "the zip archive holds {} files ({}); name the one to read in `unpack.member`",
                files.len(),
                listed(files)
            ));
        }
    })
}

/// Reads the archive's file `name` through `read`, held to `unpack`'s caps.
fn member<T>(
    archive: &mut Archive,
    name: &str,
    size: u64,
    unpack: &Unpack,
    read: impl FnOnce(&mut dyn Read) -> T,
) -> Result<T, String> {
    let what = format!("zip member `{name}`");
    let member = archive
        .by_name(name)
        .map_err(|e| format!("{what} cannot be read ({e})"))?;
    // The member cannot read more packed bytes than the archive holds, whatever its header
    // claims.
    let packed = member.compressed_size().min(size);
    let mut guarded = Guarded {
        inner: member,
        packed: Packed::Known(packed),
        unpacked: 0,
        unpack,
        what,
    };
    Ok(read(&mut guarded))
}

/// Up to five member names, for an error.
fn listed(files: &[String]) -> String {
    let mut out: Vec<String> = files.iter().take(5).map(|f| format!("`{f}`")).collect();
    if files.len() > 5 {
        out.push(format!("and {} more", files.len() - 5));
    }
    if out.is_empty() {
        return "no file".to_owned();
    }
    out.join(", ")
}

/// A reader that counts the bytes read through it (the packed side of a gzip stream).
struct Counted<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// How many packed bytes the unpacked ones came from so far.
enum Packed {
    /// A stream: counted as the decoder reads it.
    Counted(Rc<Cell<u64>>),
    /// A zip member: its packed size.
    Known(u64),
}

/// An unpacking reader held to [`Unpack`]'s caps.
struct Guarded<'u, R> {
    inner: R,
    packed: Packed,
    unpacked: u64,
    unpack: &'u Unpack,
    /// The file, for errors.
    what: String,
}

impl<R: Read> Read for Guarded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| {
            io::Error::new(e.kind(), format!("{} does not unpack ({e})", self.what))
        })?;
        self.unpacked += n as u64;
        let what = &self.what;
        if self.unpacked > self.unpack.max_bytes {
            return Err(io::Error::other(format!(
                "{what} unpacks to more than {} bytes (`unpack.max_bytes`)",
                self.unpack.max_bytes
            )));
        }
        let packed = match &self.packed {
            Packed::Counted(count) => count.get(),
            Packed::Known(size) => *size,
        };
        if self.unpacked > RATIO_FLOOR
            && self.unpacked > packed.saturating_mul(self.unpack.max_ratio)
        {
            return Err(io::Error::other(format!(
                "{what} unpacks to more than {} times its packed size ({} bytes from {packed}; \
                 `unpack.max_ratio`): refused as a decompression bomb",
                self.unpack.max_ratio, self.unpacked
            )));
        }
        Ok(n)
    }
}
