//! Teams: who pays. Consumers map to teams by an explicit `team` label, else by namespace, else to
//! `unattributed`, which stays visible in every report.

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A team's id: 1 to 63 lowercase letters, digits, `-` or `_`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TeamId(String);

/// The team of consumers no label or namespace claims.
pub const UNATTRIBUTED: &str = "unattributed";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{0:?} is not a team id: use 1 to 63 lowercase letters, digits, '-' or '_', starting with a letter or digit"
)]
pub struct TeamIdError(pub String);

impl TeamId {
    pub fn parse(s: &str) -> Result<TeamId, TeamIdError> {
        let ok = (1..=63).contains(&s.len())
            && s.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && (b == b'-' || b == b'_'))
            });
        if ok {
            Ok(TeamId(s.to_owned()))
        } else {
            Err(TeamIdError(s.to_owned()))
        }
    }

    pub fn unattributed() -> TeamId {
        TeamId(UNATTRIBUTED.to_owned())
    }

    /// `unattributed`, borrowed for as long as needed: where a claim resolves to no team, its
    /// team is this one, beside the teams an ownership holds.
    pub fn unattributed_ref() -> &'static TeamId {
        static ID: std::sync::LazyLock<TeamId> = std::sync::LazyLock::new(TeamId::unattributed);
        &ID
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `unattributed`, which is never invoiced.
    pub fn is_unattributed(&self) -> bool {
        self.0 == UNATTRIBUTED
    }
}

impl FromStr for TeamId {
    type Err = TeamIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TeamId::parse(s)
    }
}

/// A team id compares, orders and hashes as its text, so maps keyed by team are looked up by `&str`.
impl Borrow<str> for TeamId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for TeamId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl TryFrom<String> for TeamId {
    type Error = TeamIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        TeamId::parse(&s)
    }
}

impl From<TeamId> for String {
    fn from(t: TeamId) -> String {
        t.0
    }
}

impl fmt::Display for TeamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_ids_are_lowercase_slugs() {
        for ok in ["nlp", "ads-ranking", "team_7", "a"] {
            assert_eq!(TeamId::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "NLP", "-nlp", "nlp team", "ünïcode", &"x".repeat(64)] {
            let err = TeamId::parse(bad).unwrap_err();
            assert!(err.to_string().contains("is not a team id"), "{err}");
        }
    }
}
