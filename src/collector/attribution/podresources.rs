//! The kubelet's PodResources API (`v1.PodResourcesLister/List`, gRPC over the unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): which pod and container holds each device
//! (`GPU-…`, `MIG-…`, time-slicing and MPS replicas as `GPU-…::N`), and the DRA claims behind
//! dynamically allocated ones. The messages are the subset of the kubelet's `api.proto` the collector
//! reads, written out with prost (field numbers as in the proto), so no protobuf compiler is needed.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The gRPC method path.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// Where the kubelet serves the API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("cannot reach the kubelet's PodResources socket {0}: {1}")]
    Connect(PathBuf, String),
    #[error("the kubelet's PodResources List call failed: {0}")]
    Call(String),
}

/// Opens a gRPC channel over a unix socket.
pub async fn connect(socket: &Path) -> Result<Channel, PodResourcesError> {
    let path = socket.to_owned();
    // The URI is a placeholder: the connector ignores it and dials the socket.
    Endpoint::try_from("http://[::]:50051")
        .expect("a valid placeholder URI")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .map_err(|e| PodResourcesError::Connect(socket.to_owned(), e.to_string()))
}

/// Calls `List` on the kubelet at `socket`.
pub async fn list(socket: &Path) -> Result<Vec<PodResources>, PodResourcesError> {
    let channel = connect(socket).await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| PodResourcesError::Call(e.to_string()))?;
    let response = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            tonic::codegen::http::uri::PathAndQuery::from_static(LIST_PATH),
            tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default(),
        )
        .await
        .map_err(|s| PodResourcesError::Call(format!("{}: {}", s.code(), s.message())))?;
    Ok(response.into_inner().pod_resources)
}
