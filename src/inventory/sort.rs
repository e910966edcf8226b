//! Sort fields, the missing-last comparison and the sorting of the pre-sorted orders.

use std::cmp::Ordering;

/// `sort.field` values (docs/protocol.md §Sorting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SortField {
    Price,
    ListPrice,
    Msrp,
    Mileage,
    Year,
    Make,
    Model,
    Stock,
    UpdatedAt,
}

/// Every sort field AAP defines (docs/protocol.md §Sorting).
pub fn sort_fields() -> impl Iterator<Item = &'static str> {
    SortField::ALL.into_iter().map(SortField::name)
}

impl SortField {
    pub(super) const ALL: [SortField; 9] = [
        SortField::Price,
        SortField::ListPrice,
        SortField::Msrp,
        SortField::Mileage,
        SortField::Year,
        SortField::Make,
        SortField::Model,
        SortField::Stock,
        SortField::UpdatedAt,
    ];

    pub(super) fn parse(name: &str) -> Option<SortField> {
        SortField::ALL.into_iter().find(|f| f.name() == name)
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            SortField::Price => "price",
            SortField::ListPrice => "list_price",
            SortField::Msrp => "msrp",
            SortField::Mileage => "mileage",
            SortField::Year => "year",
            SortField::Make => "make",
            SortField::Model => "model",
            SortField::Stock => "stock",
            SortField::UpdatedAt => "updated_at",
        }
    }
}

/// Present values before missing ones whatever the order; present values in `descending` or
/// ascending order.
pub(super) fn present_first<T>(
    a: Option<T>,
    b: Option<T>,
    descending: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) if descending => cmp(&b, &a),
        (Some(a), Some(b)) => cmp(&a, &b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// `sort` of every order, in order; the second half on a thread of its own when `threads` > 1
/// (and the system gives one). Each thread hands every `sort` it makes the same `scratch`
/// (a buffer as large as the inventory): one allocation per thread instead of one per order,
/// which a refresh would otherwise take and free eighteen times over.
pub(super) fn sort_all<O: Sync, T: Send, S: Default>(
    orders: &[O],
    threads: usize,
    sort: &(impl Fn(&O, &mut S) -> T + Sync),
) -> Vec<T> {
    let sort_each = |orders: &[O]| {
        let mut scratch = S::default();
        orders
            .iter()
            .map(|order| sort(order, &mut scratch))
            .collect::<Vec<T>>()
    };
    if threads > 1 && orders.len() > 1 {
        let (first, second) = orders.split_at(orders.len() / 2);
        let parallel = std::thread::scope(|scope| {
            let helper = std::thread::Builder::new()
                .name("feed-sorting".to_owned())
                .spawn_scoped(scope, || sort_each(second))
                .ok()?;
            let mut all = sort_each(first);
            all.extend(helper.join().ok()?);
            Some(all)
        });
        if let Some(all) = parallel {
            return all;
        }
    }
    sort_each(orders)
}

/// `x` as an unsigned integer in the order of `f64::total_cmp`.
pub(super) fn f64_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}
