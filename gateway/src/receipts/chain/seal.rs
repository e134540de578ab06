//! Torn bytes and their seal. A crash can tear the last line of a chain (a write cut short);
//! when the gateway opens the file again it keeps those bytes and writes a `seal` line after
//! them, signed like a receipt, linking to the last intact line and naming the torn bytes'
//! length and SHA-256 ([`recover`] finds them). The verifier ([`super::verify`]) accepts
//! exactly those bytes before exactly that seal ([`sealed_by`]).

use serde_json::Value;

use super::{GENESIS, hash_line, lines, receipt};

/// `kind` of the line that seals torn bytes.
pub(crate) const SEAL: &str = "seal";

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

/// The 1-based line of the first receipt-like line after line `i`, when it is a seal.
pub(super) fn seal_after(
    bytes: &[u8],
    spans: &[std::ops::Range<usize>],
    i: usize,
) -> Option<usize> {
    let j = (i + 1..spans.len()).find(|&j| receipt(&bytes[spans[j].clone()]).is_some())?;
    let next = receipt(&bytes[spans[j].clone()])?;
    (next.get("kind").and_then(Value::as_str) == Some(SEAL)).then_some(j + 1)
}

/// When line `i` starts torn bytes: the seal after them, if it names exactly those bytes.
pub(super) fn sealed_by(
    bytes: &[u8],
    spans: &[std::ops::Range<usize>],
    i: usize,
) -> Option<Sealed> {
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
    use super::*;
    use crate::receipts::chain::tests::{broken_at, chain, line, text};
    use crate::receipts::chain::verify;
    use crate::receipts::signing::{SigningKey, tests::rfc_key};

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
