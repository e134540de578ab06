//! `GET /.well-known/poppy.json`: the upstream's document with the configured operations
//! versions (`[protocol] operations_versions`) merged in.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::ingress::ForwardRequest;
use crate::upstream::UpstreamClient;
use crate::upstream::forwarded::ProxyContext;

pub(crate) const PATH: &str = "/.well-known/poppy.json";

/// Fetch the upstream's document (or use the configured one) and list the operations
/// `versions` in its `extensions`, keeping every other member.
pub(crate) async fn document(
    upstream: &UpstreamClient,
    headers: &http::HeaderMap,
    fallback: Option<&Value>,
    versions: &[String],
    proxy: &ProxyContext,
) -> Value {
    let forwarded = headers
        .iter()
        .filter(|(name, _)| matches!(name.as_str(), "host" | "accept" | "accept-language"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let request = ForwardRequest {
        method: http::Method::GET,
        path_and_query: PATH.to_owned(),
        headers: forwarded,
        body: Bytes::new(),
    };
    let from_upstream = match upstream.send(request, proxy).await {
        // Read one way (a member twice is no document), as every JSON an upstream sends.
        Ok(response) if response.status == 200 => {
            crate::protocol::json::from_slice::<Value>(&response.body)
                .ok()
                .filter(Value::is_object)
        }
        Ok(_) | Err(_) => None,
    };
    merge(
        from_upstream
            .or_else(|| fallback.cloned())
            .unwrap_or_else(|| json!({})),
        versions,
    )
}

/// Set `extensions.operations` to `[{"version": V}, …]` for each of `versions`, keeping
/// other extensions (the upstream's own `operations` is replaced: the gateway holds them).
pub(crate) fn merge(mut document: Value, versions: &[String]) -> Value {
    if let Some(root) = document.as_object_mut() {
        let extensions = root.entry("extensions").or_insert_with(|| json!({}));
        if !extensions.is_object() {
            *extensions = json!({});
        }
        if let Some(map) = extensions.as_object_mut() {
            let listed = versions.iter().map(|v| json!({ "version": v })).collect();
            map.insert("operations".into(), Value::Array(listed));
        }
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_keeps_other_members() {
        let two = ["2".to_owned()];
        let doc = merge(
            json!({"name": "Shop", "extensions": {"other": [{"version": "1"}], "operations": [{"version": "1"}]}}),
            &two,
        );
        assert_eq!(doc["name"], "Shop");
        assert_eq!(doc["extensions"]["other"][0]["version"], "1");
        assert_eq!(doc["extensions"]["operations"], json!([{"version": "2"}]));
        assert_eq!(
            merge(json!({}), &two)["extensions"]["operations"],
            json!([{"version": "2"}])
        );
    }
}
