//! Who acts: the roles a token may have, the principal a request's token names, and the actor an
//! audit entry records (a token, or the command line).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::team::TeamId;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Reads everything; runs invoices and rate cards.
    Finance,
    /// Reads its own team's usage, invoices and recommendations.
    #[value(name = "team_lead", alias = "team-lead")]
    TeamLead,
    /// Ingests for its own node, nothing else.
    Collector,
    /// Ingests for any node (a back-fill: `slicemeter import prometheus`) and reads which periods
    /// are stored and the rate cards; nothing else.
    Importer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Finance => "finance",
            Role::TeamLead => "team_lead",
            Role::Collector => "collector",
            Role::Importer => "importer",
        }
    }

    /// Whether tokens of this role only send data (no dashboard, no reports).
    pub fn sends_data(self) -> bool {
        matches!(self, Role::Collector | Role::Importer)
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "finance" => Ok(Role::Finance),
            "team_lead" | "team-lead" => Ok(Role::TeamLead),
            "collector" => Ok(Role::Collector),
            "importer" => Ok(Role::Importer),
            other => Err(format!("unknown role {other:?}")),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller of a request, as its token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin { token_id: i64 },
    Finance { token_id: i64 },
    TeamLead { token_id: i64, team: TeamId },
    Collector { token_id: i64, node: String },
    Importer { token_id: i64 },
}

impl Principal {
    /// The principal of a stored token: its role, and the team or node that role needs.
    pub fn of(
        token_id: i64,
        role: Role,
        team: Option<TeamId>,
        node: Option<String>,
    ) -> Result<Principal, String> {
        Ok(match role {
            Role::Admin => Principal::Admin { token_id },
            Role::Finance => Principal::Finance { token_id },
            Role::TeamLead => Principal::TeamLead {
                token_id,
                team: team.ok_or_else(|| format!("team lead token {token_id} names no team"))?,
            },
            Role::Collector => Principal::Collector {
                token_id,
                node: node.ok_or_else(|| format!("collector token {token_id} names no node"))?,
            },
            Role::Importer => Principal::Importer { token_id },
        })
    }

    pub fn token_id(&self) -> i64 {
        match self {
            Principal::Admin { token_id }
            | Principal::Finance { token_id }
            | Principal::TeamLead { token_id, .. }
            | Principal::Collector { token_id, .. }
            | Principal::Importer { token_id } => *token_id,
        }
    }

    pub fn role(&self) -> Role {
        match self {
            Principal::Admin { .. } => Role::Admin,
            Principal::Finance { .. } => Role::Finance,
            Principal::TeamLead { .. } => Role::TeamLead,
            Principal::Collector { .. } => Role::Collector,
            Principal::Importer { .. } => Role::Importer,
        }
    }

    /// The one team a team lead may see; `None` for roles that see every team.
    pub fn team_scope(&self) -> Option<&TeamId> {
        match self {
            Principal::TeamLead { team, .. } => Some(team),
            _ => None,
        }
    }

    /// Whether the caller may send a batch that says `node`.
    pub fn may_ingest_for(&self, node: &str) -> bool {
        match self {
            Principal::Admin { .. } | Principal::Importer { .. } => true,
            Principal::Collector { node: own, .. } => own == node,
            _ => false,
        }
    }
}

/// Who acted: an API token, or the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Actor {
    pub token_id: Option<i64>,
    pub role: &'static str,
}

impl Actor {
    /// The command line, run by someone who holds the database's password.
    pub const CLI: Actor = Actor {
        token_id: None,
        role: "cli",
    };

    pub fn of(p: &Principal) -> Actor {
        Actor {
            token_id: Some(p.token_id()),
            role: p.role().as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_ingests_only_for_its_own_node_and_an_admin_for_any() {
        let c = Principal::Collector {
            token_id: 1,
            node: "a".into(),
        };
        assert!(c.may_ingest_for("a"));
        assert!(!c.may_ingest_for("b"));
        assert!(Principal::Admin { token_id: 2 }.may_ingest_for("b"));
        assert!(!Principal::Finance { token_id: 3 }.may_ingest_for("b"));
    }
}
