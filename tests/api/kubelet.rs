//! A fake kubelet: the PodResources gRPC API on a temporary unix socket, answering `List` with the
//! pods a test gives it.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use slicemeter::collector::attribution::podresources::{
    ContainerDevices, ContainerResources, LIST_PATH, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use tonic::codegen::{Body, StdError, http};

#[derive(Clone)]
struct Lister(Arc<Mutex<Vec<PodResources>>>);

impl tonic::server::UnaryService<ListPodResourcesRequest> for Lister {
    type Response = ListPodResourcesResponse;
    type Future = Pin<
        Box<dyn Future<Output = Result<tonic::Response<Self::Response>, tonic::Status>> + Send>,
    >;

    fn call(&mut self, _: tonic::Request<ListPodResourcesRequest>) -> Self::Future {
        let pods = self.0.lock().unwrap().clone();
        Box::pin(async move {
            Ok(tonic::Response::new(ListPodResourcesResponse {
                pod_resources: pods,
            }))
        })
    }
}

#[derive(Clone)]
struct Kubelet(Arc<Mutex<Vec<PodResources>>>);

impl<B> tower::Service<http::Request<B>> for Kubelet
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let pods = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != LIST_PATH {
                return Ok(tonic::Status::unimplemented("only List").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(Lister(pods), req).await)
        })
    }
}

impl tonic::server::NamedService for Kubelet {
    const NAME: &'static str = "v1.PodResourcesLister";
}

/// A running fake kubelet.
pub struct FakeKubelet {
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeKubelet {
    pub async fn start(pods: Vec<PodResources>) -> FakeKubelet {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let service = Kubelet(Arc::new(Mutex::new(pods)));
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
        FakeKubelet { socket, _dir: dir }
    }
}

/// A pod with one container holding `devices`.
pub fn pod(namespace: &str, name: &str, devices: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: devices.iter().map(|d| (*d).to_owned()).collect(),
            }],
            dynamic_resources: vec![],
        }],
    }
}
