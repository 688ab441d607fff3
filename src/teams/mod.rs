//! Teams and the namespaces they own over time. A namespace belongs to a team from an instant
//! (`domain::ownership`), so a change of its list is a version from `effective_from` (the request's
//! time unless given): it re-attributes the unlabelled consumers' usage from that instant until the
//! namespace's next version, never before. The hours it reaches change team in the transaction that
//! changes the list, from the rollups where an hour holds one owner throughout and from the raw
//! windows where the change falls inside an hour; a change that would reach an issued month is
//! refused, since its books are frozen.

pub mod store;

/// What the dashboard and the API read of it (the web layer reads through these, not the store).
pub use store::{TeamRow, VersionRow, changes_between, list};

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;
use crate::domain::ownership::{self, Claim, Ownership};
use crate::domain::team::TeamId;
use crate::domain::window::Window;
use store::{HourRow, Reach, SplitHour};

/// A change to a team: `None` leaves a field as it is (for a new team: its id as display name, no
/// cost center, GL account or namespaces); `Some(None)` clears an optional field.
#[derive(Debug, Clone, Copy, Default)]
pub struct TeamUpdate<'a> {
    pub display_name: Option<&'a str>,
    pub cost_center: Option<Option<&'a str>>,
    pub gl_account: Option<Option<&'a str>>,
    /// Replaces the namespace list from `effective_from` on.
    pub namespaces: Option<&'a [String]>,
    /// When the new list takes effect; `None`: the request's time (read once the change holds
    /// the ownership lock, so that of two changes the later to commit is the later in time).
    pub effective_from: Option<DateTime<Utc>>,
    /// Why (recorded with the versions and in the audit log).
    pub reason: Option<&'a str>,
}

/// What a put changed.
#[derive(Debug, Clone)]
pub struct PutOutcome {
    pub team: TeamRow,
    /// When the namespaces it gained or lost changed hands (`None`: the list was not sent).
    pub effective_from: Option<DateTime<Utc>>,
    pub gained: Vec<String>,
    pub lost: Vec<String>,
    /// Consumers whose usage from `effective_from` on changed team.
    pub reattributed_consumers: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error("namespace {namespace:?} belongs to team {owner:?}; remove it there first")]
    NamespaceTaken { namespace: String, owner: String },
    #[error(
        "namespace {namespace:?} would change hands from {from} on, which reaches {month}, a period with issued invoices: its books are frozen. Choose an effective_from after it, or credit its issued invoices first (a credit note is how an issued month is corrected)"
    )]
    IssuedMonth {
        namespace: String,
        from: String,
        month: String,
    },
    #[error(
        "the change falls inside the hour from {hour}, whose raw windows are no longer kept (retention), so that hour cannot be split at {at}; choose an effective_from on an hour boundary"
    )]
    RawWindowsGone { hour: String, at: String },
    /// A stored window that ingest split by its owners could not be split again: a bug, or a row
    /// not written by ingest.
    #[error("a stored window from {start} could not be split again at the change of owner")]
    WindowUnsplittable { start: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates or changes a team (only the fields `u` gives); a new namespace list takes effect from
/// `u.effective_from`, and the usage it moves from then on changes team at once.
pub async fn put(
    pool: &PgPool,
    team: &TeamId,
    u: TeamUpdate<'_>,
    actor: &Actor,
) -> Result<PutOutcome, TeamError> {
    let mut tx = pool.begin().await?;
    // The team's row first, then the ownership lock: a batch that creates the same team for a
    // `team` label does so before it takes the share lock it holds to commit (never the other
    // way round, so the two never wait on each other in a circle).
    let current = store::lock(&mut tx, team).await?;
    let (name, cost_center, gl_account) = match &current {
        Some(c) => (
            u.display_name.unwrap_or(&c.display_name),
            u.cost_center.unwrap_or(c.cost_center.as_deref()),
            u.gl_account.unwrap_or(c.gl_account.as_deref()),
        ),
        None => (
            u.display_name.unwrap_or(team.as_str()),
            u.cost_center.flatten(),
            u.gl_account.flatten(),
        ),
    };
    store::upsert(&mut tx, team, name, cost_center, gl_account).await?;
    let mut change = None;
    if let Some(namespaces) = u.namespaces {
        store::lock_ownership(&mut tx).await?;
        let at = u.effective_from.unwrap_or_else(now_to_the_microsecond);
        change = Some((
            at,
            change_namespaces(&mut tx, team, namespaces, at, u.reason).await?,
        ));
    }
    let (gained, lost, moved) = change.clone().map(|c| c.1).unwrap_or_default();
    audit::record(
        &mut tx,
        actor,
        AuditAction::TeamPut,
        team.as_str(),
        serde_json::json!({
            "display_name": name, "cost_center": cost_center, "gl_account": gl_account,
            "namespaces": u.namespaces, "effective_from": change.as_ref().map(|c| c.0),
            "reason": u.reason, "namespaces_gained": gained, "namespaces_removed": lost,
            "reattributed_consumers": moved,
        }),
    )
    .await?;
    tx.commit().await?;
    let row = store::list(pool, Some(team))
        .await?
        .pop()
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok(PutOutcome {
        team: row,
        effective_from: change.map(|c| c.0),
        gained,
        lost,
        reattributed_consumers: moved,
    })
}

/// The server's clock, to the microsecond (what PostgreSQL keeps).
fn now_to_the_microsecond() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
}

