//! The signature of a delivery, as the Standard Webhooks spec (v1.0.0) writes it: HMAC-SHA-256
//! with the secret's key over `{webhook-id}.{webhook-timestamp}.{body}`, sent as
//! `webhook-signature: v1,<base64>`. Pure. Any Standard Webhooks library verifies it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;

/// The three headers of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signed {
    /// `webhook-id`: the event's ID, the same on every attempt.
    pub(crate) id: String,
    /// `webhook-timestamp`: this attempt's time, in Unix seconds.
    pub(crate) timestamp: String,
    /// `webhook-signature`.
    pub(crate) signature: String,
}

/// Sign `body` for an attempt at `unix_seconds`.
pub(crate) fn sign(key: &[u8], id: &str, unix_seconds: i64, body: &[u8]) -> Signed {
    let timestamp = unix_seconds.to_string();
    let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, key));
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let signature = format!("v1,{}", STANDARD.encode(mac.sign().as_ref()));
    Signed {
        id: id.to_owned(),
        timestamp,
        signature,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebhookSecret;

    /// The vector of the Standard Webhooks reference libraries' tests (`test_sign_function`).
    #[test]
    fn the_reference_vector() {
        let secret = WebhookSecret::parse(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signed = sign(
            secret.key(),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signed.signature,
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(signed.timestamp, "1614265330");
        assert_eq!(signed.id, "msg_p5jXN8AQM9LWM0D4loKWxJek");
    }

    #[test]
    fn every_part_is_signed() {
        let key = [7u8; 32];
        let base = sign(&key, "evt_a", 100, b"{}");
        assert_ne!(base.signature, sign(&key, "evt_b", 100, b"{}").signature);
        assert_ne!(base.signature, sign(&key, "evt_a", 101, b"{}").signature);
        assert_ne!(base.signature, sign(&key, "evt_a", 100, b"{ }").signature);
        assert_ne!(
            base.signature,
            sign(&[8u8; 32], "evt_a", 100, b"{}").signature
        );
    }
}
