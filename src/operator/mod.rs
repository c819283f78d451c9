//! Operator mode (`serve --kubernetes`): the Catalog comes from the Akritas custom
//! resources (validated exactly as in standalone mode), secrets from Kubernetes
//! Secrets, and every object's status is written back.

pub(crate) mod api;
pub(crate) mod backoff;
pub(crate) mod leader;
pub mod projection;
pub(crate) mod requests;
pub(crate) mod secrets;
pub(crate) mod source;
pub(crate) mod status;

#[cfg(test)]
pub(crate) mod mock {
    //! A mocked API server for reconciler error paths (kube's `tower_test` pattern):
    //! each expected request is checked and answered in order.

    use axum::http::{Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::Value;

    /// One expected call: method, path prefix, answer status and body.
    pub(crate) struct Expect {
        pub method: &'static str,
        pub path: String,
        pub status: u16,
        pub body: Value,
    }

    /// A request the mocked server received.
    #[derive(Debug)]
    pub(crate) struct Seen {
        /// Path and query.
        pub uri: String,
        /// The JSON body (`Null` when there is none).
        pub body: Value,
    }

    /// A client whose requests are answered by `script`; the returned task fails if a
    /// request differs from the script, and yields the requests in order.
    pub(crate) fn client(script: Vec<Expect>) -> (kube::Client, tokio::task::JoinHandle<Vec<Seen>>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            for expect in script {
                let (request, respond) = handle.next_request().await.expect("a request");
                assert_eq!(request.method().as_str(), expect.method, "{}", request.uri());
                assert!(
                    request.uri().path().starts_with(&expect.path),
                    "expected {} {}, got {}",
                    expect.method,
                    expect.path,
                    request.uri()
                );
                let uri = request.uri().to_string();
                let bytes = request.into_body().collect_bytes().await.expect("request body");
                seen.push(Seen { uri, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) });
                let response = Response::builder()
                    .status(StatusCode::from_u16(expect.status).expect("status"))
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&expect.body).expect("json")))
                    .expect("response");
                respond.send_response(response);
            }
            seen
        });
        (kube::Client::new(service, "default"), task)
    }

    /// A client served by `answer`, called with each request's method and URI (path
    /// and query): `Some((status, body))` answers, `None` keeps the request open (a
    /// watch that sees no change). The task ends when the client is dropped.
    pub(crate) fn api_server(
        answer: impl Fn(&str, &str) -> Option<(u16, Value)> + Send + 'static,
    ) -> (kube::Client, tokio::task::JoinHandle<()>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let task = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                let uri = request.uri().to_string();
                match answer(request.method().as_str(), &uri) {
                    Some((code, body)) => respond.send_response(
                        Response::builder()
                            .status(StatusCode::from_u16(code).expect("status"))
                            .header("content-type", "application/json")
                            .body(Body::from(serde_json::to_vec(&body).expect("json")))
                            .expect("response"),
                    ),
                    None => open.push(respond),
                }
            }
        });
        (kube::Client::new(service, "default"), task)
    }

    /// A Kubernetes `Status` failure body.
    pub(crate) fn status(code: u16, reason: &str) -> Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason,
                           "reason": reason, "code": code})
    }
}
