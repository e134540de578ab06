//! The receipt chain, pure: each JSON line carries `prev`, the SHA-256 (hex) of the line before
//! it (64 zeros for the first), so an edited, removed or reordered line breaks the link after it.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `prev` of the first receipt of a chain.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

pub(crate) fn hash_line(line: &str) -> String {
    hex(&Sha256::digest(line.as_bytes()))
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

/// Check every link of a JSON Lines chain; the number of receipts when all hold. An empty last
/// line (the file's final newline) is not a receipt.
pub fn verify(text: &str) -> Result<usize, Broken> {
    let mut expected = GENESIS.to_owned();
    let mut count = 0;
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    for (i, line) in lines.iter().enumerate() {
        let number = i + 1;
        let receipt: Value = serde_json::from_str(line).map_err(|e| Broken {
            line: number,
            why: format!("not a JSON receipt ({e})"),
        })?;
        let prev = receipt.get("prev").and_then(Value::as_str).ok_or(Broken {
            line: number,
            why: "no \"prev\" member".into(),
        })?;
        if prev != expected {
            let why = if number == 1 {
                "the first receipt does not start the chain (a line before it was removed, or it was edited)".to_owned()
            } else {
                format!(
                    "\"prev\" is not the hash of line {}: that line, or this one, was edited, removed, inserted or moved",
                    number - 1
                )
            };
            return Err(Broken { line: number, why });
        }
        expected = hash_line(line);
        count += 1;
    }
    Ok(count)
}

/// The hash the next receipt links to, after the chain in `text` (which is not verified here).
pub(crate) fn last_hash(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.is_empty())
        .map_or_else(|| GENESIS.to_owned(), hash_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        (0..n)
            .map(|i| {
                let line = format!(r#"{{"n":{i},"prev":"{prev}"}}"#);
                prev = hash_line(&line);
                line
            })
            .collect()
    }

    fn text(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn a_chain_verifies_and_every_change_is_caught() {
        let lines = chain(5);
        assert_eq!(verify(&text(&lines)), Ok(5));
        assert_eq!(verify(""), Ok(0));

        let mut edited = lines.clone();
        edited[2] = edited[2].replace("\"n\":2", "\"n\":7");
        assert_eq!(verify(&text(&edited)).unwrap_err().line, 4);

        let mut removed = lines.clone();
        removed.remove(1);
        assert_eq!(verify(&text(&removed)).unwrap_err().line, 2);

        let mut swapped = lines.clone();
        swapped.swap(1, 3);
        assert_eq!(verify(&text(&swapped)).unwrap_err().line, 2);

        assert_eq!(verify(&text(&lines[1..])).unwrap_err().line, 1);
        let mut garbage = lines.clone();
        garbage[3] = "{".into();
        assert_eq!(verify(&text(&garbage)).unwrap_err().line, 4);
        assert_eq!(last_hash(&text(&lines)), hash_line(&lines[4]));
    }
}
