#!/usr/bin/env bash
# Installs the third-party frameworks and clients that the end-to-end tests put in front of or
# behind the gateway (Flask, Starlette, Express, the official MCP SDKs, ...), from PyPI and npm.
#
#     bash tests/deps/install.sh
#
# Each folder under python/ is one virtual environment (its requirements.txt, pinned), made in
# python/NAME/.venv; each folder under node/ is one npm project, installed in node/NAME/node_modules.
# Several environments exist because some tests need two major versions of one package.
# Also the demo's OpenID provider, examples/idp (npm ci), which tests/tests/readme.rs runs.
# Idempotent: an environment is rebuilt only when its requirements changed. The tests find them
# through `poppy_e2e::thirdparty`, which names this script when one is missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for requirements in "$root"/python/*/requirements.txt; do
    [[ -e $requirements ]] || continue
    dir=$(dirname "$requirements")
    venv="$dir/.venv"
    stamp="$venv/.installed"
    if [[ -f $stamp ]] && cmp -s "$requirements" "$stamp"; then
        echo "python/$(basename "$dir"): up to date"
        continue
    fi
    echo "python/$(basename "$dir"): installing $(grep -cv '^\s*\(#\|$\)' "$requirements") packages"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements"
    cp "$requirements" "$stamp"
done

for package in "$root"/node/*/package.json; do
    [[ -e $package ]] || continue
    dir=$(dirname "$package")
    stamp="$dir/node_modules/.installed"
    if [[ -f $stamp ]] && cmp -s "$package" "$stamp"; then
        echo "node/$(basename "$dir"): up to date"
        continue
    fi
    echo "node/$(basename "$dir"): npm install"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
    cp "$package" "$stamp"
done

# The demo's OpenID provider (examples/idp, oidc-provider pinned by its package-lock.json):
# tests/tests/readme.rs runs it as examples/demo.sh does, and demo.sh installs it the same way.
idp=$(cd "$root/../../examples/idp" && pwd)
if cmp -s "$idp/package-lock.json" "$idp/node_modules/.package-lock.installed" 2>/dev/null; then
    echo "examples/idp: up to date"
else
    echo "examples/idp: npm ci"
    (cd "$idp" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$idp/package-lock.json" "$idp/node_modules/.package-lock.installed"
fi
