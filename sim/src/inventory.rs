//! The simulators' vehicle stock: a deterministic generator of legacy dealer inventory.
//!
//! Two inventories, each the same on every run (a seeded xorshift, no clock, no randomness
//! crate), as of [`AS_OF`]:
//!
//! - [`toyota_group`]: 234 units at two rooftops, "Demo Toyota San Francisco" and "Demo Toyota
//!   Oakland": new, used and certified Camry, Corolla, RAV4, Tacoma, Highlander, Prius, Prius
//!   Prime (plug-in, with electric range), Tundra, 4Runner, Sienna and bZ4X (EV), plus used Honda,
//!   Ford, Chevrolet, Nissan and Subaru trade-ins. Served by the REST DMS (`dms.rs`).
//! - [`honda_powersports`]: 212 units at "Demo Honda San Jose": Civic, Accord, CR-V, HR-V, Pilot,
//!   Odyssey and Prologue (EV) cars, and Gold Wing, Africa Twin, Rebel 500, CBR600RR, Grom and
//!   Navi motorcycles. Served as a CSV feed (`feed.rs`).
//!
//! Roughly 8% are Sold, 5% In Transit (new units only), 3% Pending Sale, the rest In Stock; a
//! few are unpriced ("Call for price"). VINs are valid (ISO 3779 alphabet, real check digit,
//! model-year code in position 10) and unique; stock numbers are unique.
//!
//! ## The legacy record (the DMS's JSON, [`Vehicle::legacy_json`])
//!
//! Exactly these keys, in this order, every value a string except `Photos`:
//!
//! | Key | Example | Notes |
//! |---|---|---|
//! | `VIN` | `"4T1DAACK5TU512345"` | 17 chars, `^[A-HJ-NPR-Z0-9]{17}$` |
//! | `StockNumber` | `"SFN10023"` | rooftop code (`SF`, `OK`, `SJ`) + `N`/`U`/`C`/`M` + digits |
//! | `ModelYear` | `"2022"` | |
//! | `Make`, `Model`, `Trim` | `"Toyota"`, `"RAV4"`, `"XLE Premium"` | motorcycles' base trim is `"Base"` |
//! | `VehicleType` | `"Car"` \| `"Motorcycle"` | |
//! | `Type` | `"New"` \| `"Pre-Owned"` \| `"Certified Pre-Owned"` | |
//! | `Status` | `"In Stock"` \| `"In Transit"` \| `"Pending Sale"` \| `"Sold"` | |
//! | `InternetPrice` | `"$24,990"` \| `"Call for price"` | |
//! | `MSRP` | `"$27,500"` \| `""` | new units only |
//! | `ListPrice` | `"$25,990"` | always set (new: the MSRP; used: above the internet price) |
//! | `Odometer` | `"12,345 mi"` | new: `"0 mi"` or `"5 mi"` |
//! | `BodyStyle` | `"SUV"` | Sedan, Hatchback, SUV, Pickup Truck, Minivan, Coupe, Wagon; motorcycles: Touring, Adventure, Cruiser, Sport, Mini, Scooter |
//! | `Transmission`, `Drivetrain`, `Engine` | `"8-Speed Automatic"`, `"AWD"`, `"2.5L I4"` | motorcycles: `"Chain Drive"`, `"1833cc Flat-Six"` … |
//! | `DisplacementCC` | `"1833"` \| `""` | motorcycles only |
//! | `FuelType` | `"Gasoline"` \| `"Hybrid"` \| `"Plug-In Hybrid"` \| `"Electric"` | |
//! | `ElectricRange` | `"252"` \| `""` | miles; EVs and plug-ins |
//! | `ExtColor`, `IntColor` | `"Midnight Black Metallic"`, `"Black"` | `IntColor` may be `""` |
//! | `CityMPG`, `HwyMPG` | `"27"` \| `""` | blank for EVs and motorcycles |
//! | `Features` | `"Backup Camera\|Bluetooth\|Heated Seats"` | pipe-separated, may be `""` |
//! | `Photos` | `["https://cdn.demo-toyota.example/photos/4T1…/01.jpg", …]` | array of https URLs, may be empty |
//! | `Location` | `"Demo Toyota San Francisco"` | rooftop name |
//! | `DateInStock` | `"03/15/2026"` | MM/DD/YYYY; `""` for In Transit |
//! | `LastUpdated` | `"2026-11-30 14:05:00"` | local time, no zone |
//! | `DealerCost`, `BookValue` | `"$21,500"`, `"$23,000"` | confidential: never for buyers |

use serde_json::{Value, json};
use time::macros::date;
use time::{Date, Duration, PrimitiveDateTime, Time};

/// The inventories are a snapshot as of this day (their newest `LastUpdated` is on it).
pub const AS_OF: Date = date!(2026 - 12 - 01);

/// The Toyota group's rooftops.
pub const TOYOTA_SF: &str = "Demo Toyota San Francisco";
pub const TOYOTA_OAKLAND: &str = "Demo Toyota Oakland";
/// The Honda dealer's rooftop.
pub const HONDA_SAN_JOSE: &str = "Demo Honda San Jose";

/// Cars or motorcycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VehicleType {
    Car,
    Motorcycle,
}

impl VehicleType {
    pub fn legacy(self) -> &'static str {
        match self {
            VehicleType::Car => "Car",
            VehicleType::Motorcycle => "Motorcycle",
        }
    }
}

/// The DMS's `Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    New,
    PreOwned,
    Certified,
}

impl Condition {
    pub fn legacy(self) -> &'static str {
        match self {
            Condition::New => "New",
            Condition::PreOwned => "Pre-Owned",
            Condition::Certified => "Certified Pre-Owned",
        }
    }
}

/// The DMS's `Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InStock,
    InTransit,
    PendingSale,
    Sold,
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::InStock,
        Status::InTransit,
        Status::PendingSale,
        Status::Sold,
    ];

    pub fn legacy(self) -> &'static str {
        match self {
            Status::InStock => "In Stock",
            Status::InTransit => "In Transit",
            Status::PendingSale => "Pending Sale",
            Status::Sold => "Sold",
        }
    }
}

/// One unit, typed; the legacy strings are rendered from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vehicle {
    pub vin: String,
    pub stock_number: String,
    pub year: u16,
    pub make: &'static str,
    pub model: &'static str,
    pub trim: &'static str,
    pub vehicle_type: VehicleType,
    pub condition: Condition,
    pub status: Status,
    /// `None` = "Call for price".
    pub internet_price: Option<u32>,
    /// New units only.
    pub msrp: Option<u32>,
    pub list_price: u32,
    pub odometer: u32,
    pub body_style: &'static str,
    pub transmission: &'static str,
    pub drivetrain: &'static str,
    pub engine: &'static str,
    pub displacement_cc: Option<u32>,
    pub fuel_type: &'static str,
    pub electric_range: Option<u32>,
    pub ext_color: &'static str,
    pub int_color: &'static str,
    pub city_mpg: Option<u32>,
    pub hwy_mpg: Option<u32>,
    pub features: Vec<&'static str>,
    pub photos: Vec<String>,
    pub location: &'static str,
    /// `None` while in transit.
    pub date_in_stock: Option<Date>,
    pub last_updated: PrimitiveDateTime,
    pub dealer_cost: u32,
    pub book_value: u32,
}

