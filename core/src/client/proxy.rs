//! Which proxy, if any, the client goes through, as kubectl decides it.
//!
//! A kubeconfig cluster's `proxy-url` is used as given. Otherwise the usual
//! environment variables apply (`HTTPS_PROXY` for an `https://` server,
//! `HTTP_PROXY` for `http://`, `ALL_PROXY` for both, lowercase too), with
//! `NO_PROXY` as curl reads it (hyper-util's matcher, the one reqwest uses:
//! domains match their subdomains, IPs and CIDRs, `*`). Like Go's
//! `ProxyFromEnvironment` (so kubectl), a loopback server is never sent to an
//! environment proxy: a laptop with `HTTPS_PROXY` set still reaches its
//! local cluster directly.
//!
//! Supported: `http://` and `https://` proxies (HTTP CONNECT, with basic auth
//! from the URL's user info) and `socks5://` / `socks5h://` (DNS by the
//! proxy). An `https://` proxy's certificate is verified against the system's
//! roots, never the cluster's CA, and it is offered no client certificate
//! (`http.rs`). Proxy URLs are never printed with their user info.

use std::net::IpAddr;

use http::Uri;
use hyper_util::client::proxy::matcher::{Intercept, Matcher};

use crate::error::{Error, Result};

/// A proxy to tunnel through.
#[derive(Clone, Debug)]
pub(crate) struct Proxy(Intercept);

impl Proxy {
    /// The proxy's URL (with user info, if it has any).
    pub(crate) fn uri(&self) -> &Uri {
        self.0.uri()
    }

    /// `Proxy-Authorization` for HTTP proxies.
    pub(crate) fn basic_auth(&self) -> Option<&http::HeaderValue> {
        self.0.basic_auth()
    }

    /// User and password for SOCKS5.
    pub(crate) fn raw_auth(&self) -> Option<(&str, &str)> {
        self.0.raw_auth()
    }

    /// `scheme://host:port`, without the user info, for messages.
    pub(crate) fn display(&self) -> String {
        display(self.uri())
    }
}

