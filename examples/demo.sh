#!/usr/bin/env bash
# The demo: the example shop (a legacy API that knows nothing of approvals) and poppy-gateway in
# front of it, with the embedded memory store. Ctrl-C stops both. The README walks the flow
# against it (the agent, curl, MCP).
#
#     ./examples/demo.sh
#
# Ports (all on 127.0.0.1), changeable from the environment:
#     POPPY_PORT=8080        the gateway: where Personal Agents send their requests
#     POPPY_ADMIN_PORT=8081  its admin listener: /metrics, /healthz, /readyz
#     POPPY_CONVERSATIONS_PORT=8082  its operations service for Company Agents
#     COMPANY_PORT=8083      the example Company Agent's conversation endpoint
#     SHOP_PORT=9000         the shop itself
#
# On a fresh Debian or Ubuntu machine with Rust it first installs what the build lacks (cmake,
# a C compiler) and what the walkthroughs use (curl, jq): scripts/prereqs.sh demo.
set -euo pipefail
cd "$(dirname "$0")/.."

POPPY_PORT=${POPPY_PORT:-8080}
POPPY_ADMIN_PORT=${POPPY_ADMIN_PORT:-8081}
POPPY_CONVERSATIONS_PORT=${POPPY_CONVERSATIONS_PORT:-8082}
COMPANY_PORT=${COMPANY_PORT:-8083}
SHOP_PORT=${SHOP_PORT:-9000}
say() { printf '==> %s\n' "$*" >&2; }

bash scripts/prereqs.sh demo

for port in "$POPPY_PORT" "$POPPY_ADMIN_PORT" "$POPPY_CONVERSATIONS_PORT" "$COMPANY_PORT" "$SHOP_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "error: 127.0.0.1:$port is taken; choose others with POPPY_PORT, POPPY_ADMIN_PORT, POPPY_CONVERSATIONS_PORT, COMPANY_PORT or SHOP_PORT" >&2
        exit 1
    fi
done

say "building the shop, the gateway and the example agents (cargo build; the first build compiles pingora and takes several minutes)"
cargo build -p shop -p poppy-gateway -p agent -p company

say "starting the shop on http://127.0.0.1:$SHOP_PORT"
target/debug/shop --listen "127.0.0.1:$SHOP_PORT" &
shop=$!
trap 'kill "$shop" 2>/dev/null || true' EXIT INT TERM

say "starting the example Company Agent on http://127.0.0.1:$COMPANY_PORT (it performs through the gateway's operations service on :$POPPY_CONVERSATIONS_PORT)"
target/debug/company --listen "127.0.0.1:$COMPANY_PORT" --service "http://127.0.0.1:$POPPY_CONVERSATIONS_PORT" \
    --token-file examples/shop/conversations.token &
company=$!
trap 'kill "$shop" "$company" 2>/dev/null || true' EXIT INT TERM

say "starting the gateway on http://127.0.0.1:$POPPY_PORT (admin http://127.0.0.1:$POPPY_ADMIN_PORT, operations service http://127.0.0.1:$POPPY_CONVERSATIONS_PORT) in front of the shop; Ctrl-C stops all three"
# examples/shop/gateway.toml, with the ports above (any gateway.toml key can be set this way).
POPPY_GATEWAY__SERVER__LISTEN="127.0.0.1:$POPPY_PORT" \
    POPPY_GATEWAY__ADMIN__LISTEN="127.0.0.1:$POPPY_ADMIN_PORT" \
    POPPY_GATEWAY__CONVERSATIONS__LISTEN="127.0.0.1:$POPPY_CONVERSATIONS_PORT" \
    POPPY_GATEWAY__UPSTREAM__URL="http://127.0.0.1:$SHOP_PORT" \
    target/debug/poppy-gateway --config examples/shop/gateway.toml
