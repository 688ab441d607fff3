//! Rate cards (pure; their rows are `store`'s): effective-dated versions of what a GPU-hour costs, how compute and memory weigh in a
//! share, what each isolation level is discounted, and what happens to unallocated capacity. A version
//! is never edited once published; a change is a new version with a later `effective_from`.

pub mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::domain::exact::Exact;
use crate::domain::fields::FieldError;
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::time::{floor_hour, month_of, next_month, start_of};

/// What unallocated capacity (the part of a GPU no slice held) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdlePolicy {
    /// The platform carries it, on a line of its own.
    Platform,
    /// Teams carry it, in proportion to their charges.
    Spread,
}

impl IdlePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            IdlePolicy::Platform => "platform",
            IdlePolicy::Spread => "spread",
        }
    }
}

impl FromStr for IdlePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "platform" => Ok(IdlePolicy::Platform),
            "spread" => Ok(IdlePolicy::Spread),
            _ => Err(format!("idle_policy {s:?} is not one of platform, spread")),
        }
    }
}

/// Price multipliers by isolation level: weaker isolation is cheaper, the platform carrying the
/// noisy-neighbour risk.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IsolationFactors {
    #[schema(value_type = String, example = "1.00")]
    pub mig: Decimal,
    #[schema(value_type = String, example = "1.00")]
    pub whole: Decimal,
    #[schema(value_type = String, example = "0.90")]
    pub mps: Decimal,
    #[schema(value_type = String, example = "0.90")]
    pub vgpu: Decimal,
    #[schema(value_type = String, example = "0.75")]
    pub timeslice: Decimal,
}

impl Default for IsolationFactors {
    fn default() -> Self {
        IsolationFactors {
            mig: Decimal::ONE,
            whole: Decimal::ONE,
            mps: Decimal::new(90, 2),
            vgpu: Decimal::new(90, 2),
            timeslice: Decimal::new(75, 2),
        }
    }
}

impl IsolationFactors {
    pub fn of(&self, kind: SliceKind) -> Decimal {
        match kind {
            SliceKind::Mig => self.mig,
            SliceKind::Whole => self.whole,
            SliceKind::Mps => self.mps,
            SliceKind::Vgpu => self.vgpu,
            SliceKind::Timeslice => self.timeslice,
        }
    }
}

/// Where a GPU-hour's price came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PriceSource {
    /// The model is on the rate card's price list.
    Listed,
    /// The model is not: the rate card's `default_hourly_cost` applies, and reports say so.
    Default,
}

impl PriceSource {
    pub const ALL: [PriceSource; 2] = [PriceSource::Listed, PriceSource::Default];

    pub fn as_str(self) -> &'static str {
        match self {
            PriceSource::Listed => "listed",
            PriceSource::Default => "default",
        }
    }
}

impl FromStr for PriceSource {
    type Err = crate::domain::text::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::domain::text::UnknownName::find("price source", s, &Self::ALL, |k| k.as_str())
    }
}

/// An ISO 4217 currency and its minor unit (2 for USD: cents; 0 for JPY).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency {
    pub code: String,
    pub minor_units: u32,
}

impl Currency {
    pub fn parse(code: &str) -> Result<Currency, String> {
        let c = iso_currency::Currency::from_code(code)
            .ok_or_else(|| format!("{code:?} is not an ISO 4217 currency code"))?;
        let minor_units = c
            .exponent()
            .ok_or_else(|| format!("{code} has no minor unit and cannot be billed"))?;
        Ok(Currency {
            code: code.to_owned(),
            minor_units: u32::from(minor_units),
        })
    }

    /// Rounds once, to the minor unit, half to even (banker's rounding).
    pub fn round(&self, amount: impl Into<Exact>) -> Decimal {
        amount.into().round(self.minor_units)
    }

    /// Half a minor unit: the most one rounding can move an amount.
    pub fn half_unit(&self) -> Decimal {
        Decimal::new(5, self.minor_units + 1)
    }
}

/// A published rate card version.
#[derive(Debug, Clone, PartialEq)]
pub struct RateCard {
    /// The version number.
    pub id: i64,
    pub effective_from: DateTime<Utc>,
    pub currency: Currency,
    pub weights: ShareWeights,
    pub factors: IsolationFactors,
    pub idle_policy: IdlePolicy,
    /// Hourly cost per GPU model as NVML names it.
    pub prices: BTreeMap<String, Decimal>,
    pub default_hourly_cost: Decimal,
    pub note: Option<String>,
}

impl RateCard {
    /// The hourly cost of a whole GPU of `model`, and whether the price list had it.
    pub fn hourly_cost(&self, model: &str) -> (Decimal, PriceSource) {
        match self.prices.get(model) {
            Some(p) => (*p, PriceSource::Listed),
            None => (self.default_hourly_cost, PriceSource::Default),
        }
    }
}

