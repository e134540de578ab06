#!/usr/bin/env bash
# Installs what a fresh Debian (or Ubuntu) machine with Rust lacks to build the gateway, run the
# demo or run the tests; it installs only what is missing and says what it does.
#
#     scripts/prereqs.sh build    cmake and a C compiler: pingora's compression crates
#                                 (libz-ng-sys) build C code with cmake
#     scripts/prereqs.sh demo     build, plus curl and jq for docs/demo.md's walkthroughs, and node
#                                 and npm for the demo's OpenID provider (examples/idp)
#     scripts/prereqs.sh test     build, plus what the end-to-end tests run: redis-server and
#                                 redis-cli, prometheus (the dashboard test), python3-venv, node
#                                 and npm, docker-compose (validates docker/compose.yaml; no
#                                 engine needed), chromium and chromium-driver (the approval
#                                 page test), kubectl (Debian's kubernetes-client where none is
#                                 installed: `kubectl kustomize` renders deploy/kubernetes/);
#                                 then the tests' Python and npm packages
#                                 (tests/deps/install.sh: one pinned environment per folder of
#                                 tests/deps/python/, the MCP SDKs and FastMCP among them)
#
# examples/demo.sh, scripts/test.sh and .ci/run call it, so the three can't drift.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

what=${1:-build}
case $what in build | demo | test) ;; *)
    echo "usage: $0 build|demo|test" >&2
    exit 2
    ;;
esac

say() { printf '==> %s\n' "$*" >&2; }

# command -> Debian package that provides it
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need cmake cmake
need cc gcc
need c++ g++
need make make
if [[ $what == demo ]]; then
    need curl curl
    need jq jq
    # The demo OpenID provider for the approval page (examples/idp: oidc-provider).
    need node nodejs
    need npm npm
fi
if [[ $what == test ]]; then
    # tests/tests/front*.rs drive the system curl over TLS with HTTP/2 (Debian's has nghttp2),
    # and openssl s_client for connections that complete TLS and then stay silent.
    need curl curl
    need openssl openssl
    need redis-server redis-server
    need redis-cli redis-tools
    need prometheus prometheus
    need node nodejs
    need npm npm
    # tests/tests/approval_page.rs: a real browser renders the approval page (headless
    # Chromium; its WebDriver for the sign-in flow to come).
    need chromium chromium
    need chromedriver chromium-driver
    # tests/tests/deploy.rs renders the kustomize base with kubectl's built-in kustomize (no
    # cluster); any kubectl already installed will do (Debian's 1.20 renders the base too).
    need kubectl kubernetes-client
    python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
    docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 ||
        missing+=(docker-compose)
fi

if ((${#missing[@]})); then
    command -v apt-get >/dev/null 2>&1 || {
        echo "error: missing ${missing[*]} and no apt-get here: install them with your package manager" >&2
        exit 1
    }
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "error: need root or sudo to install ${missing[*]}" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    say "installing system packages: ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    # Debian's prometheus package would start its own server on :9090 where an init system
    # runs; the tests start theirs on free ports, so keep the packaged one from starting.
    if [[ " ${missing[*]} " == *" prometheus "* && ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${sudo[@]}" chmod +x /usr/sbin/policy-rc.d
        trap '"${sudo[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
    say "system packages: all present"
fi

command -v cargo >/dev/null 2>&1 || {
    echo "error: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
}

if [[ $what == test ]]; then
    say "test dependencies: Python (mcp 1.x and 2.x, fastmcp, ...) and npm packages (tests/deps/install.sh)"
    bash tests/deps/install.sh >&2
fi