impl Vehicle {
    /// The DMS's JSON record (see the module doc for every key).
    pub fn legacy_json(&self) -> Value {
        json!({
            "VIN": self.vin,
            "StockNumber": self.stock_number,
            "ModelYear": self.year.to_string(),
            "Make": self.make,
            "Model": self.model,
            "Trim": self.trim,
            "VehicleType": self.vehicle_type.legacy(),
            "Type": self.condition.legacy(),
            "Status": self.status.legacy(),
            "InternetPrice": self.internet_price.map_or_else(|| "Call for price".to_owned(), money),
            "MSRP": self.msrp.map(money).unwrap_or_default(),
            "ListPrice": money(self.list_price),
            "Odometer": format!("{} mi", thousands(self.odometer)),
            "BodyStyle": self.body_style,
            "Transmission": self.transmission,
            "Drivetrain": self.drivetrain,
            "Engine": self.engine,
            "DisplacementCC": opt(self.displacement_cc),
            "FuelType": self.fuel_type,
            "ElectricRange": opt(self.electric_range),
            "ExtColor": self.ext_color,
            "IntColor": self.int_color,
            "CityMPG": opt(self.city_mpg),
            "HwyMPG": opt(self.hwy_mpg),
            "Features": self.features.join("|"),
            "Photos": self.photos,
            "Location": self.location,
            "DateInStock": self.date_in_stock.map(us_date).unwrap_or_default(),
            "LastUpdated": iso_local(self.last_updated),
            "DealerCost": money(self.dealer_cost),
            "BookValue": money(self.book_value),
        })
    }
}

/// `24990` → `"$24,990"`.
pub fn money(n: u32) -> String {
    format!("${}", thousands(n))
}

/// `12345` → `"12,345"`.
pub fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn opt(n: Option<u32>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

/// `03/15/2026`.
pub fn us_date(d: Date) -> String {
    format!("{:02}/{:02}/{}", u8::from(d.month()), d.day(), d.year())
}

/// `2026-11-30 14:05:00`.
pub fn iso_local(t: PrimitiveDateTime) -> String {
    format!(
        "{}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

// ---------------------------------------------------------------------------------------------
// VINs

/// Position 10's model-year code (1980 = A … 2000 = Y, 2001 = 1 … 2009 = 9, 2010 = A again).
pub fn year_code(year: u16) -> char {
    const CODES: &[u8; 30] = b"ABCDEFGHJKLMNPRSTVWXY123456789";
    CODES[usize::from(year.saturating_sub(1980)) % 30] as char
}

fn transliterate(c: char) -> Option<u32> {
    Some(match c {
        '0'..='9' => c.to_digit(10)?,
        'A' | 'J' => 1,
        'B' | 'K' | 'S' => 2,
        'C' | 'L' | 'T' => 3,
        'D' | 'M' | 'U' => 4,
        'E' | 'N' | 'V' => 5,
        'F' | 'W' => 6,
        'G' | 'P' | 'X' => 7,
        'H' | 'Y' => 8,
        'R' | 'Z' => 9,
        _ => return None,
    })
}

/// The check digit (position 9) of a 17-character VIN, ignoring what position 9 holds now.
pub fn check_digit(vin: &str) -> Option<char> {
    const WEIGHTS: [u32; 17] = [8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2];
    if vin.chars().count() != 17 {
        return None;
    }
    let mut sum = 0;
    for (c, w) in vin.chars().zip(WEIGHTS) {
        sum += transliterate(c)? * w;
    }
    Some(match sum % 11 {
        10 => 'X',
        n => char::from_digit(n, 10)?,
    })
}

/// True when `vin` is 17 characters of the VIN alphabet with a correct check digit.
pub fn is_valid_vin(vin: &str) -> bool {
    vin.len() == 17
        && vin
            .chars()
            .all(|c| c.is_ascii_digit() || (c.is_ascii_uppercase() && !"IOQ".contains(c)))
        && check_digit(vin).is_some_and(|d| vin.chars().nth(8) == Some(d))
}

/// Assembles a valid VIN from its parts (`wmi` 3, `vds` 5, `plant` 1, `serial` < 1,000,000).
fn make_vin(wmi: &str, vds: &str, year: u16, plant: char, serial: u32) -> String {
    let draft = format!("{wmi}{vds}0{}{plant}{serial:06}", year_code(year));
    let check = check_digit(&draft).unwrap_or('0');
    let mut vin = String::with_capacity(17);
    vin.push_str(&draft[..8]);
    vin.push(check);
    vin.push_str(&draft[9..]);
    vin
}

/// A valid VIN that is in neither inventory (for 404 tests).
pub fn unknown_vin(inventory: &[Vehicle]) -> String {
    let mut serial = 999_999;
    loop {
        let vin = make_vin("4T1", "BZ1HK", 2025, 'U', serial);
        if !inventory.iter().any(|v| v.vin == vin) {
            return vin;
        }
        serial -= 1;
    }
}

// ---------------------------------------------------------------------------------------------
// The catalog

#[derive(Debug, Clone, Copy)]
struct Powertrain {
    engine: &'static str,
    transmission: &'static str,
    drivetrain: &'static str,
    fuel: &'static str,
    cc: Option<u32>,
    range: Option<u32>,
    city: Option<u32>,
    hwy: Option<u32>,
}

const fn gas(
    engine: &'static str,
    transmission: &'static str,
    drivetrain: &'static str,
    fuel: &'static str,
    city: u32,
    hwy: u32,
) -> Powertrain {
    Powertrain {
        engine,
        transmission,
        drivetrain,
        fuel,
        cc: None,
        range: None,
        city: Some(city),
        hwy: Some(hwy),
    }
}

const fn plug_in(drivetrain: &'static str, city: u32, hwy: u32, range: u32) -> Powertrain {
    Powertrain {
        engine: "2.0L I4 Plug-In Hybrid",
        transmission: "ECVT",
        drivetrain,
        fuel: "Plug-In Hybrid",
        cc: None,
        range: Some(range),
        city: Some(city),
        hwy: Some(hwy),
    }
}

const fn ev(drivetrain: &'static str, range: u32) -> Powertrain {
    Powertrain {
        engine: "Electric Motor",
        transmission: "1-Speed Automatic",
        drivetrain,
        fuel: "Electric",
        cc: None,
        range: Some(range),
        city: None,
        hwy: None,
    }
}

const fn moto(
    engine: &'static str,
    transmission: &'static str,
    drivetrain: &'static str,
    cc: u32,
) -> Powertrain {
    Powertrain {
        engine,
        transmission,
        drivetrain,
        fuel: "Gasoline",
        cc: Some(cc),
        range: None,
        city: None,
        hwy: None,
    }
}

/// A trim: name, MSRP new (current model year), index into the model's powertrains.
type Trim = (&'static str, u32, usize);

#[derive(Debug)]
struct ModelSpec {
    make: &'static str,
    model: &'static str,
    wmi: &'static str,
    vds: &'static str,
    plant: char,
    vehicle_type: VehicleType,
    body: &'static str,
    first_year: u16,
    trims: &'static [Trim],
    powertrains: &'static [Powertrain],
    extras: &'static [&'static str],
}

const NONE: &[&str] = &[];
const THREE_ROWS: &[&str] = &["Third Row Seating", "Rear Seat Reminder"];
const TRUCK: &[&str] = &["Tow Package", "Bed Liner"];
const EV_EXTRAS: &[&str] = &["DC Fast Charging", "Heat Pump"];
const TOURING: &[&str] = &["Cruise Control", "Heated Grips", "Apple CarPlay", "Airbag"];
const ADVENTURE: &[&str] = &["Cruise Control", "Heated Grips", "Quick Shifter"];
const SPORT: &[&str] = &["Quick Shifter"];

const CAMRY: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Camry",
    wmi: "4T1",
    vds: "DAACK",
    plant: 'U',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2015,
    trims: &[
        ("LE", 28_700, 0),
        ("SE", 31_000, 0),
        ("XSE", 34_900, 0),
        ("XLE AWD", 35_500, 1),
    ],
    powertrains: &[
        gas("2.5L I4 Hybrid", "ECVT", "FWD", "Hybrid", 51, 49),
        gas("2.5L I4 Hybrid", "ECVT", "AWD", "Hybrid", 44, 43),
    ],
    extras: NONE,
};

const COROLLA: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Corolla",
    wmi: "5YF",
    vds: "B4MDE",
    plant: 'P',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2014,
    trims: &[
        ("LE", 22_500, 0),
        ("SE", 25_300, 0),
        ("XSE", 28_400, 0),
        ("Hybrid LE", 24_200, 1),
    ],
    powertrains: &[
        gas("2.0L I4", "CVT", "FWD", "Gasoline", 32, 41),
        gas("1.8L I4 Hybrid", "ECVT", "FWD", "Hybrid", 53, 46),
    ],
    extras: NONE,
};

const RAV4: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "RAV4",
    wmi: "2T3",
    vds: "W1RFV",
    plant: 'C',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2015,
    trims: &[
        ("LE", 29_800, 0),
        ("XLE", 31_400, 0),
        ("XLE Premium", 34_300, 1),
        ("Limited", 38_000, 1),
        ("Hybrid XSE", 38_900, 2),
    ],
    powertrains: &[
        gas("2.5L I4", "8-Speed Automatic", "FWD", "Gasoline", 27, 35),
        gas("2.5L I4", "8-Speed Automatic", "AWD", "Gasoline", 27, 34),
        gas("2.5L I4 Hybrid", "ECVT", "AWD", "Hybrid", 41, 38),
    ],
    extras: NONE,
};