/// The proxy for `server`: `explicit` (a kubeconfig `proxy-url`), else the
/// environment's through `env`, which reads a variable. `None`: connect
/// directly.
pub(crate) fn choose(
    explicit: Option<&str>,
    server: &Uri,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Proxy>> {
    if let Some(url) = explicit.filter(|u| !u.trim().is_empty()) {
        check_scheme(url, "the kubeconfig's proxy-url")?;
        let matcher = Matcher::builder().all(url.to_owned()).build();
        return Ok(matcher.intercept(server).map(Proxy));
    }
    if is_loopback(server) {
        return Ok(None);
    }
    let first = |names: &[&str]| names.iter().find_map(|n| env(n).filter(|v| !v.trim().is_empty()));
    let all = first(&["ALL_PROXY", "all_proxy"]);
    let http = first(&["HTTP_PROXY", "http_proxy"]).or_else(|| all.clone());
    let https = first(&["HTTPS_PROXY", "https_proxy"]).or(all);
    let relevant = if server.scheme_str() == Some("http") { &http } else { &https };
    let Some(url) = relevant else { return Ok(None) };
    check_scheme(url, "the proxy environment variable")?;
    let matcher = Matcher::builder()
        .http(http.clone().unwrap_or_default())
        .https(https.clone().unwrap_or_default())
        .no(first(&["NO_PROXY", "no_proxy"]).unwrap_or_default())
        .build();
    Ok(matcher.intercept(server).map(Proxy))
}

/// Rejects what no connector here can speak (and what does not parse).
fn check_scheme(url: &str, origin: &str) -> Result<()> {
    let full = if url.contains("://") { url.to_owned() } else { format!("http://{url}") };
    let uri: Uri = full.parse().map_err(|_| Error::config(format!("{origin} is not a URL")))?;
    match uri.scheme_str() {
        Some("http" | "https" | "socks5" | "socks5h") if uri.host().is_some() => Ok(()),
        _ => Err(Error::config(format!(
            "{origin} {} is not an http://, https://, socks5:// or socks5h:// proxy",
            display(&uri)
        ))),
    }
}

/// Whether `server` is on this host (`localhost`, `127.0.0.0/8`, `::1`).
pub(super) fn is_loopback(server: &Uri) -> bool {
    let Some(host) = server.host() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `scheme://host:port` without the user info, for messages.
pub(super) fn display(uri: &Uri) -> String {
    let host = uri.host().unwrap_or("?");
    match uri.port_u16() {
        Some(port) => format!("{}://{host}:{port}", uri.scheme_str().unwrap_or("http")),
        None => format!("{}://{host}", uri.scheme_str().unwrap_or("http")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.get(name).cloned()
    }

    fn chosen(explicit: Option<&str>, server: &str, vars: &[(&str, &str)]) -> Option<String> {
        choose(explicit, &server.parse().unwrap(), env(vars)).unwrap().map(|p| display(p.uri()))
    }

    #[test]
    fn the_kubeconfig_proxy_url_wins_and_applies_even_to_loopback() {
        let vars = [("HTTPS_PROXY", "http://env:3128")];
        assert_eq!(
            chosen(Some("http://cfg:8080"), "https://127.0.0.1:6443", &vars).as_deref(),
            Some("http://cfg:8080")
        );
        assert_eq!(chosen(Some("socks5h://s:1080"), "https://k8s:6443", &[]).as_deref(), Some("socks5h://s:1080"));
    }

    #[test]
    fn environment_proxies_by_scheme_with_no_proxy() {
        let vars =
            [("HTTPS_PROXY", "http://secure:3128"), ("http_proxy", "plain:3128"), ("NO_PROXY", ".internal,10.0.0.0/8")];
        assert_eq!(chosen(None, "https://api.example.com", &vars).as_deref(), Some("http://secure:3128"));
        assert_eq!(chosen(None, "http://api.example.com", &vars).as_deref(), Some("http://plain:3128"));
        assert_eq!(chosen(None, "https://k8s.internal:6443", &vars), None, "NO_PROXY domain");
        assert_eq!(chosen(None, "https://api.internal", &vars), None, "and its subdomains");
        assert_eq!(chosen(None, "https://10.1.2.3:6443", &vars), None, "NO_PROXY CIDR");
        assert_eq!(chosen(None, "https://11.1.2.3:6443", &vars).as_deref(), Some("http://secure:3128"));
        assert_eq!(chosen(None, "https://x", &[("ALL_PROXY", "socks5://a:1")]).as_deref(), Some("socks5://a:1"));
        assert_eq!(chosen(None, "https://x", &[("HTTPS_PROXY", "http://p:1"), ("no_proxy", "*")]), None);
        assert_eq!(chosen(None, "https://x", &[("HTTPS_PROXY", "  ")]), None, "empty is unset");
    }

    #[test]
    fn loopback_servers_never_use_an_environment_proxy() {
        let vars = [("HTTPS_PROXY", "http://p:3128")];
        for server in ["https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443", "https://127.1.2.3"] {
            assert_eq!(chosen(None, server, &vars), None, "{server}");
        }
    }

    #[test]
    fn credentials_become_auth_and_never_appear_in_messages() {
        let p = choose(Some("http://us%40er:p%3Ass@proxy:3128"), &"https://k8s".parse().unwrap(), env(&[]))
            .unwrap()
            .unwrap();
        assert!(p.basic_auth().is_some());
        assert_eq!(display(p.uri()), "http://proxy:3128");
        let e = choose(Some("ftp://user:secret@proxy:21"), &"https://k8s".parse().unwrap(), env(&[])).unwrap_err();
        assert!(e.message.contains("ftp://proxy:21") && !e.message.contains("secret"), "{}", e.message);
        let e = choose(None, &"https://k8s".parse().unwrap(), env(&[("HTTPS_PROXY", "http://a b")])).unwrap_err();
        assert!(e.message.contains("not a URL"), "{}", e.message);
    }
}
