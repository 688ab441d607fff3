//! Namespaces that changed hands within a month (issue 39): the fleet page names every change with
//! both teams, a team's page the namespaces it gained or gave up (naming no other team, which a
//! team lead may not see). A namespace's unlabelled pods are billed to its owner at each moment,
//! so these instants are where a team's figures for the namespace start or stop.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::teams::{self, VersionRow};

/// A change of a namespace's owner: the version that starts it and the owner before it.
pub struct Handover {
    pub namespace: String,
    pub at: DateTime<Utc>,
    pub before: Option<TeamId>,
    pub after: Option<TeamId>,
}

/// The changes of owner that start inside `month`, by instant (a version that names the owner it
/// follows is no change).
pub async fn of_month(pool: &sqlx::PgPool, month: Month) -> Result<Vec<Handover>, sqlx::Error> {
    Ok(teams::changes_between(pool, month.start(), month.end())
        .await?
        .into_iter()
        .filter(|(v, before)| &v.team_id != before)
        .map(|(v, before): (VersionRow, Option<TeamId>)| Handover {
            namespace: v.namespace,
            at: v.effective_from,
            before,
            after: v.team_id,
        })
        .collect())
}

fn instant(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// Every change, with both owners (the fleet page's).
pub fn fleet_notice(month: Month, changes: &[Handover]) -> Markup {
    fn owner(t: &Option<TeamId>) -> &str {
        t.as_ref().map_or("no team", TeamId::as_str)
    }
    html! {
        @if !changes.is_empty() {
            section aria-labelledby="handovers-h" data-field="handovers" {
                h2 id="handovers-h" { "Namespaces that changed hands in " (month) }
                p { "A namespace's pods without a " code { "team" } " label are billed to its owner at each moment: "
                    "the month splits at these instants." }
                ul {
                    @for c in changes {
                        li data-namespace=(c.namespace) {
                            strong { (c.namespace) } ": " (owner(&c.before)) " until "
                            (instant(c.at)) ", then " (owner(&c.after))
                        }
                    }
                }
            }
        }
    }
}

/// The namespaces `team` gained or gave up (its page's).
pub fn team_notice(team: &TeamId, month: Month, changes: &[Handover]) -> Markup {
    let ours = |t: &Option<TeamId>| t.as_ref() == Some(team);
    let mine: Vec<&Handover> = changes
        .iter()
        .filter(|c| ours(&c.before) || ours(&c.after))
        .collect();
    html! {
        @if !mine.is_empty() {
            section aria-labelledby="handovers-h" data-field="handovers" {
                h2 id="handovers-h" { "Namespaces that changed hands in " (month) }
                ul {
                    @for c in mine {
                        li data-namespace=(c.namespace) {
                            strong { (c.namespace) }
                            @if ours(&c.after) { " is " (team) "'s from " } @else { " is no longer " (team) "'s from " }
                            (instant(c.at))
                            ": its pods without a " code { "team" } " label are billed "
                            @if ours(&c.after) { "here from then on." } @else { "elsewhere from then on." }
                        }
                    }
                }
            }
        }
    }
}
