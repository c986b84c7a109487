//! Mapping of `kube::Error` to the core [`Error`], with the verb and resource
//! that failed so an RBAC denial or a missing object is actionable, and
//! without the secrets kube's own texts can quote (see `credential_message`
//! and [`redact`]).

use std::path::Path;

use kube::client::AuthError;
use kube::config::AuthInfo;

use crate::error::{position, Error, ErrorCode};

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
/// 400/422 → `invalid_request`, 429/5xx and transport failures → `unavailable`;
/// a credential that cannot be obtained (a failing exec plugin) → `config`.
pub fn api_error(err: kube::Error, action: Action<'_>) -> Error {
    let what = action.describe();
    match &err {
        kube::Error::Api(status) => {
            let msg = &status.message;
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
            Error::new(code, text).with_source(err)
        }
        // Neither keeps `err`: its text is what the message leaves out (a
        // credential plugin's output; a transport error before `redact`).
        kube::Error::Auth(e) => {
            Error::config(format!("{what}: authentication failed: {}", credential_message(e, None)))
        }
        kube::Error::SerdeError(e) => {
            let text = format!("{what}: unexpected response: {e}");
            Error::internal(text).with_source(err)
        }
        kube::Error::BuildRequest(e) => {
            let text = format!("{what}: {e}");
            Error::invalid_request(text).with_source(err)
        }
        other => match credential_failure(other) {
            Some(why) => Error::config(format!("{what}: authentication failed: {why}")),
            None => Error::new(
                ErrorCode::Unavailable,
                format!("{what}: the API server could not be reached: {}", redact(&with_causes(other))),
            ),
        },
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

/// Why a credential could not be obtained or used, in words that quote
/// nothing the credential source was given or printed: see
/// [`credential_message`]. The client puts it in place of kube's own error
/// where that arises (building the client, and the auth layer of every
/// request, where an exec plugin runs again as its token expires).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CredentialError(String);

impl CredentialError {
    /// `err` described with `plugin`, the basename of the credential plugin.
    pub(crate) fn new(err: &AuthError, plugin: Option<&str>) -> Self {
        CredentialError(credential_message(err, plugin))
    }
}

/// The basename of the program the credentials come from, to name it in
/// messages: the exec plugin's `command`, or the `cmd-path` of a `gcp`
/// auth-provider (which takes precedence in kube, as in client-go).
pub(crate) fn plugin_name(auth: &AuthInfo) -> Option<String> {
    let program = match &auth.auth_provider {
        Some(provider) => provider.config.get("cmd-path")?,
        None => auth.exec.as_ref()?.command.as_ref()?,
    };
    let name = Path::new(program).file_name().map(|n| n.to_string_lossy().into_owned());
    Some(name.unwrap_or_else(|| program.clone()))
}

/// kube's auth error in words of our own. kube's texts are not safe to show:
/// a failed plugin prints the `Debug` form of its `Command` (every argument,
/// such as `--client-secret …`, and every explicitly set environment
/// variable) and its whole stdout and stderr; unparsable plugin output comes
/// with a snippet of it. So a plugin is named by its program's basename
/// (`plugin`) and described by its exit status or the position of the parse
/// error only; the rest is kube's text, which carries no credential, through
/// [`redact`] as a second layer.
pub(crate) fn credential_message(err: &AuthError, plugin: Option<&str>) -> String {
    let plugin = plugin.map_or_else(|| "the credential plugin".to_owned(), |p| format!("the credential plugin `{p}`"));
    match err {
        AuthError::AuthExecRun { out, .. } => format!(
            "{plugin} failed ({}); its arguments, environment and output are not shown, as they may hold secrets: \
             run it by hand to see why",
            out.status
        ),
        AuthError::AuthExecStart(e) => format!("{plugin} could not be started: {e}"),
        AuthError::AuthExecParse(e) => format!(
            "{plugin} printed something that is not an ExecCredential{} (not shown: it may hold a credential)",
            position(e.location().map(|l| (l.line(), l.column())))
        ),
        AuthError::ExecPluginFailed => format!("{plugin} printed an ExecCredential without a `status`"),
        AuthError::InvalidBearerToken(_) => {
            "the bearer token holds a character an HTTP header cannot carry (a control character or non-ASCII)"
                .to_owned()
        }
        AuthError::InvalidBasicAuth(_) => {
            "the username or password holds a character an HTTP header cannot carry".to_owned()
        }
        other => redact(&other.to_string()),
    }
}

/// What a credential failure somewhere in `err`'s chain says, if there is
/// one: a [`CredentialError`] the client put there, or (should kube's own
/// error get through) that error in our words, without the plugin's name.
fn credential_failure(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(c) = e.downcast_ref::<CredentialError>() {
            return Some(c.to_string());
        }
        if let Some(a) = e.downcast_ref::<AuthError>() {
            return Some(credential_message(a, None));
        }
        next = e.source();
    }
    None
}

/// A `kube::Error` from building the client, in words that quote no secret:
/// credential failures as [`credential_message`] (naming `plugin`), the
/// rest as kube says it, with its causes, through [`redact`].
pub(crate) fn describe(err: &kube::Error, plugin: Option<&str>) -> String {
    match err {
        kube::Error::Auth(e) => credential_message(e, plugin),
        other => credential_failure(other).unwrap_or_else(|| redact(&with_causes(other))),
    }
}

/// Removes secrets from an error text kube or a library wrote, as a second
/// layer behind describing errors in our own words (see
/// `credential_message`): user info in URLs; `Bearer` and `Basic`
/// credentials; whatever follows `stdout:` / `stderr:` (kube's `Debug` of a
/// plugin's output, text or bytes); and the value of every field whose name
/// says it holds a secret (`secret_name`: tokens, secrets, passwords, key
/// and certificate data) written as JSON (`"token": "…"`, also escaped inside
/// a quoted string), as YAML (`token: …` at the start of a line or after
/// `{`, `,` or `- `), as an environment assignment (`VAULT_TOKEN="…"`) or
/// as a command-line flag (`--client-secret …`, `--token=…`).
pub(crate) fn redact(message: &str) -> String {
    let text = redact_userinfo(message);
    let text = redact_after(&text, "Bearer ", |s| s.find(char::is_whitespace).unwrap_or(s.len()));
    let text = redact_after(&text, "Basic ", |s| s.find(char::is_whitespace).unwrap_or(s.len()));
    let text = redact_output(&text, "stdout: ");
    let text = redact_output(&text, "stderr: ");
    redact_fields(&text)
}

/// What replaces a secret.
const REDACTED: &str = "<redacted>";

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
            out.push_str(REDACTED);
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
        out.push_str(REDACTED);
        rest = &rest[start + len(&rest[start..])..];
    }
    out.push_str(rest);
    out
}

