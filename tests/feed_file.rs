//! Feed sources beyond HTTP (issue 39, part 3): a `kind: file` upstream reads the export from a
//! directory another container writes (a sync sidecar, an SFTP drop mounted into the pod). The
//! real gateway in-process, the files written by the test:
//!
//! - a file renamed into place is loaded; an unchanged file (same size and modification time)
//!   is not read again (`not_modified`); a new file renamed over it replaces the copy;
//! - a file written in place, row by row, is never served half-written: while it grows, each
//!   refresh fails (`failed`) and the previous copy is served whole; once it is still, it loads;
//! - `check` locates a `kind: file` upstream whose `base_url` is no local directory.

mod common;
mod feed_support;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use common::Gateway;
use feed_support::{feed, feed_folder_with, gzip, prices, refreshes, write_config};

const FEED_YAML: &str = r#"upstream: drop
request: { method: GET, path: /outgoing/Bestand%20Boote.csv.gz }
format: csv
csv: { delimiter: "|" }
refresh: 1h
max_stale: 2h
item: |
  {
    vehicle_id: (.["Rumpf-Nr."] | nonempty), stock: (.["Lager #"] | nonempty),
    dealer_id: $dealer.id, vehicle_type: "other", year: (.Baujahr | int),
    make: (.Hersteller | nonempty), model: (.Modell | nonempty), condition: "used",
    status: "available", price: (.Preis | dollars),
    other_attributes: { engine_hours: (.Motorstunden | num) }
  } | compact
"#;

/// A marina's export: `|`-separated, prices as "12,499", hours instead of miles.
fn boats(prices: &[&str]) -> Vec<u8> {
    let mut csv = "Rumpf-Nr.|Lager #|Baujahr|Hersteller|Modell|Preis|Motorstunden\n".to_owned();
    for (i, price) in prices.iter().enumerate() {
        csv.push_str(&format!(
            "DE-BAV{i:05}A919|L {i}|2019|Bavaria|S{}|\"{price}\"|{}\n",
            30 + i,
            120 + i * 7
        ));
    }
    csv.into_bytes()
}

/// Writes `bytes` as the writer's contract says: under another name, then renamed into place.
fn publish(target: &Path, bytes: &[u8]) {
    let temporary = target.with_extension("part");
    std::fs::write(&temporary, bytes).expect("write");
    std::fs::rename(&temporary, target).expect("rename");
}

/// The dealer.
const MARINA: &str = "marina";

/// The drop: a `kind: file` upstream at `${DROP_URL}`, a local directory.
const DROP_UPSTREAM: &str = "drop:\n  kind: file\n  base_url: ${DROP_URL}\n  timeouts: { request: 10s }\n  \
    max_response_bytes: 1048576\n";

struct Setup {
    gw: Gateway,
    export: std::path::PathBuf,
}

async fn start(first: &[u8]) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let drop_dir = dir.path().join("sftp drop");
    std::fs::create_dir_all(drop_dir.join("outgoing")).expect("mkdir");
    let export = drop_dir.join("outgoing/Bestand Boote.csv.gz");
    publish(&export, first);
    let folder = dir.path().join(MARINA);
    feed_folder_with(&folder, FEED_YAML, DROP_UPSTREAM);
    let config = write_config(dir.path(), &[(MARINA, &folder)]);
    let url = url::Url::from_directory_path(&drop_dir).expect("file URL");
    let vars = HashMap::from([("DROP_URL".to_owned(), url.to_string())]);
    let gw = common::start_file_with_vars(&config, Some(dir), vars).await;
    Setup { gw, export }
}

fn outcome(counts: &HashMap<String, u64>, name: &str) -> u64 {
    counts.get(name).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_renamed_into_place_is_loaded_and_an_unchanged_one_is_not_read_again() {
    let setup = start(&gzip(&boats(&["48,900", "12,499", "31,000"]))).await;
    assert_eq!(prices(&setup.gw, MARINA).await, [12_499, 31_000, 48_900]);
    let before = refreshes(&setup.gw, MARINA).await;

    // Nothing changed: same size, same modification time.
    feed(&setup.gw, MARINA).refresh_now().await;
    let after = refreshes(&setup.gw, MARINA).await;
    assert_eq!(
        outcome(&after, "not_modified"),
        outcome(&before, "not_modified") + 1,
        "{after:?}"
    );
    assert_eq!(outcome(&after, "changed"), outcome(&before, "changed"));

    // A new export renamed over the old one.
    publish(
        &setup.export,
        &gzip(&boats(&["48,900", "12,499", "31,000", "7,250"])),
    );
    feed(&setup.gw, MARINA).refresh_now().await;
    let changed = refreshes(&setup.gw, MARINA).await;
    assert_eq!(
        outcome(&changed, "changed"),
        outcome(&after, "changed") + 1,
        "{changed:?}"
    );
    assert_eq!(
        prices(&setup.gw, MARINA).await,
        [7_250, 12_499, 31_000, 48_900]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_written_in_place_is_never_served_half_written() {
    let old = ["48,900", "12,499", "31,000"];
    let setup = start(&boats(&old)).await;
    let old_prices = prices(&setup.gw, MARINA).await;
    assert_eq!(old_prices, [12_499, 31_000, 48_900]);

    // A writer that truncates the file and writes it again row by row, in place.
    let new: Vec<String> = (0..16).map(|i| format!("{},{:03}", 20 + i, i)).collect();
    let new_refs: Vec<&str> = new.iter().map(String::as_str).collect();
    let whole = boats(&new_refs);
    let path = setup.export.clone();
    let rows: Vec<Vec<u8>> = whole
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    // The refreshes below must all meet the file being written: on a busy host the writer's
    // thread may start late, and a refresh of the old, still file is rightly `not_modified`.
    let (created, writing) = tokio::sync::oneshot::channel();
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::File::create(&path).expect("open in place");
        let _ = created.send(());
        for row in rows {
            file.write_all(&row).expect("write");
            file.flush().expect("flush");
            // (The writer's own thread, not the runtime's.)
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    writing.await.expect("the writer truncated the file");
    let failed_before = outcome(&refreshes(&setup.gw, MARINA).await, "failed");
    let mut refreshed = 0;
    while !writer.is_finished() {
        feed(&setup.gw, MARINA).refresh_now().await;
        refreshed += 1;
        assert_eq!(
            prices(&setup.gw, MARINA).await,
            old_prices,
            "a half-written file was served"
        );
    }
    writer.join().expect("writer");
    assert!(refreshed >= 1);
    let failed = outcome(&refreshes(&setup.gw, MARINA).await, "failed");
    assert!(
        failed >= failed_before + refreshed - 1,
        "refreshes of a growing file fail: {failed} of {refreshed}"
    );

    // Still now: the next refresh reads it whole.
    feed(&setup.gw, MARINA).refresh_now().await;
    let mut expected: Vec<i64> = (0..16).map(|i| (20 + i) * 1000 + i).collect();
    expected.sort_unstable();
    assert_eq!(prices(&setup.gw, MARINA).await, expected);
}

#[test]
fn check_locates_a_file_upstream_that_is_no_local_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join(MARINA);
    feed_folder_with(
        &folder,
        FEED_YAML,
        "drop:\n  kind: file\n  base_url: https://exports.example.com/outgoing\n",
    );
    let config = write_config(dir.path(), &[(MARINA, &folder)]);
    let (code, all) = common::run_cli(&["check"], &config, &[]);
    assert_eq!(code, 1, "{all}");
    common::assert_located(
        &all,
        &folder.join("upstreams.yaml"),
        3,
        "base_url of `kind: file` is a local directory",
    );
}