const TACOMA: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Tacoma",
    wmi: "3TM",
    vds: "LB5JN",
    plant: 'M',
    vehicle_type: VehicleType::Car,
    body: "Pickup Truck",
    first_year: 2014,
    trims: &[
        ("SR", 32_000, 0),
        ("SR5", 35_500, 0),
        ("TRD Sport", 39_800, 1),
        ("TRD Off-Road", 42_000, 1),
        ("Limited", 52_000, 2),
    ],
    powertrains: &[
        gas(
            "2.4L Turbo I4",
            "8-Speed Automatic",
            "RWD",
            "Gasoline",
            21,
            26,
        ),
        gas(
            "2.4L Turbo I4",
            "8-Speed Automatic",
            "4WD",
            "Gasoline",
            20,
            24,
        ),
        gas(
            "2.4L Turbo I4 Hybrid",
            "8-Speed Automatic",
            "4WD",
            "Hybrid",
            21,
            24,
        ),
    ],
    extras: TRUCK,
};

const HIGHLANDER: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Highlander",
    wmi: "5TD",
    vds: "KDRAH",
    plant: 'S',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2015,
    trims: &[
        ("LE", 40_500, 0),
        ("XLE", 44_000, 0),
        ("Limited", 48_500, 1),
        ("Platinum", 52_000, 1),
        ("Hybrid XLE", 46_500, 2),
    ],
    powertrains: &[
        gas(
            "2.4L Turbo I4",
            "8-Speed Automatic",
            "FWD",
            "Gasoline",
            22,
            29,
        ),
        gas(
            "2.4L Turbo I4",
            "8-Speed Automatic",
            "AWD",
            "Gasoline",
            21,
            28,
        ),
        gas("2.5L I4 Hybrid", "ECVT", "AWD", "Hybrid", 35, 35),
    ],
    extras: THREE_ROWS,
};

const PRIUS: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Prius",
    wmi: "JTD",
    vds: "ACAAU",
    plant: 'J',
    vehicle_type: VehicleType::Car,
    body: "Hatchback",
    first_year: 2016,
    trims: &[
        ("LE", 28_350, 0),
        ("XLE", 31_000, 0),
        ("Limited", 34_700, 0),
    ],
    powertrains: &[gas("2.0L I4 Hybrid", "ECVT", "FWD", "Hybrid", 57, 56)],
    extras: NONE,
};

const PRIUS_PRIME: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Prius Prime",
    wmi: "JTD",
    vds: "ACAEU",
    plant: 'J',
    vehicle_type: VehicleType::Car,
    body: "Hatchback",
    first_year: 2023,
    trims: &[
        ("SE", 33_500, 0),
        ("XSE", 36_500, 1),
        ("XSE Premium", 40_000, 1),
    ],
    powertrains: &[plug_in("FWD", 52, 52, 44), plug_in("FWD", 48, 48, 39)],
    extras: EV_EXTRAS,
};

const TUNDRA: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Tundra",
    wmi: "5TF",
    vds: "LA5DB",
    plant: 'X',
    vehicle_type: VehicleType::Car,
    body: "Pickup Truck",
    first_year: 2015,
    trims: &[
        ("SR5", 48_000, 0),
        ("Limited", 56_000, 0),
        ("Platinum", 64_000, 1),
        ("TRD Pro", 72_000, 1),
    ],
    powertrains: &[
        gas(
            "3.4L Twin-Turbo V6",
            "10-Speed Automatic",
            "4WD",
            "Gasoline",
            18,
            22,
        ),
        gas(
            "3.4L Twin-Turbo V6 Hybrid",
            "10-Speed Automatic",
            "4WD",
            "Hybrid",
            19,
            22,
        ),
    ],
    extras: TRUCK,
};

const FOUR_RUNNER: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "4Runner",
    wmi: "JTE",
    vds: "VA5AR",
    plant: '5',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2014,
    trims: &[
        ("SR5", 41_000, 0),
        ("TRD Off-Road", 47_000, 0),
        ("Limited", 53_000, 0),
        ("TRD Pro", 66_000, 0),
    ],
    powertrains: &[gas(
        "2.4L Turbo I4",
        "8-Speed Automatic",
        "4WD",
        "Gasoline",
        19,
        22,
    )],
    extras: NONE,
};

const SIENNA: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "Sienna",
    wmi: "5TD",
    vds: "XSKFC",
    plant: 'S',
    vehicle_type: VehicleType::Car,
    body: "Minivan",
    first_year: 2021,
    trims: &[
        ("LE", 39_900, 0),
        ("XLE", 45_000, 0),
        ("Limited", 52_000, 1),
        ("Platinum", 57_000, 1),
    ],
    powertrains: &[
        gas("2.5L I4 Hybrid", "ECVT", "FWD", "Hybrid", 36, 36),
        gas("2.5L I4 Hybrid", "ECVT", "AWD", "Hybrid", 35, 36),
    ],
    extras: THREE_ROWS,
};

const BZ4X: ModelSpec = ModelSpec {
    make: "Toyota",
    model: "bZ4X",
    wmi: "JTM",
    vds: "AAAAA",
    plant: 'A',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2023,
    trims: &[
        ("XLE FWD", 37_000, 0),
        ("XLE AWD", 39_500, 1),
        ("Limited", 43_500, 1),
    ],
    powertrains: &[ev("FWD", 252), ev("AWD", 228)],
    extras: EV_EXTRAS,
};

