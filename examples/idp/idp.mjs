// The demo's OpenID provider: a real oidc-provider (the same pinned version the tests use) that
// the approval page signs the User in with (authorization code + PKCE). A DEMO provider, for a
// laptop only: its login form signs in ANY user name, with no password, and its signing key is
// made at startup (a restart signs in everyone again). A real Company uses its own provider.
//
//     npm ci --prefix examples/idp     # once (examples/demo.sh does it)
//     node examples/idp/idp.mjs --listen 127.0.0.1:8086 \
//         --redirect-uri http://127.0.0.1:8085/callback \
//         --client-secret-file examples/shop/page-client.secret
//
// The one client is the approval page's: `--client-id` (default "poppy-approval-page"), its
// secret read from --client-secret-file (the same file gateway.toml's [approval_page] names),
// redirecting only to --redirect-uri. Consent is implied: the page asks for `openid` only.
// Port 0 picks a free port. The first line printed is
// `demo identity provider: http://HOST:PORT (…)`: the issuer.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import Provider from 'oidc-provider';

import { escapeHtml, impliedOpenidGrant, withSignIn } from './sign_in.mjs';

const { values: args } = parseArgs({
  options: {
    listen: { type: 'string', default: '127.0.0.1:8086' },
    'redirect-uri': { type: 'string' },
    'client-id': { type: 'string', default: 'poppy-approval-page' },
    'client-secret-file': { type: 'string' },
  },
});
function usage(problem) {
  process.stderr.write(`idp.mjs: ${problem}\nusage: node idp.mjs --listen HOST:PORT --redirect-uri URL --client-secret-file FILE [--client-id ID]\n`);
  process.exit(2);
}
if (!args['redirect-uri']) usage('--redirect-uri is required (the approval page\'s {public_url}/callback)');
if (!args['client-secret-file']) usage('--client-secret-file is required');
const secret = readFileSync(args['client-secret-file'], 'utf8').trim();
if (!secret) usage(`${args['client-secret-file']} is empty`);
const at = args.listen.lastIndexOf(':');
const host = args.listen.slice(0, at);
const port = Number(args.listen.slice(at + 1));
if (at < 1 || !Number.isInteger(port) || port < 0 || port > 65535) usage(`--listen ${args.listen}: write HOST:PORT`);

// A signing key of its own, made now: nothing to keep secret in the repository.
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: `demo-${randomBytes(4).toString('hex')}`, alg: 'ES256', use: 'sig' };

// The login form: it says plainly that this is a demo provider without passwords.
function loginPage(uid, problem) {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Demo sign-in</title>
<style>body{font:1.1rem/1.5 system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem;color:#111}
.demo{border:2px solid #a15c00;background:#fff4e0;padding:.5rem 1rem}
input,button{font:inherit;padding:.4rem .6rem}button{margin-top:.5rem}
:focus{outline:3px solid #1a55c4;outline-offset:2px}</style></head>
<body><form method="post" action="/interaction/${escapeHtml(uid)}/login">
<h1>Demo sign-in</h1>
<p class="demo"><strong>A demo identity provider</strong> (examples/idp): any user name signs in, with no password. Never use it for anything real.</p>
${problem ? `<p role="alert">${escapeHtml(problem)}</p>` : ''}
<p><label for="login">User name (the account the request acts for, e.g. <code>ada</code>)</label><br>
<input id="login" name="login" autocomplete="username" autofocus required></p>
<button id="submit" type="submit">Sign in</button>
</form></body></html>`;
}

const server = createServer();
server.on('error', (err) => {
  process.stderr.write(`idp.mjs: cannot listen on ${args.listen}: ${err.message}\n`);
  process.exit(1);
});
server.listen(port, host, () => {
  const address = server.address();
  const issuer = `http://${host}:${address.port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: args['client-id'],
      client_secret: secret,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: [args['redirect-uri']],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'ES256', // its one key's
    }],
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    loadExistingGrant: impliedOpenidGrant,
    jwks: { keys: [signingKey] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: false } },
  });
  server.on('request', withSignIn(provider, loginPage));
  process.stdout.write(`demo identity provider: ${issuer} (DEMO: any user name signs in, no password; client ${args['client-id']}, redirecting to ${args['redirect-uri']})\n`);
});
