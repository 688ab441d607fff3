//! A client of Prometheus' HTTP query API (Prometheus, Thanos, Mimir, VictoriaMetrics answer it
//! alike), for what `import prometheus` reads: raw samples, through a range selector at
//! `/api/v1/query` (`m[1h]` at a time gives every stored sample of the hour, unlike `query_range`,
//! whose steps carry a sample forward for the 5-minute look-back), and label names; and of its remote
//! read API (`remote_read`: a selector's stored samples as chunks, what the unit cost reads where
//! the server answers it). Every failure names the query: an error status with Prometheus' own
//! message, a timeout, an answer that is not whole JSON (a truncated one), or one larger than the
//! limit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

pub mod remote_read;

/// How to sign in to the query API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Bearer(String),
    Basic { user: String, password: String },
}

/// A query that brought no usable answer.
#[derive(Debug, thiserror::Error)]
#[error("Prometheus' answer to {query} at {time}: {reason}")]
pub struct QueryError {
    pub query: String,
    /// The evaluation time asked for, RFC 3339, or "now".
    pub time: String,
    pub reason: String,
    /// Worth asking again (a timeout, a 5xx, a server not ready yet).
    pub transient: bool,
}

impl QueryError {
    /// The answer was larger than the client takes (`max_answer_bytes`): a shorter range may fit.
    pub fn too_large(&self) -> bool {
        self.reason.starts_with(TOO_LARGE)
    }
}

const TOO_LARGE: &str = "the answer is over ";

/// One series and its samples, in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct RawSeries {
    pub name: String,
    /// Its labels other than the name.
    pub labels: Vec<(String, String)>,
    /// (Unix milliseconds, value).
    pub samples: Vec<(i64, f64)>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    status: &'a str,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, borrow)]
    data: Option<Data<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Data<'a> {
    Result {
        #[serde(rename = "resultType")]
        result_type: &'a str,
        #[serde(borrow)]
        result: Vec<Matrix<'a>>,
    },
    Names(Vec<String>),
}

#[derive(Deserialize)]
struct Matrix<'a> {
    metric: BTreeMap<String, String>,
    #[serde(default, borrow)]
    values: Vec<(f64, &'a str)>,
}

#[derive(Clone)]
pub struct Prometheus {
    client: reqwest::Client,
    base: String,
    auth: Auth,
    max_answer_bytes: usize,
}

