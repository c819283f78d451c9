//! The fixed error codes of a notification delivery: an outcome names one, never a token or
//! a URL that holds one.

/// Sanitised delivery failure classes (upstream error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("encode_payload")]
    EncodePayload,
    #[error("create_request")]
    CreateRequest,
    #[error("timeout")]
    Timeout,
    #[error("request_failed")]
    RequestFailed,
    #[error("http_status")]
    HttpStatus,
    #[error("read_response")]
    ReadResponse,
    #[error("response_too_large")]
    ResponseTooLarge,
    #[error("remote_rejected")]
    RemoteRejected,
    /// The egress policy refuses the target (see the receiver's `Ready` condition).
    #[error("egress_refused")]
    EgressRefused,
    /// The request carries a credential and would travel over plain http.
    #[error("cleartext_credential")]
    CleartextCredential,
}

impl DeliveryError {
    /// Stable error code (same text as `Display`).
    pub fn code(self) -> &'static str {
        match self {
            DeliveryError::EncodePayload => "encode_payload",
            DeliveryError::CreateRequest => "create_request",
            DeliveryError::Timeout => "timeout",
            DeliveryError::RequestFailed => "request_failed",
            DeliveryError::HttpStatus => "http_status",
            DeliveryError::ReadResponse => "read_response",
            DeliveryError::ResponseTooLarge => "response_too_large",
            DeliveryError::RemoteRejected => "remote_rejected",
            DeliveryError::EgressRefused => "egress_refused",
            DeliveryError::CleartextCredential => "cleartext_credential",
        }
    }
}