const TRADE_CIVIC: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Civic",
    wmi: "2HG",
    vds: "FC2F5",
    plant: 'H',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2012,
    trims: &[("LX", 22_000, 0), ("Sport", 24_000, 0), ("EX", 26_000, 0)],
    powertrains: &[gas("2.0L I4", "CVT", "FWD", "Gasoline", 31, 40)],
    extras: NONE,
};

const TRADE_ACCORD: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Accord",
    wmi: "1HG",
    vds: "CV1F3",
    plant: 'A',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2012,
    trims: &[("LX", 26_000, 0), ("EX-L", 31_000, 0)],
    powertrains: &[gas("1.5L Turbo I4", "CVT", "FWD", "Gasoline", 29, 37)],
    extras: NONE,
};

const TRADE_CRV: ModelSpec = ModelSpec {
    make: "Honda",
    model: "CR-V",
    wmi: "5J6",
    vds: "RW2H8",
    plant: 'L',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2012,
    trims: &[("LX", 28_000, 0), ("EX", 30_500, 1), ("EX-L", 33_000, 1)],
    powertrains: &[
        gas("1.5L Turbo I4", "CVT", "FWD", "Gasoline", 28, 34),
        gas("1.5L Turbo I4", "CVT", "AWD", "Gasoline", 27, 32),
    ],
    extras: NONE,
};

const TRADE_F150: ModelSpec = ModelSpec {
    make: "Ford",
    model: "F-150",
    wmi: "1FT",
    vds: "EW1EP",
    plant: 'F',
    vehicle_type: VehicleType::Car,
    body: "Pickup Truck",
    first_year: 2012,
    trims: &[("XL", 36_000, 0), ("XLT", 44_000, 0), ("Lariat", 55_000, 1)],
    powertrains: &[
        gas(
            "2.7L Twin-Turbo V6",
            "10-Speed Automatic",
            "4WD",
            "Gasoline",
            18,
            23,
        ),
        gas("5.0L V8", "10-Speed Automatic", "4WD", "Gasoline", 17, 23),
    ],
    extras: TRUCK,
};

const TRADE_ESCAPE: ModelSpec = ModelSpec {
    make: "Ford",
    model: "Escape",
    wmi: "1FM",
    vds: "CU0GD",
    plant: 'U',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2013,
    trims: &[("S", 27_000, 0), ("SE", 29_500, 0), ("Titanium", 34_000, 1)],
    powertrains: &[
        gas(
            "1.5L Turbo I3",
            "8-Speed Automatic",
            "FWD",
            "Gasoline",
            27,
            33,
        ),
        gas(
            "2.0L Turbo I4",
            "8-Speed Automatic",
            "AWD",
            "Gasoline",
            23,
            31,
        ),
    ],
    extras: NONE,
};

const TRADE_MUSTANG: ModelSpec = ModelSpec {
    make: "Ford",
    model: "Mustang",
    wmi: "1FA",
    vds: "6P8TH",
    plant: '5',
    vehicle_type: VehicleType::Car,
    body: "Coupe",
    first_year: 2014,
    trims: &[("EcoBoost", 31_000, 0), ("GT", 42_000, 1)],
    powertrains: &[
        gas(
            "2.3L Turbo I4",
            "10-Speed Automatic",
            "RWD",
            "Gasoline",
            21,
            30,
        ),
        gas("5.0L V8", "6-Speed Manual", "RWD", "Gasoline", 15, 24),
    ],
    extras: NONE,
};

const TRADE_SILVERADO: ModelSpec = ModelSpec {
    make: "Chevrolet",
    model: "Silverado 1500",
    wmi: "3GC",
    vds: "UYDED",
    plant: 'G',
    vehicle_type: VehicleType::Car,
    body: "Pickup Truck",
    first_year: 2013,
    trims: &[("WT", 38_000, 0), ("LT", 47_000, 1), ("RST", 52_000, 1)],
    powertrains: &[
        gas(
            "2.7L Turbo I4",
            "8-Speed Automatic",
            "RWD",
            "Gasoline",
            19,
            22,
        ),
        gas("5.3L V8", "10-Speed Automatic", "4WD", "Gasoline", 16, 21),
    ],
    extras: TRUCK,
};

const TRADE_EQUINOX: ModelSpec = ModelSpec {
    make: "Chevrolet",
    model: "Equinox",
    wmi: "3GN",
    vds: "AXKEV",
    plant: 'L',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2013,
    trims: &[("LS", 27_000, 0), ("LT", 29_500, 0), ("Premier", 33_500, 1)],
    powertrains: &[
        gas(
            "1.5L Turbo I4",
            "6-Speed Automatic",
            "FWD",
            "Gasoline",
            26,
            31,
        ),
        gas(
            "1.5L Turbo I4",
            "6-Speed Automatic",
            "AWD",
            "Gasoline",
            25,
            30,
        ),
    ],
    extras: NONE,
};

const TRADE_MALIBU: ModelSpec = ModelSpec {
    make: "Chevrolet",
    model: "Malibu",
    wmi: "1G1",
    vds: "ZD5ST",
    plant: 'F',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2012,
    trims: &[("LS", 24_000, 0), ("LT", 26_500, 0)],
    powertrains: &[gas("1.5L Turbo I4", "CVT", "FWD", "Gasoline", 28, 36)],
    extras: NONE,
};

const TRADE_ALTIMA: ModelSpec = ModelSpec {
    make: "Nissan",
    model: "Altima",
    wmi: "1N4",
    vds: "BL4BV",
    plant: 'C',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2012,
    trims: &[("S", 25_000, 0), ("SV", 27_500, 0), ("SR", 29_000, 0)],
    powertrains: &[gas("2.5L I4", "CVT", "FWD", "Gasoline", 27, 39)],
    extras: NONE,
};

const TRADE_ROGUE: ModelSpec = ModelSpec {
    make: "Nissan",
    model: "Rogue",
    wmi: "JN8",
    vds: "BT3BB",
    plant: 'W',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2013,
    trims: &[("S", 28_000, 0), ("SV", 30_500, 1), ("SL", 35_000, 1)],
    powertrains: &[
        gas("1.5L Turbo I3", "CVT", "FWD", "Gasoline", 30, 37),
        gas("1.5L Turbo I3", "CVT", "AWD", "Gasoline", 28, 35),
    ],
    extras: NONE,
};

const TRADE_OUTBACK: ModelSpec = ModelSpec {
    make: "Subaru",
    model: "Outback",
    wmi: "4S4",
    vds: "BTANC",
    plant: '3',
    vehicle_type: VehicleType::Car,
    body: "Wagon",
    first_year: 2012,
    trims: &[
        ("Base", 29_000, 0),
        ("Premium", 31_500, 0),
        ("Limited", 37_000, 0),
    ],
    powertrains: &[gas("2.5L H4", "CVT", "AWD", "Gasoline", 26, 32)],
    extras: NONE,
};

const TRADE_FORESTER: ModelSpec = ModelSpec {
    make: "Subaru",
    model: "Forester",
    wmi: "JF2",
    vds: "SKADC",
    plant: 'H',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2012,
    trims: &[
        ("Base", 28_000, 0),
        ("Premium", 30_500, 0),
        ("Sport", 33_000, 0),
    ],
    powertrains: &[gas("2.5L H4", "CVT", "AWD", "Gasoline", 26, 33)],
    extras: NONE,
};

