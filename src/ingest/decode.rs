//! A request body into a [`Batch`]: gunzipped when it says so, at most the limit's bytes of JSON, one
//! JSON object (nothing but whitespace after it) whose keys each appear once, every bad value named
//! by its path.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Read;

use super::IngestError;
use crate::domain::batch::Batch;

/// Decodes a request body, gunzipping it when `gzip` is set, reading at most `limit` bytes of JSON.
pub fn decode(body: &[u8], gzip: bool, limit: usize) -> Result<Batch, IngestError> {
    let json;
    let bytes = if gzip {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body)
            .take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| {
                IngestError::Malformed(format!("the gzip body does not decompress: {e}"))
            })?;
        if out.len() > limit {
            return Err(IngestError::TooLarge { limit });
        }
        json = out;
        &json[..]
    } else {
        if body.len() > limit {
            return Err(IngestError::TooLarge { limit });
        }
        body
    };
    let malformed = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            IngestError::Malformed(inner.to_string())
        } else {
            IngestError::Malformed(format!("{path}: {inner}"))
        }
    };
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(IngestError::Malformed(
            "a batch is a JSON object: {\"node\": …, \"period\": …}".into(),
        ));
    }
    // Objects with a key twice are refused: JSON parsers disagree on which one wins, and the
    // contract's answer is neither. Each pass runs untracked first; only a body it refuses is read
    // again tracking its path, to name where: tracking allocates for every value.
    fn named<T: serde::de::DeserializeOwned>(
        bytes: &[u8],
        malformed: impl Fn(serde_path_to_error::Error<serde_json::Error>) -> IngestError,
    ) -> Result<T, IngestError> {
        serde_json::from_slice(bytes).map_err(|untracked| {
            let de = &mut serde_json::Deserializer::from_slice(bytes);
            match serde_path_to_error::deserialize::<_, T>(de) {
                Err(e) => malformed(e),
                // Text after the batch's object: the tracked read stops at the object's end.
                Ok(_) => IngestError::Malformed(untracked.to_string()),
            }
        })
    }
    named::<NoDuplicateKeys>(bytes, malformed)?;
    named(bytes, malformed)
}

/// Any JSON value whose objects, at every depth, have each key once.
struct NoDuplicateKeys;

/// The keys of one object so far, borrowed from the body where they have no escapes: in a list
/// while few (a batch's objects have a dozen at most), hashed past that, so that a hostile object
/// of a million keys costs linear time, not quadratic.
enum Seen<'de> {
    Few(Vec<Cow<'de, str>>),
    Many(HashSet<Cow<'de, str>>),
}

impl<'de> Seen<'de> {
    const FEW: usize = 16;

    /// Adds a key; false when the object had it already.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        match self {
            Seen::Few(keys) if keys.len() < Self::FEW => {
                let new = !keys.contains(&key);
                if new {
                    keys.push(key);
                }
                new
            }
            Seen::Few(keys) => {
                let mut set: HashSet<_> = keys.drain(..).collect();
                let new = set.insert(key);
                *self = Seen::Many(set);
                new
            }
            Seen::Many(set) => set.insert(key),
        }
    }
}

/// An object's key, borrowed from the body where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object's key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NoDuplicateKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
                Ok(NoDuplicateKeys)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut seen = Seen::Few(Vec::new());
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "the key {key:?} appears twice in one object"
                        )));
                    }
                    map.next_value::<NoDuplicateKeys>()?;
                }
                Ok(NoDuplicateKeys)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(json: &str) -> String {
        match decode(json.as_bytes(), false, 1 << 20) {
            Err(IngestError::Malformed(m)) => m,
            other => panic!("{json}: {other:?}"),
        }
    }

    #[test]
    fn a_key_twice_is_found_in_small_and_large_objects_and_through_escapes() {
        let keys = |n: usize| (0..n).map(|k| format!("\"k{k}\":{k}")).collect::<Vec<_>>();
        for n in [3, Seen::FEW, Seen::FEW + 1, 200] {
            let mut object = keys(n);
            object.push("\"k2\":0".into());
            let json = format!("{{\"node\":\"n\",\"labels\":{{{}}}}}", object.join(","));
            let m = refusal(&json);
            assert!(
                m.starts_with("labels: the key \"k2\" appears twice in one object"),
                "{n} keys: {m}"
            );
            let distinct = format!("{{\"node\":\"n\",\"labels\":{{{}}}}}", keys(n).join(","));
            assert!(!refusal(&distinct).contains("twice"), "{n} keys");
        }
        let m = refusal(r#"{"node":"n","no\u0064e":"m"}"#);
        assert!(
            m.starts_with("the key \"node\" appears twice in one object"),
            "{m}"
        );
    }
}
