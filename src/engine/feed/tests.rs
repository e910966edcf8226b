//! The feed's threads, its ordered parallel mapping and its lookups.

use super::*;

/// The demo Honda feed mapping, loaded as the gateway loads it.
fn demo_feed() -> Arc<Feed> {
    demo_feed_from(None)
}

/// [`demo_feed`], fetching from `feed_url` (else the mapping's default address).
fn demo_feed_from(feed_url: Option<&str>) -> Arc<Feed> {
    let vars = |name: &str| match (name, feed_url) {
        ("FEED_URL", Some(url)) => Some(url.to_owned()),
        _ => None,
    };
    let schemas = crate::schema::Schemas::load().expect("schemas");
    let metrics = crate::telemetry::metrics::Metrics::new();
    let ctx = crate::mapping::LoadContext {
        schemas: &schemas,
        vars: &vars,
        dealer_id: "demo_honda",
        dealer_name: "Demo Honda",
        metrics: &metrics,
        previous: None,
        cache: &crate::mapping::LoadCache::default(),
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/demo-honda");
    let mut loaded = crate::mapping::load_folder(&dir, &ctx).expect("demo-honda loads");
    loaded.feeds.pop().expect("a feed")
}

fn example_csv() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/mappings/demo-honda/examples/feed.csv"
    );
    std::fs::read(path).expect("the example feed")
}

fn answers(snapshot: &Snapshot) -> Vec<Result<Value, String>> {
    let requests = [
        (
            Skill::InventorySearch,
            serde_json::json!({ "sort": { "field": "price" } }),
        ),
        (Skill::InventoryFacets, serde_json::json!({})),
        (
            Skill::InventoryVehicle,
            serde_json::json!({ "stock": "SJM10002" }),
        ),
        (
            Skill::InventoryVehicle,
            serde_json::json!({ "stock": "SJM10003" }),
        ),
    ];
    requests
        .iter()
        .map(|(skill, request)| {
            snapshot
                .answer(*skill, request)
                .map(crate::protocol::Data::into_value)
                .map_err(|e| e.to_string())
        })
        .collect()
}

#[test]
fn a_refresh_shares_the_vehicles_that_did_not_change_and_answers_as_a_fresh_load() {
    let feed = demo_feed();
    let body = example_csv();
    let first = feed
        .build(&bytes::Bytes::from(body.clone()), Declared::default())
        .expect("builds");
    assert_eq!((first.len(), first.stats.reused), (3, 0));
    let changed = String::from_utf8(body)
        .expect("UTF-8")
        .replacen("\"$24,990\"", "\"$23,990\"", 1);
    let changed = bytes::Bytes::from(changed);
    let refreshed = feed
        .build_after(&changed, Declared::default(), Some(&first), None)
        .expect("builds");
    assert_eq!(refreshed.stats.reused, 2, "all but the repriced unit");
    let fresh = feed.build(&changed, Declared::default()).expect("builds");
    assert_eq!(answers(&refreshed), answers(&fresh));
    assert_ne!(answers(&refreshed), answers(&first), "the new price shows");
}

#[test]
fn a_feed_that_repeats_a_unit_lists_it_once_as_its_first_row_says() {
    let feed = demo_feed();
    let body = String::from_utf8(example_csv()).expect("UTF-8");
    let mut rows = body.lines();
    let header = rows.next().expect("a header");
    let civic = rows
        .clone()
        .find(|row| row.starts_with("1HGCY2F57RA000002,"))
        .expect("the example's Civic");
    // The same unit again, lower-cased VIN (VINs compare upper-cased), cheaper, another stock
    // number; then again, unchanged; then a unit the feed has not listed yet.
    let again = civic
        .replacen("1HGCY2F57RA000002", "1hgcy2f57ra000002", 1)
        .replacen("SJM10002", "SJM90002", 1)
        .replacen("\"$24,990\"", "\"$19,990\"", 1);
    let other = civic
        .replacen("1HGCY2F57RA000002", "1HGCY2F57RA000099", 1)
        .replacen("SJM10002", "SJM10099", 1);
    let mut document = vec![header.to_owned()];
    document.extend(rows.map(str::to_owned));
    document.extend([again, civic.to_owned(), other]);
    let document = bytes::Bytes::from(document.join("\r\n"));
    let built = feed.build(&document, Declared::default()).expect("builds");
    assert_eq!(built.len(), 4, "the three units, and the new one");
    let price = |request: Value| {
        built
            .answer(Skill::InventoryVehicle, &request)
            .map(|data| data.into_value()["price"].clone())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        price(serde_json::json!({ "vin": "1HGCY2F57RA000002" })),
        Ok(24990.into())
    );
    assert!(
        price(serde_json::json!({ "stock": "SJM90002" })).is_err(),
        "not listed"
    );
    assert_eq!(
        price(serde_json::json!({ "stock": "SJM10099" })),
        Ok(24990.into())
    );
    // And a refresh of it reads the same.
    let refreshed = feed
        .build_after(&document, Declared::default(), Some(&built), None)
        .expect("builds");
    assert_eq!((refreshed.len(), refreshed.stats.reused), (4, 4));
    assert_eq!(answers(&refreshed), answers(&built));
}

