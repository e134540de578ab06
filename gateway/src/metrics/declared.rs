//! `poppy_declared_operations_versions_total{version}`: which operations versions the
//! requests for operations declare in `Poppy-Extensions`, so an operator sees when agents of
//! another major (v3) arrive. The label is bounded: an implemented major, `other` or `none`.

use prometheus::{IntCounterVec, Opts, Registry};

use crate::protocol::Declared;

const NAME: &str = "poppy_declared_operations_versions_total";
const HELP: &str = "Requests for operations by the operations version their Poppy-Extensions declares: an implemented major (2), other (operations of another major, or without a version) or none (no operations member); an unreadable header is not counted";

pub(super) struct DeclaredVersions(IntCounterVec);

impl DeclaredVersions {
    /// Registered in `registry`, every label present from the start (a 0, not "no data").
    pub(super) fn new(registry: &Registry) -> Result<DeclaredVersions, prometheus::Error> {
        let counter = IntCounterVec::new(Opts::new(NAME, HELP), &["version"])?;
        registry.register(Box::new(counter.clone()))?;
        for declared in Declared::ALL {
            counter.with_label_values(&[declared.label()]);
        }
        Ok(DeclaredVersions(counter))
    }

    pub(super) fn count(&self, declared: Declared) {
        self.0.with_label_values(&[declared.label()]).inc();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_label_is_exported_from_the_start_and_counts() {
        let registry = Registry::new();
        let declared = DeclaredVersions::new(&registry).unwrap();
        declared.count(Declared::Other);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        for line in [
            "poppy_declared_operations_versions_total{version=\"2\"} 0\n",
            "poppy_declared_operations_versions_total{version=\"none\"} 0\n",
            "poppy_declared_operations_versions_total{version=\"other\"} 1\n",
        ] {
            assert!(text.contains(line), "{text}");
        }
    }
}
