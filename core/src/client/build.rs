//! Building a `kube::Client` from the `kubeConfig` option.

use kube::config::{
    AuthInfo, Cluster, Context, ExecInteractiveMode, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use kube::{Client, Config};
use secrecy::{ExposeSecret, SecretString};

use super::proxy;
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
                Error::config(format!("in-cluster configuration failed (KUBERNETES_SERVICE_HOST is set): {e}"))
            })?;
            (config, None)
        }
        KubeConfigSource::Default => {
            let kc = Kubeconfig::read().map_err(|e| {
                Error::config(format!(
                    "no Kubernetes configuration found: not running in a cluster and reading KUBECONFIG / ~/.kube/config failed ({e}); \
                     set KUBECONFIG or pass the `kubeConfig` option"
                ))
            })?;
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
    let client = super::http::client(config, proxy.as_ref())
        .map_err(|e| Error::config(format!("cannot build the Kubernetes client: {}", super::redact(&e.to_string()))))?;
    Ok(Connection { client, default_namespace })
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
            }
        }
    }
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.map_err(|e| {
        Error::config(format!("cannot use the kubeconfig from {origin}: {}", super::redact(&e.to_string())))
    })?;
    Ok((config, explicit_proxy))
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
