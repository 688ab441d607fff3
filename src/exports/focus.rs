//! FOCUS 1.2 (and 1.0) cost and usage rows (FinOps Foundation, <https://focus.finops.org>): every
//! column the version's specification defines, in alphabetical order, then slicemeter's own `x_`
//! columns; and the rows of a slice-day, of the platform's capacity and of rounding. Pure: figures
//! in, rows and CSV records out; `exports` streams them.
//!
//! The file stays whole: a row's cells and the rows that fill them (a slice-day's, the platform's)
//! are one mapping onto the FOCUS columns, checked together against the validator's rules.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use rust_decimal::RoundingStrategy::MidpointNearestEven;
use rust_decimal::prelude::ToPrimitive;

use crate::billing::pricing::Charge;
use crate::billing::rate_card::{Currency, RateCard};
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::text::spreadsheet_safe;
use crate::domain::time::Month;
use crate::reports::slices::{SliceDay, Unpriced};

mod columns;
pub mod split;
pub mod store;

pub use columns::{
    COLUMNS, FOCUS12_CRITERIA, FOCUS13_CRITERIA, MINOR_UNIT, PRICING_UNIT, SHARE_UNIT, Version,
};

/// Who issues and provides the charges: the GPU platform team running slicemeter.
#[derive(Debug, Clone)]
pub struct Issuer {
    pub billing_account_id: String,
    pub billing_account_name: String,
    /// InvoiceIssuerName, ProviderName and PublisherName.
    pub name: String,
    pub service_name: String,
}

impl Default for Issuer {
    fn default() -> Self {
        Issuer {
            billing_account_id: "slicemeter".into(),
            billing_account_name: "GPU chargeback".into(),
            name: "GPU Platform".into(),
            service_name: "GPU slices".into(),
        }
    }
}

/// A FOCUS `ChargeCategory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Usage,
    Adjustment,
}

/// One row before formatting. Quantities and prices exact; `billed` already in minor units.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub category: Category,
    pub correction: bool,
    pub description: String,
    pub charge_start: DateTime<Utc>,
    pub charge_end: DateTime<Utc>,
    pub billed: Decimal,
    /// At list price: hourly cost x GPU-equivalent hours, before the isolation factor.
    pub list_cost: Decimal,
    pub list_unit_price: Option<Decimal>,
    /// At the contracted (factored) price: the exact amount before rounding.
    pub contracted_cost: Decimal,
    pub contracted_unit_price: Option<Decimal>,
    /// Slice-hours.
    pub consumed_hours: Option<Decimal>,
    /// `PricingQuantity`: GPU-equivalent hours, or what [`Row::pricing_unit`] counts.
    pub pricing_hours: Option<Decimal>,
    /// `PricingUnit` of the quantity: [`PRICING_UNIT`], or [`SHARE_UNIT`] for a share priced whole.
    pub pricing_unit: &'static str,
    pub resource_id: Option<String>,
    pub resource_name: Option<String>,
    pub resource_type: Option<String>,
    pub sku_id: String,
    pub sku_price_id: String,
    pub sub_account_id: String,
    pub sub_account_name: String,
    pub tags: BTreeMap<String, String>,
    pub gpu_model: Option<String>,
    pub slice_kind: Option<String>,
    pub mig_profile: Option<String>,
    pub physical_share: Option<Decimal>,
    pub isolation_factor: Option<Decimal>,
    pub rate_card: Option<i64>,
    pub invoice_number: Option<String>,
    /// What the SKU meters (FOCUS 1.2 `SkuMeter`).
    pub sku_meter: &'static str,
    /// The row's part in FOCUS 1.3's split cost allocation, if it has one.
    pub allocation: Option<Allocated>,
}

