//! The `kubeConfig` option: where the provider's credentials come from.
//! Parsed and checked up front; the client module turns it into a
//! `kube::Config`. `Debug` never prints tokens or kubeconfig contents.

use std::fmt;
use std::path::{Path, PathBuf};

use kube::config::{Kubeconfig, KubeconfigError};
use secrecy::SecretString;
use serde_json::Value;

use super::fields::{kind, Fields};
use crate::error::{position, Error, Result};

/// Where the Kubernetes credentials come from.
pub enum KubeConfigSource {
    /// Option omitted: the in-cluster service account when
    /// `KUBERNETES_SERVICE_HOST` is set, else `KUBECONFIG` / `~/.kube/config`
    /// (current context). Resolved when the client is built.
    Default,
    /// A kubeconfig file (current context), already parsed.
    File {
        /// Where it was read from (named in errors).
        path: PathBuf,
        /// Its contents.
        kubeconfig: Box<Kubeconfig>,
    },
    /// A kubeconfig passed as a YAML (or JSON) string, already parsed.
    Inline(Box<Kubeconfig>),
    /// An explicit server and bearer token.
    Server(ServerConfig),
}

/// `kubeConfig: { server, token | tokenFile, caData | caFile, insecureSkipTlsVerify? }`.
pub struct ServerConfig {
    /// API server URL, `https://host:port`.
    pub server: String,
    /// The bearer token or the file it is read from (re-read as it rotates).
    pub token: TokenSource,
    /// Base64-encoded PEM CA bundle (kubeconfig `certificate-authority-data`).
    pub ca_data: Option<String>,
    /// CA bundle file.
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification (testing only).
    pub insecure_skip_tls_verify: bool,
}

/// A bearer token given inline or as a file.
pub enum TokenSource {
    /// The token itself.
    Inline(SecretString),
    /// A file holding the token; kube re-reads it about once a minute.
    File(PathBuf),
}

impl fmt::Debug for KubeConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeConfigSource::Default => f.write_str("Default"),
            KubeConfigSource::File { path, .. } => f.debug_tuple("File").field(path).finish(),
            KubeConfigSource::Inline(_) => f.write_str("Inline(<kubeconfig redacted>)"),
            KubeConfigSource::Server(s) => f
                .debug_struct("Server")
                .field("server", &s.server)
                .field("token", &s.token)
                .field("ca_file", &s.ca_file)
                .field("insecure_skip_tls_verify", &s.insecure_skip_tls_verify)
                .finish_non_exhaustive(),
        }
    }
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Inline(_) => f.write_str("Inline(<redacted>)"),
            TokenSource::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// Parses the `kubeConfig` option (absent → [`KubeConfigSource::Default`]).
pub(crate) fn parse(value: Option<&Value>) -> Result<KubeConfigSource> {
    match value {
        None => Ok(KubeConfigSource::Default),
        Some(Value::String(s)) => parse_string(s),
        Some(v @ Value::Object(_)) => parse_server(v).map(KubeConfigSource::Server),
        Some(other) => Err(Error::config(format!(
            "option `kubeConfig` must be a path, a kubeconfig YAML string or {{ server, token | tokenFile, caData | caFile }}, got {}",
            kind(other)
        ))),
    }
}

/// A string is kubeconfig content when it spans lines or is JSON; else a path.
fn parse_string(s: &str) -> Result<KubeConfigSource> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err(Error::config("option `kubeConfig` must not be empty"));
    }
    if s.contains('\n') || trimmed.starts_with('{') {
        let kc = Kubeconfig::from_yaml(trimmed).map_err(|e| {
            // Lines are counted in the string as given, not the trimmed one.
            let skipped = s[..s.len() - s.trim_start().len()].matches('\n').count() as u64;
            let at = parse_position(&e).map(|(line, column)| (line + skipped, column));
            Error::config(format!(
                "option `kubeConfig`: the kubeconfig string is not valid kubeconfig YAML{} (its text is not shown: it may hold credentials)",
                position(at)
            ))
        })?;
        return Ok(KubeConfigSource::Inline(Box::new(kc)));
    }
    let path = expand_home(trimmed);
    let kc = read_file(&path).map_err(|why| Error::config(format!("option `kubeConfig`: {why}")))?;
    Ok(KubeConfigSource::File { path, kubeconfig: Box::new(kc) })
}

/// Reads the kubeconfig file at `path`; the error says what went wrong with
/// it, naming the file. A YAML error is reported by its line and column
/// only: kube's parser (serde-saphyr) renders the lines around the error,
/// which can be a `token:` line, and quotes the values it rejects.
pub(crate) fn read_file(path: &Path) -> std::result::Result<Kubeconfig, String> {
    Kubeconfig::read_from(path).map_err(|e| match e {
        KubeconfigError::ReadConfig(io, _) => format!("cannot read kubeconfig file {}: {io}", path.display()),
        KubeconfigError::Parse(_) => format!(
            "kubeconfig file {} is not valid kubeconfig YAML{} (its text is not shown: it may hold credentials)",
            path.display(),
            position(parse_position(&e))
        ),
        // The documents of the file do not merge (kind or apiVersion differ):
        // kube's text names no value.
        other => format!("kubeconfig file {}: {other}", path.display()),
    })
}