/// A decimal given as a string (`"4.00"`) or a whole number (`4`): exact either way. A fractional
/// JSON or TOML number is refused: it has been through binary floating point before it gets here,
/// and prices and shares stay exact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecimalInput(pub Decimal);

impl<'de> Deserialize<'de> for DecimalInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = DecimalInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a decimal in a string, e.g. \"4.00\", or a whole number")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<DecimalInput, E> {
                Decimal::from_str(s.trim())
                    .map(DecimalInput)
                    .map_err(|_| E::custom(format!("{s:?} is not a decimal number")))
            }
            fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<DecimalInput, E> {
                Err(E::custom(format!(
                    "{f} is a floating-point number; write decimals as strings, e.g. \"{f}\", so they stay exact"
                )))
            }
            fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<DecimalInput, E> {
                Ok(DecimalInput(Decimal::from(i)))
            }
            fn visit_u64<E: serde::de::Error>(self, i: u64) -> Result<DecimalInput, E> {
                Ok(DecimalInput(Decimal::from(i)))
            }
        }
        d.deserialize_any(V)
    }
}

impl utoipa::PartialSchema for DecimalInput {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::SchemaType::Array(vec![
                utoipa::openapi::Type::String,
                utoipa::openapi::Type::Integer,
            ]))
            .pattern(Some(r"^\s*-?\d{1,14}(\.\d{1,14})?\s*$"))
            .description(Some(
                "A decimal in a string, e.g. \"4.00\", or a whole number; fractional JSON numbers are refused (they would pass through floating point)",
            ))
            .examples([serde_json::json!("4.00")])
            .into()
    }
}

impl utoipa::ToSchema for DecimalInput {}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct WeightsInput {
    pub compute: DecimalInput,
    pub memory: DecimalInput,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FactorsInput {
    pub mig: Option<DecimalInput>,
    pub whole: Option<DecimalInput>,
    pub mps: Option<DecimalInput>,
    pub vgpu: Option<DecimalInput>,
    pub timeslice: Option<DecimalInput>,
}

/// A new rate card version as posted (`POST /v1/rate-cards`) or loaded from TOML
/// (`slicemeter rate-card load`, see `deploy/rate-card.example.toml`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateCardInput {
    /// From when it prices hours: on an hour boundary, later than every published version.
    #[schema(example = "2026-11-01T00:00:00Z")]
    pub effective_from: DateTime<Utc>,
    /// ISO 4217, e.g. USD.
    #[schema(example = "USD")]
    pub currency: String,
    /// Default 0.5 / 0.5; they must sum to 1.
    pub weights: Option<WeightsInput>,
    /// Defaults: mig 1.00, whole 1.00, mps 0.90, vgpu 0.90, timeslice 0.75.
    pub isolation_factors: Option<FactorsInput>,
    /// `platform` (default) or `spread`.
    pub idle_policy: Option<String>,
    /// Hourly cost of models missing from `prices`.
    pub default_hourly_cost: DecimalInput,
    /// Hourly cost of a whole GPU, by model name as NVML reports it.
    #[schema(value_type = BTreeMap<String, String>)]
    pub prices: BTreeMap<String, DecimalInput>,
    pub note: Option<String>,
}

/// How far ahead a version may start: a card dated 9999-12-31 would leave no room for another.
pub const MAX_DAYS_AHEAD: i64 = 400;
/// The highest hourly cost of one GPU a card may set (in its currency's major unit): with it, a
/// month's fleet cost of a million GPUs stays under 10^15, far inside an exact decimal.
pub const MAX_HOURLY_COST: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