const CIVIC: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Civic",
    wmi: "2HG",
    vds: "FE2F5",
    plant: 'H',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2016,
    trims: &[
        ("LX", 24_250, 0),
        ("Sport", 26_450, 0),
        ("Sport Hybrid", 29_450, 1),
        ("Sport Touring Hybrid", 32_850, 1),
        ("Type R", 45_890, 2),
    ],
    powertrains: &[
        gas("2.0L I4", "CVT", "FWD", "Gasoline", 32, 41),
        gas("2.0L I4 Hybrid", "ECVT", "FWD", "Hybrid", 50, 47),
        gas("2.0L Turbo I4", "6-Speed Manual", "FWD", "Gasoline", 22, 28),
    ],
    extras: NONE,
};

const ACCORD: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Accord",
    wmi: "1HG",
    vds: "CY1F3",
    plant: 'A',
    vehicle_type: VehicleType::Car,
    body: "Sedan",
    first_year: 2016,
    trims: &[
        ("LX", 28_295, 0),
        ("SE", 30_995, 0),
        ("Sport Hybrid", 33_655, 1),
        ("Touring Hybrid", 39_995, 1),
    ],
    powertrains: &[
        gas("1.5L Turbo I4", "CVT", "FWD", "Gasoline", 29, 37),
        gas("2.0L I4 Hybrid", "ECVT", "FWD", "Hybrid", 46, 41),
    ],
    extras: NONE,
};

const CRV: ModelSpec = ModelSpec {
    make: "Honda",
    model: "CR-V",
    wmi: "7FA",
    vds: "RS4H5",
    plant: 'E',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2017,
    trims: &[
        ("LX", 30_850, 0),
        ("EX", 33_850, 1),
        ("Sport Hybrid", 35_150, 2),
        ("Sport-L Hybrid", 39_450, 3),
    ],
    powertrains: &[
        gas("1.5L Turbo I4", "CVT", "FWD", "Gasoline", 28, 34),
        gas("1.5L Turbo I4", "CVT", "AWD", "Gasoline", 27, 31),
        gas("2.0L I4 Hybrid", "ECVT", "FWD", "Hybrid", 43, 36),
        gas("2.0L I4 Hybrid", "ECVT", "AWD", "Hybrid", 40, 34),
    ],
    extras: NONE,
};

const HRV: ModelSpec = ModelSpec {
    make: "Honda",
    model: "HR-V",
    wmi: "3CZ",
    vds: "RZ2H3",
    plant: 'M',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2016,
    trims: &[("LX", 25_500, 0), ("Sport", 27_500, 0), ("EX-L", 29_800, 1)],
    powertrains: &[
        gas("2.0L I4", "CVT", "FWD", "Gasoline", 26, 32),
        gas("2.0L I4", "CVT", "AWD", "Gasoline", 25, 30),
    ],
    extras: NONE,
};

const PILOT: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Pilot",
    wmi: "5FN",
    vds: "YG1H4",
    plant: 'B',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2016,
    trims: &[
        ("Sport", 40_600, 0),
        ("EX-L", 43_900, 1),
        ("TrailSport", 49_200, 1),
        ("Elite", 53_500, 1),
    ],
    powertrains: &[
        gas("3.5L V6", "10-Speed Automatic", "FWD", "Gasoline", 19, 27),
        gas("3.5L V6", "10-Speed Automatic", "AWD", "Gasoline", 19, 25),
    ],
    extras: THREE_ROWS,
};

const ODYSSEY: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Odyssey",
    wmi: "5FN",
    vds: "RL6H8",
    plant: 'B',
    vehicle_type: VehicleType::Car,
    body: "Minivan",
    first_year: 2016,
    trims: &[
        ("EX-L", 42_500, 0),
        ("Sport-L", 44_700, 0),
        ("Touring", 46_500, 0),
        ("Elite", 51_600, 0),
    ],
    powertrains: &[gas(
        "3.5L V6",
        "10-Speed Automatic",
        "FWD",
        "Gasoline",
        19,
        28,
    )],
    extras: THREE_ROWS,
};

const PROLOGUE: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Prologue",
    wmi: "3GP",
    vds: "KHURL",
    plant: 'R',
    vehicle_type: VehicleType::Car,
    body: "SUV",
    first_year: 2024,
    trims: &[
        ("EX", 47_400, 0),
        ("Touring", 51_700, 1),
        ("Elite", 57_900, 1),
    ],
    powertrains: &[ev("FWD", 296), ev("AWD", 281)],
    extras: EV_EXTRAS,
};

const GOLD_WING: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Gold Wing",
    wmi: "JH2",
    vds: "SC79A",
    plant: 'K',
    vehicle_type: VehicleType::Motorcycle,
    body: "Touring",
    first_year: 2018,
    trims: &[
        ("Base", 24_800, 0),
        ("Tour", 28_900, 0),
        ("Tour DCT Airbag", 32_500, 1),
    ],
    powertrains: &[
        moto("1833cc Flat-Six", "6-Speed Manual", "Shaft Drive", 1833),
        moto("1833cc Flat-Six", "7-Speed DCT", "Shaft Drive", 1833),
    ],
    extras: TOURING,
};

const AFRICA_TWIN: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Africa Twin",
    wmi: "JH2",
    vds: "SD10A",
    plant: 'K',
    vehicle_type: VehicleType::Motorcycle,
    body: "Adventure",
    first_year: 2016,
    trims: &[("Base", 14_999, 0), ("Adventure Sports ES DCT", 18_499, 1)],
    powertrains: &[
        moto(
            "1084cc Parallel-Twin",
            "6-Speed Manual",
            "Chain Drive",
            1084,
        ),
        moto("1084cc Parallel-Twin", "6-Speed DCT", "Chain Drive", 1084),
    ],
    extras: ADVENTURE,
};

const REBEL_500: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Rebel 500",
    wmi: "JH2",
    vds: "PC60A",
    plant: 'K',
    vehicle_type: VehicleType::Motorcycle,
    body: "Cruiser",
    first_year: 2017,
    trims: &[("Base", 6_499, 0), ("ABS", 6_799, 0), ("ABS SE", 6_999, 0)],
    powertrains: &[moto(
        "471cc Parallel-Twin",
        "6-Speed Manual",
        "Chain Drive",
        471,
    )],
    extras: NONE,
};

const CBR600RR: ModelSpec = ModelSpec {
    make: "Honda",
    model: "CBR600RR",
    wmi: "JH2",
    vds: "PC40A",
    plant: 'K',
    vehicle_type: VehicleType::Motorcycle,
    body: "Sport",
    first_year: 2015,
    trims: &[("Base", 12_199, 0), ("ABS", 12_499, 0)],
    powertrains: &[moto(
        "599cc Inline-Four",
        "6-Speed Manual",
        "Chain Drive",
        599,
    )],
    extras: SPORT,
};

const GROM: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Grom",
    wmi: "MLH",
    vds: "JC92A",
    plant: '5',
    vehicle_type: VehicleType::Motorcycle,
    body: "Mini",
    first_year: 2017,
    trims: &[("Base", 3_599, 0), ("ABS", 3_799, 0), ("SP", 3_999, 0)],
    powertrains: &[moto("124cc Single", "5-Speed Manual", "Chain Drive", 124)],
    extras: NONE,
};

const NAVI: ModelSpec = ModelSpec {
    make: "Honda",
    model: "Navi",
    wmi: "MLH",
    vds: "JF86A",
    plant: '5',
    vehicle_type: VehicleType::Motorcycle,
    body: "Scooter",
    first_year: 2022,
    trims: &[("Base", 1_899, 0)],
    powertrains: &[moto("109cc Single", "CVT", "Belt Drive", 109)],
    extras: NONE,
};

