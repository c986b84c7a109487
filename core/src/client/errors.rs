//! Mapping of `kube::Error` to the core [`Error`], with the verb and resource
//! that failed so an RBAC denial or a missing object is actionable.

use crate::error::{Error, ErrorCode};

/// What the client was doing when an API call failed: used in messages.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    /// Kubernetes verb: get, list, watch, create, patch, delete.
    pub verb: &'a str,
    /// Resource, e.g. `sandboxclaims.extensions.agents.x-k8s.io` or `pods/exec`.
    pub resource: &'a str,
    /// Object name, when there is one.
    pub name: Option<&'a str>,
    /// Namespace of the call.
    pub namespace: &'a str,
}

impl Action<'_> {
    fn describe(&self) -> String {
        match self.name {
            Some(n) => format!("{} {} {:?} in namespace {:?}", self.verb, self.resource, n, self.namespace),
            None => format!("{} {} in namespace {:?}", self.verb, self.resource, self.namespace),
        }
    }
}

/// Maps a `kube::Error` from `action` to an [`Error`] with a stable code.
///
/// 404 → `not_found`, 403 → `forbidden` (naming the verb and resource the
/// service account lacks), 401 → `config`, 409 → `invalid_state`,
/// 400/422 → `invalid_request`, 429/5xx and transport failures → `unavailable`.
pub fn api_error(err: kube::Error, action: Action<'_>) -> Error {
    let what = action.describe();
    match err {
        kube::Error::Api(status) => {
            let msg = status.message.clone();
            let (code, text) = match status.code {
                404 => (ErrorCode::NotFound, format!("{what}: not found ({msg})")),
                403 => (
                    ErrorCode::Forbidden,
                    format!(
                        "{what}: forbidden: the credentials lack RBAC permission to {} {} ({msg})",
                        action.verb, action.resource
                    ),
                ),
                401 => (ErrorCode::Config, format!("{what}: unauthorized: the API server rejected the credentials ({msg})")),
                409 => (ErrorCode::InvalidState, format!("{what}: conflict ({msg})")),
                400 | 422 => (ErrorCode::InvalidRequest, format!("{what}: rejected by the API server ({msg})")),
                408 | 504 => (ErrorCode::Timeout, format!("{what}: timed out on the API server ({msg})")),
                _ => (ErrorCode::Unavailable, format!("{what}: API server answered {} ({msg})", status.code)),
            };
            Error::new(code, text)
        }
        kube::Error::Auth(e) => Error::config(format!("{what}: authentication failed: {e}")),
        kube::Error::SerdeError(e) => Error::internal(format!("{what}: unexpected response: {e}")),
        kube::Error::BuildRequest(e) => Error::invalid_request(format!("{what}: {e}")),
        other => Error::new(
            ErrorCode::Unavailable,
            format!("{what}: the API server could not be reached: {}", redact(&other.to_string())),
        ),
    }
}

/// Removes anything that looks like a bearer token from a transport message.
/// kube's errors do not include tokens today; this is defence in depth.
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("Bearer ") {
        out.push_str(&rest[..i + 7]);
        out.push_str("<redacted>");
        rest = rest[i + 7..].trim_start_matches(|c: char| !c.is_whitespace());
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_bearer_tokens() {
        assert_eq!(redact("header Bearer abc.def end"), "header Bearer <redacted> end");
        assert_eq!(redact("no token"), "no token");
    }

    #[test]
    fn forbidden_names_verb_and_resource() {
        let status = kube::core::Status::failure("denied", "Forbidden").with_code(403);
        let e = api_error(
            kube::Error::Api(Box::new(status)),
            Action { verb: "create", resource: "sandboxclaims", name: None, namespace: "ns" },
        );
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert!(e.message.contains("create sandboxclaims"), "{}", e.message);
    }
}