/// From `at`, `team` owns exactly `namespaces`: versions for those it gains and loses then, and
/// their consumers' usage re-attributed until each one's next version. Returns what it gained,
/// lost, and how many consumers changed team.
async fn change_namespaces(
    tx: &mut sqlx::PgConnection,
    team: &TeamId,
    namespaces: &[String],
    at: DateTime<Utc>,
    reason: Option<&str>,
) -> Result<(Vec<String>, Vec<String>, u64), TeamError> {
    let held = store::owned_at(tx, team, at).await?;
    let before = store::ownership(tx, namespaces).await?;
    let mut gained = Vec::new();
    for ns in namespaces {
        match before.owner_at(ns, at) {
            Some(owner) if owner == team => {}
            Some(owner) => {
                return Err(TeamError::NamespaceTaken {
                    namespace: ns.clone(),
                    owner: owner.to_string(),
                });
            }
            None => gained.push(ns.clone()),
        }
    }
    gained.sort();
    let lost: Vec<String> = held
        .into_iter()
        .filter(|ns| !namespaces.contains(ns))
        .collect();
    if gained.is_empty() && lost.is_empty() {
        return Ok((gained, lost, 0));
    }
    let changed: Vec<String> = gained.iter().chain(&lost).cloned().collect();
    let prior = store::ownership(tx, &changed).await?;
    // Each namespace's change holds until its next version.
    let reaches: Vec<Reach> = changed
        .iter()
        .map(|ns| Reach {
            namespace: ns.clone(),
            from: at,
            until: prior.next_after(ns, at),
        })
        .collect();
    check_no_issued_month(tx, &reaches).await?;
    store::put_versions(tx, &gained, at, Some(team), reason).await?;
    store::put_versions(tx, &lost, at, None, reason).await?;
    let owners = store::ownership(tx, &changed).await?;
    let (mut moved, split) = store::reattribute_whole_hours(tx, &reaches).await?;
    if !split.is_empty() {
        let windows = store::raw_windows(tx, &split).await?;
        let rows = split_hours(&split, &windows, &owners, at)?;
        moved.extend(changed_team(&split, &rows));
        store::replace_split_hours(tx, &rows).await?;
    }
    store::reattribute_days(tx).await?;
    moved.sort_unstable();
    moved.dedup();
    Ok((gained, lost, moved.len() as u64))
}

/// Refuses a change that reaches a month whose books are frozen, and takes the period locks of
/// the months it reaches (up to the current one: later months have no books yet).
async fn check_no_issued_month(
    tx: &mut sqlx::PgConnection,
    reaches: &[Reach],
) -> Result<(), TeamError> {
    let now = Utc::now();
    let first = reaches.iter().map(|r| first_of_month(r.from)).min();
    // A reach ends before its next version: one that starts on the 1st reaches none of its month.
    let last = reaches
        .iter()
        .map(|r| {
            let end = r
                .until
                .map_or(now, |u| u - chrono::Duration::microseconds(1));
            first_of_month(end.min(now).max(r.from))
        })
        .max();
    let (Some(first), Some(last)) = (first, last) else {
        return Ok(());
    };
    let Some(month) = store::lock_months_and_find_issued(tx, first, last).await? else {
        return Ok(());
    };
    let reach = reaches
        .iter()
        .find(|r| first_of_month(r.from) <= month && r.until.is_none_or(|u| month_start(month) < u))
        .unwrap_or(&reaches[0]);
    Err(TeamError::IssuedMonth {
        namespace: reach.namespace.clone(),
        from: reach
            .from
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        month: month.format("%Y-%m").to_string(),
    })
}

