// What real MCP servers do during an approved call, driven with the TypeScript SDK
// (@modelcontextprotocol/sdk, from this folder) through the gateway, one scenario per run, as
// tests/deps/mcp/during.py does with the Python SDK (tests/tests/mcp_during.rs asserts on the
// JSON lines it prints).
//
//     node during.mjs SCENARIO GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT
//
// - `elicit`: the held tool that asks the user a question mid-call (elicitation/create on the
//   call's SSE stream); the SDK answers it while the call runs.
// - `cancel`: the approved call times out in the SDK, which sends notifications/cancelled;
//   then retried with the same approval until its answer comes.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, gateway, upstreamUrl, session] = process.argv.slice(2);
const APPROVAL_KEY = "personalagentprotocol.org/approval";
const RETRY_KEY = "personalagentprotocol.org/retry";

const emit = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const upstream = async (path, method = "GET") => (await fetch(upstreamUrl + path, { method })).json();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const exchange = (order) => ({ order_id: order, item_id: "itm_4Qa", replacement_sku: "stormline-insulated-m" });
const approvalOf = (result) => {
  const op = result?.structuredContent?.operation;
  return op ? { operation_id: op.operation_id, revision: op.revision } : null;
};

// The SDK's notifications are POSTs of their own: this notes when the gateway answered one.
let cancellationAnswered = null;
const noting = async (url, init) => {
  const response = await fetch(url, init);
  if (typeof init?.body === "string" && init.body.includes("notifications/cancelled")) {
    emit("cancellation_answered", { status: response.status });
    cancellationAnswered = response.status;
  }
  return response;
};

const headers = { "Poppy-Session": session, "Poppy-Extensions": '"operations";v="2"' };
const transport = new StreamableHTTPClientTransport(new URL(gateway), { requestInit: { headers }, fetch: noting });
const client = new Client({ name: "poppy-e2e-ts-during", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  emit("asked", { message: request.params.message });
  return { action: "accept", content: { confirm: true } };
});
await client.connect(transport);

async function call(name, args, approval, timeout = 20000) {
  const params = { name, arguments: args };
  if (approval) params._meta = { [APPROVAL_KEY]: approval };
  try {
    return await client.callTool(params, undefined, { timeout });
  } catch (e) {
    return { raised: `${e.name}: ${e.message}`, code: e.code ?? null };
  }
}

async function waitFor(predicate, what) {
  for (let i = 0; i < 500; i++) {
    if (await predicate()) return;
    await sleep(20);
  }
  throw new Error(`timed out waiting: ${what}`);
}

if (scenario === "elicit") {
  const held = await call("confirm_exchange", exchange("ord_r1"));
  emit("held", { result: held, counts: await upstream("/count") });
  const approval = approvalOf(held);
  emit("approve", { result: await call("confirm_exchange", exchange("ord_r1"), approval), counts: await upstream("/count") });
  emit("replay", { result: await call("confirm_exchange", exchange("ord_r1"), approval), counts: await upstream("/count") });
} else if (scenario === "cancel") {
  const held = await call("exchange_item", exchange("ord_c1"));
  const approval = approvalOf(held);
  emit("held", { result: held, counts: await upstream("/count") });
  await upstream("/hold", "POST");
  const timedOut = await call("exchange_item", exchange("ord_c1"), approval, 1000);
  await waitFor(() => cancellationAnswered !== null, "the cancellation's answer");
  // Forwarded, the server cancels the call at its gate: wait for that before opening it.
  if ((await upstream("/count")).cancel_received) {
    await waitFor(async () => (await upstream("/count")).cancelled, "the server cancelled the call");
  }
  emit("timed_out", { result: timedOut, counts: await upstream("/count") });
  await upstream("/release", "POST");
  let result;
  let retries = 0;
  for (; retries < 200; retries++) {
    result = await call("exchange_item", exchange("ord_c1"), approval);
    if (result?._meta?.[RETRY_KEY]?.error !== "operation_in_progress") break;
    await sleep(50);
  }
  emit("retried", { result, retries: retries + 1, counts: await upstream("/count") });
  emit("after", { result: await call("exchange_item", exchange("ord_c1"), approval), counts: await upstream("/count") });
}
await transport.terminateSession();
await client.close();
emit("done");
