//! Config by environment, for containers: `POPPY_GATEWAY__SECTION__KEY=value` sets `key` of
//! `[section]` in gateway.toml (`POPPY_GATEWAY__POLICIES` sets the top-level `policies`).
//! A value is read as a TOML value when it is one (`10`, `true`, `["a.toml"]`), else as a
//! string (`127.0.0.1:8080`, `redis://redis:6379/0`); quote it to force a string (`'"10"'`).
//!
//! Overrides are applied to the parsed document before it is validated, so they are checked
//! like the file itself (unknown keys are errors) and every problem with an overridden value
//! names the variable instead of a place in the file. To get there without losing the file's
//! own line and column numbers, each value is parsed from a region appended after the file's
//! text, and errors that point into that region are given back to their variable.
//!
//! `POPPY_GATEWAY_KEYS` (one underscore) is not a config key and is not read here.

use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigError, ConfigErrors, from_toml};

/// What every override variable starts with.
pub(crate) const PREFIX: &str = "POPPY_GATEWAY__";

/// The variables of one underscore the gateway reads (every `POPPY_GATEWAY__…` one is a
/// config key, checked as the file is).
pub(crate) const KNOWN_VARIABLES: [&str; 3] = [
    "POPPY_GATEWAY_CONFIG",
    "POPPY_GATEWAY_KEYS",
    "POPPY_GATEWAY_ADMIN_TOKEN",
];

/// `POPPY_GATEWAY_…` variables of this process that the gateway does not read: a mistyped
/// name would otherwise be ignored without a word (`check` and the start warn about each).
pub fn unknown_variables() -> Vec<String> {
    unknown_among(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()))
}

fn unknown_among(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| {
            name.starts_with("POPPY_GATEWAY_")
                && !name.starts_with(PREFIX)
                && !KNOWN_VARIABLES.contains(&name.as_str())
        })
        .collect();
    unknown.sort();
    unknown
}

/// The table the override values are parsed in; removed before validation.
const REGION: &str = "__poppy_gateway_environment__";

/// One `POPPY_GATEWAY__…` variable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Override {
    var: String,
    /// Lower-case keys, outermost first.
    path: Vec<String>,
    /// `None` when the value is not UTF-8.
    value: Option<String>,
}

/// The overrides of one load, sorted by variable name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    vars: Vec<Override>,
}

/// gateway.toml with the overrides applied.
pub(crate) struct Applied<T> {
    pub file: T,
    /// The text the file's spans point into (the file, then the override values).
    pub source: String,
    pub env: EnvLines,
}

/// Which lines of [`Applied::source`] hold which variable's value.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvLines {
    lines: Vec<(Range<usize>, String)>,
}

