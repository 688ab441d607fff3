//! Reports' service: the monthly report of a period, read from billing (the period priced, its books
//! and pending corrections) and from the rollups (consumers no team claims). What a month's report
//! is made of is read once for every team and kept while the database has not changed
//! ([`ReportCache`]), so the fleet page, every team's page and the API share one read; so are the
//! usage report's sums, priced to add up to those months' invoice lines.
//! The file stays whole: the monthly report, the usage report and its costs alone share that cache
//! and one reading of the open months' invoice lines.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use super::forecast::{self, PaceCost, TeamForecast};
use super::gauges::FleetGauges;
use super::monthly::{self, MonthlyReport, UnattributedConsumer};
use super::pod_hours::{self, PodHourSums};
use super::store;
use super::usage::{self, Dimension, GroupBy, Invoiced, Step, UsageReport, UsageSums};
use crate::billing::period::{Books, Line, LineKind, PeriodBill, PeriodState};
use crate::billing::rate_card::store as rate_cards;
use crate::billing::service::{self as billing, Error};
use crate::db::cache::SnapshotCache;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// What a month's report is made of, for every team at once.
#[derive(Debug)]
pub struct MonthInputs {
    bill: PeriodBill,
    books: Books,
    pending: BTreeMap<TeamId, Vec<Line>>,
    consumers: Vec<UnattributedConsumer>,
}

/// Months' report inputs and usage sums, kept while the database has not changed
/// (`serve --report-max-stale`).
#[derive(Debug)]
pub struct ReportCache {
    months: SnapshotCache<Month, MonthInputs>,
    usage: SnapshotCache<UsageKey, Vec<UsageSums>>,
    pod_hours: SnapshotCache<PodHoursKey, PodHourSums>,
}

