//! The receipt chain, pure: each JSON line carries `prev`, the SHA-256 (hex) of the line before
//! it (64 zeros for the first), so an edited, removed or reordered line breaks the link after it;
//! with the operator's public key, every line's signature ([`super::signing`]) is checked too, so
//! an edited line whose later links were recomputed is caught at that line.
//!
//! A crash can tear the last line (a write cut short). When the gateway opens the file again it
//! keeps those bytes and writes a `seal` line after them: signed like a receipt, linking to the
//! last intact line, naming the torn bytes' length and SHA-256 ([`recover`]). The verifier
//! accepts exactly those bytes before exactly that seal, and reports them.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::signing::{PublicKey, Unverified, verify_line};

/// `prev` of the first receipt of a chain.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `kind` of the line that seals torn bytes.
pub(crate) const SEAL: &str = "seal";

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

/// Torn bytes and the seal after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The 1-based lines the torn bytes span.
    pub lines: (usize, usize),
    pub bytes: usize,
    /// The seal's own line.
    pub seal_line: usize,
    pub sealed_at: Option<String>,
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

/// The 1-based line of the first receipt-like line after line `i`, when it is a seal.
fn seal_after(bytes: &[u8], spans: &[std::ops::Range<usize>], i: usize) -> Option<usize> {
    let j = (i + 1..spans.len()).find(|&j| receipt(&bytes[spans[j].clone()]).is_some())?;
    let next = receipt(&bytes[spans[j].clone()])?;
    (next.get("kind").and_then(Value::as_str) == Some(SEAL)).then_some(j + 1)
}

