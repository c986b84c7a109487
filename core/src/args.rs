//! The numbers a caller passes to sandbox calls, checked the same way
//! everywhere. They arrive as JavaScript numbers (`f64`): the binding hands
//! them over unconverted, so every range and integer check lives here.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Longest timeout accepted, in ms: `setTimeout`'s own limit (24.8 days).
pub(crate) const MAX_TIMEOUT_MS: f64 = 2_147_483_647.0;
/// Largest count accepted: JavaScript's largest exact integer.
pub(crate) const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A timeout in ms: absent or 0 → none; otherwise a number in
/// (0, `MAX_TIMEOUT_MS`]. `name` is the option's name in the error.
pub fn timeout_ms(name: &str, value: Option<f64>) -> Result<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(ms) if ms > 0.0 && ms <= MAX_TIMEOUT_MS => Ok(Some(Duration::from_secs_f64(ms / 1000.0))),
        Some(ms) => Err(Error::invalid_request(format!(
            "{name} must be a number of milliseconds from 0 (none) to {MAX_TIMEOUT_MS} (24.8 days), got {ms}"
        ))),
    }
}

/// A byte count: absent → `default`; otherwise a whole number in
/// [0, `MAX_SAFE_INTEGER`].
pub fn byte_count(name: &str, value: Option<f64>, default: u64) -> Result<u64> {
    match value {
        None => Ok(default),
        Some(v) if whole(v) => Ok(v as u64),
        Some(v) => Err(Error::invalid_request(format!(
            "{name} must be a whole number of bytes from 0 to {MAX_SAFE_INTEGER}, got {v}"
        ))),
    }
}

/// Which bytes of a file to read: from `offset`, at most `length` of them
/// (`None`: to the end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte (0: the start).
    pub offset: u64,
    /// How many bytes at most; `None`: up to the end of the file.
    pub length: Option<u64>,
}

/// `readFile`'s `offset` and `length`: absent, or whole numbers in
/// [0, `MAX_SAFE_INTEGER`].
pub fn byte_range(offset: Option<f64>, length: Option<f64>) -> Result<ByteRange> {
    let length = match length {
        None => None,
        Some(v) => Some(byte_count("length", Some(v), 0)?),
    };
    Ok(ByteRange { offset: byte_count("offset", offset, 0)?, length })
}

/// Largest number of columns or rows of a terminal (agentOS's
/// `MAX_TERMINAL_DIMENSION`).
pub(crate) const MAX_TERMINAL_DIMENSION: u16 = 4096;

/// A terminal's columns or rows: absent → `default`; otherwise a whole
/// number in [1, `MAX_TERMINAL_DIMENSION`].
pub fn terminal_dimension(name: &str, value: Option<f64>, default: u16) -> Result<u16> {
    match value {
        None => Ok(default),
        Some(v) if whole(v) && (1.0..=f64::from(MAX_TERMINAL_DIMENSION)).contains(&v) => Ok(v as u16),
        Some(v) => Err(Error::invalid_request(format!(
            "{name} must be a whole number from 1 to {MAX_TERMINAL_DIMENSION}, got {v}"
        ))),
    }
}

/// An output sequence number to read after: absent, or a whole number in
/// [0, `MAX_SAFE_INTEGER`].
pub fn sequence(name: &str, value: Option<f64>) -> Result<Option<u64>> {
    match value {
        None => Ok(None),
        Some(v) if whole(v) => Ok(Some(v as u64)),
        Some(v) => Err(Error::invalid_request(format!(
            "{name} must be the sequence of a chunk (a non-negative integer), got {v}"
        ))),
    }
}

/// Longest `usage()` CPU sample, in ms.
pub(crate) const MAX_SAMPLE_MS: f64 = 10_000.0;

/// `usage()`'s `sampleMs`: absent → no sample; otherwise a whole number of
/// ms in [1, `MAX_SAMPLE_MS`].
pub fn sample_ms(value: Option<f64>) -> Result<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(ms) if (1.0..=MAX_SAMPLE_MS).contains(&ms) && ms.fract() == 0.0 => {
            Ok(Some(Duration::from_millis(ms as u64)))
        }
        Some(ms) => Err(Error::invalid_request(format!(
            "sampleMs must be a whole number of milliseconds from 1 to {MAX_SAMPLE_MS}, got {ms}; nothing was run"
        ))),
    }
}

/// What one call may ask of a sandbox: the provider's bounds on what a tool
/// call (a model's choice) can make the host wait for or hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Timeout of file operations and process calls that do not set one.
    pub call_timeout: Duration,
    /// Largest `timeoutMs` a command or process may ask for.
    pub max_timeout: Duration,
    /// Largest `maxOutputBytes` of an exec (each result buffer).
    pub max_output_bytes: u64,
    /// Largest `maxBytes` of a `readFile`.
    pub max_read_bytes: u64,
}

