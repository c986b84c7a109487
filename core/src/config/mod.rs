//! Provider options: JSON in (as passed to `agentSandboxProvider(opts)`),
//! a validated [`ProviderConfig`] out. Every problem is an
//! [`ErrorCode::Config`](crate::ErrorCode::Config) error naming the option, so
//! mistakes surface when the provider is constructed, not at the first create.

mod fields;
pub(crate) mod kubeconfig;
mod modes;
pub(crate) mod validate;

use std::time::Duration;

use serde_json::Value;

use crate::args::Limits;
use crate::args::{TransferPolicy, TunnelLimits};
use crate::error::{Error, Result};
use fields::{kind, Fields};
pub use kubeconfig::KubeConfigSource;
pub(crate) use kubeconfig::{ServerConfig, TokenSource};
pub(crate) use modes::{DirectMode, Mode, SecurityProfile, WarmPoolMode, VOLUME_NAME};

/// Default provider name: persisted by Rivet next to the sandbox id, so it
/// must stay stable.
pub(crate) const DEFAULT_NAME: &str = "agent-sandbox";
/// Default working directory inside the sandbox.
pub(crate) const DEFAULT_CWD: &str = "/workspace";
/// Default readiness timeout (a cold start with an image pull can take minutes).
pub(crate) const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Default cap on concurrent execs per provider (pods/exec bypasses API
/// priority and fairness, so we cap it ourselves).
pub(crate) const DEFAULT_MAX_CONCURRENT_EXECS: usize = 32;
/// Default share of those one sandbox may use at once, so one sandbox's
/// never-ending calls cannot hold every slot of the worker.
pub(crate) const DEFAULT_MAX_CONCURRENT_EXECS_PER_SANDBOX: usize = 8;

/// What `suspend()` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SuspendPolicy {
    /// Delete the pod (`operatingMode: Suspended`); only the persistent volume
    /// at `cwd` survives.
    Pod,
    /// Keep the pod running; suspend only moves the TTL.
    None,
}

/// The validated provider options.
#[derive(Debug)]
pub struct ProviderConfig {
    /// Provider name (`provider.name`).
    pub name: String,
    /// Namespace; `None` = from the kubeconfig context (or "default").
    pub(crate) namespace: Option<String>,
    /// Working directory inside the sandbox.
    pub cwd: String,
    /// Container to exec into; `None` = the pod's first container.
    pub(crate) container: Option<String>,
    /// How long connect waits for readiness (and suspend/destroy for completion).
    pub(crate) ready_timeout: Duration,
    /// What suspend does.
    pub(crate) suspend: SuspendPolicy,
    /// Inactivity backstop: the sandbox is deleted this long after the last
    /// connect/exec.
    pub(crate) ttl: Option<Duration>,
    /// How often activity may move the TTL at most, instead of
    /// min(ttl / 4, 60 s): a test seam, the hidden option `__testTtlRefreshMs`
    /// (not in index.d.ts, not in the list of known options).
    pub(crate) ttl_refresh_interval: Option<Duration>,
    /// Where credentials come from.
    pub(crate) kube_config: KubeConfigSource,
    /// Concurrent exec cap.
    pub(crate) max_concurrent_execs: usize,
    /// Concurrent execs of one sandbox (at most `max_concurrent_execs`).
    pub(crate) max_concurrent_execs_per_sandbox: usize,
    /// What one call may ask of a sandbox (`callTimeoutMs`, `limits`).
    pub(crate) limits: Limits,
    /// Port-forward tunnels (`maxTunnels`, `maxTunnelsPerSandbox`,
    /// `tunnelIdleTimeoutMs`).
    pub(crate) tunnels: TunnelLimits,
    /// Where transfers' local paths may be and the most they may ask
    /// (`transfers`).
    pub(crate) transfers: TransferPolicy,
    /// Commands also travel in the exec URL, for the API server's audit log
    /// (`commandsInAuditLog`; env values never do).
    pub(crate) commands_in_audit_log: bool,
    /// Warm pool or direct.
    pub(crate) mode: Mode,
}