#[test]
fn a_document_whose_connection_breaks_off_is_refused_not_taken_for_a_shorter_one() {
    let feed = demo_feed();
    let body = example_csv();
    // The header and the first row arrive, then the connection fails or ends.
    let cut = body
        .windows(2)
        .enumerate()
        .filter(|(_, w)| *w == b"\r\n")
        .nth(1)
        .map(|(i, _)| i + 2)
        .expect("two lines");
    let build = |then_fails: bool| {
        let (chunks, reader) = tokio::sync::mpsc::channel(cut / 7 + 2);
        for piece in body[..cut].chunks(7) {
            chunks
                .try_send(Ok(bytes::Bytes::copy_from_slice(piece)))
                .expect("room");
        }
        if then_fails {
            chunks.try_send(Err(())).expect("room");
        }
        drop(chunks);
        let rows = formats::csv_stream(ChunkReader::new(reader), Declared::default())
            .map_err(|e| feed.bad_document(e))?;
        feed.build_rows(rows, None, None)
    };
    assert_eq!(build(false).expect("a one-row feed").len(), 1);
    let error = build(true).expect_err("a broken document");
    assert!(error.to_string().contains("connection failed"), "{error}");
}

#[test]
fn records_mapped_on_several_threads_are_merged_in_feed_order() {
    for threads in [1, 2, 3] {
        let mut input = (0..1000u32).collect::<Vec<_>>().into_iter();
        let next = || {
            let batch: Vec<u32> = input.by_ref().take(7).collect();
            Ok((!batch.is_empty()).then_some(batch))
        };
        // Uneven work, so that threads finish out of order.
        let work = |batch: Vec<u32>| {
            if batch[0].is_multiple_of(3) {
                let spin = (0..200_000u64).fold(0u64, |a, x| a.wrapping_add(x * x));
                std::hint::black_box(spin);
            }
            batch.into_iter().map(|x| x * 2).collect()
        };
        let mut merged = Vec::new();
        in_order(threads, next, work, |x| merged.push(x)).expect("maps");
        assert_eq!(
            merged,
            (0..1000).map(|x| x * 2).collect::<Vec<_>>(),
            "{threads} threads"
        );
    }
}

#[test]
fn an_unreadable_document_stops_the_mapping_threads_with_its_error() {
    for threads in [1, 3] {
        let mut batches = 0;
        let next = || {
            batches += 1;
            if batches > 5 {
                return Err("CSV row 40 unreadable".to_owned());
            }
            Ok(Some(vec![batches; 8]))
        };
        let mut merged = 0;
        let error = in_order(threads, next, |b: Vec<i32>| b, |_| merged += 1).unwrap_err();
        assert_eq!(error, "CSV row 40 unreadable");
        assert!(merged <= 40);
    }
}

#[tokio::test]
async fn a_panicking_build_is_an_error_and_the_feed_thread_goes_on() {
    let thread = FeedThread::default();
    let failed = thread
        .run(false, || -> u32 { panic!("a defect in a build") })
        .await;
    assert_eq!(failed, Err("the build panicked".to_owned()));
    let on = thread.run(false, || std::thread::current().name().map(str::to_owned));
    assert_eq!(on.await, Ok(Some("feed-build".to_owned())));
}

#[tokio::test]
async fn feed_thread_work_starts_before_its_result_is_awaited() {
    // A streamed build must read while the caller pumps the connection into it.
    let thread = FeedThread::default();
    let (started, seen) = std::sync::mpsc::channel();
    let pending = thread.run(false, move || started.send(()).is_ok());
    seen.recv_timeout(Duration::from_secs(10))
        .expect("the work ran before anyone awaited it");
    assert_eq!(pending.await, Ok(true));
}