impl Prometheus {
    /// A client of the API under `base` (e.g. `http://prometheus:9090`, or Thanos' or Mimir's
    /// prefix up to `/api/v1`, excluded), each query allowed `timeout`.
    pub fn new(
        base: &str,
        auth: Auth,
        timeout: Duration,
        max_answer_bytes: usize,
    ) -> Result<Prometheus, String> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)));
        // On loopback an answer is not worth compressing: Prometheus 2.42 took 0.33 s to gzip a
        // day of 200 GPUs' counters (3.7 MB) that it sends plain in 0.04-0.11 s.
        let host = reqwest::Url::parse(base)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()));
        if host.is_some_and(|h| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }) {
            builder = builder.no_gzip();
        }
        let client = builder
            .build()
            .map_err(|e| format!("the HTTP client: {e}"))?;
        Ok(Prometheus {
            client,
            base: base.trim_end_matches('/').to_owned(),
            auth,
            max_answer_bytes,
        })
    }

    /// Every sample of the series `selector` matches with a timestamp in `[from_ms, to_ms)`.
    /// Prometheus 2 closes a range selector on both ends and 3 opens it on the left, so the range
    /// asked for reaches a millisecond further on each side and the ends are cut here.
    pub async fn raw(
        &self,
        selector: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RawSeries>, QueryError> {
        let span = to_ms - from_ms;
        self.matrix(format!("{selector}[{span}ms]"), from_ms, to_ms)
            .await
    }

    /// The points of `expr` evaluated every `step_ms` with a timestamp in `[from_ms, to_ms)`,
    /// through a subquery: for an expression a range selector cannot follow (a sum, a rate).
    pub async fn subquery(
        &self,
        expr: &str,
        step_ms: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RawSeries>, QueryError> {
        let span = to_ms - from_ms;
        self.matrix(format!("({expr})[{span}ms:{step_ms}ms]"), from_ms, to_ms)
            .await
    }

    /// The matrix `query` (a range ending at `to_ms - 1`) answers, cut to `[from_ms, to_ms)`.
    async fn matrix(
        &self,
        query: String,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RawSeries>, QueryError> {
        let at = to_ms - 1;
        let time = format!("{}.{:03}", at.div_euclid(1000), at.rem_euclid(1000));
        let shown = chrono::DateTime::from_timestamp_millis(at)
            .map_or_else(|| time.clone(), |t| t.to_rfc3339());
        let err = |reason: String, transient: bool| QueryError {
            query: query.clone(),
            time: shown.clone(),
            reason,
            transient,
        };
        let body = self
            .get("/api/v1/query", &[("query", &query), ("time", &time)])
            .await
            .map_err(|(reason, transient)| err(reason, transient))?;
        matrix_series(&body, from_ms, to_ms).map_err(|(reason, transient)| err(reason, transient))
    }

    /// `expr` evaluated at `start_ms`, `start_ms + step_ms`, ... up to `end_ms` (`/api/v1/query_range`):
    /// one point per step and series, each an instant query's answer at its time. Read by the unit
    /// cost for `*_over_time` functions of an hour's window, whose points are not raw samples.
    pub async fn query_range(
        &self,
        expr: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<Vec<RawSeries>, QueryError> {
        let secs = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        let shown = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms).map_or_else(|| secs(ms), |t| t.to_rfc3339())
        };
        let err = |reason: String, transient: bool| QueryError {
            query: expr.to_owned(),
            time: format!(
                "{} to {} every {step_ms} ms",
                shown(start_ms),
                shown(end_ms)
            ),
            reason,
            transient,
        };
        let body = self
            .get(
                "/api/v1/query_range",
                &[
                    ("query", expr),
                    ("start", &secs(start_ms)),
                    ("end", &secs(end_ms)),
                    ("step", &secs(step_ms)),
                ],
            )
            .await
            .map_err(|(reason, transient)| err(reason, transient))?;
        matrix_series(&body, i64::MIN, i64::MAX)
            .map_err(|(reason, transient)| err(reason, transient))
    }

    /// The label names of the series `selector` matches.
    pub async fn label_names(&self, selector: &str) -> Result<Vec<String>, QueryError> {
        let err = |reason: String, transient: bool| QueryError {
            query: format!("labels of {selector}"),
            time: "now".into(),
            reason,
            transient,
        };
        let body = self
            .get("/api/v1/labels", &[("match[]", selector)])
            .await
            .map_err(|(reason, transient)| err(reason, transient))?;
        match parse(&body)
            .map_err(|(reason, transient)| err(reason, transient))?
            .data
        {
            Some(Data::Names(names)) => Ok(names),
            _ => Err(err("the answer has no label names".into(), false)),
        }
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Vec<u8>, (String, bool)> {
        let request = self
            .authorised(self.client.get(format!("{}{path}", self.base)))
            .query(query);
        let response = request.send().await.map_err(Prometheus::failed)?;
        let status = response.status();
        let body = self.body(response).await?;
        if status.is_success() {
            return Ok(body);
        }
        // An error answer names its cause in JSON; one before the server is ready is plain text.
        let said = serde_json::from_slice::<Envelope>(&body)
            .ok()
            .and_then(|e| {
                Some(format!(
                    "{} ({})",
                    e.error?,
                    e.error_type.unwrap_or_default()
                ))
            })
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_owned()
            });
        Err((
            format!("HTTP {status}: {said}"),
            status.is_server_error() || status.as_u16() == 429,
        ))
    }

    fn authorised(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { user, password } => request.basic_auth(user, Some(password)),
        }
    }

    /// Why a request brought no answer, and that asking again may help.
    fn failed(e: reqwest::Error) -> (String, bool) {
        if e.is_timeout() {
            ("no answer in time".to_owned(), true)
        } else {
            (format!("the request failed: {e}"), true)
        }
    }

    /// The whole body of `response`, at most `max_answer_bytes`.
    async fn body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, (String, bool)> {
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                if e.is_timeout() {
                    ("the answer did not arrive whole in time".to_owned(), true)
                } else {
                    (format!("the answer was cut off: {e}"), true)
                }
            })?;
            let Some(chunk) = chunk else { break };
            if body.len() + chunk.len() > self.max_answer_bytes {
                return Err((
                    format!(
                        "{TOO_LARGE}{} bytes; import in shorter chunks (--chunk)",
                        self.max_answer_bytes
                    ),
                    false,
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// A successful matrix answer, read straight into its series: what every answer of a raw read or a
/// range query is. Anything else (an error, another result type, JSON that does not fit) is read
/// again by [`parse`], which names what is wrong.
#[derive(Deserialize)]
struct MatrixAnswer<'a> {
    status: &'a str,
    #[serde(borrow)]
    data: MatrixData<'a>,
}

#[derive(Deserialize)]
struct MatrixData<'a> {
    #[serde(rename = "resultType")]
    result_type: &'a str,
    #[serde(borrow)]
    result: Vec<Matrix<'a>>,
}

/// The series of a matrix answer, samples in `[from_ms, to_ms)`; else why not, and whether trying
/// again may help.
fn matrix_series(body: &[u8], from_ms: i64, to_ms: i64) -> Result<Vec<RawSeries>, (String, bool)> {
    // The common answer typed at once (an untagged enum would first copy every sample into a
    // generic value, and try each variant on it).
    if let Ok(answer) = serde_json::from_slice::<MatrixAnswer>(body)
        && answer.status == "success"
        && answer.data.result_type == "matrix"
    {
        return series(answer.data.result, from_ms, to_ms).map_err(|reason| (reason, false));
    }
    let envelope = parse(body)?;
    let Some(Data::Result {
        result_type,
        result,
    }) = envelope.data
    else {
        return Err(("the answer has no result".into(), false));
    };
    if result_type != "matrix" {
        return Err((
            format!("the answer is a {result_type}, not a matrix"),
            false,
        ));
    }
    series(result, from_ms, to_ms).map_err(|reason| (reason, false))
}

/// The series of a matrix, their samples cut to `[from_ms, to_ms)`.
fn series(result: Vec<Matrix<'_>>, from_ms: i64, to_ms: i64) -> Result<Vec<RawSeries>, String> {
    let mut out = Vec::with_capacity(result.len());
    for m in result {
        let mut labels: Vec<(String, String)> = Vec::with_capacity(m.metric.len());
        let mut name = String::new();
        for (k, v) in m.metric {
            if k == "__name__" {
                name = v;
            } else {
                labels.push((k, v));
            }
        }
        let mut samples = Vec::with_capacity(m.values.len());
        for (seconds, value) in m.values {
            let ms = (seconds * 1000.0).round();
            if !(ms.is_finite() && ms >= from_ms as f64 && ms < to_ms as f64) {
                continue;
            }
            // Prometheus writes NaN and infinities as words; they are kept here, and refused
            // where figures are checked, with their series.
            let v = match value {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                other => other
                    .parse::<f64>()
                    .map_err(|_| format!("{other:?} is not a sample value"))?,
            };
            samples.push((ms as i64, v));
        }
        out.push(RawSeries {
            name,
            labels,
            samples,
        });
    }
    Ok(out)
}

fn parse(body: &[u8]) -> Result<Envelope<'_>, (String, bool)> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| {
        (
            format!(
                "the answer is not whole JSON ({e}; {} bytes): truncated, or not Prometheus",
                body.len()
            ),
            false,
        )
    })?;
    if envelope.status != "success" {
        return Err((
            format!(
                "status {:?}: {} ({})",
                envelope.status,
                envelope.error.clone().unwrap_or_default(),
                envelope.error_type.clone().unwrap_or_default()
            ),
            false,
        ));
    }
    Ok(envelope)
}
