//! What a sandbox uses: CPU, memory, pids and disk, read in one exec from the
//! container's own cgroup files (v2, or v1 where the node runs it) and
//! `stat -f` of the filesystem holding cwd. Never `/proc/meminfo` or
//! `/proc/stat`: in a container they describe the node. The in-pod script
//! only prints files (`sh/usage.sh`); every number is parsed here
//! (`parse.rs`), none sizes anything.

mod parse;

use std::time::Duration;

use bytes::Bytes;

pub use parse::Source;

use crate::error::{Error, ErrorCode, Result};
use crate::exec::output::HeadBuffer;
use crate::exec::wrapper::script_argv;
use crate::exec::{script_status, Call, ExecEngine, ExecTarget, Exit, Program, RunOptions, ScriptOutput};
use crate::script_exit::MISSING_TOOL;
use parse::{cfs_quota, cpu_max, keyed, max_or_number, number, v1_memory_limit, Reading};

/// `$1` directory of the disk figures, `$2` seconds between two CPU
/// readings (empty: one). Prints the cgroup version and readings of files
/// (see the script); exit [`MISSING_TOOL`] with the tool's name.
pub(crate) const USAGE: &str = in_pod_script!("usage/sh/usage.sh");

/// Most bytes the script may print (its files are a few KiB).
const MAX_OUTPUT: usize = 64 * 1024;

/// What a sandbox uses, as `usage()` returns it. Counters are cumulative
/// since the container started.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    /// When the files were read, ms since the epoch (the sandbox's clock).
    pub timestamp_ms: f64,
    /// Which cgroup version the numbers come from.
    pub source: Source,
    /// CPU time used (v2 `cpu.stat` `usage_usec`, v1 `cpuacct.usage`).
    pub cpu_seconds: f64,
    /// CPU limit in cores (quota / period); `None`: no limit.
    pub cpu_limit_cores: Option<f64>,
    /// CPU use over the sample, in % of the limit (of one core without a
    /// limit); only when a sample was asked for.
    pub cpu_percent: Option<f64>,
    /// Memory charged, page cache included (v2 `memory.current`, v1
    /// `memory.usage_in_bytes`).
    pub memory_bytes: u64,
    /// `memory_bytes` less inactive file pages, as the kubelet computes the
    /// working set (what eviction and `kubectl top` use); `memory_bytes`
    /// where there is no `memory.stat` (gVisor: its page cache is the
    /// sandbox's own memory, so all of it is the working set).
    pub memory_working_set_bytes: u64,
    /// Memory limit; `None`: no limit.
    pub memory_limit_bytes: Option<u64>,
    /// Processes the kernel's OOM killer ended in this cgroup; `None` where
    /// the runtime does not count them (gVisor's cgroupfs has neither
    /// `memory.events` nor `memory.oom_control`).
    pub oom_kills: Option<u64>,
    /// Tasks (processes and threads) now.
    pub pids: u64,
    /// Pid limit; `None`: no limit.
    pub pids_limit: Option<u64>,
    /// Bytes used and total of the filesystem holding cwd; `None` when
    /// `stat -f` could not report it (cwd gone).
    pub disk: Option<(u64, u64)>,
}

/// Reads the sandbox's usage in one exec; with `sample`, CPU twice that far
/// apart, for `cpu_percent`. `cwd` is the directory whose filesystem is
/// reported. `unsupported` when the image lacks a tool or the runtime shows no
/// cgroup file the result needs (the message names it); `internal`, naming
/// the file, when one holds what no kernel writes.
pub(crate) async fn usage(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    cwd: &str,
    sample: Option<Duration>,
) -> Result<Usage> {
    let wait = sample.map(|d| format!("{}.{:03}", d.as_secs(), d.subsec_millis())).unwrap_or_default();
    let mut out = Vec::new();
    let mut sink = ScriptOutput::new(|chunk: Bytes| {
        if out.len() + chunk.len() > MAX_OUTPUT {
            return Err(Error::internal(format!("usage: the sandbox printed over {MAX_OUTPUT} bytes of cgroup files")));
        }
        out.extend_from_slice(&chunk);
        Ok(())
    });
    let program = Program::Argv(script_argv(USAGE, [cwd.to_owned(), wait]));
    let exit = engine.run(target, program, RunOptions::call(call, None), &mut sink).await?;
    let stderr = sink.into_stderr();
    outcome(exit, &String::from_utf8_lossy(&out), stderr)
}

