//! Building a `kube::Client` from the `kubeConfig` option.

use std::ffi::OsString;
use std::path::PathBuf;

use kube::config::{
    AuthInfo, Cluster, Context, ExecInteractiveMode, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use kube::{Client, Config};
use secrecy::{ExposeSecret, SecretString};

use super::proxy;
use super::requests::Requests;
use crate::config::kubeconfig::read_file;
use crate::config::{KubeConfigSource, ServerConfig, TokenSource};
use crate::error::{Error, Result};

/// A client plus the namespace its configuration selects (kubeconfig context
/// namespace, the service account's namespace in cluster, else "default").
#[derive(Clone)]
pub struct Connection {
    /// The Kubernetes client (cheap to clone).
    pub client: Client,
    /// Namespace from the configuration.
    pub default_namespace: String,
    /// Set when the credentials travel where anyone on the way could take
    /// them (plain `http://`, or TLS unchecked); the lifecycle reports it once.
    pub transport_warning: Option<String>,
    /// What the client has sent so far, by verb and resource.
    pub requests: Requests,
}

/// Builds the client. Must run inside a Tokio runtime (kube spawns a worker).
///
/// Omitted `kubeConfig`: in-cluster when `KUBERNETES_SERVICE_HOST` is set
/// (kube re-reads the rotating token file), else `KUBECONFIG` /
/// `~/.kube/config`. Exec auth plugins work; they are run non-interactively
/// unless the kubeconfig asks otherwise, so they never read Node's stdin.
pub async fn connect(source: &KubeConfigSource) -> Result<Connection> {
    let (config, explicit_proxy) = match source {
        KubeConfigSource::Default if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            let config = Config::incluster().map_err(|e| {
                Error::config(format!(
                    "in-cluster configuration failed (KUBERNETES_SERVICE_HOST is set): {}",
                    super::redact(&e.to_string())
                ))
            })?;
            (config, None)
        }
        KubeConfigSource::Default => {
            let kc = read_default(std::env::var_os("KUBECONFIG"), std::env::home_dir())?;
            from_kubeconfig(kc, "KUBECONFIG / ~/.kube/config").await?
        }
        KubeConfigSource::File { path, kubeconfig } => {
            from_kubeconfig((**kubeconfig).clone(), &path.display().to_string()).await?
        }
        KubeConfigSource::Inline(kc) => from_kubeconfig((**kc).clone(), "the `kubeConfig` string").await?,
        KubeConfigSource::Server(s) => from_kubeconfig(server_kubeconfig(s), "the `kubeConfig` object").await?,
    };
    let proxy = proxy::choose(explicit_proxy.as_deref(), &config.cluster_url, |name| std::env::var(name).ok())?;
    let default_namespace = config.default_namespace.clone();
    let transport_warning = transport_warning(&config, proxy.is_some());
    let requests = Requests::default();
    let client = super::http::client(config, proxy.as_ref(), &requests)?;
    Ok(Connection { client, default_namespace, transport_warning, requests })
}

/// The kubeconfig kube's `Kubeconfig::read` would load: the files `KUBECONFIG`
/// lists, merged (the first to set a value wins), else `~/.kube/config` under
/// `home`. Read here, file by file, so that an error names its file and
/// quotes none of it (see [`read_file`]).
fn read_default(kubeconfig: Option<OsString>, home: Option<PathBuf>) -> Result<Kubeconfig> {
    let listed: Vec<PathBuf> = kubeconfig
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    let paths = match (listed.is_empty(), home) {
        (false, _) => listed,
        (true, Some(home)) => vec![home.join(".kube").join("config")],
        (true, None) => Vec::new(),
    };
    let unusable = |why: String| {
        Error::config(format!(
            "no usable Kubernetes configuration: not running in a cluster, and {why}; \
             set KUBECONFIG or pass the `kubeConfig` option"
        ))
    };
    if paths.is_empty() {
        return Err(unusable("KUBECONFIG is not set and there is no home directory for ~/.kube/config".to_owned()));
    }
    let mut merged = Kubeconfig::default();
    for path in paths {
        let kc = read_file(&path).map_err(unusable)?;
        merged = merged.merge(kc).map_err(|e| {
            Error::config(format!("the kubeconfig files of KUBECONFIG cannot be merged at {}: {e}", path.display()))
        })?;
    }
    Ok(merged)
}

