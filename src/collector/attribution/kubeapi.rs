//! Pod labels (for the `team` label) and uids from the Kubernetes API server, when the collector's
//! service account may list pods on its node: `GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`.
//! Without that access, teams come from the server's namespace-to-team mapping.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, Clone, PartialEq)]
pub struct PodMeta {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct PodList {
    items: Vec<Pod>,
}

#[derive(Deserialize)]
struct Pod {
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Metadata {
    uid: String,
    namespace: String,
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeApiError {
    #[error("not in a Kubernetes pod with a service account ({0})")]
    NotInCluster(String),
    #[error("listing pods from the API server failed: {0}")]
    Request(String),
}

#[derive(Clone)]
pub struct KubeApi {
    client: reqwest::Client,
    base: String,
    token: String,
    node: String,
}

impl KubeApi {
    /// The API server of the cluster the collector runs in, with its service account.
    pub fn in_cluster(node: &str) -> Result<KubeApi, KubeApiError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .map_err(|_| KubeApiError::NotInCluster("KUBERNETES_SERVICE_HOST is unset".into()))?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let read = |f: &str| {
            std::fs::read(format!("{SERVICE_ACCOUNT}/{f}"))
                .map_err(|e| KubeApiError::NotInCluster(format!("{SERVICE_ACCOUNT}/{f}: {e}")))
        };
        let token = String::from_utf8_lossy(&read("token")?).trim().to_owned();
        let ca = reqwest::Certificate::from_pem(&read("ca.crt")?)
            .map_err(|e| KubeApiError::NotInCluster(format!("ca.crt: {e}")))?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Self::new(&format!("https://{host}:{port}"), &token, Some(ca), node)
    }

    pub fn new(
        base: &str,
        token: &str,
        ca: Option<reqwest::Certificate>,
        node: &str,
    ) -> Result<KubeApi, KubeApiError> {
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        if let Some(ca) = ca {
            builder = builder.add_root_certificate(ca);
        }
        Ok(KubeApi {
            client: builder
                .build()
                .map_err(|e| KubeApiError::Request(e.to_string()))?,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            node: node.to_owned(),
        })
    }

    /// The pods scheduled on this node.
    pub async fn pods(&self) -> Result<Vec<PodMeta>, KubeApiError> {
        let list: PodList = self
            .client
            .get(format!("{}/api/v1/pods", self.base))
            .query(&[("fieldSelector", format!("spec.nodeName={}", self.node))])
            .bearer_auth(&self.token)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| KubeApiError::Request(e.to_string()))?
            .json()
            .await
            .map_err(|e| KubeApiError::Request(e.to_string()))?;
        Ok(list
            .items
            .into_iter()
            .map(|p| PodMeta {
                uid: p.metadata.uid,
                namespace: p.metadata.namespace,
                name: p.metadata.name,
                labels: p.metadata.labels,
            })
            .collect())
    }
}