/// Parses and validates the options object.
///
/// `onEvent` is a JS function, which does not survive the trip to JSON: the
/// JS layer replaces it by its `typeof` string, checked here.
pub fn parse(options: &Value) -> Result<ProviderConfig> {
    let mut f = Fields::new("", options)?;
    let name = f.string("name")?.unwrap_or_else(|| DEFAULT_NAME.to_string());
    let namespace = f.string("namespace")?;
    if let Some(ns) = &namespace {
        validate::dns_label(ns).map_err(|e| f.error("namespace", e))?;
    }
    let cwd = f.string("cwd")?.unwrap_or_else(|| DEFAULT_CWD.to_string());
    validate::absolute_path(&cwd).map_err(|e| f.error("cwd", e))?;
    let container = f.string("container")?;
    if let Some(c) = &container {
        validate::dns_label(c).map_err(|e| f.error("container", e))?;
    }
    let ready_timeout =
        f.positive_int("readyTimeoutMs", 24 * 3_600_000)?.map_or(DEFAULT_READY_TIMEOUT, Duration::from_millis);
    let suspend = match f.string("suspend")?.as_deref() {
        None | Some("pod") => SuspendPolicy::Pod,
        Some("none") => SuspendPolicy::None,
        Some(other) => return Err(f.error("suspend", format!("must be \"pod\" or \"none\", got {other:?}"))),
    };
    let ttl = f.positive_int("ttlSeconds", 365 * 86_400)?.map(Duration::from_secs);
    if ttl.is_some_and(|t| t < MIN_TTL) {
        return Err(f.error("ttlSeconds", format!("must be at least {} seconds", MIN_TTL.as_secs())));
    }
    let ttl_refresh_interval = f.positive_int("__testTtlRefreshMs", 3_600_000)?.map(Duration::from_millis);
    let kube_config = kubeconfig::parse(f.raw("kubeConfig"))?;
    let max_concurrent_execs =
        f.positive_int("maxConcurrentExecs", 4096)?.map_or(DEFAULT_MAX_CONCURRENT_EXECS, |n| n as usize);
    let max_concurrent_execs_per_sandbox = f
        .positive_int("maxConcurrentExecsPerSandbox", 4096)?
        .map_or(DEFAULT_MAX_CONCURRENT_EXECS_PER_SANDBOX, |n| n as usize)
        .min(max_concurrent_execs);
    let limits = parse_limits(&mut f)?;
    let tunnels = parse_tunnels(&mut f)?;
    let transfers = parse_transfers(&mut f)?;
    let commands_in_audit_log = f.get::<bool>("commandsInAuditLog")?.unwrap_or(false);
    if let Some(v) = f.raw("onEvent") {
        if v.as_str() != Some("function") {
            let got = v.as_str().map_or(kind(v), |t| t);
            return Err(f.error("onEvent", format!("must be a function, got {got}")));
        }
    }
    let mode = parse_mode(&mut f, &cwd, suspend)?;
    f.finish()?;
    Ok(ProviderConfig {
        name,
        namespace,
        cwd,
        container,
        ready_timeout,
        suspend,
        ttl,
        ttl_refresh_interval,
        kube_config,
        max_concurrent_execs,
        max_concurrent_execs_per_sandbox,
        limits,
        tunnels,
        transfers,
        commands_in_audit_log,
        mode,
    })
}