const CAR_FEATURES: &[&str] = &[
    "Backup Camera",
    "Bluetooth",
    "Apple CarPlay",
    "Android Auto",
    "Heated Seats",
    "Blind Spot Monitor",
    "Adaptive Cruise Control",
    "Lane Departure Alert",
    "Keyless Entry",
    "Push Button Start",
    "Sunroof",
    "Leather Seats",
    "Navigation System",
    "Power Liftgate",
    "Wireless Charging",
    "Premium Audio",
    "Remote Start",
];

const MOTO_FEATURES: &[&str] = &[
    "ABS",
    "LED Lighting",
    "Traction Control",
    "Riding Modes",
    "USB Charging",
];

const EXT_COLORS: &[(&str, &[&str])] = &[
    (
        "Toyota",
        &[
            "Midnight Black Metallic",
            "Super White",
            "Wind Chill Pearl",
            "Celestial Silver Metallic",
            "Magnetic Gray Metallic",
            "Blueprint",
            "Supersonic Red",
            "Underground",
        ],
    ),
    (
        "Honda",
        &[
            "Crystal Black Pearl",
            "Platinum White Pearl",
            "Lunar Silver Metallic",
            "Meteorite Gray Metallic",
            "Radiant Red Metallic",
            "Still Night Pearl",
            "Sonic Gray Pearl",
        ],
    ),
    (
        "Ford",
        &["Agate Black", "Oxford White", "Iconic Silver", "Rapid Red"],
    ),
    (
        "Chevrolet",
        &[
            "Black",
            "Summit White",
            "Silver Ice Metallic",
            "Radiant Red",
        ],
    ),
    (
        "Nissan",
        &[
            "Super Black",
            "Glacier White",
            "Gun Metallic",
            "Deep Blue Pearl",
        ],
    ),
    (
        "Subaru",
        &[
            "Crystal Black Silica",
            "Crystal White Pearl",
            "Autumn Green Metallic",
        ],
    ),
];

const MOTO_COLORS: &[&str] = &[
    "Grand Prix Red",
    "Pearl Black",
    "Matte Black Metallic",
    "Pearl Glare White",
    "Bordeaux Red Metallic",
];

const INT_COLORS: &[&str] = &[
    "Black",
    "Gray",
    "Ash",
    "Black SofTex",
    "Macadamia",
    "Boulder",
];

// ---------------------------------------------------------------------------------------------
// The generator

/// xorshift64*: small, fast, and the same sequence everywhere.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi.saturating_sub(lo)) + 1;
        lo + u32::try_from(self.next() % span).unwrap_or(0)
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u32) -> bool {
        self.range(0, 999) < per_mille
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        let last = u32::try_from(items.len().saturating_sub(1)).unwrap_or(0);
        items[self.range(0, last) as usize]
    }
}

/// How many units of one model to make: new, pre-owned, certified.
struct Plan {
    spec: &'static ModelSpec,
    new: u32,
    used: u32,
    certified: u32,
}

const fn plan(spec: &'static ModelSpec, new: u32, used: u32, certified: u32) -> Plan {
    Plan {
        spec,
        new,
        used,
        certified,
    }
}

/// A dealer: its rooftops (name, stock prefix; the first gets `first_rooftop_share` ‰), photo
/// URLs and what to stock.
struct Dealer {
    seed: u64,
    /// `{vin}` and `{n}` (01, 02 …) are replaced.
    photo_url: &'static str,
    rooftops: &'static [(&'static str, &'static str)],
    first_rooftop_share: u32,
    plans: &'static [Plan],
}

const TOYOTA_PLANS: &[Plan] = &[
    plan(&CAMRY, 18, 5, 6),
    plan(&COROLLA, 16, 6, 6),
    plan(&RAV4, 20, 6, 6),
    plan(&TACOMA, 12, 4, 4),
    plan(&HIGHLANDER, 12, 4, 4),
    plan(&PRIUS, 8, 2, 2),
    plan(&PRIUS_PRIME, 4, 1, 1),
    plan(&TUNDRA, 8, 3, 3),
    plan(&FOUR_RUNNER, 8, 3, 3),
    plan(&SIENNA, 6, 2, 2),
    plan(&BZ4X, 6, 1, 1),
    plan(&TRADE_CIVIC, 0, 4, 0),
    plan(&TRADE_ACCORD, 0, 3, 0),
    plan(&TRADE_CRV, 0, 4, 0),
    plan(&TRADE_F150, 0, 4, 0),
    plan(&TRADE_ESCAPE, 0, 3, 0),
    plan(&TRADE_MUSTANG, 0, 2, 0),
    plan(&TRADE_SILVERADO, 0, 4, 0),
    plan(&TRADE_EQUINOX, 0, 3, 0),
    plan(&TRADE_MALIBU, 0, 2, 0),
    plan(&TRADE_ALTIMA, 0, 3, 0),
    plan(&TRADE_ROGUE, 0, 3, 0),
    plan(&TRADE_OUTBACK, 0, 3, 0),
    plan(&TRADE_FORESTER, 0, 3, 0),
];

const HONDA_PLANS: &[Plan] = &[
    plan(&CIVIC, 20, 6, 5),
    plan(&ACCORD, 16, 5, 5),
    plan(&CRV, 22, 6, 6),
    plan(&HRV, 12, 4, 3),
    plan(&PILOT, 10, 4, 3),
    plan(&ODYSSEY, 8, 3, 3),
    plan(&PROLOGUE, 8, 1, 0),
    plan(&GOLD_WING, 6, 3, 0),
    plan(&AFRICA_TWIN, 6, 3, 0),
    plan(&REBEL_500, 10, 4, 0),
    plan(&CBR600RR, 5, 2, 0),
    plan(&GROM, 10, 3, 0),
    plan(&NAVI, 8, 2, 0),
];

const TOYOTA: Dealer = Dealer {
    seed: 0x7070_7A7A_2026_0001,
    photo_url: "https://cdn.demo-toyota.example/photos/{vin}/{n}.jpg",
    rooftops: &[(TOYOTA_SF, "SF"), (TOYOTA_OAKLAND, "OK")],
    first_rooftop_share: 600,
    plans: TOYOTA_PLANS,
};

const HONDA: Dealer = Dealer {
    seed: 0x40DA_5A05_2026_0002,
    photo_url: "https://media.demo-honda.example/inventory/{vin}_{n}.jpg",
    rooftops: &[(HONDA_SAN_JOSE, "SJ")],
    first_rooftop_share: 1000,
    plans: HONDA_PLANS,
};

/// The Toyota group's 234 units (the REST DMS's data).
pub fn toyota_group() -> Vec<Vehicle> {
    generate(&TOYOTA)
}

/// The Honda car and motorcycle dealer's 212 units (the CSV feed's data).
pub fn honda_powersports() -> Vec<Vehicle> {
    generate(&HONDA)
}

fn generate(dealer: &Dealer) -> Vec<Vehicle> {
    let mut rng = Rng::new(dealer.seed);
    let mut out = Vec::new();
    let mut serials = std::collections::HashSet::new();
    let mut stock_seq = 10_000;
    for plan in dealer.plans {
        let conditions = std::iter::repeat_n(Condition::New, plan.new as usize)
            .chain(std::iter::repeat_n(Condition::PreOwned, plan.used as usize))
            .chain(std::iter::repeat_n(
                Condition::Certified,
                plan.certified as usize,
            ));
        for condition in conditions {
            stock_seq += rng.range(1, 9);
            let serial = loop {
                let s = rng.range(100_000, 999_999);
                if serials.insert(s) {
                    break s;
                }
            };
            out.push(unit(
                &mut rng, dealer, plan.spec, condition, stock_seq, serial,
            ));
        }
    }
    out
}

