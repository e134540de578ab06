//! `redis+cluster://` URLs: the seed nodes of a Redis Cluster in one string.

use crate::store::StoreError;

/// The scheme of a Redis Cluster store URL.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The seed nodes of `redis+cluster://[user[:password]@]host1:port1,host2:port2,…[/]`, each as a
/// `redis://` URL the redis client reads (credentials apply to every node). A cluster has only
/// database 0 and the client discovers every other node from any seed, so there is no path or
/// query to give. Err for anything else, or a URL of another scheme.
pub(crate) fn cluster_seeds(url: &str) -> Result<Vec<String>, StoreError> {
    let invalid = |why: &str| StoreError::Invalid(format!("invalid Redis Cluster URL: {why}"));
    let rest = url
        .strip_prefix(CLUSTER_SCHEME)
        .ok_or_else(|| invalid("it must start with redis+cluster://"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (credentials, nodes) = match rest.rsplit_once('@') {
        Some((credentials, nodes)) => (Some(credentials), nodes),
        None => (None, rest),
    };
    if nodes.contains(['/', '?', '#']) {
        return Err(invalid(
            "give only seed nodes (host:port,host:port): a cluster has no database number or options",
        ));
    }
    nodes
        .split(',')
        .map(|node| {
            if node.is_empty() || node.contains(char::is_whitespace) {
                return Err(invalid("a seed node is empty or has spaces"));
            }
            Ok(match credentials {
                Some(credentials) => format!("redis://{credentials}@{node}/"),
                None => format!("redis://{node}/"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_of_a_cluster_url() {
        assert_eq!(
            cluster_seeds("redis+cluster://10.0.0.1:7000,10.0.0.2:7001/").unwrap(),
            ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7001/"]
        );
        assert_eq!(
            cluster_seeds("redis+cluster://:s3cret@a:7000,b:7001").unwrap(),
            ["redis://:s3cret@a:7000/", "redis://:s3cret@b:7001/"]
        );
        assert_eq!(
            cluster_seeds("redis+cluster://[::1]:7000").unwrap(),
            ["redis://[::1]:7000/"]
        );
        for bad in [
            "redis://a:7000",
            "redis+cluster://",
            "redis+cluster://a:7000,,b:7001",
            "redis+cluster://a:7000/0",
            "redis+cluster://a:7000?protocol=3",
            "redis+cluster://a:7000, b:7001",
        ] {
            assert!(cluster_seeds(bad).is_err(), "{bad}");
        }
    }
}