impl Limits {
    /// Most bytes a Node.js `Buffer` holds everywhere Node 20+ runs (2^32 − 1
    /// on 32-bit-length builds): the ceiling of every byte limit.
    pub const BUFFER_MAX: u64 = u32::MAX as u64;
}

impl Default for Limits {
    /// Calls time out after 2 minutes; a call may ask for a 24.8-day
    /// timeout, 1 GiB of exec output per stream and a 2 GiB `readFile`.
    fn default() -> Self {
        Limits {
            call_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_millis(MAX_TIMEOUT_MS as u64),
            max_output_bytes: 1 << 30,
            max_read_bytes: 2 << 30,
        }
    }
}

/// NaN and the infinities fail the range check.
fn whole(v: f64) -> bool {
    (0.0..=MAX_SAFE_INTEGER).contains(&v) && v.fract() == 0.0
}

/// Caps of the port-forward tunnels of one engine (see
/// `ExecEngine::port_forward`; option values, parsed by `config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelLimits {
    /// Tunnels open at once (`maxTunnels`).
    pub max: usize,
    /// Of them, to one sandbox (`maxTunnelsPerSandbox`).
    pub per_sandbox: usize,
    /// A tunnel that moves no byte either way this long is closed
    /// (`tunnelIdleTimeoutMs`).
    pub idle: Duration,
}

impl Default for TunnelLimits {
    /// 256 tunnels, 32 to one sandbox (a page's assets through a `forward`
    /// in parallel), closed after 10 idle minutes.
    fn default() -> Self {
        TunnelLimits { max: 256, per_sandbox: 32, idle: Duration::from_secs(600) }
    }
}

/// The provider's hold on transfers (option `transfers`): where the local
/// paths of `upload` and `download` may be, and the most a call may ask
/// (option values, parsed by `config`; the rules are `transfer::Policy`'s).
#[derive(Debug, Clone, Default)]
pub(crate) struct TransferPolicy {
    /// Canonical. Set, local sources and targets must resolve inside it.
    pub(crate) local_root: Option<PathBuf>,
    /// The largest `maxBytes` a call may ask (and the default when lower).
    pub(crate) max_bytes: Option<u64>,
    /// The largest `maxEntries` a call may ask (and the default when lower).
    pub(crate) max_entries: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_dimensions() {
        assert_eq!(terminal_dimension("cols", None, 80).unwrap(), 80);
        assert_eq!(terminal_dimension("cols", Some(1.0), 80).unwrap(), 1);
        assert_eq!(terminal_dimension("cols", Some(4096.0), 80).unwrap(), 4096);
        for bad in [0.0, -1.0, 4097.0, 1e9, 80.5, f64::NAN, f64::INFINITY] {
            let e = terminal_dimension("rows", Some(bad), 24).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidRequest);
            assert!(e.message.starts_with("rows must be a whole number from 1 to 4096"), "{bad}: {e}");
        }
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout_ms("t", None).unwrap(), None);
        assert_eq!(timeout_ms("t", Some(0.0)).unwrap(), None);
        assert_eq!(timeout_ms("t", Some(1.5)).unwrap(), Some(Duration::from_micros(1500)));
        assert_eq!(timeout_ms("t", Some(MAX_TIMEOUT_MS)).unwrap(), Some(Duration::from_millis(2_147_483_647)));
        for bad in [-1.0, MAX_TIMEOUT_MS + 1.0, f64::NAN, f64::INFINITY, -0.5] {
            let e = timeout_ms("timeoutMs", Some(bad)).unwrap_err();
            assert!(e.message.starts_with("timeoutMs must be"), "{bad}: {e}");
        }
    }

    #[test]
    fn samples() {
        assert_eq!(sample_ms(None).unwrap(), None);
        assert_eq!(sample_ms(Some(1.0)).unwrap(), Some(Duration::from_millis(1)));
        assert_eq!(sample_ms(Some(MAX_SAMPLE_MS)).unwrap(), Some(Duration::from_secs(10)));
        for bad in [0.0, -1.0, 1.5, MAX_SAMPLE_MS + 1.0, 1e300, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(sample_ms(Some(bad)).unwrap_err().message.starts_with("sampleMs must be"), "{bad}");
        }
    }

    #[test]
    fn counts_and_sequences() {
        assert_eq!(byte_count("b", None, 7).unwrap(), 7);
        assert_eq!(byte_count("b", Some(0.0), 7).unwrap(), 0);
        assert_eq!(byte_count("b", Some(MAX_SAFE_INTEGER), 7).unwrap(), 9_007_199_254_740_991);
        assert_eq!(sequence("after", Some(3.0)).unwrap(), Some(3));
        for bad in [-1.0, 1.5, MAX_SAFE_INTEGER * 2.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(byte_count("maxBytes", Some(bad), 0).unwrap_err().message.starts_with("maxBytes must be"));
            assert!(sequence("after", Some(bad)).unwrap_err().message.starts_with("after must be"));
        }
    }
}