/// The result of the script's run: how it ended, its output and stderr.
fn outcome(exit: Exit, out: &str, stderr: HeadBuffer) -> Result<Usage> {
    match exit.exit_code {
        Some(MISSING_TOOL) => Err(Error::new(
            ErrorCode::Unsupported,
            format!("usage: the sandbox's image has no `{}`, which usage() needs (coreutils)", out.trim()),
        )),
        _ => {
            script_status(exit, "the usage script", stderr)?;
            let (source, readings) = parse::parse_output(out)?;
            assemble(source, &readings)
        }
    }
}

/// The result from the readings: the last for everything, the first too for
/// the CPU sample when there are two.
fn assemble(source: Source, readings: &[Reading]) -> Result<Usage> {
    let last = readings.last().expect("parse_output gives at least one reading");
    let cpu_seconds = |r: &Reading| -> Result<f64> {
        Ok(match source {
            Source::Cgroup2 => {
                let (path, content) = r.required("cpu.stat")?;
                keyed(path, content, "usage_usec")? as f64 / 1e6
            }
            Source::Cgroup1 => {
                let (path, content) = r.required("cpuacct.usage")?;
                number(path, content)? as f64 / 1e9
            }
        })
    };
    let (memory, inactive_key, events) = match source {
        Source::Cgroup2 => (last.required("memory.current")?, "inactive_file", "memory.events"),
        // The hierarchy's total, as the kubelet reads v1.
        Source::Cgroup1 => (last.required("memory.usage_in_bytes")?, "total_inactive_file", "memory.oom_control"),
    };
    let memory_bytes = number(memory.0, memory.1)?;
    let inactive = last.optional("memory.stat").map(|(p, c)| keyed(p, c, inactive_key)).transpose()?.unwrap_or(0);
    let oom_kills = last.optional(events).map(|(p, c)| keyed(p, c, "oom_kill")).transpose()?;
    let (pids_path, pids) = last.required("pids.current")?;
    let pids = number(pids_path, pids)?;
    let pids_limit = last.optional("pids.max").map(|(p, c)| max_or_number(p, c)).transpose()?.flatten();
    let (memory_limit_bytes, cpu_limit_cores) = match source {
        Source::Cgroup2 => (
            last.optional("memory.max").map(|(p, c)| max_or_number(p, c)).transpose()?.flatten(),
            last.optional("cpu.max").map(|(p, c)| cpu_max(p, c)).transpose()?.flatten(),
        ),
        Source::Cgroup1 => (
            last.optional("memory.limit_in_bytes").map(|(p, c)| v1_memory_limit(p, c)).transpose()?.flatten(),
            match (last.optional("cpu.cfs_quota_us"), last.optional("cpu.cfs_period_us")) {
                (Some((qp, q)), Some((pp, p))) => cfs_quota(qp, q, pp, p)?,
                _ => None,
            },
        ),
    };
    let cpu = cpu_seconds(last)?;
    let time_ns = last.time_ns()?;
    let cpu_percent = match readings {
        [first, _, ..] => {
            let elapsed = time_ns.saturating_sub(first.time_ns()?).max(1) as f64 / 1e9;
            let used = (cpu - cpu_seconds(first)?).max(0.0);
            Some(used / elapsed / cpu_limit_cores.unwrap_or(1.0) * 100.0)
        }
        _ => None,
    };
    let disk = match last.optional("disk") {
        Some((_, content)) => Some(parse::disk(content)?),
        None => None,
    };
    Ok(Usage {
        timestamp_ms: (time_ns / 1_000_000) as f64,
        source,
        cpu_seconds: cpu,
        cpu_limit_cores,
        cpu_percent,
        memory_bytes,
        memory_working_set_bytes: memory_bytes.saturating_sub(inactive),
        memory_limit_bytes,
        oom_kills,
        pids,
        pids_limit,
        disk,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_of(out: &str) -> Result<Usage> {
        outcome(Exit::code(0), out, HeadBuffer::new(0))
    }

    /// What `usage.sh` printed in a pod of the local node (v1), sampled.
    const V1: &str = "cgroup1\n@@1796213711514460870\n@/sys/fs/cgroup/cpuacct/cpuacct.usage\n3000000000\n\
        @@1796213712514460870\n@/sys/fs/cgroup/cpuacct/cpuacct.usage\n3500000000\n\
        @/sys/fs/cgroup/cpu/cpu.cfs_quota_us\n-1\n@/sys/fs/cgroup/cpu/cpu.cfs_period_us\n100000\n\
        @/sys/fs/cgroup/memory/memory.usage_in_bytes\n300000000\n\
        @/sys/fs/cgroup/memory/memory.limit_in_bytes\n2147483648\n\
        @/sys/fs/cgroup/memory/memory.stat\ncache 100\ninactive_file 7\ntotal_inactive_file 100000000\n\
        @/sys/fs/cgroup/memory/memory.oom_control\noom_kill_disable 0\nunder_oom 0\noom_kill 2\n\
        @/sys/fs/cgroup/pids/pids.current\n5\n@/sys/fs/cgroup/pids/pids.max\n4096\n@disk\n4096 1000 400\n";

    #[test]
    fn v1_and_v2_give_the_same_shape() {
        let u = usage_of(V1).unwrap();
        assert_eq!(
            u,
            Usage {
                timestamp_ms: 1_796_213_712_514.0,
                source: Source::Cgroup1,
                cpu_seconds: 3.5,
                cpu_limit_cores: None,
                cpu_percent: Some(50.0),
                memory_bytes: 300_000_000,
                memory_working_set_bytes: 200_000_000,
                memory_limit_bytes: Some(2 << 30),
                oom_kills: Some(2),
                pids: 5,
                pids_limit: Some(4096),
                disk: Some((600 * 4096, 1000 * 4096)),
            }
        );
        let v2 = "cgroup2\n@@2000000000\n@/sys/fs/cgroup/cpu.stat\nusage_usec 1500000\nuser_usec 1\n\
            @/sys/fs/cgroup/cpu.max\n200000 100000\n@/sys/fs/cgroup/memory.current\n1000\n!/sys/fs/cgroup/memory.max\n\
            @/sys/fs/cgroup/memory.stat\nanon 1\ninactive_file 2000\n@/sys/fs/cgroup/memory.events\noom_kill 0\n\
            @/sys/fs/cgroup/pids.current\n1\n@/sys/fs/cgroup/pids.max\nmax\n!disk\n";
        let u = usage_of(v2).unwrap();
        assert_eq!(
            (u.source, u.cpu_seconds, u.cpu_limit_cores, u.cpu_percent),
            (Source::Cgroup2, 1.5, Some(2.0), None)
        );
        assert_eq!((u.memory_bytes, u.memory_working_set_bytes, u.memory_limit_bytes), (1000, 0, None));
        assert_eq!((u.pids, u.pids_limit, u.disk, u.timestamp_ms), (1, None, None, 2000.0));
    }

    #[test]
    fn gvisor_has_no_memory_stat_nor_oom_counter() {
        // What usage.sh printed in a gVisor pod of the real node.
        let gvisor = V1
            .replace(
                "@/sys/fs/cgroup/memory/memory.stat\ncache 100\ninactive_file 7\ntotal_inactive_file 100000000\n",
                "!/sys/fs/cgroup/memory/memory.stat\n",
            )
            .replace(
                "@/sys/fs/cgroup/memory/memory.oom_control\noom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
                "!/sys/fs/cgroup/memory/memory.oom_control\n",
            );
        let u = usage_of(&gvisor).unwrap();
        assert_eq!((u.memory_bytes, u.memory_working_set_bytes, u.oom_kills), (300_000_000, 300_000_000, None));
    }

    #[test]
    fn a_missing_tool_is_unsupported_naming_it() {
        let e = outcome(Exit::code(MISSING_TOOL), "stat\n", HeadBuffer::new(0)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("no `stat`"), "{e}");
        let mut stderr = HeadBuffer::new(100);
        stderr.push(b"boom");
        let e = outcome(Exit::code(2), "", stderr).unwrap_err();
        assert_eq!((e.code, e.message.contains("boom")), (ErrorCode::Internal, true), "{e}");
    }

    #[test]
    fn a_missing_file_is_unsupported_naming_it() {
        let out = V1.replace("@/sys/fs/cgroup/pids/pids.current\n5\n", "!/sys/fs/cgroup/pids/pids.current\n");
        let e = usage_of(&out).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("/sys/fs/cgroup/pids/pids.current"), "{e}");
        let e = usage_of(&V1.replace("oom_kill 2", "oom_kill two")).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e.message.contains("memory.oom_control"), "{e}");
    }
}
