//! Just enough of the `text/event-stream` format (the HTML Living Standard's server-sent
//! events) to change or drop recorded events and keep everything else.

/// What becomes of one event, given its data.
pub(crate) enum EventChange {
    Keep,
    Replace(String),
    Drop,
}

/// The stream with each event's data replaced by `replace(data)` where it gives `Some`, or
/// `None` when no event changed. Lines end in `\n` in a changed stream; other fields
/// (`event`, `id`, `retry`) and comments stay as they were.
#[cfg(test)]
pub(crate) fn rewrite_data(
    text: &str,
    mut replace: impl FnMut(&str) -> Option<String>,
) -> Option<String> {
    rewrite_events(text, |data| match replace(data) {
        Some(new) => EventChange::Replace(new),
        None => EventChange::Keep,
    })
}

/// The stream with each event that has data changed as `change(data)` says (events without
/// data, such as comments, are kept), or `None` when nothing changed.
pub(crate) fn rewrite_events(
    text: &str,
    mut change: impl FnMut(&str) -> EventChange,
) -> Option<String> {
    let (lines, ends_with_newline) = split_lines(text);
    let mut out = String::with_capacity(text.len() + 32);
    let mut changed = false;
    let mut event: Vec<&str> = Vec::new();
    for line in lines.iter().copied() {
        if line.is_empty() {
            match write_event(&mut out, &event, &mut change) {
                Written::Dropped => changed = true,
                written => {
                    changed |= written == Written::Changed;
                    out.push('\n');
                }
            }
            event.clear();
        } else {
            event.push(line);
        }
    }
    if !event.is_empty() {
        // An event the stream did not finish: rewritten too, and left unfinished.
        match write_event(&mut out, &event, &mut change) {
            Written::Dropped => changed = true,
            written => {
                changed |= written == Written::Changed;
                if !ends_with_newline {
                    out.pop();
                }
            }
        }
    }
    changed.then_some(out)
}

#[derive(PartialEq)]
enum Written {
    AsItWas,
    Changed,
    Dropped,
}

/// Write one event's lines (each followed by `\n`), changed as `change` says.
fn write_event(
    out: &mut String,
    lines: &[&str],
    change: &mut impl FnMut(&str) -> EventChange,
) -> Written {
    let data: Vec<&str> = lines.iter().filter_map(|line| data_value(line)).collect();
    let replacement = if data.is_empty() {
        None
    } else {
        match change(&data.join("\n")) {
            EventChange::Keep => None,
            EventChange::Replace(new) => Some(new),
            EventChange::Drop => return Written::Dropped,
        }
    };
    let mut data_written = false;
    for line in lines {
        match (&replacement, data_value(line)) {
            (Some(new), Some(_)) => {
                if !data_written {
                    for part in new.split('\n') {
                        out.push_str("data: ");
                        out.push_str(part.trim_end_matches('\r'));
                        out.push('\n');
                    }
                    data_written = true;
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if replacement.is_some() {
        Written::Changed
    } else {
        Written::AsItWas
    }
}

/// One event of a stream, as a reader sees it: its `id` field, if any, and its data (the
/// `data` lines joined with `\n`).
pub(crate) struct Event<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) data: String,
}

/// The events of a stream, in order (an unfinished last one included).
pub(crate) fn events(text: &str) -> Vec<Event<'_>> {
    let (lines, _) = split_lines(text);
    let mut out = Vec::new();
    let mut id = None;
    let mut data: Vec<&str> = Vec::new();
    let mut started = false;
    for line in lines.into_iter().chain(std::iter::once("")) {
        if line.is_empty() {
            if started {
                out.push(Event {
                    id: id.take(),
                    data: data.join("\n"),
                });
            }
            data.clear();
            started = false;
            continue;
        }
        started = true;
        if let Some(value) = data_value(line) {
            data.push(value);
        } else if let Some(value) = field_value(line, "id") {
            id = Some(value);
        }
    }
    out
}

/// The value of a field line `name: value` (or `name:value`), else `None`.
fn field_value<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (field, value) = line.split_once(':')?;
    (field == name).then(|| value.strip_prefix(' ').unwrap_or(value))
}

/// The value of a `data` field line (`data`, `data:x`, `data: x`), else `None`.
fn data_value(line: &str) -> Option<&str> {
    let (field, value) = match line.split_once(':') {
        Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
        None => (line, ""),
    };
    (field == "data").then_some(value)
}

/// Lines split at `\r\n`, `\n` or `\r`, and whether the text ended with one of them.
fn split_lines(text: &str) -> (Vec<&str>, bool) {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&text[start..i]);
                i += if bytes.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                start = i;
            }
            _ => i += 1,
        }
    }
    let ends_with_newline = start == bytes.len();
    if !ends_with_newline {
        lines.push(&text[start..]);
    }
    (lines, ends_with_newline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper(data: &str) -> Option<String> {
        (data != "keep").then(|| data.to_uppercase())
    }

    #[test]
    fn replaces_data_and_keeps_other_fields() {
        assert_eq!(
            rewrite_data("event: m\nid: 1\ndata: a\ndata:b\n\n", upper).as_deref(),
            Some("event: m\nid: 1\ndata: A\ndata: B\n\n")
        );
        assert_eq!(
            rewrite_data(": hi\r\n\r\ndata: x\r\nretry: 5\r\n\r\n", upper).as_deref(),
            Some(": hi\n\ndata: X\nretry: 5\n\n")
        );
    }

    #[test]
    fn unchanged_streams_are_none() {
        assert_eq!(rewrite_data("data: keep\n\n", upper), None);
        assert_eq!(rewrite_data(": only a comment\n\n", upper), None);
        assert_eq!(rewrite_data("", upper), None);
        assert_eq!(
            rewrite_data("datum: x\n\n", upper),
            None,
            "not a data field"
        );
    }

    #[test]
    fn an_unfinished_event_stays_unfinished() {
        assert_eq!(rewrite_data("data: a", upper).as_deref(), Some("data: A"));
        assert_eq!(
            rewrite_data("data: a\n", upper).as_deref(),
            Some("data: A\n")
        );
        assert_eq!(
            rewrite_data("data: a\n\ndata: b", upper).as_deref(),
            Some("data: A\n\ndata: B")
        );
    }

    #[test]
    fn dropped_events_leave_nothing() {
        let stream = ": hi\n\nevent: message\ndata: drop\n\ndata: b\n\ndata: drop";
        let kept = rewrite_events(stream, |data| match data {
            "drop" => EventChange::Drop,
            _ => EventChange::Keep,
        });
        assert_eq!(kept.as_deref(), Some(": hi\n\ndata: b\n\n"));
    }

    #[test]
    fn events_are_read_with_their_ids() {
        let stream =
            ": c\n\nid: 1\nretry: 5\ndata: \n\nevent: message\ndata: a\ndata: b\n\nid: 2\ndata: x";
        let events = events(stream);
        let read: Vec<(Option<&str>, &str)> =
            events.iter().map(|e| (e.id, e.data.as_str())).collect();
        assert_eq!(
            read,
            [
                (None, ""),
                (Some("1"), ""),
                (None, "a\nb"),
                (Some("2"), "x")
            ]
        );
    }

    #[test]
    fn lines_split_on_every_terminator() {
        assert_eq!(
            split_lines("a\nb\r\nc\rd"),
            (vec!["a", "b", "c", "d"], false)
        );
        assert_eq!(split_lines("a\n\n"), (vec!["a", ""], true));
        assert_eq!(data_value("data"), Some(""));
        assert_eq!(data_value("data:  x"), Some(" x"));
    }
}
