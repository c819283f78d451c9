//! A kubelet stand-in for [`crate::kube_api`]: the node side of `pods/log`.
//!
//! kube-apiserver answers `GET /api/v1/namespaces/{ns}/pods/{pod}/log` by proxying to the kubelet
//! of the pod's node: HTTPS to the Node's `status.addresses` (the harness prefers `InternalIP`) at
//! `status.daemonEndpoints.kubeletEndpoint.Port`, path `/containerLogs/{ns}/{pod}/{container}`
//! with the query `previous`, `tailLines`, `limitBytes`, `sinceSeconds`, `timestamps`, `follow`.
//! The harness sets no `--kubelet-certificate-authority`, so the API server does not verify the
//! kubelet's serving certificate (a self-signed one, as a kubelet without a signed certificate
//! makes), and sends no client certificate.
//!
//! A kubelet needs a container runtime, which cannot run here; this stand-in speaks the same
//! wire format instead: the log bytes as `text/plain`, and the kubelet's own error answers (404
//! `container "c" not found in pod "p"` for a container with no log registered, 400 `previous
//! terminated container "c" in pod "p" not found` for `previous=true` with only a current log; the
//! API server turns them into `NotFound`/`BadRequest`). Like the kubelet for a container waiting
//! to restart, a request without `previous` for a container with only a previous log gets that. It honours `tailLines` and
//! deliberately IGNORES `limitBytes` (it always serves the whole log), so a test of a client's
//! byte cap measures the client's cap, not the kubelet's. `sinceSeconds`, `timestamps` and
//! `follow` are recorded but have no effect (the log is served once and the stream ends).
//!
//! Every request is recorded ([`Kubelet::requests`]) for assertions on what reached the node.
use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use crate::kube_api::KubeApi;

/// Bytes per chunk when a repeated log is streamed.
const CHUNK: usize = 64 * 1024;

/// One request the stand-in received.
#[derive(Clone, Debug)]
pub struct KubeletRequest {
    /// The URL path, e.g. `/containerLogs/default/web-0/app`.
    pub path: String,
    /// The decoded query pairs, in order.
    pub query: Vec<(String, String)>,
}

impl KubeletRequest {
    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// A container log the stand-in serves.
#[derive(Clone)]
enum LogContent {
    Bytes(Bytes),
    /// `line` (ending in `\n`) `count` times, generated while streaming.
    Repeat {
        line: Bytes,
        count: u64,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct LogKey {
    namespace: String,
    pod: String,
    container: String,
    previous: bool,
}

#[derive(Default)]
struct Shared {
    logs: Mutex<HashMap<LogKey, LogContent>>,
    requests: Mutex<Vec<KubeletRequest>>,
}

/// A running kubelet stand-in registered as a Node. The server stops on drop; the Node object
/// stays in the API server.
pub struct Kubelet {
    /// The Node's name.
    pub node_name: String,
    /// Where it listens (`127.0.0.1:PORT`, HTTPS).
    pub address: SocketAddr,
    admin_kubeconfig: std::path::PathBuf,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    /// Starts the HTTPS stand-in on a free loopback port and creates (or updates) Node
    /// `node_name` as admin: address `InternalIP 127.0.0.1`, the kubelet port, `Ready=True`, no
    /// pressure, capacity and allocatable of a small worker.
    pub async fn start(api: &KubeApi, node_name: &str) -> Kubelet {
        akritas::install_crypto_provider();
        let dir = tempfile::Builder::new().prefix("akritas-kubelet-").tempdir().expect("tempdir");
        let (cert, key) = self_signed_certificate(dir.path(), node_name);
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("kubelet stand-in TLS config");
        let tls = TlsAcceptor::from(Arc::new(config));

        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let address = tcp.local_addr().expect("local addr");
        // Handshakes run in their own tasks, so a slow or failing client does not hold up others.
        let (ready, incoming) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = tcp.accept().await else { continue };
                let tls = tls.clone();
                let ready = ready.clone();
                tokio::spawn(async move {
                    if let Ok(stream) = tls.accept(stream).await {
                        let _ = ready.send((stream, peer)).await;
                    }
                });
            }
        });

