// A real OAuth resource server on Express 4: passport-http-bearer, which reads the token from
// `Authorization: Bearer` (split on a space), `access_token` in a form body (express.urlencoded)
// and `access_token` in the query. Every token is accepted (the gateway's test provider signed
// it; this server only records it): `POST /pay/:to` and `/pay-form/:to` execute and record the
// token's client and account; `GET /__executions` lists the executions. Prints `{"port": N}`
// once listening.
const path = require('path');
const modules = path.join(__dirname, '..', 'node', 'oauth', 'node_modules');
const express = require(path.join(modules, 'express'));
const passport = require(path.join(modules, 'passport'));
const BearerStrategy = require(path.join(modules, 'passport-http-bearer')).Strategy;

const executions = [];

function claims(token) {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8'));
  } catch {
    return {};
  }
}

passport.use(new BearerStrategy((token, done) => done(null, { token })));

const app = express();
app.use(express.urlencoded({ extended: false }));
app.use(passport.initialize());

app.post(['/pay/:to', '/pay-form/:to'], passport.authenticate('bearer', { session: false }), (req, res) => {
  const named = claims(req.user.token);
  const record = {
    server: 'passport',
    execution: executions.length + 1,
    to: req.params.to,
    client: named.client_id || named.azp || null,
    account: named.account || null,
  };
  executions.push(record);
  res.status(201).json(record);
});

app.get('/__executions', (req, res) => res.json(executions));

const server = app.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