/// Split cost allocation (FOCUS 1.3): the origin charge is a card's day under one rate card (its
/// hours present at its model's hourly cost), split into the slices that held it (at list price:
/// their physical share of it) and what no slice held (the unallocated portion); see [`split`].
#[derive(Debug, Clone, PartialEq)]
pub struct Allocated {
    /// `AllocatedMethodId`: [`PHYSICAL_SHARE`] or [`IDLE_SPREAD`].
    pub method: &'static str,
    /// `AllocatedResourceId` and `AllocatedResourceName`; none for the unallocated portion.
    pub resource: Option<(String, String)>,
    /// `AllocatedMethodDetails`: `Elements` (each with its `AllocatedRatio`) and the data
    /// generator's own (`x_`) properties; none where there are no details.
    pub details: Option<serde_json::Map<String, serde_json::Value>>,
    /// `AllocatedTags`: the allocated resource's own, none of them in `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// `AllocatedMethodId` of a slice's (or the unallocated) part of a GPU model's day: DESIGN.md's
/// physical share, `share = w_compute x compute share + w_memory x memory share`, at list price.
pub const PHYSICAL_SHARE: &str = "slicemeter-physical-share-v1";
/// `AllocatedMethodId` of unallocated capacity spread to teams by their charges (idle policy
/// `spread`).
pub const IDLE_SPREAD: &str = "slicemeter-idle-spread-v1";

/// A decimal as a JSON number.
fn json_number(x: Decimal) -> serde_json::Value {
    serde_json::Number::from_f64(x.to_f64().unwrap_or_default())
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

impl Allocated {
    /// `AllocatedMethodDetails` as written.
    fn details(&self) -> Option<String> {
        self.details
            .as_ref()
            .map(|d| serde_json::Value::Object(d.clone()).to_string())
    }
}

/// FOCUS dates: `YYYY-MM-DDTHH:mm:ssZ`. Four of them a row: written digit by digit rather than
/// through a format string, which chrono parses anew each time.
pub fn timestamp(t: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    let Ok(year) = u32::try_from(t.year()) else {
        return t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    };
    if year > 9999 {
        return t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    }
    let mut s = String::with_capacity(20);
    let mut digits = |v: u32, n: u32, after: char| {
        for p in (0..n).rev() {
            s.push(char::from(b'0' + (v / 10u32.pow(p) % 10) as u8));
        }
        s.push(after);
    };
    digits(year, 4, '-');
    digits(t.month(), 2, '-');
    digits(t.day(), 2, 'T');
    digits(t.hour(), 2, ':');
    digits(t.minute(), 2, ':');
    digits(t.second(), 2, 'Z');
    s
}

/// A decimal with a fixed scale and `.` as separator, never in exponent form.
pub fn fixed(d: Decimal, scale: u32) -> String {
    let mut r =
        d.round_dp_with_strategy(scale, rust_decimal::RoundingStrategy::MidpointNearestEven);
    r.rescale(scale);
    if r.is_zero() {
        r.set_sign_positive(true);
    }
    r.to_string()
}

impl Row {
    /// The CSV record for this row under `month`'s billing period, in `version`'s columns.
    pub fn record(
        &self,
        month: Month,
        currency: &Currency,
        issuer: &Issuer,
        version: Version,
    ) -> Vec<String> {
        let mut all = self.cells(month, currency, issuer, version);
        version
            .positions()
            .iter()
            .map(|&i| std::mem::take(&mut all[i]))
            .collect()
    }

    /// Every cell, in [`COLUMNS`]' order; the JSON ones `version` does not write are left empty
    /// rather than serialised for nothing (a cell per row of a million-row export).
    fn cells(
        &self,
        month: Month,
        currency: &Currency,
        issuer: &Issuer,
        version: Version,
    ) -> Vec<String> {
        // Money with at least two decimals, quantities and prices with six: fixed scales, as the
        // FOCUS validator reads decimals as floats.
        let money = currency.minor_units.max(2);
        // Every text cell is made safe to open in a spreadsheet (names come from collectors and
        // operators); numbers and dates are written as they are.
        let t = |v: &str| spreadsheet_safe(v).into_owned();
        let opt = |v: &Option<String>| t(v.as_deref().unwrap_or_default());
        let dec6 = |v: Option<Decimal>| v.map(|d| fixed(d, 6)).unwrap_or_default();
        // Unit prices as the rate card has them (six places at least), the quantity at six, and
        // each cost their product, exact: ListCost = ListUnitPrice x PricingQuantity to the last
        // digit, as FOCUS requires and a finance tool checks. BilledCost alone is in minor units.
        let quantity = self
            .pricing_hours
            .map(|q| q.round_dp_with_strategy(6, MidpointNearestEven));
        let price = |p: Option<Decimal>| {
            p.map(|p| fixed(p, p.normalize().scale().max(6)))
                .unwrap_or_default()
        };
        let cost = |p: Option<Decimal>, otherwise: Decimal| match (p, quantity) {
            (Some(p), Some(q)) => {
                let c = p * q;
                fixed(c, c.normalize().scale().max(money))
            }
            _ => fixed(otherwise, money),
        };
        let tags = serde_json::to_string(&self.tags).expect("tags serialise");
        let platform = self.sub_account_id == PLATFORM_ACCOUNT;
        let a = self
            .allocation
            .as_ref()
            .filter(|_| version == Version::V1_3);
        let cells = vec![
            t(&a.and_then(Allocated::details).unwrap_or_default()),
            a.map(|a| a.method.to_owned()).unwrap_or_default(),
            t(a.and_then(|a| a.resource.as_ref())
                .map_or("", |r| r.0.as_str())),
            t(a.and_then(|a| a.resource.as_ref())
                .map_or("", |r| r.1.as_str())),
            t(&a.filter(|a| !a.tags.is_empty())
                .map(|a| serde_json::to_string(&a.tags).expect("tags serialise"))
                .unwrap_or_default()),
            String::new(),
            fixed(self.billed, money),
            t(&issuer.billing_account_id),
            t(&issuer.billing_account_name),
            "GPU Platform".to_owned(),
            currency.code.clone(),
            timestamp(month.end()),
            timestamp(month.start()),
            // No capacity reservations.
            String::new(),
            String::new(),
            match self.category {
                Category::Usage => "Usage",
                Category::Adjustment => "Adjustment",
            }
            .to_owned(),
            if self.correction { "Correction" } else { "" }.to_owned(),
            t(&self.description),
            match self.category {
                Category::Usage => "Usage-Based",
                Category::Adjustment => "One-Time",
            }
            .to_owned(),
            timestamp(self.charge_end),
            timestamp(self.charge_start),
            // No commitment discounts: category, id, name, quantity, status, type, unit.
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            dec6(self.consumed_hours),
            if self.consumed_hours.is_some() {
                "Slice-Hours"
            } else {
                ""
            }
            .to_owned(),
            // ContractApplied: no contract commitments.
            String::new(),
            cost(self.contracted_unit_price, self.contracted_cost),
            price(self.contracted_unit_price),
            fixed(self.billed, money),
            // The GPUs are the platform's own: it hosts what it provides.
            t(&issuer.name),
            opt(&self.invoice_number),
            t(&issuer.name),
            cost(self.list_unit_price, self.list_cost),
            price(self.list_unit_price),
            "Standard".to_owned(),
            // Priced in the currency it is billed in.
            currency.code.clone(),
            price(self.contracted_unit_price),
            fixed(self.billed, money),
            price(self.list_unit_price),
            dec6(quantity),
            if self.pricing_hours.is_some() {
                self.pricing_unit
            } else {
                ""
            }
            .to_owned(),
            t(&issuer.name),
            t(&issuer.name),
            String::new(),
            String::new(),
            opt(&self.resource_id),
            opt(&self.resource_name),
            opt(&self.resource_type),
            "AI and Machine Learning".to_owned(),
            t(&issuer.service_name),
            t(&issuer.name),
            "AI Platforms".to_owned(),
            t(&self.sku_id),
            self.sku_meter.to_owned(),
            if version == Version::V1_0 {
                String::new()
            } else {
                t(&self.price_details())
            },
            t(&self.sku_price_id),
            t(&self.sub_account_id),
            t(&self.sub_account_name),
            if platform { "Platform" } else { "Team" }.to_owned(),
            t(&tags),
            opt(&self.gpu_model),
            opt(&self.slice_kind),
            opt(&self.mig_profile),
            dec6(self.physical_share),
            self.isolation_factor
                .map(|f| fixed(f, 2))
                .unwrap_or_default(),
            self.rate_card.map(|r| r.to_string()).unwrap_or_default(),
            opt(&self.invoice_number),
        ];
        debug_assert_eq!(cells.len(), COLUMNS.len());
        cells
    }

    /// FOCUS 1.2 `SkuPriceDetails`: what the price of a GPU-hour is made of, as a flat JSON object
    /// of `x_` properties (KeyValueFormat): the GPU model, slice kind and profile, the physical
    /// share priced, the isolation factor and the model's hourly cost. Empty (null) where the row
    /// has none of them.
    fn price_details(&self) -> String {
        let mut d = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            d.insert(k.to_owned(), v);
        };
        let number = json_number;
        if let Some(m) = &self.gpu_model {
            put("x_GpuModel", m.as_str().into());
        }
        if let Some(k) = &self.slice_kind {
            put("x_SliceKind", k.as_str().into());
        }
        if let Some(p) = &self.mig_profile {
            put("x_MigProfile", p.as_str().into());
        }
        if let Some(s) = self.physical_share {
            put("x_PhysicalShare", number(s.round_dp(6)));
        }
        if let Some(f) = self.isolation_factor {
            put("x_IsolationFactor", number(f));
        }
        if let Some(h) = self.list_unit_price {
            put("x_HourlyCost", number(h));
        }
        if d.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(d).to_string()
        }
    }
}

