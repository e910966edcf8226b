//! A streamed feed document, read on the mapping thread as the connection delivers it.

/// Pieces of a streamed feed document waiting for the mapping thread. The connection delivers
/// far faster than rows are mapped, so this queue is always full; each piece holds the
/// connection's read buffer it was cut from (up to ~400 KB), allocated on an async worker and
/// freed on the feed's thread. With 16 waiting, a refresh of a 50,000-row feed peaked ~16 MB
/// higher (1.54–1.66× steady against 1.40–1.44×, `bench/feed.sh`) and loaded no faster.
pub(super) const CHUNKS_IN_FLIGHT: usize = 2;

/// A streamed document as `std::io::Read`, for the mapping thread: pieces come from the task
/// reading the connection; `Err` means the connection failed (the task reports why).
pub(super) struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, ()>>,
    current: bytes::Bytes,
    /// Every piece received, hashed here on the mapping thread rather than on the async
    /// worker that pumps the connection (a conditional refresh compares it).
    digest: sha2::Sha256,
}

impl ChunkReader {
    pub(super) fn new(
        chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, ()>>,
    ) -> ChunkReader {
        ChunkReader {
            chunks,
            current: bytes::Bytes::new(),
            digest: sha2::Sha256::default(),
        }
    }

    /// SHA-256 of the document read so far (all of it, once `read` has returned 0).
    pub(super) fn digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        self.digest.clone().finalize().into()
    }
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => {
                    sha2::Digest::update(&mut self.digest, &chunk);
                    self.current = chunk;
                }
                Some(Err(())) => {
                    return Err(std::io::Error::other("the feed's connection failed"));
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
