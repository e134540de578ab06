// A Personal Agent driving the gateway with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk, from this folder), the same steps as tests/deps/mcp/agent.py.
// Prints one JSON line per step; tests/tests/mcp_sdks.rs asserts on them.
//
//     node agent.mjs GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [gateway, upstreamUrl, session] = process.argv.slice(2);
const APPROVAL_KEY = "personalagentprotocol.org/approval";
const TIMEOUT = 20000;

const emit = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const upstream = async (path, method = "GET") => (await fetch(upstreamUrl + path, { method })).json();
const executions = async (tool = "exchange_item") => (await upstream("/count"))[tool] ?? 0;

async function connect(extension = true) {
  const headers = { "Poppy-Session": session };
  if (extension) headers["Poppy-Extensions"] = '"operations";v="2"';
  const transport = new StreamableHTTPClientTransport(new URL(gateway), { requestInit: { headers } });
  const client = new Client({ name: "poppy-e2e-ts-agent", version: "1.0.0" });
  await client.connect(transport);
  return {
    transport,
    client,
    sessionId: () => transport.sessionId ?? null,
    async call(name, args, approval) {
      const params = { name, arguments: args };
      if (approval) params._meta = { [APPROVAL_KEY]: approval };
      try {
        return await client.callTool(params, undefined, { timeout: TIMEOUT });
      } catch (e) {
        return { raised: `${e.name}: ${e.message}`, code: e.code ?? null };
      }
    },
    async close() {
      await transport.terminateSession();
      await client.close();
    },
  };
}

const exchange = (order, sku = "stormline-insulated-m") => ({ order_id: order, item_id: "itm_4Qa", replacement_sku: sku });
const operationOf = (result) => result?.structuredContent?.operation ?? null;
const approvalOf = (op) => ({ operation_id: op.operation_id, revision: op.revision });

async function waitForExecutions(n) {
  for (let i = 0; i < 500; i++) {
    if ((await executions()) >= n) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

emit("sdk", { version: JSON.parse(readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url))).version, mode: "handshake" });
const a = await connect();
const { tools } = await a.client.listTools();
emit("list", { tools: Object.fromEntries(tools.map((t) => [t.name, t.outputSchema ?? null])), session_id: a.sessionId() });
emit("unheld", { result: await a.call("lookup_order", { order_id: "ord_1" }), executions: await executions("lookup_order") });

const held = await a.call("exchange_item", exchange("ord_1"));
emit("held", { result: held, executions: await executions() });
const op1 = operationOf(held);
if (op1) {
  emit("approve", { result: await a.call("exchange_item", exchange("ord_1"), approvalOf(op1)), executions: await executions() });
  emit("replay", { result: await a.call("exchange_item", exchange("ord_1"), approvalOf(op1)), executions: await executions() });

  const op2 = operationOf(await a.call("exchange_item", exchange("ord_2")));
  await upstream("/hold", "POST");
  const first = a.call("exchange_item", exchange("ord_2"), approvalOf(op2));
  const started = await waitForExecutions(2);
  const retries = await Promise.all(Array.from({ length: 20 }, () => a.call("exchange_item", exchange("ord_2"), approvalOf(op2))));
  const during = await executions();
  await upstream("/release", "POST");
  emit("concurrent", {
    started,
    retries,
    executions_during: during,
    first: await first,
    after: await a.call("exchange_item", exchange("ord_2"), approvalOf(op2)),
    executions: await executions(),
  });
  emit("session_after_in_progress", { result: await a.call("lookup_order", { order_id: "ord_2" }) });

  const aBefore = a.sessionId();
  const b = await connect();
  const bBefore = b.sessionId();
  const replay = await b.call("exchange_item", exchange("ord_1"), approvalOf(op1));
  const bAfter = b.sessionId();
  const bWorks = await b.call("lookup_order", { order_id: "ord_b" });
  await b.close();
  emit("other_session", {
    result: replay,
    a_before: aBefore,
    a_after: a.sessionId(),
    b_before: bBefore,
    b_after: bAfter,
    b_works: bWorks,
    a_works: await a.call("lookup_order", { order_id: "ord_a" }),
    executions: await executions(),
  });

  const op3 = operationOf(await a.call("exchange_item", exchange("ord_3")));
  const changed = await a.call("exchange_item", exchange("ord_3", "stormline-insulated-l"), approvalOf(op3));
  emit("changed", { first: op3, result: changed, executions: await executions() });
}
await a.close();

const plain = await connect(false);
emit("no_extension", { result: await plain.call("exchange_item", exchange("ord_4")), executions: await executions() });
await plain.close();
emit("done");