/// The sub-account of the platform's own rows (unallocated capacity, sharing discount, rounding,
/// consumers no team claims).
pub const PLATFORM_ACCOUNT: &str = "platform";

/// The resource type FOCUS rows name for a slice kind.
pub fn resource_type(kind: SliceKind) -> &'static str {
    match kind {
        SliceKind::Mig => "MIG instance",
        SliceKind::Mps => "MPS share",
        SliceKind::Timeslice => "Time-sliced replica",
        SliceKind::Vgpu => "vGPU",
        SliceKind::Whole => "GPU",
    }
}

/// The invoice line a usage row belongs to.
pub type LineGroup = (TeamId, String, Option<SliceKind>, Option<String>, i64);

pub fn sku_id(model: Option<&str>, kind: Option<SliceKind>, profile: Option<&str>) -> String {
    [model, kind.map(SliceKind::as_str), profile]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("/")
}

/// What one slice-day comes to, and the invoice line it rounds into: what the export needs of it
/// in order ([`usage_row`] makes the rest of its row).
pub fn usage_charge(
    d: &SliceDay,
    cards: &BTreeMap<i64, RateCard>,
) -> Result<(LineGroup, Charge), Unpriced> {
    let card = d.card(cards)?;
    let charge = d.charge(cards)?;
    let group = (
        d.team.clone(),
        d.model.clone(),
        Some(d.kind),
        d.profile.clone(),
        card.id,
    );
    Ok((group, charge))
}