/// A warning when the credentials can be read or taken on the way to the API
/// server: sent over plain `http://`, or over TLS whose certificate is not
/// checked (`insecure-skip-tls-verify`). A loopback server reached without a
/// proxy is exempt: the credentials do not leave this host (`kubectl proxy`,
/// a port-forward, a tunnel).
fn transport_warning(config: &Config, proxied: bool) -> Option<String> {
    let auth = &config.auth_info;
    let credentials = auth.token.is_some()
        || auth.token_file.is_some()
        || auth.exec.is_some()
        || auth.auth_provider.is_some()
        || auth.password.is_some();
    if !credentials || (!proxied && proxy::is_loopback(&config.cluster_url)) {
        return None;
    }
    let server = proxy::display(&config.cluster_url);
    if config.cluster_url.scheme_str() == Some("http") {
        Some(format!(
            "the API server {server} is plain http://: the credentials go to it unencrypted, readable by anyone on the way; \
             use its https:// address"
        ))
    } else if config.accept_invalid_certs {
        Some(format!(
            "the API server {server}'s certificate is not checked (insecureSkipTlsVerify / insecure-skip-tls-verify): \
             the credentials go to whoever answers at that address; give its CA instead (caData or caFile, \
             certificate-authority-data)"
        ))
    } else {
        None
    }
}

/// The config, and the proxy-url of the kubeconfig's current cluster (kube
/// mixes `HTTPS_PROXY` into `Config::proxy_url`; see [`proxy`] for the rules).
async fn from_kubeconfig(mut kc: Kubeconfig, origin: &str) -> Result<(Config, Option<String>)> {
    let explicit_proxy = current_cluster(&kc).and_then(|c| c.proxy_url.clone());
    for user in kc.auth_infos.iter_mut().filter_map(|u| u.auth_info.as_mut()) {
        if let Some(exec) = user.exec.as_mut() {
            exec.interactive_mode.get_or_insert(ExecInteractiveMode::Never);
        }
        // A token pasted or read from a file usually ends in a newline,
        // which no HTTP header may hold; kubectl trims it too.
        if let Some(token) = user.token.as_mut() {
            let trimmed = token.expose_secret().trim();
            if trimmed.len() != token.expose_secret().len() {
                *token = SecretString::from(trimmed.to_owned());
            }
            // kube builds the header of an inline token with a panicking
            // `expect`: refuse what it cannot carry, naming only where from.
            if !header_safe(token.expose_secret()) {
                return Err(Error::config(format!(
                    "the token from {origin} holds a character an HTTP header cannot carry (a control character or non-ASCII)"
                )));
            }
        }
        // kube re-reads a token file as it is, whitespace and all, where it
        // cannot be trimmed: say so now rather than fail every call later.
        if let Some(path) = &user.token_file {
            if let Ok(token) = std::fs::read_to_string(path) {
                if token.trim().len() != token.len() {
                    return Err(Error::config(format!(
                        "the token file {path} (from {origin}) starts or ends with whitespace (a trailing newline?), \
                         which an HTTP header cannot carry; write it without (`printf %s \"$TOKEN\" > file`)"
                    )));
                }
                if !header_safe(&token) {
                    return Err(Error::config(format!(
                        "the token file {path} (from {origin}) holds a character an HTTP header cannot carry \
                         (a control character or non-ASCII)"
                    )));
                }
            }
        }
    }
    // kube's texts here name files, contexts and decoding errors, never a
    // value; redacted all the same.
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.map_err(|e| {
        Error::config(format!("cannot use the kubeconfig from {origin}: {}", super::redact(&e.to_string())))
    })?;
    Ok((config, explicit_proxy))
}