/// When line `i` starts torn bytes: the seal after them, if it names exactly those bytes.
fn sealed_by(bytes: &[u8], spans: &[std::ops::Range<usize>], i: usize) -> Option<Sealed> {
    let j = seal_after(bytes, spans, i)? - 1;
    let seal = receipt(&bytes[spans[j].clone()])?;
    let torn = &bytes[spans[i].start..spans[j - 1].end];
    let named = seal.get("torn_sha256").and_then(Value::as_str) == Some(&hash_line(torn))
        && seal.get("torn_bytes").and_then(Value::as_u64) == Some(torn.len() as u64);
    named.then(|| Sealed {
        lines: (i + 1, j),
        bytes: torn.len(),
        seal_line: j + 1,
        sealed_at: seal
            .get("sealed_at")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// A file's end, as the gateway finds it when it opens the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The hash the next line links to: of the last line that is a receipt.
    pub last: String,
    pub tail: Tail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Ends with a receipt and its newline (or is empty).
    Clean,
    /// The last receipt lacks only its newline.
    Unterminated,
    /// Bytes after the last receipt that are not one: a write torn by a crash.
    Torn {
        /// Their length and SHA-256, without a final newline (the seal's `torn_bytes` and
        /// `torn_sha256`).
        bytes: usize,
        sha256: String,
        /// Whether they end with a newline already (else one goes before the seal).
        newline: bool,
    },
}

/// Where a file's chain goes on, and what to seal first.
pub(crate) fn recover(bytes: &[u8]) -> Recovered {
    let (spans, unfinished) = lines(bytes);
    let end = bytes.len() - unfinished;
    if unfinished > 0 && receipt(&bytes[end..]).is_some() {
        return Recovered {
            last: hash_line(&bytes[end..]),
            tail: Tail::Unterminated,
        };
    }
    let last = spans
        .iter()
        .rposition(|s| receipt(&bytes[s.clone()]).is_some());
    let (last, from) = match last {
        Some(k) => (hash_line(&bytes[spans[k].clone()]), spans[k].end + 1),
        None => (GENESIS.to_owned(), 0),
    };
    let region = &bytes[from..];
    let tail = if region.is_empty() {
        Tail::Clean
    } else {
        let newline = region.ends_with(b"\n");
        let torn = region.strip_suffix(b"\n").unwrap_or(region);
        Tail::Torn {
            bytes: torn.len(),
            sha256: hash_line(torn),
            newline,
        }
    };
    Recovered { last, tail }
}

#[cfg(test)]
mod tests {
    use super::super::signing::{SigningKey, tests::rfc_key};
    use super::*;

    /// A chain of `n` lines, signed with `key` when given.
    fn chain(n: usize, key: Option<&SigningKey>) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        (0..n)
            .map(|i| {
                let line = line(&format!(r#""n":{i}"#), &prev, key);
                prev = hash_line(line.as_bytes());
                line
            })
            .collect()
    }

    fn line(members: &str, prev: &str, key: Option<&SigningKey>) -> String {
        match key {
            Some(key) => key.sign_line(&format!(
                r#"{{"kid":"{}",{members},"prev":"{prev}"}}"#,
                key.kid()
            )),
            None => format!(r#"{{{members},"prev":"{prev}"}}"#),
        }
    }

    fn text(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    fn broken_at(text: &str, keys: Option<&[PublicKey]>) -> usize {
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

    fn seal(torn: &[u8], prev: &str, key: Option<&SigningKey>) -> String {
        line(
            &format!(
                r#""kind":"seal","sealed_at":"2026-01-01T00:00:00.000Z","torn_bytes":{},"torn_sha256":"{}""#,
                torn.len(),
                hash_line(torn)
            ),
            prev,
            key,
        )
    }

    #[test]
    fn torn_bytes_are_sealed_and_the_chain_goes_on() {
        let key = rfc_key();
        let keys = [key.public().clone()];
        let lines = chain(3, Some(&key));
        let torn = &lines[2][..40];
        let intact = text(&lines[..2]);
        let crashed = format!("{intact}{torn}");

        // Before the restart: an unfinished last line, not a break.
        let before = verify(crashed.as_bytes(), Some(&keys)).unwrap();
        assert_eq!((before.receipts, before.unfinished), (2, 40));

        let recovered = recover(crashed.as_bytes());
        assert_eq!(recovered.last, hash_line(lines[1].as_bytes()));
        assert_eq!(
            recovered.tail,
            Tail::Torn {
                bytes: 40,
                sha256: hash_line(torn.as_bytes()),
                newline: false
            }
        );
        let sealing = seal(torn.as_bytes(), &recovered.last, Some(&key));
        let next = line(r#""n":3"#, &hash_line(sealing.as_bytes()), Some(&key));
        let sealed = format!("{crashed}\n{sealing}\n{next}\n");
        let ok = verify(sealed.as_bytes(), Some(&keys)).unwrap();
        assert_eq!(ok.receipts, 3);
        assert_eq!(ok.signatures.unwrap().verified, 4);
        assert_eq!(
            ok.seals,
            [Sealed {
                lines: (3, 3),
                bytes: 40,
                seal_line: 4,
                sealed_at: Some("2026-01-01T00:00:00.000Z".into())
            }]
        );
        assert_eq!(recover(sealed.as_bytes()).tail, Tail::Clean);

        // Other bytes than the sealed ones, a seal no torn bytes precede, an unsigned seal.
        let other_bytes = torn.replace("kid", "KID");
        assert_ne!(other_bytes, torn);
        let swapped = format!("{intact}{other_bytes}\n{sealing}\n{next}\n");
        assert_eq!(broken_at(&swapped, Some(&keys)), 3);
        let no_torn = format!("{intact}{sealing}\n");
        assert_eq!(broken_at(&no_torn, None), 3);
        let unsigned = format!(
            "{crashed}\n{}\n",
            seal(torn.as_bytes(), &recovered.last, None)
        );
        assert!(verify(unsigned.as_bytes(), None).is_ok());
        assert_eq!(broken_at(&unsigned, Some(&keys)), 4);
    }

    /// A crash while sealing: the next restart seals the torn bytes and the partial seal
    /// together. A receipt short of its newline only is completed, not sealed.
    #[test]
    fn what_recovery_finds() {
        let lines = chain(2, None);
        let intact = text(&lines);
        assert_eq!(recover(b"").tail, Tail::Clean);
        assert_eq!(recover(b"").last, GENESIS);
        let twice = format!("{intact}{{\"n\":2,\"pr\n{{\"kind\":\"se");
        let recovered = recover(twice.as_bytes());
        let region = &twice.as_bytes()[intact.len()..];
        assert_eq!(recovered.last, hash_line(lines[1].as_bytes()));
        assert_eq!(
            recovered.tail,
            Tail::Torn {
                bytes: region.len(),
                sha256: hash_line(region),
                newline: false
            }
        );
        let sealing = seal(region, &recovered.last, None);
        let healed = format!("{twice}\n{sealing}\n");
        assert_eq!(
            verify(healed.as_bytes(), None).unwrap().seals[0].lines,
            (3, 4)
        );

        let unterminated = intact.strip_suffix('\n').unwrap();
        let recovered = recover(unterminated.as_bytes());
        assert_eq!(recovered.tail, Tail::Unterminated);
        assert_eq!(recovered.last, hash_line(lines[1].as_bytes()));

        // NUL bytes (a power loss) and no receipt at all.
        let zeros = recover(&[0; 16]);
        assert_eq!(zeros.last, GENESIS);
        assert!(matches!(zeros.tail, Tail::Torn { bytes: 16, .. }));
    }
}
