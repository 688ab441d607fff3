//! What a month's rollup covers of its closed days, and which months are due to be built.

use chrono::{DateTime, Utc};

use crate::domain::time::Month;

/// A closed day as the day summaries know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct DayState {
    pub day: DateTime<Utc>,
    /// When it was summarised last; none if never.
    pub summarised_at: Option<DateTime<Utc>>,
    /// Written since it was summarised.
    pub stale: bool,
}

/// What a month's rollup covers: its days `[month start, through)`, each summarised at `seen`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Cover {
    pub month: DateTime<Utc>,
    pub through: DateTime<Utc>,
    pub seen: Vec<DateTime<Utc>>,
}

/// What `month`'s rollup can cover of `days` (closed days, in order): its first days while each
/// is summarised and not stale; none if its first day is not.
pub fn cover(month: Month, days: &[DayState]) -> Option<Cover> {
    let mut day = month.start();
    let mut seen = Vec::new();
    for d in days.iter().skip_while(|d| d.day < month.start()) {
        match d.summarised_at {
            Some(at) if d.day == day && !d.stale && day < month.end() => {
                seen.push(at);
                day += chrono::Duration::hours(24);
            }
            _ => break,
        }
    }
    (!seen.is_empty()).then(|| Cover {
        month: month.start(),
        through: day,
        seen,
    })
}

/// The months of `days` (closed days, in order) whose rollup is not what `built` holds, the newest
/// first.
pub fn due(days: &[DayState], built: &[Cover]) -> Vec<Month> {
    let mut months: Vec<Month> = days.iter().map(|d| Month::of(d.day)).collect();
    months.dedup();
    months
        .into_iter()
        .rev()
        .filter(|m| match cover(*m, days) {
            Some(c) => !built.contains(&c),
            None => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::{DayState, cover, due};
    use crate::domain::time::Month;

    #[test]
    fn a_month_covers_its_first_summarised_days_and_is_due_when_they_changed() {
        let day = |m: u32, d: u32| Utc.with_ymd_and_hms(2026, m, d, 0, 0, 0).unwrap();
        // Summarised 20 minutes after the day's end.
        let at = |m: u32, d: u32| day(m, d) + chrono::Duration::minutes(24 * 60 + 20);
        let summarised = |m: u32, d: u32| DayState {
            day: day(m, d),
            summarised_at: Some(at(m, d)),
            stale: false,
        };
        // All of October summarised; November's 1st and 2nd, its 3rd stale, its 4th summarised.
        let mut days: Vec<DayState> = (1..=31).map(|d| summarised(10, d)).collect();
        days.extend([summarised(11, 1), summarised(11, 2)]);
        days.push(DayState {
            stale: true,
            ..summarised(11, 3)
        });
        days.push(summarised(11, 4));
        let october = Month::of(day(10, 5));
        let november = Month::of(day(11, 5));
        let whole = cover(october, &days).expect("October is summarised");
        assert_eq!(whole.through, day(11, 1));
        assert_eq!(whole.seen.len(), 31);
        let part = cover(november, &days).expect("November's first days are summarised");
        assert_eq!(part.through, day(11, 3), "the stale 3rd ends the run");
        assert_eq!(part.seen, vec![at(11, 1), at(11, 2)]);
        // Nothing built: both months are due, the newest first; October built: November only.
        assert_eq!(due(&days, &[]), vec![november, october]);
        assert_eq!(due(&days, std::slice::from_ref(&whole)), vec![november]);
        // A day summarised again since October was built: October is due again.
        let mut again = days.clone();
        again[4].summarised_at = Some(at(11, 20));
        assert_eq!(due(&again, &[whole.clone(), part.clone()]), vec![october]);
        // A month whose first day is not summarised covers nothing and is not due.
        let mut first_missing = days.clone();
        first_missing[31].summarised_at = None;
        assert_eq!(cover(november, &first_missing), None);
        assert_eq!(due(&first_missing, &[whole]), Vec::<Month>::new());
    }
}