/// The pod-hour sums' range and team.
type PodHoursKey = (DateTime<Utc>, DateTime<Utc>, Option<TeamId>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UsageKey {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
    step: Step,
    team: Option<TeamId>,
}

impl ReportCache {
    /// `max_stale`: how old a kept result may be when served while another request reads it anew.
    pub fn new(max_stale: Duration) -> Self {
        ReportCache {
            months: SnapshotCache::new(max_stale, 240),
            // Any range may be asked for: few are kept.
            usage: SnapshotCache::new(max_stale, 64),
            pod_hours: SnapshotCache::new(max_stale, 16),
        }
    }
}

/// The usage report's sums (`store::usage_sums`), kept while the database has not changed.
async fn usage_sums(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Result<Arc<Vec<UsageSums>>, sqlx::Error> {
    let key = UsageKey {
        from,
        to,
        group_by: group_by.clone(),
        step,
        team: team.cloned(),
    };
    cache
        .usage
        .get(pool, key, || {
            store::usage_sums(pool, from, to, group_by, step, team)
        })
        .await
}

/// The usage report of `[from, to)` (`team`: a team lead's view of their own team): the rollups'
/// sums priced by the rate cards in force, each open month the range covers whole adding up to its
/// invoice lines as billing prices them now (its drafts). An issued month adds up to what its hours
/// cost now: its invoice lines plus the corrections its late data brings. A month billing cannot
/// price (hours without a rate card) is priced on its own, its unpriced rows without a cost.
pub async fn usage_report(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Result<UsageReport, Error> {
    let sums = usage_sums(pool, cache, from, to, group_by, step, team).await?;
    let cards = rate_cards::rate_cards(pool).await?;
    let invoiced = invoiced(pool, cache, from, to, &sums, team).await?;
    // GPU-equivalent hours by the newest rate card's weights, as the dashboard has always drawn them.
    let weights = cards.values().last().map(|c| c.weights).unwrap_or_default();
    Ok(usage::build(
        from, to, group_by, step, weights, &sums, &cards, &invoiced,
    ))
}

/// The usage report's costs alone by the hour and (team, namespace, workload, pod)
/// (`usage::pod_hour_costs`): each row's cost as [`usage_report`] gives it at that step and
/// grouping, from a read of only the sums a price needs (`pod_hours::sums`). What the unit cost
/// prices.
pub async fn pod_hour_costs(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<usage::PodHourCosts, Error> {
    // The open months' invoice lines read beside the sums: every month the range covers whole (one
    // without usage has no row to add up).
    let mut months = BTreeSet::new();
    let mut m = Month::of(from);
    while m.start() < to {
        months.insert(m);
        m = m.next();
    }
    let (sums, cards, invoiced) = tokio::try_join!(
        async {
            cache
                .pod_hours
                .get(pool, (from, to, team.cloned()), || {
                    pod_hours::sums(pool, from, to, team)
                })
                .await
                .map_err(Error::from)
        },
        async { rate_cards::rate_cards(pool).await.map_err(Error::from) },
        invoiced_months(pool, cache, from, to, months, team),
    )?;
    Ok(usage::pod_hour_costs(from, to, sums, &cards, &invoiced))
}

/// The usage lines of the open months `[from, to)` covers whole, as billing prices them now: what
/// the usage report's costs add up to.
async fn invoiced(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    sums: &[UsageSums],
    team: Option<&TeamId>,
) -> Result<Invoiced, Error> {
    let months = sums.iter().map(|s| Month::of(s.bucket)).collect();
    invoiced_months(pool, cache, from, to, months, team).await
}

/// [`invoiced`] of `months`, those of them `[from, to)` covers whole.
async fn invoiced_months(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    months: BTreeSet<Month>,
    team: Option<&TeamId>,
) -> Result<Invoiced, Error> {
    let months: BTreeSet<Month> = months
        .into_iter()
        .filter(|m| m.start() >= from && m.end() <= to)
        .collect();
    // An issued month's rows are what its hours cost now, none of its bill: not priced (nor its
    // corrections read) for nothing, the dashboards' history being mostly issued months.
    let issued = match (months.first(), months.last()) {
        (Some(&first), Some(&last)) => billing::issued_periods(pool, first, last).await?,
        _ => BTreeSet::new(),
    };
    let mut invoiced = Invoiced::default();
    for m in months.difference(&issued).copied() {
        let inputs = match self::month(pool, cache, m).await {
            Ok(inputs) => inputs,
            Err(Error::Billing(_)) => continue,
            Err(e) => return Err(e),
        };
        let bill = inputs.bill();
        // An issued month's books are as issued; these rows are what its hours cost now, late data
        // included: the issued lines plus the corrections billed on a later period. (Issued since
        // the check above, it is read here as issued.)
        if bill.negative.is_some() || inputs.books().issued() {
            continue;
        }
        for (t, lines) in &bill.lines {
            if team.is_some_and(|own| own != t) {
                continue;
            }
            for l in lines {
                let k = &l.key;
                if let (LineKind::Usage, Some(model), Some(kind)) =
                    (k.kind, &k.gpu_model, k.slice_kind)
                {
                    invoiced.0.insert(
                        (
                            m,
                            t.clone(),
                            model.clone(),
                            kind,
                            k.profile.clone(),
                            k.rate_card,
                        ),
                        l.amount,
                    );
                }
            }
        }
    }
    Ok(invoiced)
}

impl MonthInputs {
    /// The month priced as billing prices it now (or as issued).
    pub fn bill(&self) -> &PeriodBill {
        &self.bill
    }

    pub fn books(&self) -> &Books {
        &self.books
    }
}

/// What `month`'s report is made of, read once while the database is unchanged.
pub async fn month(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
) -> Result<Arc<MonthInputs>, Error> {
    cache
        .months
        .get(pool, month, || month_inputs(pool, month))
        .await
}

async fn month_inputs(pool: &PgPool, month: Month) -> Result<MonthInputs, Error> {
    let (bill, books) = billing::period_bill(pool, month).await?;
    let pending = billing::pending_corrections(pool, month).await?;
    let consumers = store::unattributed_consumers(pool, month.start(), month.end()).await?;
    Ok(MonthInputs {
        bill,
        books,
        pending,
        consumers,
    })
}

/// The monthly report of `month` as of `now` (`team`: a team lead's view of their own team).
pub async fn monthly_report(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
    now: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<MonthlyReport, Error> {
    let inputs = self::month(pool, cache, month).await?;
    Ok(monthly::monthly(
        month,
        PeriodState::of(month, now, inputs.books),
        &inputs.bill,
        &inputs.pending,
        if team.is_none() {
            inputs.consumers.clone()
        } else {
            Vec::new()
        },
        team,
    ))
}

/// What `team` comes to for `month` as billing prices it now: the sum of its invoice lines.
pub async fn team_cost(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
    team: &TeamId,
) -> Result<rust_decimal::Decimal, Error> {
    let inputs = self::month(pool, cache, month).await?;
    Ok(inputs.bill.team_total(team.as_str()))
}

/// Each team's month-end forecast (`reports::forecast`) at `now`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ForecastReport {
    /// The month forecast.
    pub month: Month,
    pub as_of: DateTime<Utc>,
    /// The hours the pace is measured over: from `PACE_DAYS` UTC midnights before today's to the
    /// last whole hour.
    pub pace_from: DateTime<Utc>,
    pub pace_to: DateTime<Utc>,
    /// `null` while no rate card has priced anything.
    pub currency: Option<String>,
    /// Every team with usage in the month or in the measured days (`team`'s alone when asked),
    /// by name; unattributed usage is never invoiced, so never forecast.
    pub teams: Vec<TeamForecast>,
}

/// The month of `now` forecast per team (`team`: that team's only), in money that matches the
/// invoices: spent is the month's lines as billing prices them now; the pace is the usage report's
/// cost of the measured days.
pub async fn forecasts(
    pool: &PgPool,
    cache: &ReportCache,
    now: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<ForecastReport, Error> {
    let month = Month::of(now);
    let inputs = self::month(pool, cache, month).await?;
    let (pace_from, pace_to) = forecast::pace_range(now);
    // Exact costs, priced as billing prices them (the usage report's rows are rounded to cents).
    let sums = usage_sums(
        pool,
        cache,
        pace_from,
        pace_to,
        &GroupBy::of(vec![Dimension::Team]),
        Step::Day,
        team,
    )
    .await?;
    let cards = rate_cards::rate_cards(pool).await?;
    let currency = inputs
        .bill
        .currency
        .clone()
        .or_else(|| cards.values().last().map(|c| c.currency.clone()));
    let days = priced_days(&sums, &cards);
    let today = crate::domain::time::start_of(now.date_naive());
    // Every team the month bills, with or without usage in the measured days.
    let mut by_team: BTreeMap<TeamId, Vec<PaceCost>> = inputs
        .bill
        .lines
        .keys()
        .map(|t| (t.clone(), Vec::new()))
        .collect();
    for ((t, bucket), cost) in days {
        by_team.entry(t).or_default().push(PaceCost {
            bucket,
            whole_day: bucket < today,
            cost,
        });
    }
    let teams = match &currency {
        None => Vec::new(),
        Some(currency) => by_team
            .into_iter()
            .filter(|(t, _)| !t.is_unattributed() && team.is_none_or(|own| own == t))
            .map(|(t, pace)| {
                let spent = inputs.bill.team_total(t.as_str());
                forecast::forecast(t, now, month.end(), spent, &pace, currency)
            })
            .collect(),
    };
    Ok(ForecastReport {
        month,
        as_of: now,
        pace_from,
        pace_to,
        currency: currency.map(|c| c.code),
        teams,
    })
}

/// `team`'s forecast for the period `[start, end)` holding `now`, of its usage in `scope` (all of
/// it when `None`): spent is the usage report's exact cost of the period so far (before the
/// invoices' rounding, a cent a line at most), the pace as [`forecasts`] measures it.
pub async fn period_forecast(
    pool: &PgPool,
    cache: &ReportCache,
    now: DateTime<Utc>,
    team: &TeamId,
    scope: Option<&crate::domain::scope::UsageScope>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Option<TeamForecast>, Error> {
    use crate::domain::scope::UsageScope;
    let mut dimensions = vec![Dimension::Team];
    match scope {
        None => {}
        Some(UsageScope::Namespace(_)) => dimensions.push(Dimension::Namespace),
        Some(UsageScope::Label { key, .. }) => dimensions.push(Dimension::Label(key.clone())),
    }
    let group_by = GroupBy::of(dimensions);
    let inside = |s: &UsageSums| match scope {
        None => true,
        Some(UsageScope::Namespace(ns)) => s.namespace.as_deref() == Some(ns.as_str()),
        Some(UsageScope::Label { value, .. }) => {
            s.labels.first().and_then(|v| v.as_deref()) == Some(value.as_str())
        }
    };
    let cards = rate_cards::rate_cards(pool).await?;
    let Some(currency) = cards.values().last().map(|c| c.currency.clone()) else {
        return Ok(None);
    };
    let cost = |sums: &[UsageSums]| -> BTreeMap<DateTime<Utc>, Decimal> {
        let mut by_bucket = BTreeMap::new();
        for s in sums.iter().filter(|s| inside(s)) {
            if let Some(card) = s.rate_card.and_then(|id| cards.get(&id)) {
                *by_bucket.entry(s.bucket).or_default() += s.charge(card).to_decimal();
            }
        }
        by_bucket
    };
    let so_far = usage_sums(pool, cache, start, end, &group_by, Step::Month, Some(team)).await?;
    let spent: Decimal = cost(&so_far).values().copied().sum();
    let (pace_from, pace_to) = forecast::pace_range(now);
    let days = usage_sums(
        pool,
        cache,
        pace_from,
        pace_to,
        &group_by,
        Step::Day,
        Some(team),
    )
    .await?;
    let today = crate::domain::time::start_of(now.date_naive());
    let pace: Vec<PaceCost> = cost(&days)
        .into_iter()
        .map(|(bucket, cost)| PaceCost {
            bucket,
            whole_day: bucket < today,
            cost,
        })
        .collect();
    let mut f = forecast::forecast(team.clone(), now, end, spent, &pace, &currency);
    // Projected from the exact figure; shown, like every amount, to the minor unit.
    f.spent = currency.round(f.spent);
    Ok(Some(f))
}

/// Each team's exact cost per UTC day of `sums` (grouped by team, a row a day).
fn priced_days(
    sums: &[UsageSums],
    cards: &BTreeMap<i64, crate::billing::rate_card::RateCard>,
) -> BTreeMap<(TeamId, DateTime<Utc>), Decimal> {
    let mut days: BTreeMap<(TeamId, DateTime<Utc>), Decimal> = BTreeMap::new();
    for s in sums {
        let Some(card) = s.rate_card.and_then(|id| cards.get(&id)) else {
            continue;
        };
        *days.entry((s.team.clone(), s.bucket)).or_default() += s.charge(card).to_decimal();
    }
    days
}

/// Each team's exact cost per UTC day of `[from, to)`, as billing prices it, with the currency;
/// days without usage are not in the map.
pub async fn daily_costs(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(BTreeMap<(TeamId, DateTime<Utc>), Decimal>, Option<String>), Error> {
    let sums = usage_sums(
        pool,
        cache,
        from,
        to,
        &GroupBy::of(vec![Dimension::Team]),
        Step::Day,
        None,
    )
    .await?;
    let cards = rate_cards::rate_cards(pool).await?;
    let currency = cards.values().last().map(|c| c.currency.code.clone());
    Ok((priced_days(&sums, &cards), currency))
}

/// A slice a team held on every UTC day of a range without doing work on it
/// ([`IDLE_FRACTION`](crate::domain::usage::IDLE_FRACTION) of its measured seconds or less).
#[derive(Debug, Clone, PartialEq)]
pub struct IdleSlice {
    pub team: TeamId,
    pub node: String,
    pub gpu_uuid: String,
    pub gpu_instance_id: Option<i16>,
    pub profile: Option<String>,
    pub workload: String,
    pub held_seconds: Decimal,
    /// What the range of it cost, exact, as billing prices it.
    pub cost: Decimal,
}

/// The slices held idle on each of the `days` whole UTC days before `today`.
pub async fn idle_slices(
    pool: &PgPool,
    cache: &ReportCache,
    today: DateTime<Utc>,
    days: u32,
) -> Result<Vec<IdleSlice>, Error> {
    use crate::domain::dcgm::DcgmLabel;
    use crate::domain::usage::IDLE_FRACTION;
    let from = today - chrono::Duration::days(i64::from(days));
    let group_by = GroupBy::of(vec![
        Dimension::Team,
        Dimension::Node,
        Dimension::Dcgm(DcgmLabel::Uuid),
        Dimension::Dcgm(DcgmLabel::GpuIId),
        Dimension::Profile,
        Dimension::Workload,
    ]);
    let sums = usage_sums(pool, cache, from, today, &group_by, Step::Day, None).await?;
    let cards = rate_cards::rate_cards(pool).await?;
    type Key = (TeamId, String, String, Option<i16>, Option<String>, String);
    let mut by_slice: BTreeMap<Key, (u32, crate::domain::usage::OccupancySums, Decimal)> =
        BTreeMap::new();
    for s in sums.iter().filter(|s| !s.team.is_unattributed()) {
        let key = (
            s.team.clone(),
            s.node.clone().unwrap_or_default(),
            s.gpu_uuid.clone().unwrap_or_default(),
            s.gpu_instance_id,
            s.profile.clone(),
            s.workload.clone().unwrap_or_default(),
        );
        let e = by_slice.entry(key).or_default();
        e.0 += 1;
        e.1.held_seconds += s.sums.held_seconds;
        e.1.known_seconds += s.sums.known_seconds;
        e.1.compute_active_seconds += s.sums.compute_active_seconds;
        if let Some(card) = s.rate_card.and_then(|id| cards.get(&id)) {
            e.2 += s.charge(card).to_decimal();
        }
    }
    Ok(by_slice
        .into_iter()
        .filter(|(_, (n, sums, _))| {
            *n == days
                && sums.known_seconds > Decimal::ZERO
                && sums.compute_active_seconds <= sums.known_seconds * IDLE_FRACTION
        })
        .map(
            |((team, node, gpu_uuid, gpu_instance_id, profile, workload), (_, sums, cost))| {
                IdleSlice {
                    team,
                    node,
                    gpu_uuid,
                    gpu_instance_id,
                    profile,
                    workload,
                    held_seconds: sums.held_seconds,
                    cost,
                }
            },
        )
        .collect())
}

/// What `team` cost on average over the `months` closed months before `month`, as billing prices
/// them now (issued months as issued), to the currency's minor unit; months billing cannot price
/// (hours without a rate card) are left out, and `None` if that leaves none.
pub async fn average_cost(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
    team: &TeamId,
    months: u32,
) -> Result<Option<Decimal>, Error> {
    let mut costs = Vec::new();
    let mut currency = None;
    for k in 1..=months {
        let inputs = match self::month(pool, cache, month.minus(k)).await {
            Ok(inputs) => inputs,
            Err(Error::Billing(_)) => continue,
            Err(e) => return Err(e),
        };
        currency = currency.or_else(|| inputs.bill.currency.clone());
        costs.push(inputs.bill.team_total(team.as_str()));
    }
    let n = Decimal::from(costs.len());
    Ok((!costs.is_empty()).then(|| {
        let mean = costs.iter().sum::<Decimal>() / n;
        currency.map_or(mean, |c| c.round(mean))
    }))
}

/// The fleet's gauges for the month of `now` (`reports::gauges`): each node's ingest lag, and with
/// `billing` the month as billing prices it now and its capacity. A month billing cannot price yet
/// (no rate card) has lags and capacity only.
pub async fn fleet_gauges(
    pool: &PgPool,
    cache: &ReportCache,
    now: DateTime<Utc>,
    billing: bool,
) -> Result<FleetGauges, Error> {
    let month = Month::of(now);
    let mut g = FleetGauges {
        node_lags: store::node_ingest_lags(pool, now).await?,
        ..FleetGauges::default()
    };
    if !billing {
        return Ok(g);
    }
    g.capacity_hours = store::capacity_by_day(pool, month)
        .await?
        .iter()
        .map(|(_, h)| *h)
        .sum();
    let inputs = match self::month(pool, cache, month).await {
        Ok(inputs) => inputs,
        Err(Error::Billing(_)) => return Ok(g),
        Err(e) => return Err(e),
    };
    let bill = inputs.bill();
    g.currency = bill.currency.as_ref().map(|c| c.code.clone());
    g.unallocated_cost = Some(bill.conservation.unallocated);
    g.stranded_cost = Some(bill.conservation.stranded);
    g.held_hours = bill.charges.iter().map(|c| c.gpu_equivalent_hours).sum();
    g.measured_hours = bill
        .charges
        .iter()
        .filter_map(|c| Some((c.used_gpu_equivalent_hours?, c.gpu_equivalent_hours)))
        .fold((Decimal::ZERO, Decimal::ZERO), |(u, h), (cu, ch)| {
            (u + cu, h + ch)
        });
    g.teams = bill
        .lines
        .iter()
        .filter(|(t, _)| !t.is_unattributed())
        .map(|(t, lines)| {
            let hours = bill
                .charges
                .iter()
                .filter(|c| &c.team == t)
                .map(|c| c.gpu_equivalent_hours)
                .sum();
            (t.to_string(), lines.iter().map(|l| l.amount).sum(), hours)
        })
        .collect();
    Ok(g)
}