impl RateCardInput {
    /// Checks the input at `now`; `id` 0 stands for "not yet stored".
    pub fn validate(self, now: DateTime<Utc>) -> Result<RateCard, Vec<FieldError>> {
        let mut errors = Vec::new();
        if floor_hour(self.effective_from) != self.effective_from {
            errors.push(FieldError::new(
                "effective_from",
                format!(
                    "{} is not on an hour boundary; rate cards apply by the hour",
                    self.effective_from
                ),
            ));
        } else if self.effective_from > now + chrono::Duration::days(MAX_DAYS_AHEAD) {
            errors.push(FieldError::new(
                "effective_from",
                format!(
                    "{} is more than {MAX_DAYS_AHEAD} days ahead; publish a version closer to when it applies",
                    self.effective_from
                ),
            ));
        }
        let currency = Currency::parse(&self.currency)
            .map_err(|e| errors.push(FieldError::new("currency", e)))
            .ok();
        let weights = match &self.weights {
            None => Some(ShareWeights::default()),
            Some(w) => ShareWeights::new(w.compute.0, w.memory.0)
                .map_err(|e| errors.push(FieldError::new("weights", e.to_string())))
                .ok(),
        };
        let mut factors = IsolationFactors::default();
        if let Some(f) = &self.isolation_factors {
            for (name, given, slot) in [
                ("mig", f.mig, &mut factors.mig),
                ("whole", f.whole, &mut factors.whole),
                ("mps", f.mps, &mut factors.mps),
                ("vgpu", f.vgpu, &mut factors.vgpu),
                ("timeslice", f.timeslice, &mut factors.timeslice),
            ] {
                if let Some(DecimalInput(v)) = given {
                    if v < Decimal::ZERO || v > Decimal::ONE {
                        errors.push(FieldError::new(
                            format!("isolation_factors.{name}"),
                            format!("an isolation factor is between 0 and 1, got {v}"),
                        ));
                    }
                    *slot = v;
                }
            }
        }
        let idle_policy = self
            .idle_policy
            .as_deref()
            .unwrap_or("platform")
            .parse::<IdlePolicy>()
            .map_err(|e| errors.push(FieldError::new("idle_policy", e)))
            .ok();
        let cost_error = |cost: Decimal| {
            if cost < Decimal::ZERO {
                Some("an hourly cost must not be negative".to_owned())
            } else if cost > MAX_HOURLY_COST {
                Some(format!("an hourly cost is at most {MAX_HOURLY_COST}"))
            } else if cost.normalize().scale() > 6 {
                Some("an hourly cost has at most six decimals".to_owned())
            } else {
                None
            }
        };
        if let Some(e) = cost_error(self.default_hourly_cost.0) {
            errors.push(FieldError::new("default_hourly_cost", e));
        }
        let mut prices = BTreeMap::new();
        for (model, DecimalInput(cost)) in self.prices {
            if crate::domain::text::check(&model, 200).is_err() {
                errors.push(FieldError::new(
                    "prices",
                    "a model name has 1 to 200 printable characters",
                ));
            } else if let Some(e) = cost_error(cost) {
                errors.push(FieldError::new(format!("prices.{model}"), e));
            }
            prices.insert(model, cost);
        }
        match (currency, weights, idle_policy, errors.is_empty()) {
            (Some(currency), Some(weights), Some(idle_policy), true) => Ok(RateCard {
                id: 0,
                effective_from: self.effective_from,
                currency,
                weights,
                factors,
                idle_policy,
                prices,
                default_hourly_cost: self.default_hourly_cost.0,
                note: self.note,
            }),
            _ => Err(errors),
        }
    }
}

/// Why a rate card version cannot be published or withdrawn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateCardConflict {
    #[error("effective_from must be later than {0}, the latest version's")]
    NotLater(DateTime<Utc>),
    #[error(
        "effective_from falls in {0}, a period with issued invoices; a new version may start from {1}"
    )]
    IssuedPeriod(NaiveDate, NaiveDate),
    #[error("the published versions are in {0}; one deployment bills in one currency")]
    Currency(String),
    #[error("there is no rate card version {0}")]
    NotFound(i64),
    #[error(
        "rate card version {0} is in force since {1} and cannot be withdrawn; publish a new version instead"
    )]
    InForce(i64, DateTime<Utc>),
    #[error("rate card version {0} prices {1} invoice lines and cannot be withdrawn")]
    Invoiced(i64, i64),
}

/// The version in force at `at`: the latest that started by then.
pub fn in_force_at(
    cards: &std::collections::BTreeMap<i64, RateCard>,
    at: DateTime<Utc>,
) -> Option<&RateCard> {
    cards
        .values()
        .filter(|c| c.effective_from <= at)
        .max_by_key(|c| c.effective_from)
}

/// Whether `card` may be published after the latest version (its start and currency) and the last
/// period with issued invoices: it starts after both and keeps the currency.
pub fn may_publish(
    card: &RateCard,
    latest: Option<(DateTime<Utc>, &str)>,
    last_issued: Option<NaiveDate>,
) -> Result<(), RateCardConflict> {
    if let Some((from, currency)) = latest {
        if card.effective_from <= from {
            return Err(RateCardConflict::NotLater(from));
        }
        if currency != card.currency.code {
            return Err(RateCardConflict::Currency(currency.to_owned()));
        }
    }
    if let Some(last_issued) = last_issued {
        let free_from = next_month(last_issued);
        if card.effective_from < start_of(free_from) {
            return Err(RateCardConflict::IssuedPeriod(
                month_of(card.effective_from),
                free_from,
            ));
        }
    }
    Ok(())
}

