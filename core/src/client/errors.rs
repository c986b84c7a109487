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
                401 => (
                    ErrorCode::Config,
                    format!("{what}: unauthorized: the API server rejected the credentials ({msg})"),
                ),
                409 => (ErrorCode::InvalidState, format!("{what}: conflict ({msg})")),
                400 | 422 => (ErrorCode::InvalidRequest, format!("{what}: rejected by the API server ({msg})")),
                408 | 504 => (ErrorCode::Timeout, format!("{what}: timed out on the API server ({msg})")),
                _ => (ErrorCode::Unavailable, format!("{what}: API server answered {} ({msg})", status.code)),
            };
            Error::new(code, text)
        }
        kube::Error::Auth(e) => Error::config(format!("{what}: authentication failed: {}", redact(&e.to_string()))),
        kube::Error::SerdeError(e) => Error::internal(format!("{what}: unexpected response: {e}")),
        kube::Error::BuildRequest(e) => Error::invalid_request(format!("{what}: {e}")),
        other => Error::new(
            ErrorCode::Unavailable,
            format!("{what}: the API server could not be reached: {}", redact(&with_causes(&other))),
        ),
    }
}

/// The error and its sources, `a: b: c` (kube's transport errors say only
/// "client error (Connect)" themselves; the reason is in the chain).
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Removes secrets from an error text: user info in URLs, bearer tokens, and what an exec
/// credential plugin printed. kube quotes a failed plugin's whole stdout,
/// which may hold a credential, and a credential's `"token"` field could
/// reach a parse error; kube's transport errors carry no tokens today, so the
/// bearer case is defence in depth.
pub fn redact(message: &str) -> String {
    let text = redact_userinfo(message);
    let text = redact_after(&text, "Bearer ", |s| s.find(char::is_whitespace).unwrap_or(s.len()));
    let text = redact_after(&text, "stdout: \"", quoted_len);
    redact_after(&text, "\"token\":\"", quoted_len)
}

/// `scheme://user:pass@host` → `scheme://<redacted>@host` (proxy URLs).
fn redact_userinfo(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("://") {
        let start = i + 3;
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let authority = rest.find(|c: char| c == '/' || c.is_whitespace() || c == '"').unwrap_or(rest.len());
        if let Some(at) = rest[..authority].rfind('@') {
            out.push_str("<redacted>");
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
}

/// Replaces the `len(rest)` bytes after each `marker` with `<redacted>`.
fn redact_after(message: &str, marker: &str, len: impl Fn(&str) -> usize) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(marker) {
        let start = i + marker.len();
        out.push_str(&rest[..start]);
        out.push_str("<redacted>");
        rest = &rest[start + len(&rest[start..])..];
    }
    out.push_str(rest);
    out
}

/// Length of a quoted string's body: up to its first unescaped `"` (escapes
/// as in JSON and Rust's `Debug`), or all of `s`.
fn quoted_len(s: &str) -> usize {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i,
            _ => {}
        }
    }
    s.len()
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
    fn redacts_credentials_in_urls() {
        assert_eq!(redact("proxy http://u:p%40ss@proxy:3128 failed"), "proxy http://<redacted>@proxy:3128 failed");
        assert_eq!(
            redact("https://host:1/x@y and socks5h://a:b@s:1"),
            "https://host:1/x@y and socks5h://<redacted>@s:1"
        );
    }

    #[test]
    fn transport_errors_carry_their_causes() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "tcp connect error: Connection refused");
        let e = api_error(
            kube::Error::Service(Box::new(Outer(io))),
            Action { verb: "get", resource: "pods", name: None, namespace: "ns" },
        );
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.ends_with("client error (Connect): tcp connect error: Connection refused"), "{}", e.message);
    }

    #[test]
    fn redacts_exec_plugin_output() {
        let failed = r#"auth exec command 'x' failed with status 1: Output { status: 1, stdout: "{\"token\":\"s3cr3t\"}\n", stderr: "bad" }"#;
        assert_eq!(
            redact(failed),
            r#"auth exec command 'x' failed with status 1: Output { status: 1, stdout: "<redacted>", stderr: "bad" }"#
        );
        assert_eq!(redact(r#"parse {"token":"s3cr3t","x":1}"#), r#"parse {"token":"<redacted>","x":1}"#);
        assert_eq!(redact(r#"stdout: "unterminated"#), "stdout: \"<redacted>");
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
