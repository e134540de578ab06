// A real OpenID Provider (oidc-provider) for the gateway's identity tests: it signs JWT access
// tokens with the test keys given on the command line and publishes them at /jwks, issues
// opaque tokens, and answers RFC 7662 introspection. Prints {"port": N} once listening.
//
//     node provider.mjs KEY.pem[:kid] ...
//
// Clients (client_credentials): "agent" / "agent-secret" gets tokens; "gateway" /
// "gateway-secret" introspects them; "company-web" / "web-secret" stands for the Company's own
// front end. Resource "https://shop.test" gets JWT access tokens, "urn:shop:opaque" opaque
// ones. A token request's form field `account` becomes the token's `account` claim: the user
// it acts for (a test provider: client credentials stand in for a user's sign-in).
//
// With POPPY_PAGE_REDIRECT_URI set, also the approval page's client "poppy-page" /
// "page-secret" (authorization code + PKCE, redirecting there), and a tiny login form at
// /interaction/UID: any name signs in as that subject (a test provider: no password), and
// consent is implied for the page's `openid` scope. With POPPY_PAGE_ID_TOKEN_CLAIMS (a JSON
// object) too, the ID tokens it issues get these claims besides (an `aud` list that names
// another client, an `azp`), signed again with the same key: what a provider shared with
// other clients may issue, for the page's audience checks.
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { basename } from 'node:path';
import Provider from 'oidc-provider';

// The login form's handling, shared with the demo's provider.
import { escapeHtml, impliedOpenidGrant, withSignIn } from '../../../../examples/idp/sign_in.mjs';

const keys = process.argv.slice(2).map((arg) => {
  const [file, kidArg] = arg.split(':');
  const kid = kidArg || basename(file, '.pem');
  const jwk = createPrivateKey(readFileSync(file)).export({ format: 'jwk' });
  return { ...jwk, kid, alg: jwk.kty === 'EC' ? 'ES256' : 'RS256', use: 'sig' };
});
const firstAlg = keys[0].alg;

const pageRedirect = process.env.POPPY_PAGE_REDIRECT_URI;
const idTokenClaims = process.env.POPPY_PAGE_ID_TOKEN_CLAIMS
  ? JSON.parse(process.env.POPPY_PAGE_ID_TOKEN_CLAIMS)
  : null;

// An ID token with `idTokenClaims` merged into its payload, signed with its own key again.
function withIdTokenClaims(token) {
  const [head, body] = token.split('.');
  const header = JSON.parse(Buffer.from(head, 'base64url'));
  const payload = { ...JSON.parse(Buffer.from(body, 'base64url')), ...idTokenClaims };
  const { kid, alg, use, ...jwk } = keys.find((k) => k.kid === header.kid);
  const input = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}`;
  const key = createPrivateKey({ key: jwk, format: 'jwk' });
  const signature = sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
  return `${input}.${signature.toString('base64url')}`;
}

// The tiny login form (the tests fill #login and click #submit).
function loginPage(uid, problem) {
  return `<!doctype html><title>Sign in</title>${problem ? `<p role="alert">${escapeHtml(problem)}</p>` : ''}<form method="post" action="/interaction/${escapeHtml(uid)}/login"><label for="login">User</label> <input id="login" name="login" autofocus> <button id="submit" type="submit">Sign in</button></form>`;
}

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const provider = new Provider(`http://127.0.0.1:${port}`, {
    clients: [
      { client_id: 'agent', client_secret: 'agent-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
      { client_id: 'gateway', client_secret: 'gateway-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
      { client_id: 'company-web', client_secret: 'web-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
      ...(pageRedirect ? [{
        client_id: 'poppy-page',
        client_secret: 'page-secret',
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: [pageRedirect],
        token_endpoint_auth_method: 'client_secret_basic',
      }] : []),
    ],
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    // Consent is implied for the page's sign-in: only `openid` is asked for.
    loadExistingGrant: impliedOpenidGrant,
    extraTokenClaims: async (ctx) => {
      const account = ctx?.oidc?.body?.account;
      return typeof account === 'string' && account ? { account } : undefined;
    },
    jwks: { keys },
    enabledJWA: { clientAuthSigningAlgValues: ['ES256', 'RS256'] },
    features: {
      devInteractions: { enabled: false },
      introspection: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => 'https://shop.test',
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'shop',
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: resource === 'urn:shop:opaque' ? 'opaque' : 'jwt',
          jwt: { sign: { alg: firstAlg } },
        }),
      },
    },
  });
  if (idTokenClaims) {
    provider.use(async (ctx, next) => {
      await next();
      if (ctx.path === '/token' && typeof ctx.body?.id_token === 'string') {
        ctx.body = { ...ctx.body, id_token: withIdTokenClaims(ctx.body.id_token) };
      }
    });
  }
  server.on('request', withSignIn(provider, loginPage));
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