/// Whether `Bearer <token>` can be an HTTP header value.
fn header_safe(token: &str) -> bool {
    http::HeaderValue::try_from(format!("Bearer {token}")).is_ok()
}

/// The cluster of the current context, as kube's loader picks it.
fn current_cluster(kc: &Kubeconfig) -> Option<&Cluster> {
    let context = kc.contexts.iter().find(|c| Some(&c.name) == kc.current_context.as_ref())?.context.as_ref()?;
    kc.clusters.iter().find(|c| c.name == context.cluster)?.cluster.as_ref()
}

/// An in-memory kubeconfig for `{ server, token | tokenFile, caData | caFile }`,
/// so kube's own loader handles CA parsing and token-file rotation.
fn server_kubeconfig(s: &ServerConfig) -> Kubeconfig {
    const NAME: &str = "agent-sandbox-provider";
    let (token, token_file) = match &s.token {
        TokenSource::Inline(t) => (Some(t.clone()), None),
        TokenSource::File(p) => (None, Some(p.display().to_string())),
    };
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(s.server.clone()),
                insecure_skip_tls_verify: Some(s.insecure_skip_tls_verify),
                certificate_authority: s.ca_file.as_ref().map(|p| p.display().to_string()),
                certificate_authority_data: s.ca_data.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.into(),
            auth_info: Some(AuthInfo { token, token_file, ..Default::default() }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context { cluster: NAME.into(), user: Some(NAME.into()), ..Default::default() }),
            ..Default::default()
        }],
        current_context: Some(NAME.into()),
        ..Default::default()
    }
}

#[cfg(all(test, unix))]
mod tests {
    //! A known secret in every place a credential can be (kubeconfig files,
    //! an exec plugin's arguments, environment, output and error output, a
    //! token file, a proxy URL), and no error message that quotes it.

    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::client::{api_error, Action};
    use crate::ErrorCode;

    const SECRET: &str = "s3cr3t-7f9c2a41d0e8";

