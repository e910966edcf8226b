//! Mapping a feed's records on several threads, their results merged back in feed order.

use super::Snapshot;

/// Records a mapping thread takes at a time.
pub(super) const BATCH: usize = 256;

/// Threads to map on: every core for a first load (no buyer is served yet), one for a refresh
/// (the other cores serve the buyers searching the previous copy meanwhile).
pub(super) fn threads(previous: Option<&Snapshot>) -> usize {
    match previous {
        Some(_) => 1,
        None => std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)),
    }
}

/// Most threads a first load maps on.
pub(super) const MAX_THREADS: usize = 4;

/// Maps the batches `next` yields with `work` on `threads` threads (1: on this one) and hands
/// every result to `merge`, in input order. An error from `next` stops everything and is
/// returned. At most two batches per thread are in flight, so memory stays bounded whatever
/// the document's size.
pub(super) fn in_order<T: Send, O: Send>(
    threads: usize,
    mut next: impl FnMut() -> Result<Option<Vec<T>>, String>,
    work: impl Fn(Vec<T>) -> Vec<O> + Sync,
    mut merge: impl FnMut(O),
) -> Result<(), String> {
    if threads <= 1 {
        while let Some(batch) = next()? {
            work(batch).into_iter().for_each(&mut merge);
        }
        return Ok(());
    }
    let stopped = || "a feed mapping thread stopped".to_owned();
    std::thread::scope(|scope| {
        let work = &work;
        let mut lanes = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (to_worker, inbox) = std::sync::mpsc::sync_channel::<Vec<T>>(2);
            let (outbox, from_worker) = std::sync::mpsc::sync_channel::<Vec<O>>(2);
            std::thread::Builder::new()
                .name("feed-mapping".to_owned())
                .spawn_scoped(scope, move || {
                    for batch in inbox {
                        if outbox.send(work(batch)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| format!("cannot start a feed mapping thread: {e}"))?;
            lanes.push((to_worker, from_worker));
        }
        let (mut sent, mut merged, mut done) = (0usize, 0usize, false);
        loop {
            while !done && sent - merged < 2 * threads {
                match next()? {
                    Some(batch) => {
                        lanes[sent % threads].0.send(batch).map_err(|_| stopped())?;
                        sent += 1;
                    }
                    None => done = true,
                }
            }
            if merged == sent {
                return Ok(());
            }
            let results = lanes[merged % threads].1.recv().map_err(|_| stopped())?;
            merged += 1;
            results.into_iter().for_each(&mut merge);
        }
    })
}
