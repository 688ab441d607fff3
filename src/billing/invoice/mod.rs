//! Invoices (pure; their rows are `store`'s): their typed states and what each allows, invoices as
//! the API and CSV show them, and corrections: what changed in a period after its invoice was issued
//! becomes lines on the next draft, never an edit.

pub mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use super::period::{Line, LineKey, LineKind, PeriodBill};
use super::rate_card::{Currency, PriceSource};
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::text::{UnknownName, spreadsheet_safe};
use crate::domain::time::Month;

/// Where an invoice stands: drafts are rewritten freely, issued ones are frozen, a credit note voids
/// an issued invoice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceStatus {
    Draft,
    Issued,
    Void,
}

impl InvoiceStatus {
    pub const ALL: [InvoiceStatus; 3] = [
        InvoiceStatus::Draft,
        InvoiceStatus::Issued,
        InvoiceStatus::Void,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvoiceStatus::Draft => "draft",
            InvoiceStatus::Issued => "issued",
            InvoiceStatus::Void => "void",
        }
    }
}

impl FromStr for InvoiceStatus {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        UnknownName::find("invoice status", s, &Self::ALL, |k| k.as_str())
    }
}

impl std::fmt::Display for InvoiceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An invoice, or a credit note that reverses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceKind {
    Invoice,
    CreditNote,
}

impl InvoiceKind {
    pub const ALL: [InvoiceKind; 2] = [InvoiceKind::Invoice, InvoiceKind::CreditNote];

    pub fn as_str(self) -> &'static str {
        match self {
            InvoiceKind::Invoice => "invoice",
            InvoiceKind::CreditNote => "credit_note",
        }
    }
}

impl FromStr for InvoiceKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        UnknownName::find("invoice kind", s, &Self::ALL, |k| k.as_str())
    }
}

/// Why an invoice cannot do what was asked of it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvoiceError {
    #[error("there is no invoice {0}")]
    NotFound(i64),
    #[error("invoice {0} is {1}; only a draft can be issued")]
    NotDraft(i64, InvoiceStatus),
    #[error("invoice {0} is {1}; only an issued invoice can be credited")]
    NotIssued(i64, InvoiceStatus),
    #[error("invoice {0} is a credit note; credit notes are final")]
    CreditNote(i64),
}

/// What stays the same about an invoice whatever happens to it, and where it stands.
#[derive(Debug, Clone)]
pub struct Head {
    pub id: i64,
    pub kind: InvoiceKind,
    pub status: InvoiceStatus,
    pub team: TeamId,
    pub period: Month,
    pub total: Decimal,
}

impl Head {
    /// Only a draft is issued.
    pub fn may_issue(&self) -> Result<(), InvoiceError> {
        match self.status {
            InvoiceStatus::Draft => Ok(()),
            other => Err(InvoiceError::NotDraft(self.id, other)),
        }
    }

