//! CSV dialects end to end (issue 39, part 1b): a French marine dealer's export, zipped with a
//! second file beside it, `;`-separated, decimal commas, Windows-1252, header names with spaces
//! and `#` — served by a feed host of the test's own on 127.0.0.1:0 to the real gateway
//! in-process; and `check` locating a bad `csv:` setting.

mod common;
mod feed_support;

use bytes::Bytes;
use feed_support::{Export, FeedHost, feed_folder, start_feeds, write_config, zip};
use serde_json::{Value, json};

const FEED_YAML: &str = r#"upstream: feed
request: { method: GET, path: /export/stock.zip }
format: csv
charset: windows-1252
unpack: { member: Bateaux.csv }
csv: { delimiter: ";", decimal: comma }
tables:
  etat_in: { Neuf: new, Occasion: used }
  statut_in: { Disponible: available, Vendu: sold }
item: |
  {
    vehicle_id: (.["N° coque"] | nonempty), stock: (.["Stock #"] | nonempty),
    dealer_id: $dealer.id, vehicle_type: "other",
    year: (.["Année"] | int), make: (.Marque | nonempty), model: (.["Modèle"] | nonempty),
    condition: (.["État"] | lookup($tables.etat_in)),
    status: (.Statut | lookup($tables.statut_in)),
    price: (.["Prix TTC"] | rtrimstr(" €") | dollars),
    other_attributes: { engine_hours: (.["Heures moteur"] | num), length_m: (.Longueur | num) }
  } | compact
"#;

fn units() -> Vec<u8> {
    let text = "N° coque;Stock #;Année;Marque;Modèle;État;Statut;Prix TTC;Heures moteur;Longueur\r\n\
        FR-BEN12345E819;B 01;2019;Bénéteau;Antares 7;Occasion;Disponible;\"42.900,00 €\";1.250;7,43\r\n\
        FR-JEA55555F920;B 02;2020;Jeanneau;Merry Fisher 6.95;Neuf;Disponible;\"61.499,50 €\";12;6,95\r\n\
        FR-ZOD00001A021;B 03;2021;Zodiac;Medline 5.8;Occasion;Vendu;\"18.000,00 €\";310,5;5,80\r\n";
    let (bytes, _, lossy) = encoding_rs::WINDOWS_1252.encode(text);
    assert!(!lossy);
    bytes.into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zipped_semicolon_export_with_decimal_commas_is_served_without_a_bridge() {
    let host = FeedHost::start().await;
    let photos = b"Stock #;Photo\nB 01;https://cdn.example.com/b01.jpg\n";
    host.serve(
        "/export/stock.zip",
        Export {
            body: Bytes::from(zip(&[("Photos.csv", photos), ("Bateaux.csv", &units())])),
            content_type: "application/zip",
            ..Export::default()
        },
    );
    let gw = start_feeds(&host.url, &[("marine", FEED_YAML)]).await;

    let call = json!({ "type": "inventory.search.request", "sort": { "field": "price", "order": "desc" } });
    let reply = gw.send("/dealers/marine/a2a", call).await;
    assert!(reply.body.get("error").is_none(), "{}", reply.text);
    let page: &Value = &reply.payload()["data"];
    assert_eq!(page["total"], 2, "{page}");
    let jeanneau = &page["vehicles"][0];
    assert_eq!(jeanneau["make"], "Jeanneau", "{page}");
    assert_eq!(jeanneau["model"], "Merry Fisher 6.95", "{page}");
    assert_eq!(
        jeanneau["price"], 61_500,
        "61.499,50 € rounds to 61500: {page}"
    );
    assert_eq!(jeanneau["other_attributes"]["length_m"], 6.95, "{page}");
    let beneteau = &page["vehicles"][1];
    assert_eq!(beneteau["make"], "Bénéteau");
    assert_eq!(beneteau["stock"], "B 01");
    assert_eq!(beneteau["vehicle_id"], "FR-BEN12345E819");
    assert_eq!(beneteau["price"], 42_900);
    assert_eq!(beneteau["other_attributes"]["engine_hours"], 1250, "{page}");
    assert_eq!(beneteau["other_attributes"]["length_m"], 7.43, "{page}");
}

#[test]
fn check_locates_a_bad_csv_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("marine");
    let yaml = FEED_YAML.replace(
        "csv: { delimiter: \";\", decimal: comma }",
        "csv:\n  delimiter: \";;\"\n  decimal: virgule",
    );
    feed_folder(&folder, &yaml);
    let config = write_config(dir.path(), &[("marine", &folder)]);
    let (code, all) = common::run_cli(&["check"], &config, &[("FEED_URL", "http://127.0.0.1:9")]);
    assert_eq!(code, 1, "{all}");
    let feed_yaml = folder.join("feed.yaml");
    common::assert_located(&all, &feed_yaml, 7, "`;;` is not one ASCII character");
    common::assert_located(
        &all,
        &feed_yaml,
        8,
        "unknown decimal `virgule`; expected point or comma",
    );
}
