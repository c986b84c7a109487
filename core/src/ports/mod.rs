//! Ports of a sandbox: what listens ([`listening_ports`], read from the
//! kernel's `/proc/net/tcp{,6}` so the image needs no tool), and the checks
//! of a port argument. Forwarding itself is the exec runtime's
//! ([`crate::exec::Runtime::port_forward`]): it shares the WebSocket session.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::Bytes;

use crate::error::{quoted, Error, ErrorCode, Result};
use crate::exec::wrapper::script_argv;
use crate::exec::{Call, ExecEngine, ExecTarget, Program, RunOptions, ScriptOutput};

/// Prints `/proc/net/tcp` then `/proc/net/tcp6` (when IPv6 is on).
const LISTENING: &str = in_pod_script!("ports/sh/listening.sh");

/// Most bytes of socket tables read: 150 bytes a socket, so about 100 000
/// sockets. A sandbox that opens more gets `too_large`, not host memory.
const MAX_TABLE_BYTES: usize = 16 * 1024 * 1024;
/// Most listening sockets (distinct port and address) listed. A forged
/// table of minimal rows would otherwise give 750 000 of them from 16 MiB,
/// each an object on the JS thread every actor shares.
pub(crate) const MAX_LISTENING: usize = 4096;

/// A TCP port a sandbox listens on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListeningPort {
    /// The port.
    pub port: u16,
    /// The address it is bound to (`0.0.0.0` or `::` for every address).
    pub address: String,
    /// `IPv4` or `IPv6`.
    pub family: &'static str,
    /// Bound to a loopback address only: reachable through port-forward
    /// (which connects to localhost) but not through a Service.
    pub loopback_only: bool,
}

/// Where a server in the sandbox is reached inside the cluster: through the
/// Sandbox's headless Service, whose DNS name resolves to the pod's IP (so
/// every port of the pod answers, listed in the Service or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceUrl {
    /// `http://<host>:<port>`.
    pub url: String,
    /// The Service's cluster DNS name (the Sandbox's `status.serviceFQDN`).
    pub host: String,
    /// The port.
    pub port: u16,
}

/// The in-cluster URL of `port` through the Service named `service_fqdn`;
/// `unsupported` naming the fix when the sandbox has no Service (connect
/// reads an empty `serviceFQDN` as none).
pub(crate) fn service_url(sandbox: &str, service_fqdn: Option<&str>, port: u16) -> Result<ServiceUrl> {
    let Some(host) = service_fqdn else {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "sandbox {sandbox} has no Service, so no URL reaches it: set `sandbox.service: true` (direct mode) \
                 or `service: true` in the warm pool's SandboxTemplate, or use sandbox.forward()/fetch()"
            ),
        ));
    };
    Ok(ServiceUrl { url: format!("http://{host}:{port}"), host: host.to_owned(), port })
}

/// A port argument: a whole number in 1..=65535, else `invalid_request`.
pub fn port(name: &str, value: f64) -> Result<u16> {
    if value.fract() == 0.0 && (1.0..=65535.0).contains(&value) {
        Ok(value as u16)
    } else {
        Err(Error::invalid_request(format!(
            "{name} must be an integer from 1 to 65535, got {value}; nothing was opened"
        )))
    }
}

/// The listening TCP sockets in `target`'s network, by port then address.
pub(crate) async fn listening_ports(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
) -> Result<Vec<ListeningPort>> {
    let mut table = Vec::new();
    let mut sink = ScriptOutput::new(|data: Bytes| {
        if table.len() + data.len() > MAX_TABLE_BYTES {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!("the sandbox's TCP socket tables exceed {MAX_TABLE_BYTES} bytes"),
            ));
        }
        table.extend_from_slice(&data);
        Ok(())
    });
    let program = Program::Argv(script_argv(LISTENING, []));
    let exit = engine.run(target, program, RunOptions::call(call, None), &mut sink).await?;
    // Whoever controls the sandbox's `cat` writes this stderr: quoted
    // escaped, never raw.
    match exit.status("reading /proc/net/tcp")? {
        0 => parse_tables(&table),
        code => Err(Error::internal(format!(
            "reading /proc/net/tcp failed (exit {code}): {}",
            quoted(String::from_utf8_lossy(&sink.into_stderr().into_inner()).trim())
        ))),
    }
}