fn unit(
    rng: &mut Rng,
    dealer: &Dealer,
    spec: &ModelSpec,
    condition: Condition,
    stock_seq: u32,
    serial: u32,
) -> Vehicle {
    let moto = spec.vehicle_type == VehicleType::Motorcycle;
    let newest: u16 = if moto { 2026 } else { 2027 };
    let year = match condition {
        Condition::New => newest - u16::from(rng.chance(650)),
        Condition::Certified => pick_year(rng, spec.first_year.max(2021), 2025),
        Condition::PreOwned => pick_year(rng, spec.first_year, 2025),
    };
    let (trim, base_msrp, pt) = rng.pick(spec.trims);
    let pt = spec.powertrains[pt.min(spec.powertrains.len() - 1)];
    let age = u32::from(2026u16.saturating_sub(year));

    // Status: In Transit only for new units.
    let roll = rng.range(0, 999);
    let status = match roll {
        0..=79 => Status::Sold,
        80..=109 => Status::PendingSale,
        110..=209 if condition == Condition::New => Status::InTransit,
        _ => Status::InStock,
    };

    // Mileage.
    let odometer = match condition {
        Condition::New => rng.pick(&[0, 5, 0]),
        _ if moto => (age.max(1) * rng.range(1_200, 3_800)).min(60_000),
        Condition::Certified => (age.max(1) * rng.range(7_000, 13_000)).min(84_000),
        Condition::PreOwned => age.max(1) * rng.range(6_000, 15_500) + rng.range(0, 999),
    };

    // Money: MSRP for the year, prices ending in 90 (cars) or 99 (bikes), book and cost.
    let options = if moto { 0 } else { rng.range(0, 8) * 250 };
    let year_msrp = if moto {
        base_msrp
    } else {
        (base_msrp + options) * (100 + if year == 2027 { 2 } else { 0 }) / 100 / 5 * 5
    };
    let (internet, msrp, list, book, cost) = match condition {
        Condition::New => {
            let discount = rng.range(0, 10) * 250;
            let price = charm(year_msrp.saturating_sub(discount), moto);
            let book = year_msrp * rng.range(92, 95) / 100 / 25 * 25;
            let cost = year_msrp * rng.range(88, 93) / 100;
            (price, Some(year_msrp), year_msrp, book, cost)
        }
        _ => {
            let keep = if moto { 0.90_f64 } else { 0.86_f64 };
            let base = f64::from(base_msrp) * keep.powi(i32::try_from(age).unwrap_or(10));
            let expected = f64::from(age.max(1)) * if moto { 2_500.0 } else { 12_000.0 };
            let adj = (expected - f64::from(odometer)) * if moto { 0.3 } else { 0.06 };
            let mut value = (base + adj).max(if moto { 1_500.0 } else { 4_500.0 });
            if condition == Condition::Certified {
                value *= 1.06;
            }
            let price = charm(value as u32, moto);
            let book = price * rng.range(90, 97) / 100 / 25 * 25;
            let cost = book * rng.range(80, 90) / 100;
            let list = price + rng.range(2, 8) * 250;
            (price, None, list, book, cost)
        }
    };
    let internet_price = (!rng.chance(25)).then_some(internet);

    // Colors and equipment.
    let ext_color = if moto {
        rng.pick(MOTO_COLORS)
    } else {
        let palette = EXT_COLORS
            .iter()
            .find(|(make, _)| *make == spec.make)
            .map_or(EXT_COLORS[0].1, |(_, colors)| colors);
        rng.pick(palette)
    };
    let int_color = if moto || rng.chance(40) {
        ""
    } else {
        rng.pick(INT_COLORS)
    };
    let pool = if moto { MOTO_FEATURES } else { CAR_FEATURES };
    let want = rng.range(if moto { 1 } else { 3 }, if moto { 4 } else { 8 });
    let mut features: Vec<&'static str> = pool
        .iter()
        .copied()
        .filter(|_| rng.range(0, 999) < want * 1000 / pool.len() as u32)
        .collect();
    features.extend(spec.extras.iter().copied().filter(|_| rng.chance(700)));

    // Where and when.
    let (location, code) = if dealer.rooftops.len() > 1 && !rng.chance(dealer.first_rooftop_share) {
        dealer.rooftops[1]
    } else {
        dealer.rooftops[0]
    };
    let kind = match (condition, moto) {
        (Condition::New, false) => 'N',
        (Condition::PreOwned, false) => 'U',
        (Condition::Certified, false) => 'C',
        (_, true) => 'M',
    };
    let stock_number = format!("{code}{kind}{stock_seq}");
    let vin = make_vin(spec.wmi, spec.vds, year, spec.plant, serial);
    let on_lot_days = rng.range(
        1,
        if condition == Condition::New {
            180
        } else {
            120
        },
    );
    let date_in_stock =
        (status != Status::InTransit).then(|| AS_OF - Duration::days(i64::from(on_lot_days)));
    let updated_days_ago = match date_in_stock {
        Some(_) => rng.range(0, on_lot_days),
        None => rng.range(0, 5),
    };
    let clock = Time::from_hms(
        u8::try_from(rng.range(7, 19)).unwrap_or(12),
        u8::try_from(rng.range(0, 59)).unwrap_or(0),
        u8::try_from(rng.range(0, 59)).unwrap_or(0),
    )
    .unwrap_or(Time::MIDNIGHT);
    let last_updated =
        PrimitiveDateTime::new(AS_OF - Duration::days(i64::from(updated_days_ago)), clock);
    let photo_count = if status == Status::InTransit || rng.chance(25) {
        0
    } else {
        rng.range(1, 12)
    };
    let photos = (1..=photo_count)
        .map(|n| {
            dealer
                .photo_url
                .replace("{vin}", &vin)
                .replace("{n}", &format!("{n:02}"))
        })
        .collect();

    Vehicle {
        vin,
        stock_number,
        year,
        make: spec.make,
        model: spec.model,
        trim,
        vehicle_type: spec.vehicle_type,
        condition,
        status,
        internet_price,
        msrp,
        list_price: list,
        odometer,
        body_style: spec.body,
        transmission: pt.transmission,
        drivetrain: pt.drivetrain,
        engine: pt.engine,
        displacement_cc: pt.cc,
        fuel_type: pt.fuel,
        electric_range: pt.range,
        ext_color,
        int_color,
        city_mpg: pt.city,
        hwy_mpg: pt.hwy,
        features,
        photos,
        location,
        date_in_stock,
        last_updated,
        dealer_cost: cost,
        book_value: book,
    }
}

fn pick_year(rng: &mut Rng, first: u16, last: u16) -> u16 {
    let year = rng.range(u32::from(first.min(last)), u32::from(last));
    u16::try_from(year).unwrap_or(last)
}

