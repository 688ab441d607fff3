//! A request body into a [`Batch`]: gunzipped when it says so, at most the limit's bytes of JSON, one
//! JSON object whose keys each appear once, every bad value named by its path.

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
    // contract's answer is neither.
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize::<_, NoDuplicateKeys>(de).map_err(malformed)?;
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(malformed)
}

/// Any JSON value whose objects, at every depth, have each key once.
struct NoDuplicateKeys;

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
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
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
