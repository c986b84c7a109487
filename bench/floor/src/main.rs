//! The floor: pods/exec through kube-rs and nothing else (no wrapper script,
//! no JS, no copies beyond kube's own), to show what the API server and node
//! path cost by themselves.
//!
//! `bench-floor <pod> <container> <op> [args]` with KUBECONFIG from the
//! environment and the kubeconfig's namespace; prints one JSON line:
//!   exec-seq N          `sh -c true` N times in a row   {"ms":[...]}
//!   exec-conc N         N at once                       {"ms":[...],"wallMs":..,"failed":..,"error":..}
//!                       (latencies of those that succeeded; fails if none did)
//!   stream BYTES        `head -c BYTES /dev/zero`       {"ms":..,"bytes":..}
//!   write PATH BYTES    stdin → `sh -c 'cat > "$1"'`    {"ms":..,"bytes":..}
//!   read PATH           `cat -- PATH`                   {"ms":..,"bytes":..}
//!   claim-exec POOL N PREFIX   N times in a row: a SandboxClaim `PREFIX-i`
//!                       of warm pool POOL, a watch until it is Ready, then
//!                       `sh -c true` in its pod (after one untimed exec into
//!                       <pod>)                          {"ms":[...],"claims":[...]}
//! Single-operation lines also carry cpuMs and rssBaseKb / rssPeakKb (VmRSS
//! before, VmHWM after, with the high-water mark reset just before the
//! operation).
//! The client sets TCP_NODELAY (see `client`); FLOOR_KUBE_DEFAULT=1 uses
//! kube's default client instead.

use std::error::Error;
use std::time::Instant;

