//! Durations in config: `500ms`, `30s`, `15m`, `2h`, `7d`.

use std::time::Duration;

use toml::Spanned;

use super::error::{At, ConfigError};

/// A duration key of the file: its value, or `default` when absent (or wrong: the error is
/// noted at the value, and loading goes on to find the others).
pub(super) fn duration(
    value: &Option<Spanned<String>>,
    default: Duration,
    key: &str,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Duration {
    match value {
        None => default,
        Some(v) => parse_duration(v.get_ref()).unwrap_or_else(|e| {
            errors.push(at(v.span(), format!("{key}: {e}")));
            default
        }),
    }
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. \"30s\", \"15m\", \"2h\""))?;
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let millis = match unit {
        "ms" => Some(value),
        "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        "d" => value.checked_mul(86_400_000),
        _ => {
            return Err(format!(
                "`{text}`: unit `{unit}` is not one of ms, s, m, h, d"
            ));
        }
    }
    .ok_or_else(|| format!("`{text}` is too long"))?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("5 weeks").is_err());
    }
}