impl Overrides {
    /// The `POPPY_GATEWAY__…` variables of this process.
    pub(crate) fn from_env() -> Overrides {
        Overrides::from_vars(std::env::vars_os().filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            Some((name, value.into_string().ok()))
        }))
    }

    /// The overrides among these variables (others are ignored).
    pub(crate) fn from_vars(vars: impl IntoIterator<Item = (String, Option<String>)>) -> Overrides {
        let mut vars: Vec<Override> = vars
            .into_iter()
            .filter_map(|(var, value)| {
                let rest = var.strip_prefix(PREFIX)?;
                let path = rest.split("__").map(str::to_ascii_lowercase).collect();
                Some(Override { var, path, value })
            })
            .collect();
        vars.sort_by(|a, b| a.var.cmp(&b.var));
        Overrides { vars }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// Parse gateway.toml's `source` into `T` with the overrides applied.
    pub(crate) fn apply<T: DeserializeOwned>(
        &self,
        file: &Path,
        source: &str,
    ) -> Result<Applied<T>, ConfigErrors> {
        if self.is_empty() {
            let parsed = toml::from_str(source).map_err(|e| from_toml(file, source, &e))?;
            return Ok(Applied {
                file: parsed,
                source: source.to_owned(),
                env: EnvLines::default(),
            });
        }
        let mut problems = Vec::new();
        for o in &self.vars {
            if let Some(problem) = name_problem(o) {
                problems.push(env_error(&o.var, problem));
            }
        }
        if !problems.is_empty() {
            return Err(ConfigErrors(problems));
        }

        let (text, env) = self.region(source);
        let fail = |e: toml::de::Error| env.relocate(file, from_toml(file, &text, &e).into());
        let parsed = DeTable::parse(&text).map_err(fail)?;
        let root_span = parsed.span();
        let mut root = parsed.into_inner();
        let mut values = match root.remove(REGION).map(Spanned::into_inner) {
            Some(DeValue::Table(values)) => values,
            _ => DeTable::new(),
        };
        for (i, o) in self.vars.iter().enumerate() {
            let Some((key, value)) = values.remove_entry(format!("e{i}").as_str()) else {
                continue;
            };
            if let Err(problem) = insert(&mut root, &o.path, key.span(), value) {
                problems.push(env_error(&o.var, problem));
            }
        }
        if !problems.is_empty() {
            return Err(ConfigErrors(problems));
        }
        let parsed = T::deserialize(toml::de::Deserializer::from(Spanned::new(root_span, root)))
            .map_err(fail)?;
        Ok(Applied {
            file: parsed,
            source: text,
            env,
        })
    }

    /// The file's text, then a table of the override values, one `eN = value` per variable.
    fn region(&self, source: &str) -> (String, EnvLines) {
        let mut text = source.to_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[{REGION}]\n"));
        let mut lines = Vec::new();
        for (i, o) in self.vars.iter().enumerate() {
            let entry = format!("e{i} = {}\n", toml_value(o.value.as_deref().unwrap_or("")));
            let first = text.matches('\n').count() + 1;
            let last = first + entry.trim_end_matches('\n').matches('\n').count();
            text.push_str(&entry);
            lines.push((first..last + 1, o.var.clone()));
        }
        (text, EnvLines { lines })
    }
}

impl EnvLines {
    /// Give errors that point at an override's value to its variable.
    pub(crate) fn relocate(&self, file: &Path, errors: ConfigErrors) -> ConfigErrors {
        ConfigErrors(
            errors
                .0
                .into_iter()
                .map(|error| {
                    let var = (error.file == file)
                        .then(|| self.lines.iter().find(|(l, _)| l.contains(&error.line)))
                        .flatten();
                    match var {
                        Some((_, var)) => env_error(var, error.message),
                        None => error,
                    }
                })
                .collect(),
        )
    }
}

/// A problem with a variable: its name stands where a file would.
fn env_error(var: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::whole_file(
        &PathBuf::from(format!("environment variable {var}")),
        message,
    )
}

