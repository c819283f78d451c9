//! A WebSocket client connection (Slack's Socket Mode) opened the way every outbound call of
//! the host is: the URL's host is judged by the egress policy, its addresses are filtered by
//! it, and `wss` is TLS with the system's roots (rustls). Plain `ws` is refused except to
//! loopback or `cleartext_credential_hosts`, as for any URL that carries a credential (a
//! Socket Mode URL holds a one-time ticket).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;

/// The longest a connection and its handshakes may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest message accepted from the server.
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// A byte stream a WebSocket runs over (TCP, or TLS over TCP).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// An open WebSocket.
pub type Socket = WebSocketStream<Box<dyn Stream>>;

/// Connects to a `ws://` or `wss://` URL. Errors never name the URL (it holds a ticket).
pub async fn connect(url: &str) -> Result<Socket, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, open(url))
        .await
        .unwrap_or_else(|_| Err(format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())))
}

async fn open(url: &str) -> Result<Socket, String> {
    let parsed = url::Url::parse(url).map_err(|_| "the Socket Mode URL is not a URL".to_string())?;
    let secure = match parsed.scheme() {
        "wss" => true,
        "ws" => false,
        other => return Err(format!("the Socket Mode URL's scheme is {other:?}, not wss")),
    };
    let host = parsed.host_str().ok_or("the Socket Mode URL has no host")?.to_string();
    let port = parsed.port_or_known_default().unwrap_or(if secure { 443 } else { 80 });
    let policy = crate::egress::Egress::current();
    let as_http =
        format!("{}://{}:{port}/", if secure { "https" } else { "http" }, parsed.host_str().unwrap_or_default());
    policy.check_credential_url(&as_http).map_err(|e| e.to_string())?;
    let name = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
        .await
        .map_err(|e| format!("cannot resolve {name}: {e}"))?
        .collect();
    let allowed = policy.filter(&name, found).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(allowed.as_slice()).await.map_err(|e| format!("cannot connect to {name}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Stream> = if secure {
        let server = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| format!("{name}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(tls_config()))
            .connect(server, tcp)
            .await
            .map_err(|e| format!("TLS with {name}: {e}"))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let (socket, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
        .await
        .map_err(|e| format!("WebSocket handshake with {name}: {}", handshake_error(&e)))?;
    Ok(socket)
}

/// A handshake error without the request (which names the URL).
fn handshake_error(error: &tokio_tungstenite::tungstenite::Error) -> String {
    match error {
        tokio_tungstenite::tungstenite::Error::Http(response) => format!("HTTP {}", response.status()),
        other => other.to_string(),
    }
}

fn tls_config() -> rustls::ClientConfig {
    crate::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()
}
