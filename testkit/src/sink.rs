//! A webhook receiver stand-in that records every notification it is sent: the path,
//! the `X-Akritas-Delivery` idempotency key and the JSON body. It answers `200` after a
//! random pause of up to `max_delay`, so a crash can fall between "the receiver got it"
//! and "the sender heard back" (the case a receiver deduplicates by delivery id).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    /// Request path (`/a`, `/b`, …: one per NotificationReceiver).
    pub path: String,
    /// `X-Akritas-Delivery`, empty when absent.
    pub delivery_id: String,
    /// The body as JSON (`null` when it is not JSON).
    pub body: Value,
}

/// A running receiver; stops when dropped.
pub struct Sink {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    held: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sink {
    /// Serves on a free loopback port.
    pub async fn start(max_delay: Duration) -> Sink {
        let received = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (sink, holding) = (received.clone(), held.clone());
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
            let (sink, holding) = (sink.clone(), holding.clone());
            async move {
                let delivery_id =
                    headers.get("x-akritas-delivery").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                sink.lock().unwrap().push(Received { path: uri.path().to_string(), delivery_id, body });
                while holding.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let millis = u64::try_from(max_delay.as_millis()).unwrap_or(u64::MAX);
                if millis > 0 {
                    tokio::time::sleep(Duration::from_millis(rand::random_range(0..=millis))).await;
                }
                axum::Json(json!({"received": true}))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Sink { url, received, held, task }
    }

    /// While `on`, every request is recorded and then left unanswered (a receiver that hangs).
    pub fn hold(&self, on: bool) {
        self.held.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Everything received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}