/// The part a slice's row takes in FOCUS 1.3's split cost allocation, before its card's day gives
/// it its ratios (`split::Split::slice`).
pub fn slice_allocation(d: &SliceDay) -> Allocated {
    let mut tags = BTreeMap::from([(
        "slicemeter/slice-kind".to_owned(),
        d.kind.as_str().to_owned(),
    )]);
    if let Some(p) = &d.profile {
        tags.insert("slicemeter/mig-profile".to_owned(), p.clone());
    }
    Allocated {
        method: PHYSICAL_SHARE,
        resource: Some((d.slice_uuid.clone(), format!("{} {}", d.node, d.slice_uuid))),
        // Its ratios, once its card's day is known.
        details: None,
        tags,
    }
}

/// A team's usage row for one slice-day under `card`, whose `charge` [`usage_charge`] gave,
/// before it is rounded (`billed` zero) and without its part in a split cost allocation.
/// Consumers no team claims are on the platform's account: their rows carry `platform` as the
/// sub-account, their cost never invoiced.
pub fn usage_row(
    d: &SliceDay,
    card: &RateCard,
    charge: &Charge,
    invoice_numbers: &BTreeMap<String, String>,
    issuer: &Issuer,
) -> Row {
    let share = d
        .kind
        .is_reserved()
        .then(|| card.weights.reserved_share(&d.share()));
    let sku = sku_id(Some(&d.model), Some(d.kind), d.profile.as_deref());
    let mut tags = BTreeMap::from([
        ("slicemeter/team".to_owned(), d.team.to_string()),
        ("slicemeter/node".to_owned(), d.node.clone()),
    ]);
    if let Some(cc) = &d.cost_center {
        tags.insert("slicemeter/cost-center".to_owned(), cc.clone());
    }
    tags.extend(d.device().labels().map(|(k, v)| (k.to_owned(), v)));
    let unattributed = d.team.is_unattributed();
    let (sub_account_id, sub_account_name) = if unattributed {
        tags.insert("slicemeter/platform".to_owned(), d.team.to_string());
        (PLATFORM_ACCOUNT.to_owned(), issuer.name.clone())
    } else {
        (d.team.to_string(), d.team_name.clone())
    };
    let (hourly, _) = card.hourly_cost(&d.model);
    Row {
        category: Category::Usage,
        correction: false,
        description: format!(
            "{} held by {} on {}",
            match (&d.profile, d.kind) {
                (Some(p), SliceKind::Mig) => format!("MIG {p}"),
                _ => resource_type(d.kind).to_owned(),
            },
            if unattributed {
                "consumers no team claims"
            } else {
                d.team.as_str()
            },
            d.model
        ),
        charge_start: d.day,
        charge_end: d.day + Duration::days(1),
        billed: Decimal::ZERO,
        list_cost: charge.allocated.to_decimal(),
        list_unit_price: Some(hourly),
        contracted_cost: charge.amount.to_decimal(),
        contracted_unit_price: Some(charge.unit_price),
        consumed_hours: Some(charge.slice_hours),
        pricing_hours: Some(charge.gpu_equivalent_hours),
        pricing_unit: PRICING_UNIT,
        resource_id: Some(d.slice_uuid.clone()),
        resource_name: Some(format!("{} {}", d.node, d.slice_uuid)),
        resource_type: Some(resource_type(d.kind).to_owned()),
        sku_price_id: format!("{sku}/v{}", card.id),
        sku_id: sku,
        sub_account_id,
        sub_account_name,
        tags,
        gpu_model: Some(d.model.clone()),
        slice_kind: Some(d.kind.as_str().to_owned()),
        mig_profile: d.profile.clone(),
        physical_share: share,
        isolation_factor: Some(card.factors.of(d.kind)),
        rate_card: Some(card.id),
        // Consumers no team claims: the platform's document, if the caller names one for them.
        invoice_number: invoice_numbers.get(d.team.as_str()).cloned(),
        sku_meter: "GPU share held",
        allocation: None,
    }
}