/// Line and column of a YAML parse error.
fn parse_position(e: &KubeconfigError) -> Option<(u64, u64)> {
    match e {
        KubeconfigError::Parse(e) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

fn parse_server(v: &Value) -> Result<ServerConfig> {
    let mut f = Fields::new("kubeConfig", v)?;
    let server =
        f.string("server")?.ok_or_else(|| f.error("server", "is required (e.g. \"https://10.0.0.1:6443\")"))?;
    match server.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("https" | "http")) && uri.host().is_some() => {}
        _ => return Err(f.error("server", format!("{server:?} is not an http(s) URL"))),
    }
    let token = match (f.string("token")?, f.string("tokenFile")?) {
        (Some(t), None) => TokenSource::Inline(SecretString::from(t)),
        (None, Some(p)) => TokenSource::File(existing_file(&f, "tokenFile", &p)?),
        _ => return Err(f.error("token", "give exactly one of `token` and `tokenFile`")),
    };
    let ca_data = f.string("caData")?;
    let ca_file = f.string("caFile")?.map(|p| existing_file(&f, "caFile", &p)).transpose()?;
    if ca_data.is_some() && ca_file.is_some() {
        return Err(f.error("caData", "give at most one of `caData` and `caFile`"));
    }
    let insecure_skip_tls_verify = f.get::<bool>("insecureSkipTlsVerify")?.unwrap_or(false);
    f.finish()?;
    Ok(ServerConfig { server, token, ca_data, ca_file, insecure_skip_tls_verify })
}

fn existing_file(f: &Fields<'_>, key: &str, p: &str) -> Result<PathBuf> {
    let path = expand_home(p);
    if path.is_file() {
        Ok(path)
    } else {
        Err(f.error(key, format!("file {} does not exist", path.display())))
    }
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_form_needs_one_token() {
        let e = parse(Some(&json!({ "server": "https://h:6443" }))).unwrap_err();
        assert!(e.message.contains("tokenFile"), "{}", e.message);
        let e = parse(Some(&json!({ "server": "h:6443", "token": "t" }))).unwrap_err();
        assert!(e.message.contains("kubeConfig.server"), "{}", e.message);
        let ok = parse(Some(&json!({ "server": "https://h:6443", "token": "s3cret" }))).unwrap();
        let debug = format!("{ok:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn strings_are_paths_or_yaml() {
        let e = parse(Some(&json!("/nonexistent/kubeconfig"))).unwrap_err();
        assert!(e.message.contains("/nonexistent/kubeconfig"), "{}", e.message);
        let yaml =
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers:\n- name: u\n  user:\n    token: s3cret\n";
        let ok = parse(Some(&json!(yaml))).unwrap();
        assert!(!format!("{ok:?}").contains("s3cret"));
        let e = parse(Some(&json!("clusters: [\n"))).unwrap_err();
        assert!(!e.message.contains("clusters"), "{}", e.message);
    }

    /// A token two lines above a YAML error: serde-saphyr's own rendering
    /// of the error would show that line.
    const BAD: &str =
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: s3cr3t-f00d\n    username: u\n   bad: indent\n";

    #[test]
    fn yaml_errors_give_line_and_column_never_the_text() {
        let e = parse(Some(&json!(BAD))).unwrap_err();
        assert!(
            e.message.contains("the kubeconfig string is not valid kubeconfig YAML at line 8, column"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("s3cr3t") && !e.message.contains("token"), "{}", e.message);
        // Lines count in the string as given, leading blank lines included.
        let e = parse(Some(&json!(format!("\n\n{BAD}")))).unwrap_err();
        assert!(e.message.contains("at line 10, column"), "{}", e.message);
        // A value of the wrong type is not quoted either.
        let e =
            parse(Some(&json!("apiVersion: v1\nusers:\n- name: u\n  user:\n    token: [s3cr3t-f00d]\n"))).unwrap_err();
        assert!(e.message.contains("at line 5, column") && !e.message.contains("s3cr3t"), "{}", e.message);

        let path = std::env::temp_dir().join(format!("sandbox-core-kubeconfig-{}", std::process::id()));
        std::fs::write(&path, BAD).unwrap();
        let e = parse(Some(&json!(path.to_str().unwrap()))).unwrap_err();
        let _ = std::fs::remove_file(&path);
        let expected = format!(
            "option `kubeConfig`: kubeconfig file {} is not valid kubeconfig YAML at line 8, column",
            path.display()
        );
        assert!(e.message.contains(&expected), "{}", e.message);
        assert!(!e.message.contains("s3cr3t") && !e.message.contains("token"), "{}", e.message);
    }
}
