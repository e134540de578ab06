//! `[protocol]`: which versions of the operations extension the gateway advertises in
//! `poppy.json`. Only versions it implements may be listed (docs/protocol-versions.md).

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use crate::protocol::IMPLEMENTED_OPERATIONS_VERSIONS;

/// `[protocol]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProtocolFile {
    /// The `version`s listed under `extensions.operations` (default `["2"]`).
    pub operations_versions: Option<Spanned<Vec<Spanned<String>>>>,
}

/// The advertised operations versions: each one the gateway implements, listed once.
pub(super) fn compile(
    file: &ProtocolFile,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    let Some(listed) = &file.operations_versions else {
        return IMPLEMENTED_OPERATIONS_VERSIONS.map(str::to_owned).to_vec();
    };
    let implemented = IMPLEMENTED_OPERATIONS_VERSIONS
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    if listed.get_ref().is_empty() {
        errors.push(at(
            listed.span(),
            format!("protocol.operations_versions: list at least one version (this gateway implements {implemented})"),
        ));
    }
    let mut versions: Vec<String> = Vec::new();
    for version in listed.get_ref() {
        let name = version.get_ref();
        if !IMPLEMENTED_OPERATIONS_VERSIONS.contains(&name.as_str()) {
            errors.push(at(
                version.span(),
                format!("protocol.operations_versions: \"{name}\" is not an operations version this gateway implements (it implements {implemented}); advertising it would promise agents terms the gateway cannot hold"),
            ));
        } else if versions.contains(name) {
            errors.push(at(
                version.span(),
                format!("protocol.operations_versions: \"{name}\" is listed twice"),
            ));
        } else {
            versions.push(name.clone());
        }
    }
    versions
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;

    use super::*;

    fn compiled(toml_text: &str) -> (Vec<String>, Vec<String>) {
        let file: ProtocolFile = toml::from_str(toml_text).unwrap();
        let at = |span: Range<usize>, message: String| {
            ConfigError::at(Path::new("gateway.toml"), toml_text, Some(span), message)
        };
        let mut errors = Vec::new();
        let versions = compile(&file, &at, &mut errors);
        (versions, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn defaults_to_the_implemented_versions() {
        assert_eq!(compiled(""), (vec!["2".to_owned()], vec![]));
        assert_eq!(
            compiled(r#"operations_versions = ["2"]"#),
            (vec!["2".to_owned()], vec![])
        );
    }

    #[test]
    fn refuses_what_is_not_implemented_at_its_place() {
        let (_, errors) = compiled(r#"operations_versions = ["2", "3"]"#);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("gateway.toml:1:29"), "{}", errors[0]);
        assert!(
            errors[0].contains("\"3\" is not an operations version this gateway implements"),
            "{}",
            errors[0]
        );
        assert_eq!(compiled(r#"operations_versions = []"#).1.len(), 1);
        assert_eq!(compiled(r#"operations_versions = ["2", "2"]"#).1.len(), 1);
    }
}
