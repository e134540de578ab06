// The lenient API on Express 4, with method-override. See README.md.
const path = require("path");
const modules = path.join(__dirname, "..", "node", "express", "node_modules");
const express = require(path.join(modules, "express"));
const methodOverride = require(path.join(modules, "method-override"));

const app = express();
const executions = [];

app.use(express.json());
app.use(express.urlencoded({ extended: true }));
app.use(methodOverride("X-HTTP-Method-Override"));
app.use(methodOverride("_method"));
app.use(
  methodOverride((req) => {
    if (req.body && typeof req.body === "object" && "_method" in req.body) {
      const method = req.body._method;
      delete req.body._method;
      return method;
    }
  }),
);

function execute(res, kind, terms) {
  const record = { framework: "express", kind, execution: executions.length + 1, ...terms };
  executions.push(record);
  res.status(201).json(record);
}

app.post("/accounts/:account/transfers", (req, res) => {
  const body = req.body || {};
  execute(res, "transfer", {
    account: req.params.account,
    amount: body.amount === undefined ? null : body.amount,
    to: body.to === undefined ? null : body.to,
    currency: req.query.currency === undefined ? null : req.query.currency,
    channel: req.get("X-Channel") === undefined ? null : req.get("X-Channel"),
  });
});
// A form API: `express.urlencoded({ extended: true })` (qs) reads `Customer[name]` as
// `Customer.name` and `Tags[]` as an array.
const field = (body, name) => (body[name] === undefined ? null : body[name]);
app.post("/2010-04-01/Accounts/:account/Calls.json", (req, res) => {
  const body = req.body || {};
  execute(res, "create_call", {
    account: req.params.account,
    to: field(body, "To"),
    sender: field(body, "From"),
    customer: body.Customer && body.Customer.name !== undefined ? body.Customer.name : null,
    tags: field(body, "Tags"),
    fields: body,
  });
});
app.post("/2010-04-01/Accounts/:account/Calls/:sid.json", (req, res) => {
  const body = req.body || {};
  execute(res, "update_call", {
    account: req.params.account,
    sid: req.params.sid,
    status: field(body, "Status"),
    fields: body,
  });
});
// A Stripe-like form API: every field as qs nests it (`metadata[k]`, `line_items[0][price]`,
// `expand[]`).
app.post("/v1/checkout/sessions", (req, res) => execute(res, "checkout", { fields: req.body || {} }));
app.delete("/accounts/:account", (req, res) => execute(res, "close", { account: req.params.account }));
app.get("/confirm/:code", (req, res) => execute(res, "confirm", { code: req.params.code }));
app.post("/mcp", express.text({ type: "*/*" }), (req, res) =>
  execute(res, "mcp", { body: typeof req.body === "string" ? req.body : JSON.stringify(req.body) }),
);
app.get("/__executions", (req, res) => res.json(executions));

const server = app.listen(0, "127.0.0.1", () => {
  console.log(`PORT ${server.address().port}`);
});
