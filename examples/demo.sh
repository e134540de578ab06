#!/usr/bin/env bash
# The demo: the example shop (a legacy API that knows nothing of approvals) and poppy-gateway in
# front of it, with the embedded memory store, the example Company Agent, and the example
# Personal Agent's identity (its client metadata document and public key, which the gateway
# verifies every Poppy-Session against: [session] verify = "required"), and the shop's approval
# page with a DEMO OpenID provider (examples/idp: any user name signs in, no password) for
# agents without the extension. Ctrl-C stops them all. The README and docs/demo.md walk the
# flow against it (the agent, curl, MCP, a conversation, the approval page).
#
#     ./examples/demo.sh
#
# Ports (all on 127.0.0.1), changeable from the environment:
#     POPPY_PORT=8080        the gateway: where Personal Agents send their requests
#     POPPY_ADMIN_PORT=8081  its admin listener: /metrics, /healthz, /readyz
#     POPPY_CONVERSATIONS_PORT=8082  its operations service for Company Agents
#     COMPANY_PORT=8083      the example Company Agent's conversation endpoint
#     AGENT_PORT=8084        the example Personal Agent's metadata document (its client_id)
#     POPPY_PAGE_PORT=8085   the gateway's approval page (for agents without the extension)
#     IDP_PORT=8086          the demo OpenID provider the page signs the User in with
#     SHOP_PORT=9000         the shop itself
#
# On a fresh Debian or Ubuntu machine with Rust it first installs what the build lacks (cmake,
# a C compiler), what the walkthroughs use (curl, jq) and node and npm (the demo provider, a
# real oidc-provider installed with `npm ci` in examples/idp): scripts/prereqs.sh demo.
set -euo pipefail
cd "$(dirname "$0")/.."

POPPY_PORT=${POPPY_PORT:-8080}
POPPY_ADMIN_PORT=${POPPY_ADMIN_PORT:-8081}
POPPY_CONVERSATIONS_PORT=${POPPY_CONVERSATIONS_PORT:-8082}
COMPANY_PORT=${COMPANY_PORT:-8083}
AGENT_PORT=${AGENT_PORT:-8084}
POPPY_PAGE_PORT=${POPPY_PAGE_PORT:-8085}
IDP_PORT=${IDP_PORT:-8086}
SHOP_PORT=${SHOP_PORT:-9000}
say() { printf '==> %s\n' "$*" >&2; }

bash scripts/prereqs.sh demo

for port in "$POPPY_PORT" "$POPPY_ADMIN_PORT" "$POPPY_CONVERSATIONS_PORT" "$COMPANY_PORT" "$AGENT_PORT" "$POPPY_PAGE_PORT" "$IDP_PORT" "$SHOP_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "error: 127.0.0.1:$port is taken; choose others with POPPY_PORT, POPPY_ADMIN_PORT, POPPY_CONVERSATIONS_PORT, COMPANY_PORT, AGENT_PORT, POPPY_PAGE_PORT, IDP_PORT or SHOP_PORT" >&2
        exit 1
    fi
done

say "building the shop, the gateway and the example agents (cargo build; the first build compiles pingora and takes several minutes)"
cargo build -p shop -p poppy-gateway -p agent -p company

# The demo OpenID provider's packages (oidc-provider, pinned by its package-lock.json).
if ! cmp -s examples/idp/package-lock.json examples/idp/node_modules/.package-lock.installed 2>/dev/null; then
    say "installing the demo OpenID provider's packages (npm ci in examples/idp)"
    (cd examples/idp && npm ci --no-audit --no-fund --loglevel=error)
    cp examples/idp/package-lock.json examples/idp/node_modules/.package-lock.installed
fi

say "starting the shop on http://127.0.0.1:$SHOP_PORT"
target/debug/shop --listen "127.0.0.1:$SHOP_PORT" &
shop=$!
trap 'kill "$shop" 2>/dev/null || true' EXIT INT TERM

say "starting the example Company Agent on http://127.0.0.1:$COMPANY_PORT (it performs through the gateway's operations service on :$POPPY_CONVERSATIONS_PORT)"
target/debug/company --listen "127.0.0.1:$COMPANY_PORT" --service "http://127.0.0.1:$POPPY_CONVERSATIONS_PORT" \
    --token-file examples/shop/conversations.token &
company=$!
trap 'kill "$shop" "$company" 2>/dev/null || true' EXIT INT TERM

# The gateway fetches the agent's document when it verifies a Session: it must be up first.
AGENT_URL="http://127.0.0.1:$AGENT_PORT/agent.json"
say "serving the example Personal Agent's metadata document at $AGENT_URL (its client_id; a PUBLIC demo key, for this laptop only)"
target/debug/agent identity --listen "127.0.0.1:$AGENT_PORT" >/dev/null &
identity=$!
trap 'kill "$shop" "$company" "$identity" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$AGENT_PORT") 2>/dev/null && break
    sleep 0.1
done
PAGE_URL="http://127.0.0.1:$POPPY_PAGE_PORT"
IDP_URL="http://127.0.0.1:$IDP_PORT"
say "starting the DEMO OpenID provider on $IDP_URL for the approval page's sign-in (any user name signs in, no password: a laptop only)"
node examples/idp/idp.mjs --listen "127.0.0.1:$IDP_PORT" --redirect-uri "$PAGE_URL/callback" \
    --client-secret-file examples/shop/page-client.secret >/dev/null &
idp=$!
trap 'kill "$shop" "$company" "$identity" "$idp" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$IDP_PORT") 2>/dev/null && break
    sleep 0.1
done

if [ "$AGENT_PORT" != 8084 ]; then
    # The agent signs as its --agent-url: tell the walkthroughs' agent where it is now.
    say "in the walkthroughs' terminal: export POPPY_AGENT_URL=$AGENT_URL"
fi

say "starting the gateway on http://127.0.0.1:$POPPY_PORT (admin http://127.0.0.1:$POPPY_ADMIN_PORT, operations service http://127.0.0.1:$POPPY_CONVERSATIONS_PORT, approval page $PAGE_URL) in front of the shop, verifying every Poppy-Session against $AGENT_URL; Ctrl-C stops them all"
# examples/shop/gateway.toml, with the ports above (any gateway.toml key can be set this way,
# arrays and tables included).
POPPY_GATEWAY__SERVER__LISTEN="127.0.0.1:$POPPY_PORT" \
    POPPY_GATEWAY__ADMIN__LISTEN="127.0.0.1:$POPPY_ADMIN_PORT" \
    POPPY_GATEWAY__CONVERSATIONS__LISTEN="127.0.0.1:$POPPY_CONVERSATIONS_PORT" \
    POPPY_GATEWAY__UPSTREAM__URL="http://127.0.0.1:$SHOP_PORT" \
    POPPY_GATEWAY__SESSION__ORIGINS="[\"http://127.0.0.1:$POPPY_PORT\", \"http://127.0.0.1:$COMPANY_PORT\"]" \
    POPPY_GATEWAY__SESSION__AGENT="[{client_id = \"$AGENT_URL\"}]" \
    POPPY_GATEWAY__APPROVAL_PAGE__LISTEN="127.0.0.1:$POPPY_PAGE_PORT" \
    POPPY_GATEWAY__APPROVAL_PAGE__PUBLIC_URL="$PAGE_URL" \
    POPPY_GATEWAY__APPROVAL_PAGE__ISSUER="$IDP_URL" \
    target/debug/poppy-gateway --config examples/shop/gateway.toml
