//! W3C Trace Context (`traceparent`, `tracestate`), read for their syntax only: a header that
//! is not exactly right starts a new trace instead (the spec's rule for a receiver), and
//! nothing in it is trusted beyond being an ID (the sampled flag only guides parent-based
//! sampling).
//!
//! Hand-written, not opentelemetry_sdk's `TraceContextPropagator`: that one trims spaces,
//! takes IDs of any length and a `+` sign (`from_str_radix`), reads any version below `ff`
//! with whatever follows, and sees only the first of two `traceparent` headers, where
//! docs/operations.md promises that all of these start a new trace.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// Longest `tracestate` kept (the spec's 32 members of at most 256 bytes each, with commas).
const MAX_TRACESTATE_BYTES: usize = 8192;
/// Most `tracestate` members (W3C Trace Context, 3.3.1.1).
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The remote parent a request's headers name: one `traceparent`, well formed (two are
/// ambiguous: the spec allows one), and its `tracestate` lines joined as the spec says.
pub(crate) fn from_headers(
    headers: &http::HeaderMap,
    traceparent: &http::HeaderName,
    tracestate: &http::HeaderName,
) -> Option<SpanContext> {
    let mut parents = headers.get_all(traceparent).iter();
    let (Some(parent), None) = (parents.next(), parents.next()) else {
        return None;
    };
    let state: Vec<&[u8]> = headers
        .get_all(tracestate)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    parse(
        parent.as_bytes(),
        (!state.is_empty())
            .then(|| state.join(&b","[..]))
            .as_deref(),
    )
}

/// The remote parent a `traceparent` (and `tracestate`) name, if well formed.
pub(crate) fn parse(traceparent: &[u8], tracestate: Option<&[u8]>) -> Option<SpanContext> {
    let (trace_id, span_id, flags) = parse_traceparent(traceparent)?;
    let state = tracestate.and_then(parse_tracestate).unwrap_or_default();
    Some(SpanContext::new(
        TraceId::from(trace_id),
        SpanId::from(span_id),
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        state,
    ))
}

/// `traceparent` exactly as version `00` writes it: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase
/// hex, neither ID all zeros. Any other version starts a new trace: no later version is
/// defined, so what it means is unknown, and the spec's "try its first 55 characters" would
/// take a client's IDs from a header nobody can check (docs/operations.md says so).
fn parse_traceparent(value: &[u8]) -> Option<(u128, u64, u8)> {
    if value.len() != 55 || !value.starts_with(b"00-") {
        return None;
    }
    if value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = hex(&value[3..35])?;
    let span_id = u64::try_from(hex(&value[36..52])?).ok()?;
    let flags = u8::try_from(hex(&value[53..55])?).ok()?;
    (trace_id != 0 && span_id != 0).then_some((trace_id, span_id, flags))
}

/// Lowercase hex digits only (no sign, no uppercase), at most 32 of them.
fn hex(digits: &[u8]) -> Option<u128> {
    if digits.is_empty() || digits.len() > 32 {
        return None;
    }
    digits.iter().try_fold(0u128, |acc, &b| {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(d))
    })
}

/// `tracestate` if every member is well formed (else none is kept: the spec lets a receiver
/// drop a malformed one, and the trace goes on without it).
fn parse_tracestate(value: &[u8]) -> Option<TraceState> {
    if value.len() > MAX_TRACESTATE_BYTES {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    let mut members = Vec::new();
    for member in text.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let (key, val) = member.split_once('=')?;
        if !valid_key(key) || !valid_value(val) || members.len() == MAX_TRACESTATE_MEMBERS {
            return None;
        }
        members.push((key, val));
    }
    TraceState::from_key_value(members).ok()
}