/// Whether `card` may be withdrawn at `now`, `lines` invoice lines being priced by it: only before
/// it is in force and while nothing was invoiced with it (a mistyped date or price, say).
pub fn may_withdraw(
    card: &RateCard,
    now: DateTime<Utc>,
    lines: i64,
) -> Result<(), RateCardConflict> {
    if card.effective_from <= now {
        return Err(RateCardConflict::InForce(card.id, card.effective_from));
    }
    if lines > 0 {
        return Err(RateCardConflict::Invoiced(card.id, lines));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn now() -> DateTime<Utc> {
        "2026-11-01T00:00:00Z".parse().unwrap()
    }

    fn input(toml: &str) -> RateCardInput {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn the_example_rate_card_parses_with_its_defaults() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/rate-card.example.toml"
        ))
        .unwrap();
        let card = input(&text).validate(now()).unwrap();
        assert_eq!(card.currency.code, "USD");
        assert_eq!(
            card.hourly_cost("NVIDIA H100 80GB HBM3"),
            (dec!(4.00), PriceSource::Listed)
        );
        assert_eq!(
            card.hourly_cost("Tesla T4"),
            (card.default_hourly_cost, PriceSource::Default)
        );
        assert_eq!(card.factors, IsolationFactors::default());
        assert_eq!(card.weights, ShareWeights::default());
    }

    #[test]
    fn decimals_are_strings_or_whole_numbers_never_floats() {
        let card = |cost: &str| {
            serde_json::from_str::<RateCardInput>(&format!(
                r#"{{"effective_from": "2026-11-01T00:00:00Z", "currency": "USD",
                    "default_hourly_cost": {cost}, "prices": {{}}}}"#
            ))
        };
        assert_eq!(card(r#""4.10""#).unwrap().default_hourly_cost.0, dec!(4.10));
        assert_eq!(card("4").unwrap().default_hourly_cost.0, dec!(4));
        let err = card("4.1").unwrap_err().to_string();
        assert!(
            err.contains("4.1 is a floating-point number; write decimals as strings"),
            "{err}"
        );
        let err = toml::from_str::<RateCardInput>(
            "effective_from = \"2026-11-01T00:00:00Z\"\ncurrency = \"USD\"\ndefault_hourly_cost = \"3\"\n[prices]\n\"NVIDIA H200\" = 5.2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("write decimals as strings"), "{err}");
    }

    #[test]
    fn a_bad_rate_card_names_every_bad_field() {
        let errors = input(
            r#"effective_from = "2026-11-01T00:30:00Z"
               currency = "XYZ"
               idle_policy = "nobody"
               default_hourly_cost = -1
               [weights]
               compute = "0.6"
               memory = "0.6"
               [isolation_factors]
               mps = "1.5"
               [prices]
               "NVIDIA H100 80GB HBM3" = "-4"
            "#,
        )
        .validate(now())
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "effective_from",
                "currency",
                "weights",
                "isolation_factors.mps",
                "idle_policy",
                "default_hourly_cost",
                "prices.NVIDIA H100 80GB HBM3"
            ]
        );
    }

    #[test]
    fn a_version_far_ahead_or_priced_past_any_card_is_refused() {
        let card = |from: &str, cost: &str| {
            input(&format!(
                "effective_from = \"{from}\"\ncurrency = \"USD\"\ndefault_hourly_cost = \"{cost}\"\n[prices]\n"
            ))
            .validate(now())
        };
        assert!(card("2027-12-05T00:00:00Z", "3").is_ok(), "399 days ahead");
        let errors = card("9999-12-31T00:00:00Z", "3").unwrap_err();
        assert_eq!(errors[0].field, "effective_from");
        assert!(
            errors[0].message.contains("more than 400 days ahead"),
            "{errors:?}"
        );
        let errors = card("2026-12-01T00:00:00Z", "1000000.01").unwrap_err();
        assert_eq!(errors[0].field, "default_hourly_cost");
        assert!(errors[0].message.contains("at most 1000000"), "{errors:?}");
        let errors = card("2026-12-01T00:00:00Z", "0.0000001").unwrap_err();
        assert!(errors[0].message.contains("six decimals"), "{errors:?}");
    }

    #[test]
    fn amounts_round_half_to_even_to_the_minor_unit() {
        let usd = Currency::parse("USD").unwrap();
        assert_eq!(usd.round(dec!(1337.142857)), dec!(1337.14));
        assert_eq!(usd.round(dec!(0.125)), dec!(0.12));
        assert_eq!(usd.round(dec!(0.135)), dec!(0.14));
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(jpy.round(dec!(2.5)), dec!(2));
        assert_eq!(jpy.half_unit(), dec!(0.5));
        assert_eq!(Currency::parse("KWD").unwrap().minor_units, 3);
    }
}
