//! The upstreams of `bench/feed.sh`: a dealer group's whole inventory as one CSV feed in the demo
//! Honda feed's format, and the demo REST DMS for the proxy-mode comparison.
//!
//! ```sh
//! cargo run --release --example feed_upstream -- --rows 50000 --write inventory.csv
//! cargo run --release --example feed_upstream -- --rows 50000 --endpoints-file up.json
//! ```
//!
//! The rows are the demo's own units (the Honda store's 212 and the Toyota group's 234, written by
//! `aap_sim::feed::row`, so every quirk of the demo feed is there: BOM, CRLF, quoted money, trailing
//! spaces, sold units, blank prices), cycled until `--rows`, each with its own VIN (valid check
//! digit), stock number and photo URLs, and prices, mileage and modification times spread across
//! cycles so that sorting and ranges see distinct values. The same arguments give the same bytes.
//!
//! Serving (`--endpoints-file`): `GET /feeds/inventory.csv` answers the document without
//! authentication, `text/csv; charset=utf-8`. With `--changed-every N` (default 20) the feed
//! alternates between two versions that differ in every N-th row (price and modification time),
//! like a feed that changed a little between two refreshes; `0` always serves the same document.
//! The demo DMS simulator runs next to it. Once both listen, the endpoints file is written:
//! `{"feed": URL, "dms": URL, "rows": N, "bytes": N}`. Runs until interrupted.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aap_sim::dms;
use aap_sim::feed::{FEED_PATH, csv_document};
use aap_sim::inventory::{self, Vehicle, check_digit};
use aap_sim::sim::{self, SimApp, SimRequest, SimResponse};
use bytes::Bytes;
use clap::Parser;
use http::StatusCode;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    /// Rows of the feed (units, sold ones included).
    #[arg(long, default_value_t = 50_000)]
    rows: usize,
    /// Write the document here and exit.
    #[arg(long)]
    write: Option<PathBuf>,
    /// Serve the feed and the DMS; write their addresses here once they listen.
    #[arg(long)]
    endpoints_file: Option<PathBuf>,
    /// Every N-th row differs between the two versions served in turn (0: one version).
    #[arg(long, default_value_t = 20)]
    changed_every: usize,
}

/// `rows` units cycling through the demo inventories; `version` moves the price and the
/// modification time of every `changed_every`-th row.
fn group_inventory(rows: usize, version: usize, changed_every: usize) -> Vec<Vehicle> {
    let base: Vec<Vehicle> = inventory::honda_powersports()
        .into_iter()
        .chain(inventory::toyota_group())
        .collect();
    (0..rows)
        .map(|i| {
            let mut v = base[i % base.len()].clone();
            let cycle = u32::try_from(i / base.len()).unwrap_or(u32::MAX);
            let old_vin = std::mem::take(&mut v.vin);
            // Serial (positions 12–17) = the row number; position 9 recomputed.
            let mut vin = format!("{}{:06}", &old_vin[..11], i % 1_000_000);
            if let Some(check) = check_digit(&vin) {
                vin.replace_range(8..9, &check.to_string());
            }
            for photo in &mut v.photos {
                *photo = photo.replace(&old_vin, &vin);
            }
            v.vin = vin;
            let prefix: String = v
                .stock_number
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            v.stock_number = format!("{prefix}{:06}", i + 1);
            let changed = changed_every > 0 && version % 2 == 1 && i % changed_every == 0;
            let bump = (cycle % 9) * 100 + if changed { 500 } else { 0 };
            v.internet_price = v.internet_price.map(|p| p + bump);
            if v.odometer > 100 {
                v.odometer += cycle * 37 % 5_000;
            }
            let minutes = i64::from(cycle % 600) + if changed { 1 } else { 0 };
            v.last_updated -= time::Duration::minutes(minutes);
            v
        })
        .collect()
}

struct FeedFile {
    versions: Vec<Bytes>,
    served: AtomicUsize,
}

impl SimApp for FeedFile {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        if req.path != FEED_PATH {
            return sim::text(StatusCode::NOT_FOUND, "Not Found");
        }
        let n = self.served.fetch_add(1, Ordering::Relaxed);
        let body = self.versions[n % self.versions.len()].clone();
        sim::bytes_response(StatusCode::OK, "text/csv; charset=utf-8", body)
    }

    fn fixtures(&self) -> Value {
        json!({ "versions": self.versions.len(), "served": self.served.load(Ordering::Relaxed) })
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        sim::text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
    }

    fn garbage(&self, req: &SimRequest) -> SimResponse {
        self.handle(req)
    }

    fn huge(&self, req: &SimRequest) -> SimResponse {
        self.handle(req)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let document = |version| csv_document(&group_inventory(args.rows, version, args.changed_every));
    if let Some(path) = &args.write {
        std::fs::write(path, document(0))?;
        return Ok(());
    }
    let Some(endpoints_file) = &args.endpoints_file else {
        return Err("give --write FILE or --endpoints-file FILE".into());
    };
    let versions = if args.changed_every > 0 { 2 } else { 1 };
    let versions: Vec<Bytes> = (0..versions).map(|v| Bytes::from(document(v))).collect();
    let bytes = versions[0].len();
    let feed = sim::start(Arc::new(FeedFile {
        versions,
        served: AtomicUsize::new(0),
    }))
    .await?;
    let dms = dms::start_dms().await?;
    let endpoints = json!({
        "feed": feed.base_url(),
        "dms": dms.base_url(),
        "rows": args.rows,
        "bytes": bytes,
    });
    let tmp = endpoints_file.with_extension("tmp");
    std::fs::write(&tmp, endpoints.to_string())?;
    std::fs::rename(&tmp, endpoints_file)?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
