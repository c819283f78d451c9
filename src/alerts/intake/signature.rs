//! HMAC signatures of alert deliveries (`spec.auth.hmacSecret`), checked in constant time.
//!
//! `X-Akritas-Signature` carries `sha256=<hex HMAC-SHA256>` of the body; when the AlertSource
//! names `hmacTimestampHeader`, of `{timestamp}:{body}` instead, `{timestamp}` being that
//! header's value, the Unix seconds the sender signed at (Grafana's format with its webhook
//! `timestampHeader`; the bare hex Grafana sends is accepted then too). Then, as the Slack
//! route does, a delivery signed more than [`WINDOW_SECONDS`] from the host's clock is refused,
//! and the store refuses a signature it already accepted within the window
//! ([`RecentSignatures`]), so a captured delivery cannot be replayed, later or at once. A
//! signature of the body alone cannot expire; it stays accepted as before.

use std::collections::{HashSet, VecDeque};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The header the signature travels in.
pub const SIGNATURE_HEADER: &str = "x-akritas-signature";
/// How far a signed timestamp may be from the host's clock, in seconds (as Slack's).
pub const WINDOW_SECONDS: i64 = 300;
/// Most signatures remembered; past it the oldest are forgotten first (each is needed only
/// within the window, and only a holder of the secret adds one).
pub const MAX_REMEMBERED: usize = 65_536;

/// Why a signed delivery is refused (HTTP 401); each message says what to send instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No signature, or not the HMAC of what was sent.
    #[error(
        "missing or wrong X-Akritas-Signature: send sha256=<hex HMAC-SHA256 of {signed}> made with the source's \
         hmacSecret"
    )]
    Wrong {
        /// What is signed: `the body` or `{timestamp}:{body}`.
        signed: &'static str,
    },
    /// The source wants a signed timestamp and the header is missing or not Unix seconds.
    #[error(
        "missing or malformed {header}: this AlertSource's HMAC covers {{timestamp}}:{{body}}; send the Unix time \
         (seconds) you signed at in {header}"
    )]
    NoTimestamp {
        /// The header named by `hmacTimestampHeader`.
        header: String,
    },
    /// The signed timestamp is too far from the host's clock.
    #[error(
        "the {header} is more than 5 minutes from the host's clock: a signed delivery is accepted only within 5 \
         minutes of its signing, so an old one cannot be replayed; sign each delivery when you send it (check the \
         sender's clock if every delivery is refused)"
    )]
    Expired {
        /// The header named by `hmacTimestampHeader`.
        header: String,
    },
    /// The same signature was already accepted within the window.
    #[error(
        "this X-Akritas-Signature was already accepted: a signed delivery is accepted once; sign each delivery \
         anew with the time you send it"
    )]
    Replayed,
}

/// A delivery whose signature covered its timestamp: what the replay memory keeps of it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Signed {
    /// Unix seconds the sender signed at.
    pub at: i64,
    /// The first 16 bytes of the SHA-256 of the signature's bytes, in hex.
    pub digest: String,
}

/// Checks the signature of `body` with `secret`. `timestamp` is `(header, value)` when the
/// source signs a timestamp; then the timestamp must be within [`WINDOW_SECONDS`] of `now`
/// (Unix seconds) and the answer is what the replay memory must check and keep.
pub fn verify(
    secret: &[u8],
    signature: Option<&str>,
    timestamp: Option<(&str, Option<&str>)>,
    body: &[u8],
    now: i64,
) -> Result<Option<Signed>, SignatureError> {
    let signed_at = match timestamp {
        None => None,
        Some((header, value)) => {
            let at = value.map(str::trim).and_then(|value| value.parse::<i64>().ok());
            let at = at.ok_or_else(|| SignatureError::NoTimestamp { header: header.to_string() })?;
            if (now - at).abs() > WINDOW_SECONDS {
                return Err(SignatureError::Expired { header: header.to_string() });
            }
            Some((value.unwrap_or_default().trim(), at))
        }
    };
    let wrong =
        || SignatureError::Wrong { signed: if signed_at.is_some() { "{timestamp}:{body}" } else { "the body" } };
    // `sha256=<hex>`; a signed timestamp also accepts the bare hex Grafana sends.
    let presented = signature.map(str::trim).and_then(|s| match s.strip_prefix("sha256=") {
        Some(hex_mac) => Some(hex_mac),
        None => signed_at.is_some().then_some(s),
    });
    let presented = presented.and_then(|hex_mac| hex::decode(hex_mac).ok()).ok_or_else(wrong)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| wrong())?;
    if let Some((text, _)) = signed_at {
        mac.update(text.as_bytes());
        mac.update(b":");
    }
    mac.update(body);
    mac.verify_slice(&presented).map_err(|_| wrong())?;
    Ok(signed_at.map(|(_, at)| Signed { at, digest: hex::encode(&Sha256::digest(&presented)[..16]) }))
}

/// Signatures accepted within the window, oldest first: a replayed one is refused. Kept in the
/// alert store's state (each delivery record carries its [`Signed`]), so a restart and every
/// replica on the database remember them too.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "Vec<Signed>", into = "Vec<Signed>")]
pub struct RecentSignatures {
    order: VecDeque<(i64, u128)>,
    seen: HashSet<u128>,
}

fn digest_bits(signed: &Signed) -> Option<u128> {
    u128::from_str_radix(&signed.digest, 16).ok()
}