    /// Only an issued invoice is credited; a credit note is final.
    pub fn may_credit(&self) -> Result<(), InvoiceError> {
        if self.kind == InvoiceKind::CreditNote {
            return Err(InvoiceError::CreditNote(self.id));
        }
        match self.status {
            InvoiceStatus::Issued => Ok(()),
            other => Err(InvoiceError::NotIssued(self.id, other)),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InvoiceLine {
    pub line_no: i32,
    /// `usage`, `idle_spread`, `correction` or `credit`.
    #[schema(value_type = String)]
    pub line_kind: LineKind,
    pub description: String,
    pub gpu_model: Option<String>,
    #[schema(value_type = Option<String>)]
    pub slice_kind: Option<SliceKind>,
    pub profile: Option<String>,
    /// The rate card version that priced it.
    pub rate_card: Option<i64>,
    /// `listed`, or `default` when the model was not on the rate card's price list.
    #[schema(value_type = Option<String>)]
    pub price_source: Option<PriceSource>,
    #[schema(value_type = String, example = "720")]
    pub slice_hours: Decimal,
    #[schema(value_type = String, example = "334.285714")]
    pub gpu_equivalent_hours: Decimal,
    /// Price of a GPU-equivalent hour (hourly cost x isolation factor).
    #[schema(value_type = Option<String>, example = "4.00")]
    pub unit_price: Option<Decimal>,
    /// Rounded once, half to even, to the currency's minor unit.
    #[schema(value_type = String, example = "1337.14")]
    pub amount: Decimal,
    /// The occupancy windows behind the line.
    pub windows: i64,
    /// For corrections: the period corrected.
    pub corrects_period: Option<Month>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Invoice {
    pub id: i64,
    /// `SM-<year>-<6 digits>` once issued; gap-free within a year.
    #[schema(example = "SM-2026-000001")]
    pub number: Option<String>,
    /// `invoice` or `credit_note`.
    #[schema(value_type = String)]
    pub kind: InvoiceKind,
    #[schema(value_type = String)]
    pub team: TeamId,
    pub period: Month,
    /// `draft`, `issued` or `void`.
    #[schema(value_type = String)]
    pub status: InvoiceStatus,
    pub currency: String,
    /// The sum of the lines.
    #[schema(value_type = String, example = "1337.14")]
    pub total: Decimal,
    pub created_at: DateTime<Utc>,
    pub issued_at: Option<DateTime<Utc>>,
    /// For a credit note: the invoice it voids.
    pub credits: Option<i64>,
    /// For a voided invoice: the credit note that voided it.
    pub credited_by: Option<i64>,
    /// Empty in lists; every line in `GET /v1/invoices/{id}`.
    pub lines: Vec<InvoiceLine>,
}

/// What was billed to a team for a period so far, per line key: the period's issued invoice, the
/// corrections later invoices carried for it, and credits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Billed {
    pub slice_hours: Decimal,
    pub gpu_equivalent_hours: Decimal,
    pub exact_amount: Decimal,
    pub amount: Decimal,
    pub unit_price: Option<Decimal>,
}

/// The part of a line key that identifies what was priced, whatever the line's kind.
pub type PricedKey = (Option<String>, Option<SliceKind>, Option<String>, i64);

pub fn priced_key(k: &LineKey) -> PricedKey {
    (
        k.gpu_model.clone(),
        k.slice_kind,
        k.profile.clone(),
        k.rate_card,
    )
}

/// Correction lines for one team and an earlier period: the period as priced now, less what was
/// billed for it. Nothing when nothing changed.
pub fn corrections(
    period: Month,
    now: Option<&[Line]>,
    billed: &BTreeMap<PricedKey, Billed>,
    currency: &Currency,
) -> Vec<Line> {
    let mut current: BTreeMap<PricedKey, &Line> = BTreeMap::new();
    for l in now.unwrap_or_default() {
        current.insert(priced_key(&l.key), l);
    }
    let keys: BTreeSet<&PricedKey> = current.keys().chain(billed.keys()).collect();
    let zero = Billed::default();
    let mut out = Vec::new();
    for key in keys {
        let was = billed.get(key).unwrap_or(&zero);
        let (slice_hours, gpu_eq, exact, amount, unit_price, source, windows) =
            match current.get(key) {
                Some(l) => (
                    l.slice_hours,
                    l.gpu_equivalent_hours,
                    l.exact_amount,
                    l.amount,
                    l.unit_price,
                    l.price_source,
                    l.windows,
                ),
                None => (
                    Decimal::ZERO,
                    Decimal::ZERO,
                    Decimal::ZERO,
                    Decimal::ZERO,
                    was.unit_price,
                    None,
                    0,
                ),
            };
        let delta = currency.round(amount - was.amount);
        let quantity_changed = (slice_hours - was.slice_hours).round_dp(6) != Decimal::ZERO
            || (gpu_eq - was.gpu_equivalent_hours).round_dp(6) != Decimal::ZERO;
        if delta.is_zero() && !quantity_changed {
            continue;
        }
        let (gpu_model, slice_kind, profile, rate_card) = key.clone();
        out.push(Line {
            key: LineKey {
                kind: LineKind::Correction,
                gpu_model,
                slice_kind,
                profile,
                rate_card,
            },
            price_source: source,
            slice_hours: slice_hours - was.slice_hours,
            gpu_equivalent_hours: gpu_eq - was.gpu_equivalent_hours,
            unit_price,
            exact_amount: exact - was.exact_amount,
            amount: delta,
            windows,
            corrects: Some(period),
            billed_before: Some(was.amount),
        });
    }
    out
}

/// The teams and lines a draft run writes for `bill`'s period, given the teams whose invoice for the
/// period is already issued (left alone) and corrections for earlier periods. `unattributed` is
/// never invoiced.
pub fn drafts(
    bill: &PeriodBill,
    issued: &BTreeSet<TeamId>,
    mut corrections: BTreeMap<TeamId, Vec<Line>>,
) -> BTreeMap<TeamId, Vec<Line>> {
    let mut out = BTreeMap::new();
    let teams: BTreeSet<TeamId> = bill
        .lines
        .keys()
        .chain(corrections.keys())
        .cloned()
        .collect();
    for team in teams {
        if issued.contains(&team) || team.is_unattributed() {
            continue;
        }
        let mut lines = bill.lines.get(&team).cloned().unwrap_or_default();
        lines.extend(corrections.remove(&team).unwrap_or_default());
        if !lines.is_empty() {
            out.insert(team, lines);
        }
    }
    out
}

/// An invoice as CSV (RFC 4180, UTF-8): one row per line, the header's fields repeated.
pub fn to_csv(invoice: &Invoice) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "invoice_number",
        "invoice_id",
        "kind",
        "status",
        "team",
        "period",
        "currency",
        "line_no",
        "line_kind",
        "description",
        "gpu_model",
        "slice_kind",
        "profile",
        "rate_card_version",
        "price_source",
        "slice_hours",
        "gpu_equivalent_hours",
        "unit_price",
        "amount",
        "windows",
        "corrects_period",
    ])?;
    // Text cells are made safe to open in a spreadsheet; numbers are left as numbers.
    let text = |v: &str| spreadsheet_safe(v).into_owned();
    let opt = |v: &Option<String>| text(v.as_deref().unwrap_or_default());
    for l in &invoice.lines {
        w.write_record([
            opt(&invoice.number),
            invoice.id.to_string(),
            invoice.kind.as_str().to_owned(),
            invoice.status.as_str().to_owned(),
            text(invoice.team.as_str()),
            invoice.period.to_string(),
            invoice.currency.clone(),
            l.line_no.to_string(),
            l.line_kind.as_str().to_owned(),
            text(&l.description),
            opt(&l.gpu_model),
            l.slice_kind
                .map(|k| k.as_str().to_owned())
                .unwrap_or_default(),
            opt(&l.profile),
            l.rate_card.map(|r| r.to_string()).unwrap_or_default(),
            l.price_source
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default(),
            l.slice_hours.to_string(),
            l.gpu_equivalent_hours.to_string(),
            l.unit_price.map(|p| p.to_string()).unwrap_or_default(),
            l.amount.to_string(),
            l.windows.to_string(),
            l.corrects_period.map(|p| p.to_string()).unwrap_or_default(),
        ])?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

#[cfg(test)]
mod tests {
    use rust_decimal_macros::dec;

    use super::*;

    fn line(model: &str, amount: Decimal, hours: Decimal) -> Line {
        Line {
            key: LineKey {
                kind: LineKind::Usage,
                gpu_model: Some(model.into()),
                slice_kind: Some(SliceKind::Mig),
                profile: Some("3g.40gb".into()),
                rate_card: 1,
            },
            price_source: Some(PriceSource::Listed),
            slice_hours: hours,
            gpu_equivalent_hours: hours / dec!(2),
            unit_price: Some(dec!(4)),
            exact_amount: amount,
            amount,
            windows: 10,
            corrects: None,
            billed_before: None,
        }
    }

    #[test]
    fn late_windows_become_a_correction_of_the_difference() {
        let usd = Currency::parse("USD").unwrap();
        let issued = line("H100", dec!(100.00), dec!(50));
        let billed = BTreeMap::from([(
            priced_key(&issued.key),
            Billed {
                slice_hours: dec!(50),
                gpu_equivalent_hours: dec!(25),
                exact_amount: dec!(100.00),
                amount: dec!(100.00),
                unit_price: Some(dec!(4)),
            },
        )]);
        let now = [line("H100", dec!(104.00), dec!(52))];
        let fixes = corrections("2026-10".parse().unwrap(), Some(&now), &billed, &usd);
        assert_eq!(fixes.len(), 1);
        assert_eq!(fixes[0].amount, dec!(4.00));
        assert_eq!(fixes[0].slice_hours, dec!(2));
        assert_eq!(fixes[0].key.kind, LineKind::Correction);
        assert_eq!(
            fixes[0].description(),
            "Correction for 2026-10: MIG 3g.40gb on H100 (rate card v1)"
        );
        // Priced again with nothing new: no correction.
        assert!(corrections("2026-10".parse().unwrap(), Some(&[issued]), &billed, &usd).is_empty());
    }
}
