// The sign-in of the demo's OpenID provider (idp.mjs) and of the tests' provider
// (tests/deps/node/oidc/provider.mjs), written once: a login form at /interaction/UID where any
// user name signs in as that subject (no password: a demo's and a test's provider only), and
// consent implied for the approval page's `openid` scope. It imports no package, so that both
// import it by its path from their own npm projects.

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// A form body, at most 16 KiB (the login form posts one short field).
function readBody(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk) => {
      body += chunk;
      if (body.length > 16 * 1024) req.destroy();
    });
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

// oidc-provider's `loadExistingGrant`: consent is implied, the page asks for `openid` only
// (who is signed in).
export async function impliedOpenidGrant(ctx) {
  const grantId = ctx.oidc.result?.consent?.grantId
    || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
  if (grantId) return ctx.oidc.provider.Grant.find(grantId);
  const grant = new ctx.oidc.provider.Grant({
    clientId: ctx.oidc.client.clientId,
    accountId: ctx.oidc.session.accountId,
  });
  grant.addOIDCScope('openid');
  await grant.save();
  return grant;
}

// The server's request handler: /interaction/UID shows `loginPage(uid, problem)` (a form
// posting `login` to /interaction/UID/login) and signs that name in; everything else is the
// provider's.
export function withSignIn(provider, loginPage) {
  const callback = provider.callback();
  return async (req, res) => {
    const match = /^\/interaction\/([^/?]+)(\/login)?/.exec(req.url);
    if (!match) return callback(req, res);
    try {
      const details = await provider.interactionDetails(req, res);
      if (req.method === 'GET' && !match[2]) {
        res.setHeader('content-type', 'text/html; charset=utf-8');
        res.end(loginPage(details.uid));
        return undefined;
      }
      if (req.method === 'POST' && match[2]) {
        const login = (new URLSearchParams(await readBody(req)).get('login') || '').trim();
        if (!login) {
          res.statusCode = 400;
          res.setHeader('content-type', 'text/html; charset=utf-8');
          res.end(loginPage(details.uid, 'Type a user name.'));
          return undefined;
        }
        await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
        return undefined;
      }
      res.statusCode = 405;
      res.end();
    } catch (err) {
      res.statusCode = 400;
      res.setHeader('content-type', 'text/plain; charset=utf-8');
      res.end(`sign-in failed: ${err && err.message}; open the approval link again\n`);
    }
    return undefined;
  };
}
