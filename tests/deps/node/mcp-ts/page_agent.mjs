// A Personal Agent that does not declare the operations extension, on the official TypeScript
// MCP SDK (@modelcontextprotocol/sdk, from this folder): the same steps as
// tests/deps/mcp/page_agent.py. Its elicitation handler, when it has one (then it declares
// URL-mode elicitation), records each request and answers "accept". Prints one JSON line per
// step; tests/tests/mcp_page.rs asserts on them.
//
//     node page_agent.mjs GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [gateway, upstreamUrl, session, authorization] = process.argv.slice(2);
const TIMEOUT = 20000;
const ARGUMENTS = { order_id: "ord_p1", item_id: "itm_4Qa", replacement_sku: "stormline-insulated-m" };

const emit = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const executions = async (tool = "exchange_item") => (await (await fetch(upstreamUrl + "/count")).json())[tool] ?? 0;

// `asked`: an array to record elicitation requests in (null: no handler, no capability).
async function connect(asked, extension = false) {
  const headers = { "Poppy-Session": session };
  // The user's token: the page is approved by the account it is for.
  if (authorization) headers.Authorization = authorization;
  if (extension) headers["Poppy-Extensions"] = '"operations";v="2"';
  const transport = new StreamableHTTPClientTransport(new URL(gateway), { requestInit: { headers } });
  const capabilities = asked ? { elicitation: { url: {} } } : {};
  const client = new Client({ name: "poppy-e2e-ts-page-agent", version: "1.0.0" }, { capabilities });
  if (asked) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params);
      return { action: "accept" };
    });
  }
  await client.connect(transport);
  return {
    version: () => transport.protocolVersion ?? null,
    async call(name, args) {
      try {
        const result = await client.callTool({ name, arguments: args }, undefined, { timeout: TIMEOUT });
        return {
          isError: result.isError ?? false,
          text: result.content?.[0]?.text ?? null,
          structuredContent: result.structuredContent ?? null,
          _meta: result._meta ?? null,
        };
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

// A request on the call's stream may be handled just after the call's result is returned.
async function atLeast(asked, n) {
  for (let i = 0; i < 250 && asked.length < n; i++) await new Promise((r) => setTimeout(r, 20));
}

emit("sdk", {
  client: "typescript",
  version: JSON.parse(readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url))).version,
  mode: "handshake",
});
const asked = [];
const agent = await connect(asked);
const page = await agent.call("exchange_item", ARGUMENTS);
await atLeast(asked, 1);
emit("page", { version: agent.version(), result: page, elicitations: [...asked], executions: await executions() });
const again = await agent.call("exchange_item", ARGUMENTS);
await atLeast(asked, 2);
emit("again", { result: again, elicitations: asked.slice(1), executions: await executions() });
emit("session_works", { result: await agent.call("lookup_order", { order_id: "ord_p1" }) });
await agent.close();

const plain = await connect(null);
emit("no_handler", { version: plain.version(), result: await plain.call("exchange_item", ARGUMENTS), executions: await executions() });
await plain.close();

const poppy = await connect(null, true);
emit("with_extension", { result: await poppy.call("exchange_item", ARGUMENTS), executions: await executions() });
await poppy.close();
emit("done", { executions: await executions() });
