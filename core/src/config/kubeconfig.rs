//! The `kubeConfig` option: where the provider's credentials come from.
//! Parsed and checked up front; the client module turns it into a
//! `kube::Config`. `Debug` never prints tokens or kubeconfig contents.

use std::fmt;
use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use secrecy::SecretString;
use serde_json::Value;

use super::fields::{kind, Fields};
use crate::error::{Error, Result};

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
pub fn parse(value: Option<&Value>) -> Result<KubeConfigSource> {
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
        // kube's parse errors quote no secrets, but keep them out anyway.
        let kc = Kubeconfig::from_yaml(trimmed)
            .map_err(|_| Error::config("option `kubeConfig`: the kubeconfig string is not valid kubeconfig YAML"))?;
        return Ok(KubeConfigSource::Inline(Box::new(kc)));
    }
    let path = expand_home(trimmed);
    let kc = Kubeconfig::read_from(&path).map_err(|e| {
        Error::config(format!("option `kubeConfig`: cannot read kubeconfig file {}: {e}", path.display()))
    })?;
    Ok(KubeConfigSource::File { path, kubeconfig: Box::new(kc) })
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
}