/// Which of the platform's figures a row carries; its text names the row's SKU and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlatformFigure {
    Unallocated,
    SharingDiscount,
    Rounding,
}

impl PlatformFigure {
    pub fn as_str(self) -> &'static str {
        match self {
            PlatformFigure::Unallocated => "unallocated",
            PlatformFigure::SharingDiscount => "sharing-discount",
            PlatformFigure::Rounding => "rounding",
        }
    }
}

/// One of the platform's rows: unallocated capacity, the sharing discount or the rounding residual.
pub fn platform_row(
    month: Month,
    day: DateTime<Utc>,
    model: &str,
    card: &RateCard,
    what: PlatformFigure,
    exact: Decimal,
    issuer: &Issuer,
) -> Row {
    let description = match what {
        PlatformFigure::Unallocated => {
            format!("Unallocated capacity of {model}: the share of its GPUs no slice held")
        }
        PlatformFigure::SharingDiscount | PlatformFigure::Rounding => {
            format!("Sharing discount on {model}: the (1 - isolation factor) part of shared slices")
        }
    };
    let sku = if model.is_empty() {
        what.as_str().to_owned()
    } else {
        format!("{model}/{}", what.as_str())
    };
    // Unallocated capacity and the sharing discount are GPU-hours at the model's hourly cost; the
    // rounding residual is minor units at one minor unit each (it may be negative, a price not).
    let (hourly, _) = card.hourly_cost(model);
    let (unit_price, unit) = if what == PlatformFigure::Rounding {
        (Decimal::new(1, card.currency.minor_units), MINOR_UNIT)
    } else {
        (hourly, PRICING_UNIT)
    };
    let priced = !unit_price.is_zero();
    Row {
        category: Category::Usage,
        correction: false,
        description,
        charge_start: day,
        charge_end: (day + Duration::days(1)).min(month.end()),
        billed: Decimal::ZERO,
        list_cost: exact,
        list_unit_price: priced.then_some(unit_price),
        contracted_cost: exact,
        contracted_unit_price: priced.then_some(unit_price),
        consumed_hours: None,
        pricing_hours: priced.then(|| exact / unit_price),
        pricing_unit: unit,
        // Capacity, not a resource: no resource, so no resource type either (ResourceType-C-004-C).
        resource_id: None,
        resource_name: None,
        resource_type: None,
        sku_price_id: format!("{sku}/v{}", card.id),
        sku_id: sku,
        sub_account_id: PLATFORM_ACCOUNT.into(),
        sub_account_name: issuer.name.clone(),
        tags: BTreeMap::from([("slicemeter/platform".to_owned(), what.as_str().to_owned())]),
        gpu_model: (!model.is_empty()).then(|| model.to_owned()),
        slice_kind: None,
        mig_profile: None,
        physical_share: None,
        isolation_factor: None,
        rate_card: Some(card.id),
        invoice_number: None,
        sku_meter: match what {
            PlatformFigure::Unallocated => "Unallocated capacity",
            PlatformFigure::SharingDiscount => "Sharing discount",
            PlatformFigure::Rounding => "Rounding",
        },
        // The unallocated portion of its cards' days, once known (`split::Split::unallocated`).
        allocation: None,
    }
}

#[cfg(test)]
mod tests;
