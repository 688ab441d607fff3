//! API tokens and their hashes: a token is shown once when created and only its SHA-256 is stored;
//! comparison is constant-time. The roles and principals tokens name are `domain::access`.

pub mod service;
pub mod store;

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

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
}
