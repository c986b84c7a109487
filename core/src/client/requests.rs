//! A count of the requests a provider sends, by verb and resource (`list
//! pods`, `create sandboxclaims`, `exec pods`), for tests, benchmarks and the
//! debug trace: what each call cost the API server, seen from the client.
//! Every attempt counts, retries included. And the TCP connections it
//! opened to the API server (or its proxy).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use http::{Method, Uri};

/// The counts of one client (cheap to clone; clones share the counts).
#[derive(Clone, Default)]
pub struct Requests {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    connections: Arc<AtomicU64>,
}

impl Requests {
    /// Counts one request (and traces it).
    pub fn record(&self, method: &Method, uri: &Uri) {
        let key = classify(method, uri);
        crate::trace!("api: {key}");
        let mut counts = lock(&self.counts);
        *counts.entry(key).or_default() += 1;
    }

    /// `"verb resource"` → requests so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        lock(&self.counts).clone()
    }

    /// Counts one TCP connection opened.
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// TCP connections opened so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// `"verb resource"` of a Kubernetes API request, with the verbs RBAC uses
/// (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
/// `deletecollection`) plus `exec` for the pods/exec upgrade, and the
/// resource as RBAC names it (`plural` or `plural/subresource`). Names and
/// namespaces are left out: they say which object, not what it cost.
pub(crate) fn classify(method: &Method, uri: &Uri) -> String {
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let skip = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return format!("{} {}", method.as_str().to_lowercase(), uri.path()),
    };
    let mut rest = segments.get(skip..).unwrap_or_default();
    if rest.len() >= 3 && rest[0] == "namespaces" {
        rest = &rest[2..];
    }
    let plural = rest.first().copied().unwrap_or("");
    let named = rest.len() >= 2;
    let resource = match rest.get(2) {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_owned(),
    };
    let verb = match *method {
        _ if resource.ends_with("/exec") || resource.ends_with("/attach") => "exec",
        Method::GET if is_watch(uri) => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return format!("{} {resource}", method.as_str().to_lowercase()),
    };
    format!("{verb} {resource}")
}

/// Whether a request is a watch (`?watch=true`, or `1`).
pub(crate) fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(method: Method, uri: &str) -> String {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_named_as_rbac_names_them() {
        let claims = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/agents/sandboxclaims";
        assert_eq!(key(Method::GET, &format!("{claims}?labelSelector=x&limit=500")), "list sandboxclaims");
        assert_eq!(key(Method::GET, &format!("{claims}?watch=true&resourceVersion=5")), "watch sandboxclaims");
        assert_eq!(key(Method::GET, &format!("{claims}/sbx-1")), "get sandboxclaims");
        assert_eq!(key(Method::POST, claims), "create sandboxclaims");
        assert_eq!(key(Method::PATCH, &format!("{claims}/sbx-1")), "patch sandboxclaims");
        assert_eq!(key(Method::DELETE, &format!("{claims}/sbx-1")), "delete sandboxclaims");
        assert_eq!(key(Method::GET, "/api/v1/namespaces/agents/pods/p/exec?command=sh"), "exec pods/exec");
        assert_eq!(key(Method::GET, "/api/v1/namespaces/agents"), "get namespaces");
        assert_eq!(
            key(Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"),
            "create selfsubjectrulesreviews"
        );
        assert_eq!(key(Method::GET, "/version"), "get /version");
    }

    #[test]
    fn counts_add_up_per_key() {
        let requests = Requests::default();
        let uri: Uri = "/api/v1/namespaces/a/pods/p".parse().unwrap();
        requests.record(&Method::GET, &uri);
        requests.clone().record(&Method::GET, &uri);
        requests.record(&Method::DELETE, &uri);
        let counts = requests.snapshot();
        assert_eq!(counts.get("get pods"), Some(&2));
        assert_eq!(counts.get("delete pods"), Some(&1));
    }
}
