//! HTTP/1.1 spoken byte by byte over a real `tokio::net::TcpStream`, for requests no
//! well-behaved client would send: bodies shorter than their `Content-Length`, broken chunk
//! sizes, bare CR or LF inside header values, huge or non-UTF-8 headers. A request is the
//! exact bytes written; the answer is whatever the server wrote back before closing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the server did with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It answered (the first response on the connection).
    Answered(RawResponse),
    /// It closed the connection without writing anything.
    Closed,
    /// It wrote nothing and kept the connection open until the deadline.
    TimedOut,
}

/// One parsed HTTP/1.1 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when the response was chunked.
    pub body: Vec<u8>,
    /// Bytes the server wrote after this response on the same connection.
    pub after: Vec<u8>,
}

impl RawResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the client does once its bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Waits for the answer with its write side open.
    Wait,
    /// Shuts its write side (the server reads EOF after the bytes), then waits.
    HalfClose,
}

/// Writes `bytes` to `addr` and reads until the server closes the connection or `deadline`
/// passes; the first response is the answer, whatever follows it is kept in
/// [`RawResponse::after`] (a second response means the server read a second request).
pub async fn exchange(addr: std::net::SocketAddr, bytes: &[u8], then: Then, deadline: Duration) -> Outcome {
    let mut stream = TcpStream::connect(addr).await.expect("connect to the server under test");
    // The server may answer and close before it read everything (a 413 on a declared
    // length): a failed write is part of the outcome, so it is not an error here.
    let _ = stream.write_all(bytes).await;
    if then == Then::HalfClose {
        let _ = stream.shutdown().await;
    }
    let mut received = Vec::new();
    let read = tokio::time::timeout(deadline, async {
        let mut buffer = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            received.extend_from_slice(&buffer[..n]);
        }
    })
    .await;
    match parse(&received) {
        Some(response) => Outcome::Answered(response),
        None if read.is_err() && received.is_empty() => Outcome::TimedOut,
        None if received.is_empty() => Outcome::Closed,
        None => panic!("unparseable or incomplete response: {:?}", String::from_utf8_lossy(&received)),
    }
}

/// Parses one complete response from the start of `bytes`, or `None` if incomplete.
pub fn parse(bytes: &[u8]) -> Option<RawResponse> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &bytes[end + 4..];
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let (body, after) = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else {
        let length: usize = find("content-length").map_or(Some(0), |v| v.parse().ok())?;
        (rest.get(..length)?.to_vec(), rest[length..].to_vec())
    };
    Some(RawResponse { status, headers, body, after })
}

/// The de-chunked body and the bytes after its last chunk.
fn dechunk(mut bytes: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut body = Vec::new();
    loop {
        let line_end = bytes.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&bytes[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            // Trailers (none expected) end with an empty line.
            let end = bytes.windows(2).position(|w| w == b"\r\n")?;
            return Some((body, bytes[end + 2..].to_vec()));
        }
        body.extend_from_slice(bytes.get(..size)?);
        bytes = bytes.get(size + 2..)?;
    }
}

/// A request written by hand: request line, headers in order, raw body. Nothing is added
/// except what the builder's methods add.
#[derive(Debug, Clone)]
pub struct RawRequest {
    head: Vec<u8>,
    body: Vec<u8>,
    /// Whether `head` still needs its terminating blank line.
    open_head: bool,
}

impl RawRequest {
    /// `METHOD TARGET HTTP/1.1` with `Host` and `Connection: close`.
    pub fn new(method: &str, target: &str) -> RawRequest {
        RawRequest::keep_alive(method, target).header("connection", "close")
    }

    /// `METHOD TARGET HTTP/1.1` with `Host` only: the connection may carry more requests.
    pub fn keep_alive(method: &str, target: &str) -> RawRequest {
        let head = format!("{method} {target} HTTP/1.1\r\nhost: localhost\r\n").into_bytes();
        RawRequest { head, body: Vec::new(), open_head: true }
    }

    /// Exactly these bytes, nothing added (for broken request lines and pipelining).
    pub fn from_bytes(bytes: &[u8]) -> RawRequest {
        RawRequest { head: bytes.to_vec(), body: Vec::new(), open_head: false }
    }

    /// Adds a header line `name: value` exactly as given (no checks: CR, LF and
    /// non-UTF-8 bytes are written as they are).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> RawRequest {
        self.head.extend_from_slice(name.as_bytes());
        self.head.extend_from_slice(b": ");
        self.head.extend_from_slice(value.as_ref());
        self.head.extend_from_slice(b"\r\n");
        self
    }

    /// Adds raw bytes to the header block (for malformed lines).
    pub fn raw_line(mut self, line: impl AsRef<[u8]>) -> RawRequest {
        self.head.extend_from_slice(line.as_ref());
        self.head.extend_from_slice(b"\r\n");
        self
    }

    /// A body with its true `Content-Length`.
    pub fn body(self, body: impl AsRef<[u8]>) -> RawRequest {
        let body = body.as_ref().to_vec();
        self.header("content-length", body.len().to_string()).raw_body(body)
    }

    /// A body written as is, with no length header added.
    pub fn raw_body(mut self, body: impl AsRef<[u8]>) -> RawRequest {
        self.body = body.as_ref().to_vec();
        self
    }

    /// A body sent `Transfer-Encoding: chunked` in chunks of at most `chunk` bytes.
    pub fn chunked(self, body: impl AsRef<[u8]>, chunk: usize) -> RawRequest {
        let mut encoded = Vec::new();
        for part in body.as_ref().chunks(chunk.max(1)) {
            encoded.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            encoded.extend_from_slice(part);
            encoded.extend_from_slice(b"\r\n");
        }
        encoded.extend_from_slice(b"0\r\n\r\n");
        self.header("transfer-encoding", "chunked").raw_body(encoded)
    }

    /// The bytes to write.
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = self.head.clone();
        if self.open_head {
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(&self.body);
        bytes
    }
}