impl RecentSignatures {
    /// Whether `signed` was accepted already.
    pub fn replayed(&self, signed: &Signed) -> bool {
        digest_bits(signed).is_some_and(|bits| self.seen.contains(&bits))
    }

    /// Remembers `signed`, accepted at `now` (Unix seconds); forgets what the window already
    /// refuses, and the oldest past [`MAX_REMEMBERED`].
    pub fn remember(&mut self, signed: &Signed, now: i64) {
        while let Some(&(at, bits)) = self.order.front() {
            if at >= now - WINDOW_SECONDS && self.order.len() < MAX_REMEMBERED {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&bits);
        }
        if let Some(bits) = digest_bits(signed)
            && self.seen.insert(bits)
        {
            self.order.push_back((signed.at, bits));
        }
    }

    /// Signatures remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl From<Vec<Signed>> for RecentSignatures {
    fn from(list: Vec<Signed>) -> Self {
        let mut recent = RecentSignatures::default();
        for signed in &list {
            if let Some(bits) = digest_bits(signed)
                && recent.seen.insert(bits)
            {
                recent.order.push_back((signed.at, bits));
            }
        }
        recent
    }
}

impl From<RecentSignatures> for Vec<Signed> {
    fn from(recent: RecentSignatures) -> Self {
        recent.order.into_iter().map(|(at, bits)| Signed { at, digest: format!("{bits:032x}") }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"grafana-hmac-secret";
    const BODY: &[u8] = br#"{"status":"firing"}"#;
    const NOW: i64 = 1_800_000_000;

    fn sign(message: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
        mac.update(message);
        hex::encode(mac.finalize().into_bytes())
    }

    fn stamped(at: i64) -> String {
        sign(format!("{at}:{}", std::str::from_utf8(BODY).unwrap()).as_bytes())
    }

    #[test]
    fn a_body_signature_needs_its_prefix_and_never_expires() {
        let signature = sign(BODY);
        assert_eq!(verify(SECRET, Some(&format!("sha256={signature}")), None, BODY, NOW), Ok(None));
        let bare = verify(SECRET, Some(&signature), None, BODY, NOW);
        assert_eq!(bare, Err(SignatureError::Wrong { signed: "the body" }), "as before signed timestamps");
        let wrong = verify(SECRET, Some(&sign(b"other")), None, BODY, NOW);
        assert_eq!(wrong, Err(SignatureError::Wrong { signed: "the body" }));
        assert!(matches!(verify(SECRET, None, None, BODY, NOW), Err(SignatureError::Wrong { .. })));
    }

    #[test]
    fn a_timestamped_signature_covers_the_timestamp_and_expires_after_the_window() {
        let header = "X-Grafana-Alerting-Timestamp";
        let now = NOW.to_string();
        let signed = verify(SECRET, Some(&stamped(NOW)), Some((header, Some(&now))), BODY, NOW + 299).unwrap();
        assert_eq!(signed.as_ref().map(|s| (s.at, s.digest.len())), Some((NOW, 32)), "Grafana sends the bare hex");
        let prefixed = format!("sha256={}", stamped(NOW));
        assert_eq!(verify(SECRET, Some(&prefixed), Some((header, Some(&now))), BODY, NOW), Ok(signed));
        let body_only = verify(SECRET, Some(&sign(BODY)), Some((header, Some(&now))), BODY, NOW);
        assert_eq!(body_only, Err(SignatureError::Wrong { signed: "{timestamp}:{body}" }), "the timestamp is signed");
        let moved = verify(SECRET, Some(&stamped(NOW)), Some((header, Some("1800000001"))), BODY, NOW);
        assert!(matches!(moved, Err(SignatureError::Wrong { .. })), "a changed timestamp breaks the signature");
        for late in [NOW + 301, NOW - 301] {
            let old = verify(SECRET, Some(&stamped(NOW)), Some((header, Some(&now))), BODY, late);
            assert_eq!(old, Err(SignatureError::Expired { header: header.into() }));
        }
        for bad in [None, Some("yesterday"), Some("")] {
            let refused = verify(SECRET, Some(&stamped(NOW)), Some((header, bad)), BODY, NOW);
            assert_eq!(refused, Err(SignatureError::NoTimestamp { header: header.into() }));
        }
        let message = SignatureError::Expired { header: header.into() }.to_string();
        assert!(message.contains(header) && message.contains("5 minutes"), "{message}");
    }

    #[test]
    fn a_signature_is_remembered_within_the_window_and_boundedly() {
        let signed = |at: i64, n: u128| Signed { at, digest: format!("{n:032x}") };
        let mut recent = RecentSignatures::default();
        recent.remember(&signed(NOW, 1), NOW);
        assert!(recent.replayed(&signed(NOW, 1)));
        assert!(!recent.replayed(&signed(NOW, 2)));
        recent.remember(&signed(NOW + 400, 2), NOW + 400);
        assert!(!recent.replayed(&signed(NOW, 1)), "forgotten once the window refuses it anyway");
        let copy: RecentSignatures = serde_json::from_value(serde_json::to_value(&recent).unwrap()).unwrap();
        assert!(copy.replayed(&signed(NOW + 400, 2)), "kept in snapshots");
        for n in 0..MAX_REMEMBERED as u128 + 10 {
            recent.remember(&signed(NOW + 400, 100 + n), NOW + 400);
        }
        assert_eq!(recent.len(), MAX_REMEMBERED);
    }
}