/// The value after each `marker` (`stdout: `): a quoted string's body, or a
/// byte list's (`Debug` of non-UTF-8 output), or the next word.
fn redact_output(message: &str, marker: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(marker) {
        let start = i + marker.len();
        match value_span(&rest[start..], false) {
            Some((from, to)) => {
                out.push_str(&rest[..start + from]);
                out.push_str(REDACTED);
                rest = &rest[start + to..];
            }
            None => {
                out.push_str(&rest[..start]);
                rest = &rest[start..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether a field, variable or flag named `name` holds a secret: its name,
/// lowercased without `-` and `_`, ends in token, secret, password, passwd,
/// keydata, certificatedata, privatekey or apikey (`token`, `id-token`,
/// `VAULT_TOKEN`, `--client-secret`, `client-key-data`, `clientKeyData`,
/// `client-certificate-data`). Not `token-file` or `tokenFile`: paths.
fn secret_name(name: &str) -> bool {
    const ENDINGS: [&str; 8] =
        ["token", "secret", "password", "passwd", "keydata", "certificatedata", "privatekey", "apikey"];
    let name: String = name.chars().filter(|c| *c != '-' && *c != '_').map(|c| c.to_ascii_lowercase()).collect();
    ENDINGS.iter().any(|ending| name.ends_with(ending))
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Replaces the value of every field, variable or flag with a secret name.
fn redact_fields(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !is_name_byte(bytes[i]) || (i > 0 && is_name_byte(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let end = i + bytes[i..].iter().take_while(|b| is_name_byte(**b)).count();
        match secret_after(text, i, end) {
            Some((from, to)) => {
                out.push_str(&text[copied..from]);
                out.push_str(REDACTED);
                copied = to;
                i = to.max(end);
            }
            None => i = end,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The span of the value given to the name at `text[start..end]`, if it is
/// a secret name written as a field, assignment or flag (see [`redact`]).
fn secret_after(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let name = &text[start..end];
    if !secret_name(name) {
        return None;
    }
    let bytes = text.as_bytes();
    let flag = name.starts_with("--");
    // A quoted name: `"token"` (JSON, or `Debug` of an argument) or
    // `\"token\"` (the same inside a quoted string).
    let quote = ["\\\"", "\""].into_iter().find(|q| text[end..].starts_with(q) && text[..start].ends_with(q));
    let after_name = end + quote.map_or(0, str::len);
    let sep = skip_blanks(bytes, after_name);
    let (value, to_line_end) = match bytes.get(sep) {
        Some(b':') if quote.is_some() => (sep + 1, false),
        Some(b':') if yaml_key_position(text, start) => (sep + 1, true),
        Some(b'=') => (sep + 1, false),
        Some(_) if flag && sep > after_name => (sep, false),
        _ => return None,
    };
    let value = skip_blanks(bytes, value);
    value_span(&text[value..], to_line_end).map(|(from, to)| (value + from, value + to))
}

fn skip_blanks(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

/// Whether a name at `start` is where a YAML key would be: first on its
/// line (also after a source snippet's `12 |` gutter, or an escaped `\n`),
/// or after `{`, `,`, `[` or a list item's `-`. Prose ("invalid bearer
/// token: …") is not.
fn yaml_key_position(text: &str, start: usize) -> bool {
    let before = text[..start].trim_end_matches([' ', '\t']);
    before.is_empty() || before.ends_with("\\n") || before.ends_with(['\n', '\r', '|', '{', ',', '[', '-'])
}

/// The span of a value at the start of `s` (blanks skipped): a quoted
/// string's body (`"…"`, `\"…\"` inside a quoted string, `'…'`), a byte
/// list's (`[…]`), or else up to the end of the line (`to_line_end`, for
/// YAML, whose plain values may hold spaces) or of the word. `None` when
/// empty.
fn value_span(s: &str, to_line_end: bool) -> Option<(usize, usize)> {
    let (from, to) = if let Some(body) = s.strip_prefix("\\\"") {
        (2, 2 + body.find("\\\"").unwrap_or(body.len()))
    } else if let Some(body) = s.strip_prefix('"') {
        (1, 1 + quoted_len(body))
    } else if let Some(body) = s.strip_prefix('\'') {
        (1, 1 + body.find('\'').unwrap_or(body.len()))
    } else if let Some(body) = s.strip_prefix('[') {
        (1, 1 + body.find(']').unwrap_or(body.len()))
    } else if to_line_end {
        (0, s.find(['\n', '\r', '"', '\\']).unwrap_or(s.len()))
    } else {
        (
            0,
            s.find(|c: char| c.is_whitespace() || matches!(c, ',' | '}' | ']' | ')' | '"' | '\\' | ';'))
                .unwrap_or(s.len()),
        )
    };
    (to > from).then_some((from, to))
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
            r#"auth exec command 'x' failed with status 1: Output { status: 1, stdout: "<redacted>", stderr: "<redacted>" }"#
        );
        assert_eq!(redact(r#"parse {"token":"s3cr3t","x":1}"#), r#"parse {"token":"<redacted>","x":1}"#);
        assert_eq!(redact(r#"stdout: "unterminated"#), "stdout: \"<redacted>");
        // Non-UTF-8 output is printed by `Debug` as a byte list.
        assert_eq!(redact("stdout: [115, 51], stderr: \"x\" }"), "stdout: [<redacted>], stderr: \"<redacted>\" }");
    }

    /// `redact(text)` is `expected`.
    fn redacted(text: &str, expected: &str) {
        assert_eq!(redact(text), expected, "redact({text:?})");
    }

    #[test]
    fn redacts_json_fields_with_spaces_and_escaped() {
        redacted(r#"{"token": "s3cr3t", "x": 1}"#, r#"{"token": "<redacted>", "x": 1}"#);
        redacted(r#"{"token" :"s3cr3t"}"#, r#"{"token" :"<redacted>"}"#);
        redacted(
            r#"{"clientKeyData": "LS0tLS1CRUdJTg==", "kind": "ExecCredential"}"#,
            r#"{"clientKeyData": "<redacted>", "kind": "ExecCredential"}"#,
        );
        redacted(r#"{"clientCertificateData":"LS0t"}"#, r#"{"clientCertificateData":"<redacted>"}"#);
        redacted(r#"{"password": 12345}"#, r#"{"password": <redacted>}"#);
        redacted(r#"{"token": "with \"escaped\" quotes", "x": 1}"#, r#"{"token": "<redacted>", "x": 1}"#);
        // JSON inside a quoted (`Debug`) string.
        redacted(
            r#"out "{\"status\": {\"token\": \"s3cr3t\"}}""#,
            r#"out "{\"status\": {\"token\": \"<redacted>\"}}""#,
        );
    }

    #[test]
    fn redacts_yaml_keys_also_in_source_snippets() {
        redacted(
            "users:\n- name: u\n  user:\n    token: eyJhbGci.s3cr3t\n",
            "users:\n- name: u\n  user:\n    token: <redacted>\n",
        );
        redacted("   4 |     token: eyJhbGci.s3cr3t\n   5 |   bad", "   4 |     token: <redacted>\n   5 |   bad");
        redacted("    client-key-data: LS0tLS1CRUdJTi\n", "    client-key-data: <redacted>\n");
        redacted("    client-certificate-data: LS0tLS1\n", "    client-certificate-data: <redacted>\n");
        redacted("  password: correct horse battery", "  password: <redacted>");
        redacted("- id-token: 'a b c'", "- id-token: '<redacted>'");
        redacted("{token: s3cr3t, kind: x}", "{token: <redacted>");
        redacted("a line\\n  token: s3cr3t\\n next", "a line\\n  token: <redacted>\\n next");
    }

    #[test]
    fn redacts_environment_assignments_and_flags() {
        redacted(
            r#"KUBERNETES_EXEC_INFO="{}" VAULT_TOKEN="s3cr3t-env" "kubelogin" "get-token" "--client-secret" "s3cr3t-arg" "--password=pw" --token tk"#,
            r#"KUBERNETES_EXEC_INFO="{}" VAULT_TOKEN="<redacted>" "kubelogin" "get-token" "--client-secret" "<redacted>" "--password=<redacted>" --token <redacted>"#,
        );
        redacted(
            "HOME=/root API_KEY=abc DB_PASSWORD=pw rest",
            "HOME=/root API_KEY=<redacted> DB_PASSWORD=<redacted> rest",
        );
    }

    #[test]
    fn prose_and_paths_are_left_alone() {
        for text in [
            "invalid bearer token: failed to parse header value",
            "failed to read token file '/var/run/token': No such file or directory",
            "tokenFile: /var/run/secrets/token",
            "token-key: .credential.access_token",
            "the `token` option must be a string",
            "no token",
        ] {
            redacted(text, text);
        }
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> AuthError {
        use std::os::unix::process::ExitStatusExt;
        AuthError::AuthExecRun {
            cmd: r#"VAULT_TOKEN="s3cr3t-env" "/opt/bin/kubelogin" "--client-secret" "s3cr3t-arg""#.to_owned(),
            out: Box::new(std::process::Output {
                status: std::process::ExitStatus::from_raw(code << 8),
                stdout: stdout.as_bytes().to_vec(),
                stderr: stderr.as_bytes().to_vec(),
            }),
        }
    }

    #[test]
    fn a_failed_plugin_is_named_by_its_basename_and_exit_status_only() {
        let auth: AuthInfo = serde_json::from_value(serde_json::json!({
            "exec": { "apiVersion": "client.authentication.k8s.io/v1", "command": "/opt/bin/kubelogin" }
        }))
        .unwrap();
        let plugin = plugin_name(&auth);
        assert_eq!(plugin.as_deref(), Some("kubelogin"));
        let err = exited(3, r#"{"status": {"token": "s3cr3t-out"}}"#, "s3cr3t-err: denied");
        let text = credential_message(&err, plugin.as_deref());
        assert!(text.starts_with("the credential plugin `kubelogin` failed (exit status: 3)"), "{text}");
        assert!(!text.contains("s3cr3t") && !text.contains("/opt/bin"), "{text}");
        // Also when kube's error reaches a request (as the auth layer's
        // error, boxed in `Service`), with or without the client's rewrite.
        let action = Action { verb: "get", resource: "pods", name: None, namespace: "ns" };
        for boxed in [
            tower::BoxError::from(exited(3, "s3cr3t-out", "s3cr3t-err")),
            tower::BoxError::from(CredentialError::new(&exited(3, "s3cr3t-out", "s3cr3t-err"), Some("kubelogin"))),
        ] {
            let e = api_error(kube::Error::Service(boxed), action);
            assert_eq!(e.code, ErrorCode::Config, "{}", e.message);
            assert!(
                e.message.contains("authentication failed") && e.message.contains("exit status: 3"),
                "{}",
                e.message
            );
            assert!(!e.message.contains("s3cr3t"), "{}", e.message);
        }
        let e = api_error(kube::Error::Auth(exited(1, "s3cr3t", "")), action);
        assert!(e.code == ErrorCode::Config && !e.message.contains("s3cr3t"), "{}", e.message);
        // Nor does the cause chain: a credential error keeps no source.
        assert!(std::error::Error::source(&e).is_none());
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
        let source = std::error::Error::source(&e).expect("the API answer is kept as the source");
        assert!(matches!(source.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403));
    }
}