    /// A fresh directory for one test.
    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sandbox-core-secrets-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A kubeconfig whose user is the exec plugin `kubelogin` in `dir`: a
    /// symlink to `/bin/sh` running `body` (a script file is never executed
    /// itself, so no test thread's fork can hold it open for writing:
    /// ETXTBSY), given the secret as an argument and in its environment.
    fn with_plugin(dir: &Path, body: &str) -> KubeConfigSource {
        let plugin = dir.join("kubelogin");
        std::os::unix::fs::symlink("/bin/sh", &plugin).unwrap();
        let script = dir.join("plugin.sh");
        std::fs::write(&script, body).unwrap();
        let yaml = format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:1
contexts:
- name: x
  context: {{ cluster: c, user: u }}
current-context: x
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: {}
      args: ["{}", "--client-secret", "{SECRET}"]
      env:
      - name: VAULT_TOKEN
        value: "{SECRET}"
"#,
            plugin.display(),
            script.display()
        );
        KubeConfigSource::Inline(Box::new(Kubeconfig::from_yaml(&yaml).unwrap()))
    }

    /// The error of `connect(source)`; `config`, without the secret.
    async fn connect_error(source: &KubeConfigSource) -> Error {
        let e = connect(source).await.err().expect("connect fails");
        assert_eq!(e.code, ErrorCode::Config, "{}", e.message);
        assert!(!e.message.contains(SECRET), "{}", e.message);
        e
    }

    fn action() -> Action<'static> {
        Action { verb: "get", resource: "namespaces", name: None, namespace: "" }
    }

    async fn get(conn: &Connection) -> kube::Error {
        let request = http::Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
        conn.client.request::<serde_json::Value>(request).await.unwrap_err()
    }

    #[tokio::test]
    async fn a_failing_plugin_is_named_by_basename_and_exit_status_only() {
        let dir = temp_dir("plugin-fails");
        let source = with_plugin(
            &dir,
            r#"printf '{"status": {"token": "%s"}}\n' "$VAULT_TOKEN"; echo "denied: $* $VAULT_TOKEN" >&2; exit 3"#,
        );
        let e = connect_error(&source).await;
        assert!(e.message.contains("the credential plugin `kubelogin` failed (exit status: 3)"), "{}", e.message);
        assert!(!e.message.contains(&*dir.to_string_lossy()) && !e.message.contains("denied"), "{}", e.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn unparsable_plugin_output_is_described_not_quoted() {
        let dir = temp_dir("plugin-garbage");
        let source = with_plugin(
            &dir,
            r#"printf '{"apiVersion": "client.authentication.k8s.io/v1",\n "status": {"token": "%s"},\n  garbage: [\n' "$VAULT_TOKEN""#,
        );
        let e = connect_error(&source).await;
        assert!(
            e.message
                .contains("the credential plugin `kubelogin` printed something that is not an ExecCredential at line"),
            "{}",
            e.message
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_plugin_failing_as_its_token_is_refreshed_fails_the_request_without_secrets() {
        let dir = temp_dir("plugin-refresh");
        // Succeeds with an expired token (so kube runs it again before each
        // request) until `plugin.sh.fail` exists.
        let source = with_plugin(
            &dir,
            r#"if [ -e "$0.fail" ]; then echo "$VAULT_TOKEN $*" >&2; echo "$VAULT_TOKEN"; exit 4; fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}' "$VAULT_TOKEN""#,
        );
        let conn = connect(&source).await.unwrap();
        std::fs::write(dir.join("plugin.sh.fail"), "").unwrap();
        let e = api_error(get(&conn).await, action());
        assert_eq!(e.code, ErrorCode::Config, "{}", e.message);
        assert!(e.message.contains("the credential plugin `kubelogin` failed (exit status: 4)"), "{}", e.message);
        assert!(!e.message.contains(SECRET), "{}", e.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn building_the_client_runs_the_credential_plugin_once_for_tls_and_once_for_the_token() {
        // A plugin can take a second (a cloud provider's CLI). kube runs it
        // once to read a client identity for TLS and once for the token. The
        // client has two connection pools (HTTP/2 for calls, HTTP/1.1 for
        // watches and upgrades): they share one TLS set-up, so not once each.
        let dir = temp_dir("plugin-runs");
        let runs = dir.join("runs");
        let source = with_plugin(
            &dir,
            &format!(
                r#"echo run >> '{}'
printf '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"t"}}}}'"#,
                runs.display()
            ),
        );
        connect(&source).await.unwrap();
        let ours = std::fs::read_to_string(&runs).map(|s| s.lines().count()).unwrap_or(0);
        assert!((1..=2).contains(&ours), "the plugin ran {ours} times");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn server_with_token(token: TokenSource) -> KubeConfigSource {
        KubeConfigSource::Server(ServerConfig {
            server: "https://10.0.0.1:6443".to_owned(),
            token,
            ca_data: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
        })
    }

    #[tokio::test]
    async fn a_token_no_header_can_carry_is_refused_without_quoting_it() {
        let bad = format!("{SECRET}\u{1}x");
        let e = connect_error(&server_with_token(TokenSource::Inline(SecretString::from(bad.clone())))).await;
        assert!(e.message.contains("the token from the `kubeConfig` object holds a character"), "{}", e.message);
        let dir = temp_dir("token-file");
        let file = dir.join("token");
        std::fs::write(&file, &bad).unwrap();
        let e = connect_error(&server_with_token(TokenSource::File(file.clone()))).await;
        assert!(e.message.contains(&format!("the token file {}", file.display())), "{}", e.message);
        std::fs::write(&file, format!("{SECRET}\n")).unwrap();
        let e = connect_error(&server_with_token(TokenSource::File(file))).await;
        assert!(e.message.contains("whitespace"), "{}", e.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn with_proxy(proxy_url: &str) -> KubeConfigSource {
        let kc = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{ "name": "c", "cluster": { "server": "https://10.0.0.1:6443", "proxy-url": proxy_url } }],
            "contexts": [{ "name": "x", "context": { "cluster": "c", "user": "u" } }],
            "users": [{ "name": "u", "user": { "token": "t" } }],
        });
        KubeConfigSource::Inline(Box::new(serde_json::from_value(kc).unwrap()))
    }

    #[tokio::test]
    async fn proxy_credentials_appear_in_no_error() {
        // Nothing listens on port 1: the request fails at the proxy.
        let conn = connect(&with_proxy(&format!("http://user:{SECRET}@127.0.0.1:1"))).await.unwrap();
        let e = api_error(get(&conn).await, action());
        assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
        assert!(!e.message.contains(SECRET), "{}", e.message);
        // A proxy URL that does not parse.
        connect_error(&with_proxy(&format!("http://user:{SECRET} x@proxy:3128"))).await;
    }

    /// A kubeconfig file with a token two lines above a YAML error.
    fn bad_kubeconfig(dir: &Path) -> PathBuf {
        let path = dir.join("config");
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {SECRET}\n    username: u\n   bad: indent\n"
        );
        std::fs::write(&path, yaml).unwrap();
        path
    }

    #[test]
    fn the_default_kubeconfig_errors_name_the_file_line_and_column_only() {
        let dir = temp_dir("default-kubeconfig");
        let bad = bad_kubeconfig(&dir);
        let good = dir.join("good");
        std::fs::write(&good, "apiVersion: v1\nkind: Config\ncurrent-context: x\n").unwrap();
        // KUBECONFIG lists files (merged, the first value wins); the bad one is named.
        let listed = std::env::join_paths([&good, &bad]).unwrap();
        let e = read_default(Some(listed), None).unwrap_err();
        assert_eq!(e.code, ErrorCode::Config);
        assert!(e
            .message
            .contains(&format!("kubeconfig file {} is not valid kubeconfig YAML at line 8", bad.display())));
        assert!(!e.message.contains(SECRET) && !e.message.contains("token"), "{}", e.message);
        let merged = read_default(Some(std::env::join_paths([&good, &good]).unwrap()), None).unwrap();
        assert_eq!(merged.current_context.as_deref(), Some("x"));
        // Else ~/.kube/config.
        std::fs::create_dir_all(dir.join(".kube")).unwrap();
        std::fs::rename(&bad, dir.join(".kube").join("config")).unwrap();
        let e = read_default(Some(OsString::new()), Some(dir.clone())).unwrap_err();
        assert!(e.message.contains(".kube/config is not valid kubeconfig YAML at line 8"), "{}", e.message);
        assert!(!e.message.contains(SECRET), "{}", e.message);
        let e = read_default(None, Some(dir.join("nowhere"))).unwrap_err();
        assert!(e.message.contains("cannot read kubeconfig file") && e.message.contains("KUBECONFIG"), "{}", e.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn config(server: &str, setup: impl FnOnce(&mut Config)) -> Config {
        let mut config = Config::new(server.parse().unwrap());
        setup(&mut config);
        config
    }

    #[test]
    fn credentials_over_http_or_unchecked_tls_are_warned_about() {
        let token = |c: &mut Config| c.auth_info.token = Some(SecretString::from(SECRET));
        let w = transport_warning(&config("http://10.0.0.1:8080", token), false).unwrap();
        assert!(w.contains("http://10.0.0.1:8080 is plain http://"), "{w}");
        let insecure = |c: &mut Config| {
            c.auth_info.token_file = Some("/var/run/token".to_owned());
            c.accept_invalid_certs = true;
        };
        let w = transport_warning(&config("https://u:p@k8s.example.com", insecure), false).unwrap();
        assert!(w.contains("https://k8s.example.com's certificate is not checked"), "{w}");
        assert!(!w.contains(SECRET) && !w.contains("u:p"), "{w}");
        // Verified TLS; no credentials; a loopback server reached directly.
        assert_eq!(transport_warning(&config("https://10.0.0.1", token), false), None);
        assert_eq!(transport_warning(&config("http://10.0.0.1", |_| {}), false), None);
        assert_eq!(transport_warning(&config("http://127.0.0.1:8001", token), false), None);
        assert!(transport_warning(&config("http://127.0.0.1:8001", token), true).is_some(), "through a proxy");
    }
}
