//! Who owns a namespace when (issue 39). Ownership is kept in versions, like rate cards: each says
//! that from its instant on, until the namespace's next version, one team owns the namespace (or
//! none, when its unlabelled consumers are `unattributed`). A consumer's usage goes to its `team`
//! label's team whatever the namespace, else to its namespace's owner at each moment: a window
//! that straddles a change is split at the instant in proportion to its time, exactly as a window
//! that straddles an hour is (`Window::split_hour_at`), so that the parts sum to the window.
//!
//! Ingest attributes new windows with it, and a change of ownership dated in the past re-attributes
//! the hours it reaches from the raw windows with the same function, so that both give the same
//! figures to the last digit.

use std::collections::HashMap;

use chrono::{DateTime, TimeZone, Utc};

use super::team::TeamId;
use super::window::{HourlyUsage, Window};

/// The first instant the ingest contract accepts: the mappings kept before ownership was dated
/// became versions from here, "from the beginning of data" (migration 0023).
pub fn beginning() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid instant")
}

/// One version: from `from`, `team` owns the namespace (`None`: no team does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerVersion {
    pub from: DateTime<Utc>,
    pub team: Option<TeamId>,
}

/// The versions of some namespaces, each namespace's in order.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    by_namespace: HashMap<String, Vec<OwnerVersion>>,
}

impl Ownership {
    /// From `(namespace, version)` rows in any order.
    pub fn from_rows(rows: impl IntoIterator<Item = (String, OwnerVersion)>) -> Ownership {
        let mut by_namespace: HashMap<String, Vec<OwnerVersion>> = HashMap::new();
        for (namespace, v) in rows {
            by_namespace.entry(namespace).or_default().push(v);
        }
        for versions in by_namespace.values_mut() {
            versions.sort_by_key(|v| v.from);
        }
        Ownership { by_namespace }
    }

    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    fn versions(&self, namespace: &str) -> &[OwnerVersion] {
        self.by_namespace
            .get(namespace)
            .map_or(&[][..], Vec::as_slice)
    }

    /// The team that owns `namespace` at `at`; `None` when no team does.
    pub fn owner_at(&self, namespace: &str, at: DateTime<Utc>) -> Option<&TeamId> {
        let versions = self.versions(namespace);
        let n = versions.partition_point(|v| v.from <= at);
        versions[..n].last().and_then(|v| v.team.as_ref())
    }

    /// The first version of `namespace` after `at`: until when one starting at `at` holds.
    pub fn next_after(&self, namespace: &str, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let versions = self.versions(namespace);
        versions
            .get(versions.partition_point(|v| v.from <= at))
            .map(|v| v.from)
    }

    /// The instants strictly between `from` and `to` at which `namespace` gets a new version.
    pub fn changes_within(
        &self,
        namespace: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let versions = self.versions(namespace);
        let first = versions.partition_point(|v| v.from <= from);
        versions[first..]
            .iter()
            .map(|v| v.from)
            .take_while(move |&t| t < to)
    }
}

/// How far ahead a version may start: one dated 9999-12-31 would leave no room for another.
pub const MAX_DAYS_AHEAD: i64 = 400;

