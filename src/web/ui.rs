//! The embedded web UI: one HTML page for `/` and the client-side routes, and its
//! assets at `/ui/{name}`, compiled into the binary from `ui/` (no CDN, no build
//! step). The page holds no data, so it needs no API key; every API call it makes
//! carries the key the user entered. Responses carry a strict Content Security
//! Policy, an `ETag` and `Cache-Control: no-cache` (revalidate, answered 304).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// The page's Content Security Policy: only this origin's scripts, styles and API.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
pub struct Asset {
    /// Name under `/ui/`.
    pub name: &'static str,
    /// Media type.
    pub content_type: &'static str,
    /// The file's text, built into the binary from `ui/` with `include_str!`.
    pub body: &'static str,
}

/// The page and its assets.
pub const INDEX: Asset =
    Asset { name: "index.html", content_type: "text/html; charset=utf-8", body: include_str!("../../ui/index.html") };

const JS: &str = "text/javascript; charset=utf-8";

/// The files under `/ui/`.
pub const ASSETS: [Asset; 11] = [
    Asset { name: "app.css", content_type: "text/css; charset=utf-8", body: include_str!("../../ui/app.css") },
    Asset { name: "app.js", content_type: JS, body: include_str!("../../ui/app.js") },
    Asset { name: "api.js", content_type: JS, body: include_str!("../../ui/api.js") },
    Asset { name: "dom.js", content_type: JS, body: include_str!("../../ui/dom.js") },
    Asset { name: "markdown.js", content_type: JS, body: include_str!("../../ui/markdown.js") },
    Asset { name: "chat.js", content_type: JS, body: include_str!("../../ui/chat.js") },
    Asset { name: "runs.js", content_type: JS, body: include_str!("../../ui/runs.js") },
    Asset { name: "incidents.js", content_type: JS, body: include_str!("../../ui/incidents.js") },
    Asset { name: "resources.js", content_type: JS, body: include_str!("../../ui/resources.js") },
    Asset { name: "change.js", content_type: JS, body: include_str!("../../ui/change.js") },
    Asset { name: "schedules.js", content_type: JS, body: include_str!("../../ui/schedules.js") },
];

/// The `ETag` of each asset (the page first), computed once from the contents.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::iter::once(&INDEX)
        .chain(ASSETS.iter())
        .map(|asset| format!("\"{}\"", &hex::encode(Sha256::digest(asset.body.as_bytes()))[..32]))
        .collect()
});

/// The UI routes (no API key): the page for each client-side route, and the assets.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route("/chat", get(page))
        .route("/runs", get(page))
        .route("/runs/{id}", get(page))
        .route("/incidents", get(page))
        .route("/incidents/{id}", get(page))
        .route("/resources", get(page))
        .route("/schedules", get(page))
        .route("/change", get(page))
        .route("/ui/{name}", get(asset))
}

async fn page(headers: HeaderMap) -> Response {
    serve(&INDEX, &ETAGS[0], &headers)
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().position(|asset| asset.name == name) {
        Some(index) => serve(&ASSETS[index], &ETAGS[index + 1], &headers),
        None => ApiError::not_found(format!("no UI asset {name:?}")).into_response(),
    }
}

fn serve(asset: &Asset, etag: &str, headers: &HeaderMap) -> Response {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let set = response.headers_mut();
    set.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    if let Ok(value) = HeaderValue::from_str(etag) {
        set.insert(header::ETAG, value);
    }
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    set.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    set.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    set.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    set.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        for asset in std::iter::once(&INDEX).chain(ASSETS.iter()) {
            for part in asset.body.split("\"./").skip(1).chain(asset.body.split("\"/ui/").skip(1)) {
                let Some(name) = part.split('"').next() else { continue };
                assert!(names.contains(&name), "{} refers to {name}, which is not embedded", asset.name);
            }
        }
        assert_eq!(ETAGS.len(), ASSETS.len() + 1);
    }

    #[test]
    fn no_script_uses_html_sinks() {
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
                assert!(!asset.body.contains(sink), "{} uses {sink}", asset.name);
            }
        }
    }
}
