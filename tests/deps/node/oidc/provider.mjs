// A real OpenID Provider (oidc-provider) for the gateway's identity tests: it signs JWT access
// tokens with the test keys given on the command line and publishes them at /jwks, issues
// opaque tokens, and answers RFC 7662 introspection. Prints {"port": N} once listening.
//
//     node provider.mjs KEY.pem[:kid] ...
//
// Clients (client_credentials): "agent" / "agent-secret" gets tokens; "gateway" /
// "gateway-secret" introspects them. Resource "https://shop.test" gets JWT access tokens,
// "urn:shop:opaque" opaque ones.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { basename } from 'node:path';
import Provider from 'oidc-provider';

const keys = process.argv.slice(2).map((arg) => {
  const [file, kidArg] = arg.split(':');
  const kid = kidArg || basename(file, '.pem');
  const jwk = createPrivateKey(readFileSync(file)).export({ format: 'jwk' });
  return { ...jwk, kid, alg: jwk.kty === 'EC' ? 'ES256' : 'RS256', use: 'sig' };
});
const firstAlg = keys[0].alg;

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const provider = new Provider(`http://127.0.0.1:${port}`, {
    clients: [
      { client_id: 'agent', client_secret: 'agent-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
      { client_id: 'gateway', client_secret: 'gateway-secret', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
    ],
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
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