/// A stale copy whose refresh failed is served without a new attempt at each search: the next
/// one waits for `refresh` (the feed's schedule tries again then), instead of every search of
/// a failing source starting another download and build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_do_not_retry_a_failed_refresh_before_its_interval() {
    let sim = aap_sim::feed::start_feed().await.expect("feed simulator");
    let feed = demo_feed_from(Some(&sim.base_url()));
    feed.refresh_now().await;
    assert!(feed.current().is_some(), "the first load");
    // The copy is past `refresh` (5m) and within `max_stale` (1h); the source now fails.
    let stale = Instant::now() - Duration::from_secs(600);
    *feed.confirmed.lock().unwrap() = Some(stale);
    sim.set_mode(aap_sim::sim::Mode::Fail, 0);
    sim.clear_received();
    let settle = |feed: &Arc<Feed>| {
        let feed = Arc::clone(feed);
        async move {
            for _ in 0..500 {
                if !feed.background.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the background refresh did not end");
        }
    };
    feed.snapshot().await.expect("the stale copy is served");
    settle(&feed).await;
    let attempted = sim.received().len();
    assert!(
        attempted > 0,
        "the first search of a stale copy refreshes it"
    );
    for _ in 0..10 {
        feed.snapshot().await.expect("the stale copy is served");
        settle(&feed).await;
    }
    assert_eq!(
        sim.received().len(),
        attempted,
        "no search retried the failed refresh within `refresh`"
    );
    // Once `refresh` has passed since the failure, a search tries again.
    *feed.failed_at.lock().unwrap() = Some(stale);
    feed.snapshot().await.expect("the stale copy is served");
    settle(&feed).await;
    assert!(sim.received().len() > attempted, "a due retry was made");
    sim.shutdown().await;
}

/// A feed's thread that has had nothing to do for [`thread::IDLE_END`] ends (the allocator
/// hands back what it freed only then), and the next job starts another; while jobs keep
/// coming, it is the same thread.
#[tokio::test]
async fn an_idle_feed_thread_ends_and_the_next_job_starts_another() {
    let thread = FeedThread::default();
    let id = || std::thread::current().id();
    let first = thread.run(false, id).await.expect("a job");
    let next = thread.run(false, id).await.expect("a job");
    assert_eq!(first, next, "a busy feed keeps its thread");
    tokio::time::sleep(thread::IDLE_END + Duration::from_millis(700)).await;
    let later = thread
        .run(false, id)
        .await
        .expect("a job after the idle time");
    assert_ne!(
        first, later,
        "the idle thread ended; the job ran on a new one"
    );
}

/// A job sent while the thread decides to end is run, never lost: sent just before, at and just
/// after the idle time runs out.
#[tokio::test]
async fn a_job_sent_as_the_feed_thread_ends_is_run() {
    let thread = FeedThread::default();
    for offset_ms in [-15_i64, -3, 0, 2, 10] {
        thread.run(false, || ()).await.expect("a job");
        let wait = thread::IDLE_END.as_millis() as i64 + offset_ms;
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        let ran = tokio::time::timeout(Duration::from_secs(10), thread.run(false, || 7)).await;
        assert_eq!(
            ran,
            Ok(Ok(7)),
            "the job sent {offset_ms} ms off the idle time"
        );
    }
}

#[test]
fn a_lookup_finds_exact_keys_and_the_last_vehicle_of_a_repeated_one() {
    let mut lookup = Lookup::default();
    for (key, vehicle) in [("B2", 0), ("A1", 1), ("B2", 2), ("", 3), ("A10", 4)] {
        lookup.insert(key, vehicle);
    }
    lookup.seal();
    assert_eq!(lookup.get("A1"), Some(1));
    assert_eq!(lookup.get("B2"), Some(2));
    assert_eq!(lookup.get("A10"), Some(4));
    assert_eq!(lookup.get(""), Some(3));
    assert_eq!(lookup.get("A"), None);
    assert_eq!(lookup.get("b2"), None);
    assert_eq!(lookup.get("C"), None);
    assert_eq!(Lookup::default().get("A1"), None);
}

/// A refresh builds its copy only once the copy before last, which a search may still read, is
/// on its way to be freed, so that the feed's thread frees it first: a dealer group's whole
/// inventory is never held three times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_waits_until_the_copy_before_last_is_freed() {
    let sim = aap_sim::feed::start_feed().await.expect("feed simulator");
    let feed = demo_feed_from(Some(&sim.base_url()));
    // The simulator serves the same bytes each time, which a refresh would keep: each refresh
    // here forgets what the copy was made from, as if the export had changed.
    let forget = |feed: &Feed| *feed.validators.lock().unwrap() = Validators::default();
    feed.refresh_now().await;
    let first = feed.current().expect("the first load");
    let first_freed = Arc::downgrade(&first);
    forget(&feed);
    feed.refresh_now().await;
    let second = feed.current().expect("a refreshed copy");
    assert!(
        !Arc::ptr_eq(&first, &second),
        "the refresh replaced the copy"
    );

    // A search still reads the first copy: the next refresh waits for it.
    forget(&feed);
    let third = tokio::spawn({
        let feed = Arc::clone(&feed);
        async move { feed.refresh_now().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!third.is_finished(), "the next refresh went ahead");
    let current = feed.current().expect("a copy");
    assert!(Arc::ptr_eq(&current, &second), "a third copy was built");

    // The search ends: the first copy is freed, then the third is built.
    drop(first);
    third.await.expect("the refresh");
    assert!(
        first_freed.upgrade().is_none(),
        "the first copy was not freed first"
    );
    let current = feed.current().expect("a copy");
    assert!(!Arc::ptr_eq(&current, &second), "the third copy is served");
    sim.shutdown().await;
}