/// The LISTEN rows (state `0A`) of `/proc/net/tcp` and `tcp6` text, one
/// entry per port and address; rows that do not parse are skipped (the
/// header, and anything forged). More than [`MAX_LISTENING`] entries are
/// `too_large`.
fn parse_tables(table: &[u8]) -> Result<Vec<ListeningPort>> {
    let mut found = BTreeSet::new();
    for line in table.split(|b| *b == b'\n') {
        let mut fields = std::str::from_utf8(line).unwrap_or_default().split_whitespace();
        let (Some(_slot), Some(local), Some(_remote), Some("0A")) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if let Some(port) = parse_local(local) {
            found.insert(port);
            if found.len() > MAX_LISTENING {
                return Err(Error::new(
                    ErrorCode::TooLarge,
                    format!("the sandbox has more than {MAX_LISTENING} listening TCP sockets; none are listed"),
                ));
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// `ADDR:PORT` in the kernel's hex: the address as 32-bit words printed as
/// numbers of the kernel's byte order (one word for IPv4, four for IPv6;
/// little endian on the x86-64 and arm64 nodes Kubernetes runs on), the port
/// as a number.
fn parse_local(local: &str) -> Option<ListeningPort> {
    let (addr, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok().filter(|p| *p != 0)?;
    if addr.len() % 8 != 0 {
        return None;
    }
    let mut bytes = Vec::with_capacity(16);
    for i in (0..addr.len()).step_by(8) {
        bytes.extend(u32::from_str_radix(addr.get(i..i + 8)?, 16).ok()?.to_le_bytes());
    }
    let (address, family, loopback_only) = match <[u8; 4]>::try_from(bytes.as_slice()) {
        Ok(v4) => {
            let ip = Ipv4Addr::from(v4);
            (ip.to_string(), "IPv4", ip.is_loopback())
        }
        Err(_) => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(bytes.as_slice()).ok()?);
            let loopback = ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback());
            (ip.to_string(), "IPv6", loopback)
        }
    };
    Some(ListeningPort { port, address, family, loopback_only })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_gives_a_url_and_none_names_the_fix() {
        let url = service_url("sb", Some("sb.ns.svc.cluster.local"), 3000).unwrap();
        assert_eq!(url.url, "http://sb.ns.svc.cluster.local:3000");
        assert_eq!((url.host.as_str(), url.port), ("sb.ns.svc.cluster.local", 3000));
        let e = service_url("sb", None, 3000).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("service: true"), "{}", e.message);
    }

    #[test]
    fn listen_rows_parse_and_others_are_skipped() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n\
            1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 2 1\n\
            2: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 3 1\n\
            3: ZZZZZZZZ:0050 00000000:0000 0A\n\
            4: 0100007F:0000 00000000:0000 0A\n\
            0: 00000000000000000000000001000000:0BB8 00000000000000000000000000000000:0000 0A 0\n\
            1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 0\n\
            2: 0000000000000000FFFF00000100007F:0BB9 00000000000000000000000000000000:0000 0A 0\n";
        let got: Vec<_> = parse_tables(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|p| (p.port, p.address, p.family, p.loopback_only))
            .collect();
        assert_eq!(
            got,
            vec![
                (80, "0.0.0.0".to_owned(), "IPv4", false),
                (80, "::".to_owned(), "IPv6", false),
                (3000, "::1".to_owned(), "IPv6", true),
                (3001, "::ffff:127.0.0.1".to_owned(), "IPv6", true),
                (8080, "127.0.0.1".to_owned(), "IPv4", true),
            ]
        );
    }

    #[test]
    fn a_forged_table_is_bounded_and_its_bad_rows_skipped() {
        let row = |i: usize| format!("{i}: 0100007F:{:04X} 00000000:0000 0A 0\n", i + 1);
        // Duplicates count once; rows that are not text are skipped.
        let mut table: Vec<u8> = (0..MAX_LISTENING).flat_map(|i| [row(i), row(i)]).collect::<String>().into();
        table.extend_from_slice(b"9: \xff\x00:0050 00000000:0000 0A\n\0\0\0\n");
        assert_eq!(parse_tables(&table).unwrap().len(), MAX_LISTENING);
        table.extend_from_slice(row(MAX_LISTENING).as_bytes());
        let e = parse_tables(&table).unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert!(e.message.contains("4096"), "{e}");
    }

    #[test]
    fn ports_are_whole_numbers_from_1_to_65535() {
        assert_eq!(port("port", 1.0).unwrap(), 1);
        assert_eq!(port("port", 65535.0).unwrap(), 65535);
        for bad in [0.0, -1.0, 65536.0, 1.5, f64::NAN, f64::INFINITY] {
            assert_eq!(port("port", bad).unwrap_err().code, ErrorCode::InvalidRequest, "{bad}");
        }
    }
}
