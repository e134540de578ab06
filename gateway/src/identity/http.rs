//! The gateway's own HTTP requests: JWKS fetches (and token introspection). Redirects are not
//! followed (a key URL that moves is configured again, not followed), bodies are bounded.

use std::sync::OnceLock;
use std::time::Duration;

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            // Building a client without custom TLS roots cannot fail in practice; fall back
            // to the default one rather than panic.
            .unwrap_or_default()
    })
}

pub(crate) async fn get(url: &str, timeout: Duration, max_bytes: usize) -> Result<Vec<u8>, String> {
    read(client().get(url).timeout(timeout), max_bytes).await
}

pub(crate) async fn post_form(
    url: &str,
    form: &[(&str, &str)],
    basic_auth: Option<(&str, &str)>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, String> {
    let mut request = client()
        .post(url)
        .form(form)
        .header("accept", "application/json")
        .timeout(timeout);
    if let Some((user, password)) = basic_auth {
        request = request.basic_auth(user, Some(password));
    }
    read(request, max_bytes).await
}

async fn read(request: reqwest::RequestBuilder, max_bytes: usize) -> Result<Vec<u8>, String> {
    let mut response = request
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("answer larger than {max_bytes} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
