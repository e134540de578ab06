//! A strict RFC 3339 `date-time` parser (section 5.6), enough to check `expires_at` and read
//! it as Unix time without another dependency.

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` → seconds since the Unix epoch.
pub fn parse(text: &str) -> Result<f64, String> {
    let bad = |why: &str| format!("{text:?} is not an RFC 3339 date-time: {why}");
    let b = text.as_bytes();
    if b.len() < 20 {
        return Err(bad("too short"));
    }
    let digits = |from: usize, len: usize| -> Result<i64, String> {
        let part = text.get(from..from + len).ok_or_else(|| bad("truncated"))?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad("expected digits"));
        }
        part.parse().map_err(|_| bad("expected digits"))
    };
    let expect = |at: usize, allowed: &[u8]| -> Result<(), String> {
        if b.get(at).is_some_and(|c| allowed.contains(c)) {
            Ok(())
        } else {
            Err(bad("bad separator"))
        }
    };
    let year = digits(0, 4)?;
    expect(4, b"-")?;
    let month = digits(5, 2)?;
    expect(7, b"-")?;
    let day = digits(8, 2)?;
    expect(10, b"Tt")?;
    let hour = digits(11, 2)?;
    expect(13, b":")?;
    let minute = digits(14, 2)?;
    expect(16, b":")?;
    let second = digits(17, 2)?;
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad("field out of range"));
    }
    let mut at = 19;
    let mut fraction = 0.0;
    if b[at] == b'.' {
        let start = at + 1;
        at = start;
        while at < b.len() && b[at].is_ascii_digit() {
            at += 1;
        }
        if at == start {
            return Err(bad("empty fraction"));
        }
        fraction = format!("0.{}", &text[start..at])
            .parse::<f64>()
            .map_err(|_| bad("bad fraction"))?;
    }
    let offset = match b.get(at) {
        Some(b'Z') | Some(b'z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == b.len() => {
            let hours = digits(at + 1, 2)?;
            expect(at + 3, b":")?;
            let minutes = digits(at + 4, 2)?;
            if hours > 23 || minutes > 59 {
                return Err(bad("offset out of range"));
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return Err(bad("expected Z or ±HH:MM")),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Ok(seconds as f64 + fraction)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_utc_offsets_and_fractions() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(parse("2026-10-08T19:20:00Z"), Ok(1_791_487_200.0));
        assert_eq!(parse("2026-10-08T12:20:00-07:00"), Ok(1_791_487_200.0));
        assert_eq!(parse("2026-10-08T21:20:00+02:00"), Ok(1_791_487_200.0));
        assert_eq!(parse("2000-02-29T00:00:00.5z"), Ok(951_782_400.5));
    }

    #[test]
    fn rejects_what_is_not_rfc_3339() {
        for bad in [
            "",
            "2026-10-08",
            "2026-10-08 19:20:00Z",
            "2026-10-08T19:20:00",
            "2026-13-08T19:20:00Z",
            "2026-02-30T19:20:00Z",
            "2026-10-08T19:20:00.Z",
            "2026-10-08T19:20:00+0700",
            "1791487200",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