/// Dealer pricing: cars end in 990 (`$24,990`), bikes in 99 (`$6,499`).
fn charm(n: u32, moto: bool) -> u32 {
    if moto {
        (n / 100 * 100).saturating_sub(1).max(99)
    } else {
        (n / 1000 * 1000).saturating_sub(10).max(990)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    const KEYS: [&str; 31] = [
        "VIN",
        "StockNumber",
        "ModelYear",
        "Make",
        "Model",
        "Trim",
        "VehicleType",
        "Type",
        "Status",
        "InternetPrice",
        "MSRP",
        "ListPrice",
        "Odometer",
        "BodyStyle",
        "Transmission",
        "Drivetrain",
        "Engine",
        "DisplacementCC",
        "FuelType",
        "ElectricRange",
        "ExtColor",
        "IntColor",
        "CityMPG",
        "HwyMPG",
        "Features",
        "Photos",
        "Location",
        "DateInStock",
        "LastUpdated",
        "DealerCost",
        "BookValue",
    ];

    fn vin_shape(vin: &str) -> bool {
        vin.len() == 17
            && vin
                .bytes()
                .all(|b| matches!(b, b'A'..=b'H' | b'J'..=b'N' | b'P' | b'R'..=b'Z' | b'0'..=b'9'))
    }

    #[test]
    fn check_digit_of_a_known_vin() {
        // The textbook example VIN.
        assert!(is_valid_vin("1M8GDM9AXKP042788"));
        assert!(!is_valid_vin("1M8GDM9A1KP042788"));
        assert!(!is_valid_vin("1M8GDM9AXKP04278"));
        assert!(!is_valid_vin("1M8GDM9AXKP04278O"));
        assert_eq!(year_code(2026), 'T');
        assert_eq!(year_code(2018), 'J');
        assert_eq!(year_code(2009), '9');
    }

    #[test]
    fn formats() {
        assert_eq!(money(24_990), "$24,990");
        assert_eq!(money(990), "$990");
        assert_eq!(money(1_234_567), "$1,234,567");
        assert_eq!(thousands(0), "0");
        assert_eq!(us_date(date!(2026 - 03 - 05)), "03/05/2026");
    }

    #[test]
    fn generation_is_deterministic() {
        assert_eq!(toyota_group(), toyota_group());
        assert_eq!(honda_powersports(), honda_powersports());
        assert_ne!(toyota_group()[0].vin, honda_powersports()[0].vin);
    }

    fn check_inventory(units: &[Vehicle], min: usize) {
        assert!(units.len() >= min, "{} units", units.len());
        let vins: HashSet<&str> = units.iter().map(|v| v.vin.as_str()).collect();
        let stocks: HashSet<&str> = units.iter().map(|v| v.stock_number.as_str()).collect();
        assert_eq!(vins.len(), units.len(), "VINs unique");
        assert_eq!(stocks.len(), units.len(), "stock numbers unique");
        for v in units {
            assert!(vin_shape(&v.vin) && is_valid_vin(&v.vin), "{}", v.vin);
            assert_eq!(v.vin.chars().nth(9), Some(year_code(v.year)));
            let record = v.legacy_json();
            let keys: Vec<&str> = record
                .as_object()
                .expect("object")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, KEYS);
            for (k, value) in record.as_object().expect("object") {
                assert!(
                    value.is_string() || k == "Photos",
                    "{k} is a string: {value}"
                );
            }
            assert!(v.date_in_stock.is_none_or(|d| d <= AS_OF));
            assert!(v.last_updated.date() <= AS_OF);
            if v.condition == Condition::New {
                assert!(v.odometer <= 5 && v.msrp.is_some());
            } else {
                assert!(v.odometer > 0 && v.msrp.is_none());
                assert_ne!(v.status, Status::InTransit);
            }
            if let Some(p) = v.internet_price {
                assert!(p > 0 && p <= v.list_price, "{v:?}");
            }
            assert!(v.dealer_cost > 0 && v.book_value > 0);
        }
        let count = |s: Status| units.iter().filter(|v| v.status == s).count() * 1000 / units.len();
        assert!(
            (50..=110).contains(&count(Status::Sold)),
            "sold ‰ {}",
            count(Status::Sold)
        );
        assert!((20..=80).contains(&count(Status::InTransit)));
        assert!((10..=60).contains(&count(Status::PendingSale)));
        assert!(units.iter().any(|v| v.internet_price.is_none()));
        assert!(units.iter().any(|v| v.electric_range.is_some()));
        assert!(units.iter().any(|v| v.photos.is_empty()));
        assert!(units.iter().any(|v| v.photos.len() > 5));
    }

    #[test]
    fn toyota_group_shape() {
        let units = toyota_group();
        check_inventory(&units, 220);
        let mut makes: HashMap<&str, usize> = HashMap::new();
        for v in &units {
            *makes.entry(v.make).or_default() += 1;
        }
        assert!(makes["Toyota"] > units.len() * 3 / 4);
        for make in ["Honda", "Ford", "Chevrolet", "Nissan", "Subaru"] {
            assert!(makes[make] > 0, "{make}");
        }
        assert!(
            units
                .iter()
                .filter(|v| v.make != "Toyota")
                .all(|v| v.condition == Condition::PreOwned)
        );
        for loc in [TOYOTA_SF, TOYOTA_OAKLAND] {
            assert!(units.iter().filter(|v| v.location == loc).count() > 50);
        }
        for c in [Condition::New, Condition::PreOwned, Condition::Certified] {
            assert!(units.iter().filter(|v| v.condition == c).count() > 30);
        }
        assert!(
            units
                .iter()
                .any(|v| v.model == "bZ4X" && v.fuel_type == "Electric")
        );
        assert!(
            units
                .iter()
                .any(|v| v.model == "Prius Prime" && v.electric_range == Some(44))
        );
        assert!(units.iter().all(|v| v.vehicle_type == VehicleType::Car));
    }

    #[test]
    fn honda_powersports_shape() {
        let units = honda_powersports();
        check_inventory(&units, 200);
        let bikes: Vec<&Vehicle> = units
            .iter()
            .filter(|v| v.vehicle_type == VehicleType::Motorcycle)
            .collect();
        assert!(bikes.len() > 40);
        assert!(
            bikes
                .iter()
                .all(|v| v.displacement_cc.is_some() && v.city_mpg.is_none())
        );
        assert!(
            units
                .iter()
                .filter(|v| v.vehicle_type == VehicleType::Car)
                .all(|v| v.displacement_cc.is_none())
        );
        assert!(units.iter().all(|v| v.location == HONDA_SAN_JOSE));
        assert!(units.iter().any(|v| v.model == "Prologue"));
        assert!(units.iter().all(|v| v.make == "Honda"));
    }

    #[test]
    fn unknown_vin_is_valid_and_unknown() {
        let units = toyota_group();
        let vin = unknown_vin(&units);
        assert!(is_valid_vin(&vin));
        assert!(units.iter().all(|v| v.vin != vin));
        assert!(honda_powersports().iter().all(|v| v.vin != vin));
    }

    #[test]
    fn sample_record() {
        let units = toyota_group();
        let v = units
            .iter()
            .find(|v| v.condition == Condition::PreOwned && v.internet_price.is_some())
            .expect("a used unit");
        let r = v.legacy_json();
        let price = r["InternetPrice"].as_str().expect("price");
        assert!(price.starts_with('$') && price.ends_with("990"), "{price}");
        assert!(r["Odometer"].as_str().expect("odo").ends_with(" mi"));
        assert_eq!(r["MSRP"], "");
        let date = r["DateInStock"].as_str().expect("date");
        assert_eq!(date.len(), 10);
        assert_eq!(&date[2..3], "/");
        let updated = r["LastUpdated"].as_str().expect("updated");
        assert_eq!(updated.len(), 19);
    }
}
