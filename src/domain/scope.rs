//! A part of a team's usage that a budget can watch instead of the whole team: one of its
//! namespaces, or its pods carrying a label value.

/// One of a team's namespaces, or its pods with `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UsageScope {
    Namespace(String),
    Label { key: String, value: String },
}

/// The longest label key Kubernetes takes (a 253-character prefix, `/`, a 63-character name).
const MAX_LABEL_KEY: usize = 317;

impl UsageScope {
    /// As stored: `namespace:<ns>` or `label:<key>=<value>`.
    pub fn stored(&self) -> String {
        match self {
            UsageScope::Namespace(ns) => format!("namespace:{ns}"),
            UsageScope::Label { key, value } => format!("label:{key}={value}"),
        }
    }

    /// What [`UsageScope::stored`] wrote; `None` for the whole team (`""`) or anything else.
    pub fn of_stored(s: &str) -> Option<UsageScope> {
        if let Some(ns) = s.strip_prefix("namespace:") {
            return Some(UsageScope::Namespace(ns.to_owned()));
        }
        let (key, value) = s.strip_prefix("label:")?.split_once('=')?;
        Some(UsageScope::Label {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }

    /// A `key=value` label selector, as a budget is given it.
    pub fn label(selector: &str) -> Result<UsageScope, String> {
        let bad = || {
            format!(
                "{selector:?} is not key=value (a Kubernetes label key, then a value of 1 to 63 letters, digits, '-', '_' or '.')"
            )
        };
        let (key, value) = selector.split_once('=').ok_or_else(bad)?;
        let key_ok = !key.is_empty()
            && key.len() <= MAX_LABEL_KEY
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._/".contains(&b));
        let value_ok = !value.is_empty()
            && value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if key_ok && value_ok {
            Ok(UsageScope::Label {
                key: key.to_owned(),
                value: value.to_owned(),
            })
        } else {
            Err(bad())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_is_stored_as_it_reads_back_and_a_label_is_key_equals_value() {
        let l = UsageScope::label("app.kubernetes.io/name=embedder").unwrap();
        assert_eq!(l.stored(), "label:app.kubernetes.io/name=embedder");
        assert_eq!(UsageScope::of_stored(&l.stored()), Some(l));
        let ns = UsageScope::Namespace("nlp-dev".into());
        assert_eq!(UsageScope::of_stored(&ns.stored()), Some(ns));
        assert_eq!(UsageScope::of_stored(""), None);
        for bad in ["app", "=x", "app=", "app=a b", "a?p=x"] {
            assert!(UsageScope::label(bad).is_err(), "{bad}");
        }
    }
}