/// `simple-key` or `tenant@system` (W3C Trace Context 3.3.1.3.1).
fn valid_key(key: &str) -> bool {
    let simple = |k: &str, max: usize| {
        (1..=max).contains(&k.len())
            && k.bytes().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'*' | b'/')
            })
    };
    match key.split_once('@') {
        None => simple(key, 256) && key.as_bytes()[0].is_ascii_lowercase(),
        Some((tenant, system)) => {
            simple(tenant, 241)
                && simple(system, 14)
                && (tenant.as_bytes()[0].is_ascii_lowercase()
                    || tenant.as_bytes()[0].is_ascii_digit())
                && system.as_bytes()[0].is_ascii_lowercase()
        }
    }
}

/// 1 to 256 printable ASCII characters but `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    (1..=256).contains(&value.len())
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

/// `traceparent` for `context` (version 00). Written by hand: it goes on every request a
/// tracing gateway forwards, sampled or not, and `format!` of the IDs' `{:032x}` was most of
/// what a sampled-out request cost (BENCHMARKS.md, issue 41).
pub(crate) fn format(context: &SpanContext) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    push_hex(&mut out, &context.trace_id().to_bytes());
    out.push('-');
    push_hex(&mut out, &context.span_id().to_bytes());
    out.push('-');
    push_hex(&mut out, &[context.trace_flags().to_u8()]);
    out
}

/// Lower-case hex of `bytes`, two digits each.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn written_as_format_would_write_it() {
        for text in [
            GOOD,
            "00-00000000000000000000000000000001-0000000000000001-00",
        ] {
            let context = parse(text.as_bytes(), None).unwrap();
            let by_format = std::format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                context.trace_flags().to_u8()
            );
            assert_eq!(format(&context), by_format);
            assert_eq!(format(&context), text);
        }
    }

    #[test]
    fn a_well_formed_traceparent_is_read_and_written_back() {
        let context = parse(GOOD.as_bytes(), None).unwrap();
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(format(&context), GOOD);
        let unsampled = parse(
            &GOOD.as_bytes()[..53]
                .iter()
                .chain(b"00")
                .copied()
                .collect::<Vec<_>>(),
            None,
        )
        .unwrap();
        assert!(!unsampled.is_sampled());
    }

    #[test]
    fn anything_else_starts_a_new_trace() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            // Any version but 00, as docs/operations.md says.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad.as_bytes(), None).is_none(), "{bad}");
        }
    }

    #[test]
    fn one_traceparent_header_only_and_tracestate_lines_joined() {
        let names = (
            http::HeaderName::from_static("traceparent"),
            http::HeaderName::from_static("tracestate"),
        );
        let read = |lines: &[(&http::HeaderName, &str)]| {
            let mut headers = http::HeaderMap::new();
            for (name, value) in lines {
                headers.append(*name, http::HeaderValue::from_str(value).unwrap());
            }
            from_headers(&headers, &names.0, &names.1)
        };
        assert!(read(&[(&names.0, GOOD)]).is_some());
        assert!(read(&[(&names.0, GOOD), (&names.0, GOOD)]).is_none(), "two");
        let joined = read(&[(&names.0, GOOD), (&names.1, "a=1"), (&names.1, "b=2")]).unwrap();
        assert_eq!(joined.trace_state().header(), "a=1,b=2");
    }

    #[test]
    fn tracestate_is_kept_only_when_every_member_is_well_formed() {
        let kept = parse(
            GOOD.as_bytes(),
            Some(b"congo=t61rcWkgMzE, rojo@vendor=00f067aa0ba902b7"),
        )
        .unwrap();
        assert_eq!(kept.trace_state().get("congo"), Some("t61rcWkgMzE"));
        assert_eq!(
            kept.trace_state().get("rojo@vendor"),
            Some("00f067aa0ba902b7")
        );
        for bad in [
            &b"Congo=x"[..],
            b"congo",
            b"congo=a=b",
            b"congo=x,1bad=y",
            b"\xff=x",
        ] {
            let context = parse(GOOD.as_bytes(), Some(bad)).unwrap();
            assert_eq!(context.trace_state().header(), "", "{bad:?}");
        }
    }
}
