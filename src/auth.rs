//! Who is calling: roles, API tokens and their hashes. A token is shown once when created and only
//! its SHA-256 is stored; comparison is constant-time.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use crate::domain::team::TeamId;

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
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Finance => "finance",
            Role::TeamLead => "team_lead",
            Role::Collector => "collector",
        }
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
}

impl Principal {
    pub fn token_id(&self) -> i64 {
        match self {
            Principal::Admin { token_id }
            | Principal::Finance { token_id }
            | Principal::TeamLead { token_id, .. }
            | Principal::Collector { token_id, .. } => *token_id,
        }
    }

    pub fn role(&self) -> Role {
        match self {
            Principal::Admin { .. } => Role::Admin,
            Principal::Finance { .. } => Role::Finance,
            Principal::TeamLead { .. } => Role::TeamLead,
            Principal::Collector { .. } => Role::Collector,
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
            Principal::Admin { .. } => true,
            Principal::Collector { node: own, .. } => own == node,
            _ => false,
        }
    }
}

const PREFIX: &str = "smt";

/// A freshly made token: the string to hand out once, and the hash to store.
pub struct NewToken {
    pub secret: [u8; 32],
}

impl NewToken {
    pub fn generate() -> NewToken {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        NewToken { secret }
    }

    pub fn hash(&self) -> [u8; 32] {
        hash_secret(&hex(&self.secret))
    }

    /// The bearer token for the stored row `id`: `smt_<id>_<64 hex digits>`.
    pub fn token(&self, id: i64) -> String {
        format!("{PREFIX}_{id}_{}", hex(&self.secret))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A bearer token split into the row it names and its secret part.
#[derive(Debug, PartialEq, Eq)]
pub struct PresentedToken<'a> {
    pub id: i64,
    secret: &'a str,
}

impl<'a> PresentedToken<'a> {
    pub fn parse(token: &'a str) -> Option<PresentedToken<'a>> {
        let rest = token.strip_prefix(PREFIX)?.strip_prefix('_')?;
        let (id, secret) = rest.split_once('_')?;
        let id = id.parse().ok()?;
        (secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some(PresentedToken { id, secret })
    }

    /// Constant-time comparison with the stored hash.
    pub fn matches(&self, stored_hash: &[u8]) -> bool {
        hash_secret(self.secret).ct_eq(stored_hash).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_parses_back_and_matches_only_its_own_hash() {
        let t = NewToken::generate();
        let s = t.token(42);
        let p = PresentedToken::parse(&s).unwrap();
        assert_eq!(p.id, 42);
        assert!(p.matches(&t.hash()));
        assert!(!p.matches(&NewToken::generate().hash()));
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        for bad in [
            "",
            "smt_",
            "smt_x_abc",
            "Bearer smt_1_00",
            &format!("smt_1_{}", "g".repeat(64)),
        ] {
            assert_eq!(PresentedToken::parse(bad), None, "{bad}");
        }
    }

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
