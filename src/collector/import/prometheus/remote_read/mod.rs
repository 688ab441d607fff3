//! Prometheus' remote read API (`POST /api/v1/read`) with streamed XOR chunks: the samples of the
//! series a selector matches as the TSDB stores them (compressed chunks), instead of the query
//! API's JSON (every sample's time and value written and parsed as text). The request is a
//! snappy-framed protobuf; the answer is a stream of frames (a varint length, a big-endian CRC-32C
//! of the frame, a `ChunkedReadResponse`), each one series' chunks, a series' chunks possibly
//! over several frames. Every length, checksum and chunk is checked: a broken answer is an error
//! naming where it broke, never a panic. Staleness markers are left out, as the query API leaves
//! them out; the server's external labels, which remote read adds to every series and the query
//! API does not, are taken off ([`Prometheus::external_labels`]), so that a series has one name
//! whichever API read it.

use prost::Message;

use super::{Prometheus, QueryError, RawSeries};
use xor::xor_samples;

mod xor;

/// One label matcher of a selector (`name="v"`, `!=`, `=~`, `!~`; the metric name is `__name__`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub kind: MatchKind,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Equal = 0,
    NotEqual = 1,
    Regex = 2,
    NotRegex = 3,
}

// The messages of prompb/remote.proto and types.proto that a read needs, written out with prost
// (field numbers as in the proto).
#[derive(Clone, PartialEq, prost::Message)]
struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    queries: Vec<Query>,
    /// `STREAMED_XOR_CHUNKS` is 1.
    #[prost(int32, repeated, tag = "2")]
    accepted_response_types: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Query {
    #[prost(int64, tag = "1")]
    start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    matchers: Vec<LabelMatcher>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LabelMatcher {
    #[prost(int32, tag = "1")]
    kind: i32,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(string, tag = "3")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ChunkedReadResponse {
    #[prost(message, repeated, tag = "1")]
    chunked_series: Vec<ChunkedSeries>,
    #[prost(int64, tag = "2")]
    query_index: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ChunkedSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    chunks: Vec<Chunk>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Chunk {
    #[prost(int64, tag = "1")]
    min_time_ms: i64,
    #[prost(int64, tag = "2")]
    max_time_ms: i64,
    /// `XOR` is 1: float samples, what a counter is.
    #[prost(int32, tag = "3")]
    encoding: i32,
    #[prost(bytes = "vec", tag = "4")]
    data: Vec<u8>,
}

const STREAMED_XOR_CHUNKS: i32 = 1;
const XOR: i32 = 1;

impl Prometheus {
    /// Every stored sample with a timestamp in `[from_ms, to_ms)` of the series `matchers` match,
    /// without the server's `external` labels, read by remote read's streamed chunks; `None` where
    /// the server does not answer that API so (an error status, an answer of another type, a chunk
    /// of another encoding than XOR: read through the query API then).
    pub async fn read_chunks(
        &self,
        matchers: &[Matcher],
        external: &[(String, String)],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Option<Vec<RawSeries>>, QueryError> {
        let shown = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .map_or_else(|| ms.to_string(), |t| t.to_rfc3339())
        };
        let err = |reason: String, transient: bool| QueryError {
            query: format!("remote read of {}", selector_of(matchers)),
            time: format!("{} to {}", shown(from_ms), shown(to_ms)),
            reason,
            transient,
        };
        let request = ReadRequest {
            queries: vec![Query {
                // Both ends are inclusive.
                start_timestamp_ms: from_ms,
                end_timestamp_ms: to_ms - 1,
                matchers: matchers
                    .iter()
                    .map(|m| LabelMatcher {
                        kind: m.kind as i32,
                        name: m.name.clone(),
                        value: m.value.clone(),
                    })
                    .collect(),
            }],
            accepted_response_types: vec![STREAMED_XOR_CHUNKS],
        };
        let request = self
            .authorised(self.client.post(format!("{}/api/v1/read", self.base)))
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Read-Version", "0.1.0")
            .body(snappy_literals(&request.encode_to_vec()));
        let response = request.send().await.map_err(|e| {
            let (reason, transient) = Prometheus::failed(e);
            err(reason, transient)
        })?;
        let streamed = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-streamed-protobuf"));
        if !response.status().is_success() || !streamed {
            return Ok(None);
        }
        let body = self
            .body(response)
            .await
            .map_err(|(reason, transient)| err(reason, transient))?;
        series_of_frames(&body, external, from_ms, to_ms).map_err(|reason| err(reason, false))
    }

    /// The server's external labels (`global.external_labels` of the configuration it serves at
    /// `/api/v1/status/config`), which remote read adds to every series; `None` where it does not
    /// say (a server without that endpoint, or one that did not answer).
    pub async fn external_labels(&self) -> Option<Vec<(String, String)>> {
        let body = self.get("/api/v1/status/config", &[]).await.ok()?;
        #[derive(serde::Deserialize)]
        struct Config {
            data: ConfigData,
        }
        #[derive(serde::Deserialize)]
        struct ConfigData {
            yaml: String,
        }
        let config = serde_json::from_slice::<Config>(&body).ok()?;
        let docs = yaml_rust2::YamlLoader::load_from_str(&config.data.yaml).ok()?;
        let doc = docs.first()?;
        let labels = &doc["global"]["external_labels"];
        if labels.is_badvalue() || labels.is_null() {
            return Some(Vec::new());
        }
        let hash = labels.as_hash()?;
        let mut out = Vec::with_capacity(hash.len());
        for (k, v) in hash {
            out.push((k.as_str()?.to_owned(), v.as_str()?.to_owned()));
        }
        Some(out)
    }
}

/// The matchers as a selector, for messages.
fn selector_of(matchers: &[Matcher]) -> String {
    let ops = ["=", "!=", "=~", "!~"];
    let inner: Vec<String> = matchers
        .iter()
        .map(|m| {
            format!(
                "{}{}{}",
                m.name,
                ops[m.kind as usize],
                serde_json::Value::String(m.value.clone())
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// `data` as a snappy block of literals only: what remote read's request must be (snappy) without
/// a compressor (a request is a few hundred bytes).
fn snappy_literals(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    prost::encoding::encode_varint(data.len() as u64, &mut out);
    for piece in data.chunks(1 << 16) {
        let len = piece.len() - 1;
        if len < 60 {
            out.push((len as u8) << 2);
        } else if len < 256 {
            out.push(60 << 2);
            out.push(len as u8);
        } else {
            out.push(61 << 2);
            out.extend_from_slice(&(len as u16).to_le_bytes());
        }
        out.extend_from_slice(piece);
    }
    out
}

/// CRC-32C (Castagnoli), as Go's `crc32.MakeTable(crc32.Castagnoli)`: the `crc` crate's iSCSI
/// polynomial (the crate sqlx already builds).
fn crc32c(data: &[u8]) -> u32 {
    const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    CASTAGNOLI.checksum(data)
}

/// The series of a streamed answer, samples in `[from_ms, to_ms)` in time order, without the
/// `external` labels; `None` if a chunk is not of float samples in the XOR encoding.
fn series_of_frames(
    body: &[u8],
    external: &[(String, String)],
    from_ms: i64,
    to_ms: i64,
) -> Result<Option<Vec<RawSeries>>, String> {
    let mut out: Vec<RawSeries> = Vec::new();
    // The labels of the series last read, as the answer gives them: a series over several frames
    // comes in consecutive frames under the same labels.
    let mut last: Option<Vec<Label>> = None;
    let mut at = 0;
    while at < body.len() {
        let broken = |what: &str| format!("the remote read's answer breaks at byte {at}: {what}");
        let mut rest = &body[at..];
        let len = prost::encoding::decode_varint(&mut rest)
            .map_err(|_| broken("a frame's length is cut off"))?;
        let start = body.len() - rest.len();
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| (start + 4).checked_add(len))
            .filter(|end| *end <= body.len())
            .ok_or_else(|| broken("a frame longer than the answer"))?;
        let crc = u32::from_be_bytes(body[start..start + 4].try_into().expect("4 bytes"));
        let frame = &body[start + 4..end];
        if crc32c(frame) != crc {
            return Err(broken("a frame whose checksum does not match"));
        }
        let message = ChunkedReadResponse::decode(frame)
            .map_err(|e| broken(&format!("a frame that is no ChunkedReadResponse ({e})")))?;
        for s in message.chunked_series {
            if last.as_ref() != Some(&s.labels) {
                out.push(raw_series(&s.labels, external));
                last = Some(s.labels);
            }
            let samples = &mut out.last_mut().expect("a series pushed").samples;
            for chunk in &s.chunks {
                // Another encoding (a histogram, a float encoding newer than this client): the
                // query API reads it, or names what is wrong with it.
                if chunk.encoding != XOR {
                    return Ok(None);
                }
                if chunk.max_time_ms < from_ms || chunk.min_time_ms >= to_ms {
                    continue;
                }
                xor_samples(&chunk.data, from_ms, to_ms, samples)
                    .map_err(|what| broken(&format!("a chunk {what}")))?;
            }
        }
        at = end;
    }
    for s in &mut out {
        // Chunks of overlapping blocks, if a server sends them unmerged: one sample a time.
        if s.samples.windows(2).any(|w| w[0].0 >= w[1].0) {
            s.samples.sort_by_key(|(t, _)| *t);
            s.samples.dedup_by_key(|(t, _)| *t);
        }
    }
    Ok(Some(out))
}

/// A series named as the query API names it: the metric name apart, the other labels in order,
/// without the server's external labels.
fn raw_series(labels: &[Label], external: &[(String, String)]) -> RawSeries {
    let mut name = String::new();
    let mut rest = Vec::with_capacity(labels.len());
    for l in labels {
        if l.name == "__name__" {
            name = l.value.clone();
        } else if !external.iter().any(|(k, v)| *k == l.name && *v == l.value) {
            rest.push((l.name.clone(), l.value.clone()));
        }
    }
    rest.sort();
    RawSeries {
        name,
        labels: rest,
        samples: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_castagnolis() {
        // The check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn snappy_literals_frame_the_bytes_as_they_are() {
        assert_eq!(snappy_literals(b"abc"), [3, 2 << 2, b'a', b'b', b'c']);
        let long = vec![7u8; 300];
        let framed = snappy_literals(&long);
        // 300 as a varint, a literal of 300 (61: two bytes of length - 1, little-endian).
        assert_eq!(framed[..5], [0xac, 0x02, 61 << 2, 0x2b, 0x01]);
        assert_eq!(framed.len(), 5 + 300);
    }

    #[test]
    fn a_broken_answer_is_named_where_it_breaks() {
        let frame = ChunkedReadResponse {
            chunked_series: vec![],
            query_index: 0,
        }
        .encode_to_vec();
        let mut body = vec![frame.len() as u8];
        body.extend(crc32c(&frame).to_be_bytes());
        body.extend(&frame);
        assert_eq!(series_of_frames(&body, &[], 0, 1).unwrap(), Some(vec![]));
        let mut bad = body.clone();
        bad[1] ^= 1;
        assert_eq!(
            series_of_frames(&bad, &[], 0, 1).unwrap_err(),
            "the remote read's answer breaks at byte 0: a frame whose checksum does not match"
        );
        assert_eq!(
            series_of_frames(&[200], &[], 0, 1).unwrap_err(),
            "the remote read's answer breaks at byte 0: a frame's length is cut off"
        );
        assert_eq!(
            series_of_frames(&[9, 0, 0, 0, 0, 1], &[], 0, 1).unwrap_err(),
            "the remote read's answer breaks at byte 0: a frame longer than the answer"
        );
        // A histogram's chunk: not read here (the query API is asked instead).
        let frame = ChunkedReadResponse {
            chunked_series: vec![ChunkedSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: "x".into(),
                }],
                chunks: vec![Chunk {
                    min_time_ms: 0,
                    max_time_ms: 0,
                    encoding: 2,
                    data: vec![0, 0],
                }],
            }],
            query_index: 0,
        }
        .encode_to_vec();
        let mut body = vec![frame.len() as u8];
        body.extend(crc32c(&frame).to_be_bytes());
        body.extend(&frame);
        assert_eq!(series_of_frames(&body, &[], 0, 1), Ok(None));
    }
}
