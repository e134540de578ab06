//! The receipt chain, pure: each JSON line carries `prev`, the SHA-256 (hex) of the line before
//! it (64 zeros for the first), so an edited, removed or reordered line breaks the link after it;
//! with the operator's public key, every line's signature ([`super::signing`]) is checked too, so
//! an edited line whose later links were recomputed is caught at that line.
//!
//! A crash can tear the last line (a write cut short). When the gateway opens the file again it
//! keeps those bytes and writes a `seal` line after them: signed like a receipt, linking to the
//! last intact line, naming the torn bytes' length and SHA-256 ([`seal`]). The verifier
//! accepts exactly those bytes before exactly that seal, and reports them.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::signing::{PublicKey, Unverified, verify_line};

mod seal;

pub use seal::Sealed;
pub(crate) use seal::{SEAL, Tail, recover};
use seal::{seal_after, sealed_by};

/// `prev` of the first receipt of a chain.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

pub(crate) fn hash_line(line: &[u8]) -> String {
    hex(&Sha256::digest(line))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a chain breaks: the 1-based line number and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct Broken {
    pub line: usize,
    pub why: String,
}

/// What an intact chain holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// Receipts (seals not counted).
    pub receipts: usize,
    pub seals: Vec<Sealed>,
    /// With public keys: what their check found.
    pub signatures: Option<Signatures>,
    /// Bytes after the last newline: a line being written, or torn by a crash not yet sealed
    /// (the gateway seals it when it opens the file). Not checked.
    pub unfinished: usize,
    /// The `replica` members seen.
    pub replicas: BTreeSet<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signatures {
    /// Lines whose signature verified (seals included).
    pub verified: usize,
    /// Unsigned lines at the start (written before a signing key was configured): the first
    /// signed line's `prev` commits to them, so they cannot change without breaking it.
    pub unsigned_before: usize,
    pub kids: BTreeSet<String>,
}

/// A line that looks like a receipt (or a seal): a JSON object with a string `prev`.
fn receipt(line: &[u8]) -> Option<Map<String, Value>> {
    serde_json::from_slice::<Map<String, Value>>(line)
        .ok()
        .filter(|r| r.get("prev").is_some_and(Value::is_string))
}

/// The lines of `bytes` that end with a newline, as byte ranges without it; and the number of
/// bytes after the last newline.
fn lines(bytes: &[u8]) -> (Vec<std::ops::Range<usize>>, usize) {
    let mut lines = Vec::new();
    let mut start = 0;
    for (at, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        lines.push(start..at);
        start = at + 1;
    }
    (lines, bytes.len() - start)
}

/// Check every link of a JSON Lines chain, and with `keys` every signature.
pub fn verify(bytes: &[u8], keys: Option<&[PublicKey]>) -> Result<Verified, Broken> {
    let (spans, unfinished) = lines(bytes);
    let mut verified = Verified {
        unfinished,
        signatures: keys.map(|_| Signatures::default()),
        ..Verified::default()
    };
    let mut expected = GENESIS.to_owned();
    let mut i = 0;
    while i < spans.len() {
        let line = &bytes[spans[i].clone()];
        match check(line, i + 1, &expected, keys, &mut verified) {
            Ok(r) => {
                if r.get("kind").and_then(Value::as_str) == Some(SEAL) {
                    return Err(Broken {
                        line: i + 1,
                        why: "a seal with no torn bytes before it (were they removed?)".into(),
                    });
                }
                verified.receipts += 1;
                expected = hash_line(line);
                i += 1;
            }
            Err(why) => {
                let sealed = (receipt(line).is_none())
                    .then(|| sealed_by(bytes, &spans, i))
                    .flatten();
                let Some(sealed) = sealed else {
                    let why = match seal_after(bytes, &spans, i) {
                        Some(at) if receipt(line).is_none() => format!(
                            "{why}; the seal at line {at} names other torn bytes than these (they were changed)"
                        ),
                        _ => why,
                    };
                    return Err(Broken { line: i + 1, why });
                };
                // The seal itself is checked as a line, linked to the line before the tear.
                let seal_index = sealed.seal_line - 1;
                let seal = &bytes[spans[seal_index].clone()];
                check(seal, sealed.seal_line, &expected, keys, &mut verified).map_err(|why| {
                    Broken {
                        line: sealed.seal_line,
                        why,
                    }
                })?;
                expected = hash_line(seal);
                verified.seals.push(sealed);
                i = seal_index + 1;
            }
        }
    }
    if let Some(s) = &verified.signatures
        && s.unsigned_before > 0
        && s.verified == 0
    {
        return Err(Broken {
            line: 1,
            why: "not signed, and no signed line follows to vouch for it (receipts are written unsigned without [receipts] signing_key)".into(),
        });
    }
    Ok(verified)
}

/// Check one line: a receipt, signed by one of `keys` (when given), linked to `expected`.
fn check(
    line: &[u8],
    number: usize,
    expected: &str,
    keys: Option<&[PublicKey]>,
    verified: &mut Verified,
) -> Result<Map<String, Value>, String> {
    let r: Map<String, Value> =
        serde_json::from_slice(line).map_err(|e| format!("not a JSON receipt ({e})"))?;
    let prev = r
        .get("prev")
        .and_then(Value::as_str)
        .ok_or("no \"prev\" member")?;
    if let (Some(keys), Some(signatures)) = (keys, verified.signatures.as_mut()) {
        match verify_line(line, keys) {
            Ok(kid) => {
                signatures.verified += 1;
                signatures.kids.insert(kid);
            }
            Err(Unverified::Unsigned) if signatures.verified == 0 => {
                signatures.unsigned_before += 1;
            }
            Err(Unverified::Unsigned) => {
                return Err("not signed (no \"sig\"), though the lines before it are".into());
            }
            Err(Unverified::Malformed(why)) => return Err(why),
            Err(Unverified::UnknownKey(kid)) => {
                let given: Vec<&str> = keys.iter().map(PublicKey::kid).collect();
                return Err(format!(
                    "signed by key {kid}, which is none of the given public keys ({})",
                    given.join(", ")
                ));
            }
            Err(Unverified::Bad(kid)) => {
                return Err(format!(
                    "the signature does not verify with key {kid}: the line was changed after it was signed"
                ));
            }
        }
    }
    if prev != expected {
        return Err(if number == 1 {
            "the first receipt does not start the chain (a line before it was removed, or it was edited)".to_owned()
        } else {
            format!(
                "\"prev\" is not the hash of line {}: that line, or this one, was edited, removed, inserted or moved",
                number - 1
            )
        });
    }
    if let Some(replica) = r.get("replica").and_then(Value::as_str) {
        verified.replicas.insert(replica.to_owned());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::signing::{SigningKey, tests::rfc_key};
    use super::*;

    /// A chain of `n` lines, signed with `key` when given.
    pub(super) fn chain(n: usize, key: Option<&SigningKey>) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        (0..n)
            .map(|i| {
                let line = line(&format!(r#""n":{i}"#), &prev, key);
                prev = hash_line(line.as_bytes());
                line
            })
            .collect()
    }

    pub(super) fn line(members: &str, prev: &str, key: Option<&SigningKey>) -> String {
        match key {
            Some(key) => key.sign_line(&format!(
                r#"{{"kid":"{}",{members},"prev":"{prev}"}}"#,
                key.kid()
            )),
            None => format!(r#"{{{members},"prev":"{prev}"}}"#),
        }
    }

    pub(super) fn text(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    pub(super) fn broken_at(text: &str, keys: Option<&[PublicKey]>) -> usize {
        verify(text.as_bytes(), keys).unwrap_err().line
    }

    #[test]
    fn a_chain_verifies_and_every_change_is_caught() {
        let lines = chain(5, None);
        assert_eq!(verify(text(&lines).as_bytes(), None).unwrap().receipts, 5);
        assert_eq!(verify(b"", None).unwrap().receipts, 0);

        let mut edited = lines.clone();
        edited[2] = edited[2].replace("\"n\":2", "\"n\":7");
        assert_eq!(broken_at(&text(&edited), None), 4);

        let mut removed = lines.clone();
        removed.remove(1);
        assert_eq!(broken_at(&text(&removed), None), 2);

        let mut swapped = lines.clone();
        swapped.swap(1, 3);
        assert_eq!(broken_at(&text(&swapped), None), 2);

        assert_eq!(broken_at(&text(&lines[1..]), None), 1);
        let mut garbage = lines.clone();
        garbage[3] = "{".into();
        assert_eq!(broken_at(&text(&garbage), None), 4);
        assert_eq!(
            recover(text(&lines).as_bytes()).last,
            hash_line(lines[4].as_bytes())
        );
    }

    /// Terms edited and every later link recomputed: intact without the key, caught at that
    /// line with it.
    #[test]
    fn a_relinked_forgery_is_caught_by_its_signature() {
        let key = rfc_key();
        let keys = [key.public().clone()];
        let lines = chain(6, Some(&key));
        let good = verify(text(&lines).as_bytes(), Some(&keys)).unwrap();
        let signatures = good.signatures.unwrap();
        assert_eq!(signatures.verified, 6);
        assert_eq!(signatures.kids.iter().collect::<Vec<_>>(), [key.kid()]);

        let mut forged = lines.clone();
        forged[2] = forged[2].replace("\"n\":2", "\"n\":9");
        for i in 3..forged.len() {
            let prev = hash_line(forged[i - 1].as_bytes());
            let old: Value = serde_json::from_str(&forged[i]).unwrap();
            let old = old["prev"].as_str().unwrap().to_owned();
            forged[i] = forged[i].replace(&old, &prev);
        }
        let forged = text(&forged);
        assert!(verify(forged.as_bytes(), None).is_ok(), "links alone hold");
        let broken = verify(forged.as_bytes(), Some(&keys)).unwrap_err();
        assert_eq!(broken.line, 3);
        assert!(broken.why.contains("does not verify"), "{broken}");

        let other = SigningKey::from_pkcs8_der(&{
            let rng = ring::rand::SystemRandom::new();
            ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
                .unwrap()
                .as_ref()
                .to_vec()
        })
        .unwrap();
        let broken = verify(text(&lines).as_bytes(), Some(&[other.public().clone()])).unwrap_err();
        assert_eq!(broken.line, 1);
        assert!(broken.why.contains("none of the given"), "{broken}");
    }

    /// Unsigned lines before the first signed one are vouched for by it; an unsigned line after
    /// a signed one (appended by someone without the key) is not; nor is a file with no
    /// signed line at all.
    #[test]
    fn unsigned_lines_only_before_signed_ones() {
        let key = rfc_key();
        let keys = [key.public().clone()];
        let mut lines = chain(2, None);
        lines.push(line(
            r#""n":2"#,
            &hash_line(lines[1].as_bytes()),
            Some(&key),
        ));
        let ok = verify(text(&lines).as_bytes(), Some(&keys)).unwrap();
        assert_eq!(ok.signatures.unwrap().unsigned_before, 2);

        lines.push(line(r#""n":3"#, &hash_line(lines[2].as_bytes()), None));
        assert_eq!(broken_at(&text(&lines), Some(&keys)), 4);
        assert_eq!(broken_at(&text(&chain(3, None)), Some(&keys)), 1);
    }
}