/// What decides a consumer's team: its `team` label, else its namespace, else nothing.
#[derive(Debug, Clone, Copy)]
pub enum Claim<'a> {
    Label(&'a TeamId),
    Namespace(&'a str),
    Nobody,
}

impl<'a> Claim<'a> {
    pub fn of(label: Option<&'a TeamId>, namespace: Option<&'a str>) -> Claim<'a> {
        match (label, namespace) {
            (Some(team), _) => Claim::Label(team),
            (None, Some(ns)) => Claim::Namespace(ns),
            (None, None) => Claim::Nobody,
        }
    }

    /// The team at `at`.
    pub fn team_at(self, ownership: &'a Ownership, at: DateTime<Utc>) -> &'a TeamId {
        match self {
            Claim::Label(team) => team,
            Claim::Namespace(ns) => ownership
                .owner_at(ns, at)
                .unwrap_or_else(|| TeamId::unattributed_ref()),
            Claim::Nobody => TeamId::unattributed_ref(),
        }
    }

    /// Whether the team changes inside `[from, to)`.
    pub fn changes_within(
        self,
        ownership: &Ownership,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> bool {
        match self {
            Claim::Namespace(ns) => ownership.changes_within(ns, from, to).next().is_some(),
            _ => false,
        }
    }
}

/// `window`'s figures by hour and team: each of its [`Window::hours`], split at the instants its
/// consumer's namespace changes owner inside it, each part to the team of its time. `None` on
/// overflow.
pub fn attribute<'a>(
    window: &Window,
    claim: Claim<'a>,
    ownership: &'a Ownership,
) -> Option<Vec<(DateTime<Utc>, &'a TeamId, HourlyUsage)>> {
    let mut out = Vec::with_capacity(window.hours.len() + 1);
    for (hour, piece) in &window.hours {
        let from = window.start.max(*hour);
        let to = window.end.min(*hour + chrono::Duration::hours(1));
        let cuts: Vec<DateTime<Utc>> = match claim {
            Claim::Namespace(ns) => ownership.changes_within(ns, from, to).collect(),
            _ => Vec::new(),
        };
        for (at, part) in window.split_hour_at(*hour, piece, &cuts)? {
            out.push((*hour, claim.team_at(ownership, at), part));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use rust_decimal_macros::dec;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn team(s: &str) -> TeamId {
        TeamId::parse(s).unwrap()
    }

    fn window(start: &str, end: &str, held: Decimal) -> Window {
        Window {
            slice: 0,
            consumer: 0,
            start: t(start),
            end: t(end),
            held_seconds: held,
            memory_byte_seconds: dec!(3e12),
            memory_peak_bytes: 7,
            compute_active_seconds: Some(held / dec!(2)),
            hours: Vec::new(),
        }
        .hourly()
        .unwrap()
    }

    fn moved_at(at: &str) -> Ownership {
        Ownership::from_rows([
            (
                "ns-move".to_owned(),
                OwnerVersion {
                    from: beginning(),
                    team: Some(team("alpha")),
                },
            ),
            (
                "ns-move".to_owned(),
                OwnerVersion {
                    from: t(at),
                    team: Some(team("beta")),
                },
            ),
        ])
    }

    #[test]
    fn a_window_straddling_a_change_is_split_at_the_instant_in_proportion_to_its_time() {
        let own = moved_at("2026-09-11T10:30:00Z");
        let w = window("2026-09-11T10:00:00Z", "2026-09-11T11:00:00Z", dec!(3600));
        let parts = attribute(&w, Claim::Namespace("ns-move"), &own).unwrap();
        let seen: Vec<(&str, Decimal, i32)> = parts
            .iter()
            .map(|p| (p.1.as_str(), p.2.held_seconds, p.2.window_count))
            .collect();
        assert_eq!(
            seen,
            vec![("alpha", dec!(1800), 1), ("beta", dec!(1800), 0)]
        );
        assert_eq!(parts[0].2.memory_byte_seconds, dec!(1.5e12));
        assert_eq!(parts[1].2.compute_active_seconds, dec!(900));
        // Both parts are of the hour 10:00; the peak holds in each.
        assert!(parts.iter().all(|p| p.0 == t("2026-09-11T10:00:00Z")));
        assert!(parts.iter().all(|p| p.2.memory_peak_bytes == 7));
    }

    #[test]
    fn parts_of_a_window_that_does_not_divide_evenly_sum_to_it_exactly() {
        // 59 s held over a 61 s window across an hour, cut at a third of a second: no finite
        // decimal, and still the parts add up to the window.
        let own = moved_at("2026-09-11T10:00:20.333333Z");
        let w = window("2026-09-11T09:59:40Z", "2026-09-11T10:00:41Z", dec!(59));
        let parts = attribute(&w, Claim::Namespace("ns-move"), &own).unwrap();
        assert_eq!(parts.len(), 3);
        let held: Decimal = parts.iter().map(|p| p.2.held_seconds).sum();
        let memory: Decimal = parts.iter().map(|p| p.2.memory_byte_seconds).sum();
        let windows: i32 = parts.iter().map(|p| p.2.window_count).sum();
        assert_eq!((held, memory, windows), (dec!(59), dec!(3e12), 1));
        let teams: Vec<&str> = parts.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(teams, vec!["alpha", "alpha", "beta"]);
    }

    #[test]
    fn a_label_wins_and_a_namespace_no_team_owns_is_unattributed() {
        let own = Ownership::from_rows([
            (
                "ns".to_owned(),
                OwnerVersion {
                    from: beginning(),
                    team: Some(team("alpha")),
                },
            ),
            (
                "ns".to_owned(),
                OwnerVersion {
                    from: t("2026-09-11T10:30:00Z"),
                    team: None,
                },
            ),
        ]);
        let w = window("2026-09-11T10:00:00Z", "2026-09-11T11:00:00Z", dec!(3600));
        let label = team("search");
        let labelled = attribute(&w, Claim::of(Some(&label), Some("ns")), &own).unwrap();
        assert_eq!(labelled.len(), 1);
        assert_eq!(labelled[0].1, "search");
        let parts = attribute(&w, Claim::Namespace("ns"), &own).unwrap();
        let teams: Vec<&str> = parts.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(teams, vec!["alpha", "unattributed"]);
        // Before its first version a namespace is no team's, and so is a consumer with neither.
        assert_eq!(own.owner_at("ns", t("1999-12-31T23:59:59Z")), None);
        assert_eq!(
            Claim::Nobody.team_at(&own, t("2026-09-11T10:00:00Z")),
            "unattributed"
        );
    }

    #[test]
    fn a_change_on_a_window_boundary_splits_nothing() {
        let own = moved_at("2026-09-11T10:01:00Z");
        let before = window("2026-09-11T10:00:00Z", "2026-09-11T10:01:00Z", dec!(60));
        let after = window("2026-09-11T10:01:00Z", "2026-09-11T10:02:00Z", dec!(60));
        let a = attribute(&before, Claim::Namespace("ns-move"), &own).unwrap();
        let b = attribute(&after, Claim::Namespace("ns-move"), &own).unwrap();
        assert_eq!((a.len(), a[0].1.as_str()), (1, "alpha"));
        assert_eq!((b.len(), b[0].1.as_str()), (1, "beta"));
        assert_eq!(b[0].2, after.hours[0].1);
    }
}
