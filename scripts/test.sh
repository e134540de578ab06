#!/usr/bin/env bash
# The test command README.md names: installs what is missing (scripts/prereqs.sh test), then
# runs every test of the workspace. Extra arguments go to `cargo test`.
#
#     ./scripts/test.sh
#
# .ci/run runs this same script after `cargo fmt --check` and clippy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/prereqs.sh test
printf '==> %s\n' "cargo test --workspace $* (the first build compiles pingora and takes several minutes)" >&2
exec cargo test --workspace "$@"