fn name_problem(o: &Override) -> Option<String> {
    if o.value.is_none() {
        return Some("the value is not UTF-8".into());
    }
    let bare = |key: &String| {
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if o.path.iter().all(bare) {
        None
    } else {
        Some(format!(
            "name a gateway.toml key after {PREFIX}, with `__` between a section and its key (e.g. {PREFIX}SERVER__LISTEN)"
        ))
    }
}

/// The value as TOML: itself when it is one TOML value, else a TOML string of it.
fn toml_value(value: &str) -> String {
    let is_one_value = DeTable::parse(&format!("v = {value}\n"))
        .is_ok_and(|doc| doc.get_ref().len() == 1 && doc.get_ref().contains_key("v"));
    if is_one_value && !value.trim().is_empty() {
        value.to_owned()
    } else {
        toml::Value::String(value.to_owned()).to_string()
    }
}

/// Set `path` in `table` to `value`, creating tables on the way.
fn insert<'i>(
    table: &mut DeTable<'i>,
    path: &[String],
    span: Range<usize>,
    value: Spanned<DeValue<'i>>,
) -> Result<(), String> {
    let Some((first, rest)) = path.split_first() else {
        return Err("name a key".into());
    };
    let key = || Spanned::new(span.clone(), Cow::Owned(first.clone()));
    if rest.is_empty() {
        table.remove(first.as_str());
        table.insert(key(), value);
        return Ok(());
    }
    match table.get_mut(first.as_str()).map(Spanned::get_mut) {
        Some(DeValue::Table(inner)) => insert(inner, rest, span, value),
        Some(other) => Err(format!(
            "`{first}` is {} in gateway.toml, not a table",
            other.type_str()
        )),
        None => {
            let mut inner = DeTable::new();
            insert(&mut inner, rest, span.clone(), value)?;
            table.insert(key(), Spanned::new(span.clone(), DeValue::Table(inner)));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn unknown_variables_are_named() {
        let names = [
            "POPPY_GATEWAY_KEYS",
            "POPPY_GATEWAY_ADMINTOKEN",
            "POPPY_GATEWAY__SERVER__LISTEN",
            "POPPY_GATEWAY_CONFG",
            "PATH",
        ]
        .map(String::from);
        assert_eq!(
            unknown_among(names),
            ["POPPY_GATEWAY_ADMINTOKEN", "POPPY_GATEWAY_CONFG"]
        );
    }
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        policies: Vec<String>,
        server: Server,
        store: Option<Store>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Server {
        listen: Spanned<String>,
        max_body_bytes: Option<usize>,
        debug: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Store {
        url: String,
    }

    const FILE: &str = "policies = [\"a.toml\"]\n\n[server]\nlisten = \"127.0.0.1:8080\"\n";

    fn overrides(vars: &[(&str, &str)]) -> Overrides {
        Overrides::from_vars(
            vars.iter()
                .map(|(n, v)| ((*n).to_owned(), Some((*v).to_owned()))),
        )
    }

    fn apply(vars: &[(&str, &str)], source: &str) -> Result<Applied<File>, ConfigErrors> {
        overrides(vars).apply(Path::new("gateway.toml"), source)
    }

    fn error_text(vars: &[(&str, &str)], source: &str) -> String {
        match apply(vars, source) {
            Ok(applied) => panic!("expected an error, got {:?}", applied.file),
            Err(errors) => errors.to_string(),
        }
    }

    #[test]
    fn only_double_underscore_variables_are_overrides() {
        let o = overrides(&[
            ("POPPY_GATEWAY_KEYS", "secret"),
            ("PATH", "/bin"),
            ("POPPY_GATEWAY__SERVER__LISTEN", "0.0.0.0:80"),
        ]);
        assert_eq!(o.vars.len(), 1);
        assert_eq!(o.vars[0].path, vec!["server", "listen"]);
    }

    #[test]
    fn values_replace_and_add_keys_with_toml_types() {
        let applied = apply(
            &[
                ("POPPY_GATEWAY__SERVER__LISTEN", "0.0.0.0:8080"),
                ("POPPY_GATEWAY__SERVER__MAX_BODY_BYTES", "10"),
                ("POPPY_GATEWAY__SERVER__DEBUG", "true"),
                ("POPPY_GATEWAY__POLICIES", r#"["b.toml", "c/*.toml"]"#),
                ("POPPY_GATEWAY__STORE__URL", "redis://redis:6379/0"),
            ],
            FILE,
        )
        .unwrap();
        let file = applied.file;
        assert_eq!(file.server.listen.get_ref(), "0.0.0.0:8080");
        assert_eq!(file.server.max_body_bytes, Some(10));
        assert_eq!(file.server.debug, Some(true));
        assert_eq!(file.policies, vec!["b.toml", "c/*.toml"]);
        assert_eq!(file.store.unwrap().url, "redis://redis:6379/0");
    }

    #[test]
    fn a_quoted_value_stays_a_string() {
        assert_eq!(toml_value("10"), "10");
        assert_eq!(toml_value("'10'"), "'10'");
        assert_eq!(toml_value("0.0.0.0:80"), "\"0.0.0.0:80\"");
        assert_eq!(toml_value(""), "\"\"");
        assert_eq!(
            toml_value("1\n[x]"),
            toml::Value::String("1\n[x]".into()).to_string()
        );
        let applied = apply(&[("POPPY_GATEWAY__STORE__URL", "\"memory://\"")], FILE).unwrap();
        assert_eq!(applied.file.store.unwrap().url, "memory://");
    }

    #[test]
    fn an_unknown_key_names_the_variable() {
        let text = error_text(&[("POPPY_GATEWAY__SERVER__LISTN", "0.0.0.0:80")], FILE);
        assert!(
            text.starts_with(
                "environment variable POPPY_GATEWAY__SERVER__LISTN: unknown field `listn`"
            ),
            "{text}"
        );
        let text = error_text(&[("POPPY_GATEWAY__NOPE__X", "1")], FILE);
        assert!(
            text.starts_with("environment variable POPPY_GATEWAY__NOPE__X: unknown field `nope`"),
            "{text}"
        );
    }

    #[test]
    fn a_wrong_type_names_the_variable() {
        let text = error_text(&[("POPPY_GATEWAY__SERVER__MAX_BODY_BYTES", "lots")], FILE);
        assert!(
            text.starts_with("environment variable POPPY_GATEWAY__SERVER__MAX_BODY_BYTES:"),
            "{text}"
        );
        let text = error_text(&[("POPPY_GATEWAY__POLICIES__X", "1")], FILE);
        assert!(
            text.contains("`policies` is array in gateway.toml, not a table"),
            "{text}"
        );
    }

    #[test]
    fn bad_names_are_errors() {
        for name in [
            "POPPY_GATEWAY__",
            "POPPY_GATEWAY__SERVER__",
            "POPPY_GATEWAY__SER.VER",
        ] {
            let text = error_text(&[(name, "1")], FILE);
            assert!(
                text.starts_with(&format!(
                    "environment variable {name}: name a gateway.toml key"
                )),
                "{text}"
            );
        }
        let o = Overrides::from_vars([("POPPY_GATEWAY__SERVER__LISTEN".to_owned(), None)]);
        let text = o
            .apply::<File>(Path::new("gateway.toml"), FILE)
            .err()
            .unwrap()
            .to_string();
        assert!(text.contains("not UTF-8"), "{text}");
    }

    #[test]
    fn errors_in_the_file_keep_their_line_and_column() {
        let source = "policies = [\"a.toml\"]\n\n[server]\nlisten = \"x\"\nbogus = 1\n";
        let text = error_text(&[("POPPY_GATEWAY__SERVER__MAX_BODY_BYTES", "10")], source);
        assert!(
            text.starts_with("gateway.toml:5:1: unknown field `bogus`"),
            "{text}"
        );
        // A syntax error too.
        let text = error_text(
            &[("POPPY_GATEWAY__SERVER__MAX_BODY_BYTES", "10")],
            "[server\n",
        );
        assert!(text.starts_with("gateway.toml:1:"), "{text}");
    }

    #[test]
    fn spans_of_overridden_values_are_given_back_to_their_variable() {
        let applied = apply(&[("POPPY_GATEWAY__SERVER__LISTEN", "nowhere")], FILE).unwrap();
        let span = applied.file.server.listen.span();
        let error = ConfigError::at(
            Path::new("gateway.toml"),
            &applied.source,
            Some(span.clone()),
            "bad",
        );
        let text = applied
            .env
            .relocate(Path::new("gateway.toml"), error.into())
            .to_string();
        assert_eq!(
            text,
            "environment variable POPPY_GATEWAY__SERVER__LISTEN: bad"
        );
        // Errors in other files are left alone.
        let other = ConfigError::at(Path::new("p.toml"), &applied.source, Some(span), "bad");
        let text = applied
            .env
            .relocate(Path::new("gateway.toml"), other.into())
            .to_string();
        assert!(text.starts_with("p.toml:"), "{text}");
    }

    #[test]
    fn without_overrides_the_file_is_parsed_as_it_is() {
        let applied = apply(&[], FILE).unwrap();
        assert_eq!(applied.source, FILE);
        assert_eq!(applied.file.server.listen.get_ref(), "127.0.0.1:8080");
    }
}