        let shared = Arc::new(Shared::default());
        let router = Router::new().fallback(serve).with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(TlsIncoming { incoming, address }, router).await;
        });

        let kubelet = Kubelet {
            node_name: node_name.to_string(),
            address,
            admin_kubeconfig: api.admin_kubeconfig.clone(),
            shared,
            server,
            acceptor,
        };
        kubelet.register(api);
        kubelet
    }

    fn register(&self, api: &KubeApi) {
        let name = &self.node_name;
        api.apply(&format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    \
             kubernetes.io/os: linux\n    kubernetes.io/arch: amd64\n"
        ));
        let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now").to_string();
        let condition = |kind: &str, status: &str, reason: &str, message: &str| {
            serde_json::json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            })
        };
        let resources =
            |pods: &str| serde_json::json!({"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi", "pods": pods});
        let status = serde_json::json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.address.port()}},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "capacity": resources("110"),
            "allocatable": resources("110"),
            "nodeInfo": {
                "machineID": format!("{:032x}", rand::random::<u128>()),
                "systemUUID": format!("{:032x}", rand::random::<u128>()),
                "bootID": format!("{:032x}", rand::random::<u128>()),
                "kernelVersion": "6.8.0", "osImage": "Akritas test node", "containerRuntimeVersion": "containerd://2.0.5",
                "kubeletVersion": "v1.33.13", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        }});
        self.patch_status(&status.to_string());
    }

    /// Sets one Node condition (e.g. `DiskPressure` `True`), as a kubelet reports it.
    pub fn set_condition(&self, kind: &str, status: &str, reason: &str, message: &str) {
        let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now").to_string();
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }]}});
        self.patch_status(&patch.to_string());
    }

    /// Strategic-merge patch of the Node's status (conditions merge by `type`).
    fn patch_status(&self, patch: &str) {
        let output = Command::new(crate::kube_api::kubectl_binary())
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .args(["patch", "node", &self.node_name, "--subresource=status", "--type=strategic", "-p", patch])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl");
        assert!(
            output.status.success(),
            "patching the status of Node {} failed: {}",
            self.node_name,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Serves `log` for the container (`previous`: the last terminated instance).
    pub fn set_log(&self, namespace: &str, pod: &str, container: &str, previous: bool, log: impl Into<Vec<u8>>) {
        self.insert(namespace, pod, container, previous, LogContent::Bytes(Bytes::from(log.into())));
    }

    /// Serves `line` (a trailing newline is added when missing) `count` times, generated while
    /// streaming, so a log of many MiB costs no memory.
    pub fn set_repeated_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
        line: &str,
        count: u64,
    ) {
        let mut line = line.to_string();
        if !line.ends_with('\n') {
            line.push('\n');
        }
        self.insert(namespace, pod, container, previous, LogContent::Repeat { line: Bytes::from(line), count });
    }

    fn insert(&self, namespace: &str, pod: &str, container: &str, previous: bool, content: LogContent) {
        let key = LogKey {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            previous,
        };
        self.shared.logs.lock().unwrap().insert(key, content);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<KubeletRequest> {
        self.shared.requests.lock().unwrap().clone()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.server.abort();
    }
}

/// Accepted, handshaken TLS connections for `axum::serve`.
struct TlsIncoming {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    address: SocketAddr,
}

impl axum::serve::Listener for TlsIncoming {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The acceptor task is gone (the stand-in is dropping): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.address)
    }
}

/// Every request: record it, then answer `/containerLogs/...` like the kubelet does.
async fn serve(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let uri = request.uri();
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect();
    let recorded = KubeletRequest { path: uri.path().to_string(), query };
    shared.requests.lock().unwrap().push(recorded.clone());

    let segments: Vec<&str> = recorded.path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", namespace, pod, container] = segments[..] else {
        // Go's mux answer for an unknown path.
        return (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    };
    let previous = recorded.param("previous") == Some("true");
    let tail = match recorded.param("tailLines").map(str::parse::<u64>) {
        None => None,
        Some(Ok(lines)) => Some(lines),
        Some(Err(_)) => return (StatusCode::BAD_REQUEST, r#"{"message": "Unable to decode query."}"#).into_response(),
    };
    let key =
        LogKey { namespace: namespace.to_string(), pod: pod.to_string(), container: container.to_string(), previous };
    let other = LogKey { previous: !previous, ..key.clone() };
    let (found, other_known) = {
        let logs = shared.logs.lock().unwrap();
        (logs.get(&key).cloned(), logs.get(&other).cloned())
    };
    let content = match (found, other_known) {
        (Some(content), _) => content,
        // A container waiting to restart (CrashLoopBackOff): the kubelet serves the last
        // terminated instance's log.
        (None, Some(content)) if !previous => content,
        (None, Some(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("previous terminated container {container:?} in pod {pod:?} not found"),
            )
                .into_response();
        }
        (None, None) => {
            return (StatusCode::NOT_FOUND, format!("container {container:?} not found in pod {pod:?}"))
                .into_response();
        }
    };
    let body = match content {
        LogContent::Bytes(bytes) => Body::from(tail.map_or(bytes.clone(), |lines| tail_lines(&bytes, lines))),
        LogContent::Repeat { line, count } => repeated(line, tail.map_or(count, |lines| lines.min(count))),
    };
    ([(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// The last `lines` lines of `log` (a final line without a newline counts as a line).
fn tail_lines(log: &Bytes, lines: u64) -> Bytes {
    let body = log.strip_suffix(b"\n").unwrap_or(log);
    let mut seen = 0;
    for (index, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            seen += 1;
            if seen == lines {
                return log.slice(index + 1..);
            }
        }
    }
    if lines == 0 { Bytes::new() } else { log.clone() }
}

/// A body of `line` repeated `count` times, in chunks of about [`CHUNK`] bytes.
fn repeated(line: Bytes, count: u64) -> Body {
    let per_chunk = (CHUNK / line.len().max(1)).max(1) as u64;
    let chunk = Bytes::from(line.repeat(per_chunk as usize));
    let stream = futures_util::stream::unfold(count, move |left| {
        let (line, chunk) = (line.clone(), chunk.clone());
        async move {
            match left {
                0 => None,
                left if left >= per_chunk => Some((Ok::<_, std::io::Error>(chunk), left - per_chunk)),
                left => Some((Ok(Bytes::from(line.repeat(left as usize))), 0)),
            }
        }
    });
    Body::from_stream(stream)
}

/// A self-signed ECDSA P-256 serving certificate for 127.0.0.1 and `node_name`, as DER.
fn self_signed_certificate(dir: &Path, node_name: &str) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
        assert!(output.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "kubelet.key",
        "-outform",
        "DER",
        "-out",
        "kubelet.der",
        "-days",
        "365",
        "-subj",
        &format!("/CN={node_name}@kubelet"),
        "-addext",
        &format!("subjectAltName=IP:127.0.0.1,DNS:{node_name}"),
    ]);
    openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", "kubelet.key", "-outform", "DER", "-out", "kubelet.key.der"]);
    let cert = std::fs::read(dir.join("kubelet.der")).expect("read kubelet.der");
    let key = std::fs::read(dir.join("kubelet.key.der")).expect("read kubelet.key.der");
    (CertificateDer::from(cert), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
}