/// `callTimeoutMs` and `limits: { maxTimeoutMs, maxOutputBytes, maxReadBytes }`.
fn parse_limits(f: &mut Fields<'_>) -> Result<Limits> {
    let mut limits = Limits::default();
    let max_ms = crate::args::MAX_TIMEOUT_MS as u64;
    if let Some(ms) = f.positive_int("callTimeoutMs", max_ms)? {
        limits.call_timeout = Duration::from_millis(ms);
    }
    if let Some(mut l) = f.object("limits")? {
        if let Some(ms) = l.positive_int("maxTimeoutMs", max_ms)? {
            limits.max_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = l.positive_int("maxOutputBytes", Limits::BUFFER_MAX)? {
            limits.max_output_bytes = n;
        }
        if let Some(n) = l.positive_int("maxReadBytes", Limits::BUFFER_MAX)? {
            limits.max_read_bytes = n;
        }
        l.finish()?;
    }
    Ok(limits)
}

/// `maxTunnels`, `maxTunnelsPerSandbox` (at most `maxTunnels`) and
/// `tunnelIdleTimeoutMs`.
fn parse_tunnels(f: &mut Fields<'_>) -> Result<TunnelLimits> {
    let default = TunnelLimits::default();
    let max = f.positive_int("maxTunnels", 4096)?.map_or(default.max, |n| n as usize);
    let per_sandbox =
        f.positive_int("maxTunnelsPerSandbox", 4096)?.map_or(default.per_sandbox, |n| n as usize).min(max);
    let idle = f
        .positive_int("tunnelIdleTimeoutMs", crate::args::MAX_TIMEOUT_MS as u64)?
        .map_or(default.idle, Duration::from_millis);
    Ok(TunnelLimits { max, per_sandbox, idle })
}

/// `transfers: { localRoot, maxBytes, maxEntries }`. The root must be an
/// existing directory, named by an absolute path; it is kept resolved.
fn parse_transfers(f: &mut Fields<'_>) -> Result<TransferPolicy> {
    let mut policy = TransferPolicy::default();
    let Some(mut t) = f.object("transfers")? else { return Ok(policy) };
    if let Some(root) = t.string("localRoot")? {
        let path = std::path::Path::new(&root);
        if !path.is_absolute() {
            return Err(t.error("localRoot", "must be an absolute path"));
        }
        let real = std::fs::canonicalize(path).map_err(|e| t.error("localRoot", format!("cannot be resolved: {e}")))?;
        if !real.is_dir() {
            return Err(t.error("localRoot", "must be a directory"));
        }
        policy.local_root = Some(real);
    }
    let max = crate::args::MAX_SAFE_INTEGER as u64;
    policy.max_bytes = t.positive_int("maxBytes", max)?;
    policy.max_entries = t.positive_int("maxEntries", max)?;
    t.finish()?;
    Ok(policy)
}

/// Shortest accepted `ttlSeconds`: the TTL is moved forward about once a
/// minute, so anything shorter could expire an active sandbox.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(120);

fn parse_mode(f: &mut Fields<'_>, cwd: &str, suspend: SuspendPolicy) -> Result<Mode> {
    let pool = f.string("warmPool")?;
    let claim = f.object("claim")?;
    let sandbox = f.object("sandbox")?;
    match (pool, sandbox) {
        (Some(_), Some(_)) => Err(Error::config(
            "options `warmPool` and `sandbox` are exclusive: give `warmPool` to claim from a SandboxWarmPool, or `sandbox` to create Sandboxes directly",
        )),
        (None, None) => Err(Error::config(
            "give either `warmPool` (a SandboxWarmPool name) or `sandbox: { image, ... }` (create Sandboxes directly)",
        )),
        (Some(pool), None) => {
            validate::dns_subdomain(&pool).map_err(|e| f.error("warmPool", e))?;
            // The persistent volume check needs the pool's template: done by
            // the lifecycle on create (it needs the API server).
            modes::parse_warm_pool(pool, claim).map(Mode::WarmPool)
        }
        (None, Some(s)) => {
            if claim.is_some() {
                return Err(f.error("claim", "only applies with `warmPool`; in direct mode use `sandbox` options"));
            }
            let direct = modes::parse_direct(s, cwd)?;
            let persistent = direct.volume.as_ref().is_some_and(|v| validate::path_within(cwd, &v.path));
            if suspend == SuspendPolicy::Pod && !persistent {
                return Err(Error::config(format!(
                    "option `suspend: \"pod\"` deletes the pod on suspend, so files at cwd {cwd:?} would be lost: \
                     add `sandbox.volume: {{ size: \"10Gi\" }}` (a PVC mounted at cwd), or set `suspend: \"none\"` to keep the pod running"
                )));
            }
            Ok(Mode::Direct(direct))
        }
    }
}

#[cfg(test)]
mod tests;