fn first_of_month(t: DateTime<Utc>) -> NaiveDate {
    NaiveDate::from_ymd_opt(t.year(), t.month(), 1).unwrap_or(t.date_naive())
}

fn month_start(d: NaiveDate) -> DateTime<Utc> {
    d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
}

/// A split hour's key: the hour, slice, GPU and consumer.
type HourKey = (DateTime<Utc>, i32, i32, i64);

/// The rollup rows of the split hours made again from the raw windows, each part under the team of
/// its time, exactly as ingest would have made them under today's versions. Refused when the raw
/// windows no longer add up to what the rollup holds (dropped by retention).
fn split_hours(
    hours: &[SplitHour],
    windows: &[store::RawWindow],
    owners: &Ownership,
    at: DateTime<Utc>,
) -> Result<Vec<HourRow>, TeamError> {
    let mut rows = Vec::new();
    let mut found: BTreeMap<HourKey, (Decimal, i64)> = BTreeMap::new();
    let namespace: BTreeMap<HourKey, &str> = hours
        .iter()
        .map(|h| {
            (
                (h.hour, h.slice_id, h.gpu_id, h.consumer_id),
                h.namespace.as_str(),
            )
        })
        .collect();
    for r in windows {
        let key = (r.hour, r.slice_id, r.gpu_id, r.consumer_id);
        let Some(ns) = namespace.get(&key) else {
            continue;
        };
        let window = Window {
            slice: 0,
            consumer: 0,
            start: r.window_start,
            end: r.window_end,
            held_seconds: r.held_seconds,
            memory_byte_seconds: r.memory_byte_seconds,
            memory_peak_bytes: r.memory_peak_bytes,
            compute_active_seconds: r.compute_active_seconds,
            hours: Vec::new(),
        }
        .hourly();
        let parts = window
            .as_ref()
            .and_then(|w| ownership::attribute(w, Claim::Namespace(ns), owners))
            .ok_or_else(|| TeamError::WindowUnsplittable {
                start: r
                    .window_start
                    .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            })?;
        for (hour, team, part) in parts.into_iter().filter(|p| p.0 == r.hour) {
            let f = found.entry(key).or_default();
            f.0 += part.held_seconds;
            f.1 += i64::from(part.window_count);
            rows.push(HourRow {
                hour,
                slice_id: r.slice_id,
                gpu_id: r.gpu_id,
                consumer_id: r.consumer_id,
                team_id: team.clone(),
                held_seconds: part.held_seconds,
                memory_byte_seconds: part.memory_byte_seconds,
                memory_peak_bytes: part.memory_peak_bytes,
                compute_active_seconds: part.compute_active_seconds,
                compute_known_seconds: part.compute_known_seconds,
                window_count: part.window_count,
            });
        }
    }
    // Sums of many parts can differ from the rollup's in the last of 28 digits (ingest sums a
    // batch's parts in decimals, then the database exactly); a missing window differs by its
    // seconds.
    let close = Decimal::new(1, 6);
    for h in hours {
        let (held, count) = found
            .get(&(h.hour, h.slice_id, h.gpu_id, h.consumer_id))
            .copied()
            .unwrap_or_default();
        if (held - h.held_seconds).abs() > close || count != h.window_count {
            return Err(TeamError::RawWindowsGone {
                hour: h.hour.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                at: at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            });
        }
    }
    Ok(rows)
}

/// The consumers of the split hours whose teams in an hour are not what they were.
fn changed_team(hours: &[SplitHour], rows: &[HourRow]) -> Vec<i64> {
    let mut now: BTreeMap<(DateTime<Utc>, i32, i64), BTreeSet<&TeamId>> = BTreeMap::new();
    for r in rows {
        now.entry((r.hour, r.slice_id, r.consumer_id))
            .or_default()
            .insert(&r.team_id);
    }
    hours
        .iter()
        .filter(|h| {
            let before: BTreeSet<&TeamId> = h.teams.iter().collect();
            now.get(&(h.hour, h.slice_id, h.consumer_id)) != Some(&before)
        })
        .map(|h| h.consumer_id)
        .collect()
}