use futures::TryStreamExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, AttachParams, DynamicObject, GroupVersionKind, PostParams, WatchEvent, WatchParams};
use kube::client::ConfigExt;
use kube::Client;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tower::{BoxError, ServiceBuilder};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;
const BUF: usize = 64 * 1024;

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pod, container, op, rest @ ..] = args.as_slice() else {
        return Err("usage: bench-floor <pod> <container> <op> [args]".into());
    };
    let kube = client(std::env::var_os("FLOOR_KUBE_DEFAULT").is_none()).await?;
    let pods: Api<Pod> = Api::default_namespaced(kube.clone());
    let x = Exec { pods, pod: pod.clone(), container: container.clone() };
    let arg = |i: usize| rest.get(i).cloned().ok_or("missing argument");
    let line = match op.as_str() {
        "exec-seq" => {
            let mut ms = Vec::new();
            for _ in 0..arg(0)?.parse::<usize>()? {
                let t = Instant::now();
                x.run(&["sh", "-c", "true"], None).await?;
                ms.push(elapsed(t));
            }
            format!("{{\"ms\":{ms:?}}}")
        }
        "exec-conc" => {
            let t = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..arg(0)?.parse::<usize>()? {
                let x = x.clone();
                set.spawn(async move {
                    let t = Instant::now();
                    x.run(&["sh", "-c", "true"], None).await.map(|_| elapsed(t))
                });
            }
            let (mut ms, mut failed, mut error) = (Vec::new(), 0, None);
            while let Some(r) = set.join_next().await {
                match r? {
                    Ok(v) => ms.push(v),
                    Err(e) => {
                        failed += 1;
                        error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            let wall = elapsed(t);
            if ms.is_empty() {
                return Err(error.unwrap_or_default().into());
            }
            let error = serde_json::to_string(&error)?;
            format!("{{\"ms\":{ms:?},\"wallMs\":{wall},\"failed\":{failed},\"error\":{error}}}")
        }
        "stream" => {
            let n = arg(0)?;
            measured(|| async { x.run(&["head", "-c", &n, "/dev/zero"], None).await }).await?
        }
        "write" => {
            let (path, n) = (arg(0)?, arg(1)?.parse::<usize>()?);
            let data = pattern(n);
            measured(|| async {
                x.run(&["sh", "-c", "cat > \"$1\"", "sh", &path], Some(&data)).await.map(|_| n as u64)
            })
            .await?
        }
        "read" => {
            let path = arg(0)?;
            measured(|| async { x.run(&["cat", "--", &path], None).await }).await?
        }
        "claim-exec" => {
            let (pool, n, prefix) = (arg(0)?, arg(1)?.parse::<usize>()?, arg(2)?);
            x.run(&["sh", "-c", "true"], None).await?; // warm-up: the connection
            let gvk = GroupVersionKind::gvk("extensions.agents.x-k8s.io", "v1beta1", "SandboxClaim");
            let ar = ApiResource::from_gvk_with_plural(&gvk, "sandboxclaims");
            let claims: Api<DynamicObject> = Api::default_namespaced_with(kube.clone(), &ar);
            let (mut ms, mut names) = (Vec::new(), Vec::new());
            for i in 0..n {
                let name = format!("{prefix}-{i}");
                let t = Instant::now();
                let mut claim = DynamicObject::new(&name, &ar);
                claim.data = serde_json::json!({ "spec": { "warmPoolRef": { "name": pool } } });
                let made = claims.create(&PostParams::default(), &claim).await?;
                let sandbox =
                    ready_sandbox(&claims, &name, made.metadata.resource_version.as_deref().unwrap_or("0")).await?;
                let y = Exec { pod: sandbox, ..x.clone() };
                y.run(&["sh", "-c", "true"], None).await?;
                ms.push(elapsed(t));
                names.push(name);
            }
            format!("{{\"ms\":{ms:?},\"claims\":{}}}", serde_json::to_string(&names)?)
        }
        other => return Err(format!("unknown op {other}").into()),
    };
    println!("{line}");
    Ok(())
}

/// kube's default client leaves Nagle on (hyper's `HttpConnector` default);
/// the floor sets TCP_NODELAY, as Go, Node and kubectl do.
/// `FLOOR_KUBE_DEFAULT=1` keeps kube's default stack for comparison.
async fn client(nodelay: bool) -> Res<Client> {
    let config = kube::Config::infer().await?;
    if !nodelay {
        return Ok(Client::try_from(config)?);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(BoxError::from)
        .service(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https));
    Ok(Client::new(service, config.default_namespace))
}

#[derive(Clone)]
struct Exec {
    pods: Api<Pod>,
    pod: String,
    container: String,
}

impl Exec {
    /// Runs argv, feeds `stdin` then half-closes it (v5 CLOSE), counts stdout
    /// bytes, and fails unless the status frame says the command exited 0.
    async fn run(&self, argv: &[&str], stdin: Option<&[u8]>) -> Res<u64> {
        let ap = AttachParams::default()
            .container(self.container.clone())
            .stdin(stdin.is_some())
            .max_stdin_buf_size(BUF)
            .max_stdout_buf_size(BUF)
            .max_stderr_buf_size(BUF);
        let mut p = self.pods.exec(&self.pod, argv.to_vec(), &ap).await?;
        let status = p.take_status().ok_or("no status")?;
        let (mut out, mut err, input) = (p.stdout().ok_or("no stdout")?, p.stderr().ok_or("no stderr")?, p.stdin());
        let feed = async move {
            if let (Some(mut w), Some(data)) = (input, stdin) {
                for chunk in data.chunks(BUF) {
                    w.write_all(chunk).await?;
                }
                w.shutdown().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        let (n, _, ()) = tokio::try_join!(count(&mut out), count(&mut err), feed)?;
        let st = status.await.ok_or("connection ended without a status")?;
        p.join().await.map_err(|e| e.to_string())?;
        if st.status.as_deref() != Some("Success") {
            return Err(format!("{argv:?} failed: {:?}", st.message).into());
        }
        Ok(n)
    }
}

/// Watches claim `name` from resource version `rv` until it is Ready; its Sandbox's name (= its pod's).
async fn ready_sandbox(claims: &Api<DynamicObject>, name: &str, rv: &str) -> Res<String> {
    let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(120);
    let mut events = Box::pin(claims.watch(&wp, rv).await?);
    while let Some(ev) = events.try_next().await? {
        match ev {
            WatchEvent::Added(c) | WatchEvent::Modified(c) => {
                if let Some(sandbox) = ready(&c) {
                    return Ok(sandbox);
                }
            }
            WatchEvent::Error(e) => return Err(format!("watch {name}: {}", e.message).into()),
            _ => {}
        }
    }
    Err(format!("claim {name} not Ready when the watch ended").into())
}

fn ready(claim: &DynamicObject) -> Option<String> {
    let status = claim.data.get("status")?;
    let conditions = status.get("conditions")?.as_array()?;
    conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(())?;
    Some(status.get("sandbox")?.get("name")?.as_str()?.to_owned())
}

async fn count(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<u64> {
    let mut buf = vec![0u8; BUF];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf).await? {
            0 => return Ok(n),
            k => n += k as u64,
        }
    }
}

/// Times one operation returning a byte count, with the RSS high-water mark
/// reset just before it.
async fn measured<F, Fut>(op: F) -> Res<String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Res<u64>>,
{
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let base = status_kb("VmRSS");
    let (t, cpu) = (Instant::now(), cpu_ms());
    let bytes = op().await?;
    let (ms, cpu) = (elapsed(t), cpu_ms() - cpu);
    let peak = status_kb("VmHWM");
    Ok(format!("{{\"ms\":{ms},\"cpuMs\":{cpu},\"bytes\":{bytes},\"rssBaseKb\":{base},\"rssPeakKb\":{peak}}}"))
}

fn elapsed(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// User + system CPU time of this process (all threads), ms; 10 ms ticks.
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<f64> = stat.rsplit(") ").next().unwrap_or("").split(' ').map(|x| x.parse().unwrap_or(0.0)).collect();
    f.get(11).zip(f.get(12)).map_or(0.0, |(u, s)| (u + s) * 10.0)
}

fn status_kb(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

/// Deterministic binary content (all byte values).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}
