//! What `usage.sh` prints, and the cgroup files in it, parsed. Every value
//! comes from the sandbox, so nothing here trusts it: a file that is not what
//! the kernel writes is an `internal` error naming the file; a missing file is
//! `unsupported` when the result needs it, no limit when it is a limit's.

use crate::error::{quoted, Error, ErrorCode, Result};

/// The cgroup version the files came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The unified hierarchy (`cgroup.controllers` at `/sys/fs/cgroup`).
    Cgroup2,
    /// One hierarchy per controller.
    Cgroup1,
}

impl Source {
    /// The name in the result (`source`).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cgroup2 => "cgroup2",
            Source::Cgroup1 => "cgroup1",
        }
    }
}

/// One reading: when it was taken, and each file's content (`None`: it
/// could not be read), in the order printed.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Reading {
    /// `date +%s%N` in the sandbox, as printed.
    pub time: String,
    /// `(path, content)`.
    pub files: Vec<(String, Option<String>)>,
}

impl Reading {
    /// The file whose path ends with `/name` (or is `name`) and its content
    /// (`None`: it could not be read); `None` when it was not printed.
    pub(crate) fn file(&self, name: &str) -> Option<(&str, Option<&str>)> {
        self.files
            .iter()
            .find(|(path, _)| path == name || path.strip_suffix(name).is_some_and(|p| p.ends_with('/')))
            .map(|(path, content)| (path.as_str(), content.as_deref()))
    }

    /// The content of a file the result needs: `unsupported` naming it when
    /// it could not be read (or was not printed at all).
    pub(crate) fn required(&self, name: &str) -> Result<(&str, &str)> {
        match self.file(name) {
            Some((path, Some(content))) => Ok((path, content)),
            Some((path, None)) => Err(unreadable(path)),
            None => Err(unreadable(name)),
        }
    }

    /// The content of a limit's file; `None` when the cgroup has none (the
    /// root cgroup has no `memory.max`, a hierarchy may be missing).
    pub(crate) fn optional(&self, name: &str) -> Option<(&str, &str)> {
        match self.file(name) {
            Some((path, Some(content))) => Some((path, content)),
            _ => None,
        }
    }

    /// Nanoseconds since the epoch at this reading.
    pub(crate) fn time_ns(&self) -> Result<u128> {
        digits(&self.time).ok_or_else(|| malformed("the output of `date +%s%N`", &self.time))
    }
}

fn unreadable(path: &str) -> Error {
    Error::new(
        ErrorCode::Unsupported,
        format!(
            "usage: {} cannot be read in this sandbox: the container runtime does not show the container's \
             cgroup there",
            quoted(path)
        ),
    )
}

/// `internal`, naming the file and showing the head of what it holds.
pub(crate) fn malformed(what: &str, content: &str) -> Error {
    let head: String = content.chars().take(80).collect();
    Error::internal(format!("usage: {what} holds {}, not what the kernel writes there", quoted(&head)))
}

/// Splits the script's output into the cgroup version and its readings.
pub(crate) fn parse_output(out: &str) -> Result<(Source, Vec<Reading>)> {
    let mut lines = out.lines();
    let source = match lines.next() {
        Some("cgroup2") => Source::Cgroup2,
        Some("cgroup1") => Source::Cgroup1,
        other => return Err(malformed("the usage script's first line", other.unwrap_or(""))),
    };
    let mut readings: Vec<Reading> = Vec::new();
    for line in lines {
        if let Some(time) = line.strip_prefix("@@") {
            readings.push(Reading { time: time.to_owned(), files: Vec::new() });
            continue;
        }
        let Some(reading) = readings.last_mut() else {
            return Err(malformed("the usage script's output", line));
        };
        if let Some(path) = line.strip_prefix('@') {
            reading.files.push((path.to_owned(), Some(String::new())));
        } else if let Some(path) = line.strip_prefix('!') {
            reading.files.push((path.to_owned(), None));
        } else if let Some((_, Some(content))) = reading.files.last_mut() {
            content.push_str(line);
            content.push('\n');
        } else {
            return Err(malformed("the usage script's output", line));
        }
    }
    if readings.is_empty() {
        return Err(malformed("the usage script's output", out));
    }
    Ok((source, readings))
}

/// A file holding one unsigned number (`memory.current`, `pids.current`).
pub(crate) fn number(path: &str, content: &str) -> Result<u64> {
    digits(content.trim()).and_then(|n| u64::try_from(n).ok()).ok_or_else(|| malformed(path, content))
}

/// v2 `memory.max`, `pids.max`, v1 `pids.max`: `max` or a number.
pub(crate) fn max_or_number(path: &str, content: &str) -> Result<Option<u64>> {
    match content.trim() {
        "max" => Ok(None),
        _ => number(path, content).map(Some),
    }
}

/// v1 `memory.limit_in_bytes`: "no limit" is the largest page-aligned value
/// (`9223372036854771712` with 4 KiB pages), anything from 2^62 up.
pub(crate) fn v1_memory_limit(path: &str, content: &str) -> Result<Option<u64>> {
    number(path, content).map(|n| (n < 1 << 62).then_some(n))
}

/// The value of `key` in a flat keyed file (`cpu.stat`, `memory.stat`,
/// `memory.events`, v1 `memory.oom_control`): lines of `<key> <value>`.
pub(crate) fn keyed(path: &str, content: &str, key: &str) -> Result<u64> {
    let line = content.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then_some(v)
    });
    match line {
        Some(v) => number(&format!("{path} ({key})"), v),
        None => Err(malformed(&format!("{path} (no {key})"), content)),
    }
}

/// v2 `cpu.max`: `<quota|max> <period>` → cores, `None` for `max`.
pub(crate) fn cpu_max(path: &str, content: &str) -> Result<Option<f64>> {
    let mut words = content.split_whitespace();
    let (Some(quota), Some(period), None) = (words.next(), words.next(), words.next()) else {
        return Err(malformed(path, content));
    };
    let period = number(path, period)?;
    if quota == "max" {
        return Ok(None);
    }
    cores(number(path, quota)?, period).ok_or_else(|| malformed(path, content)).map(Some)
}

/// v1 `cpu.cfs_quota_us` (`-1`: no limit) over `cpu.cfs_period_us`.
pub(crate) fn cfs_quota(quota_path: &str, quota: &str, period_path: &str, period: &str) -> Result<Option<f64>> {
    if quota.trim() == "-1" {
        return Ok(None);
    }
    let (q, p) = (number(quota_path, quota)?, number(period_path, period)?);
    cores(q, p).ok_or_else(|| malformed(period_path, period)).map(Some)
}

fn cores(quota: u64, period: u64) -> Option<f64> {
    (period > 0).then(|| quota as f64 / period as f64)
}

/// `stat -f -c '%S %b %f'` of the filesystem holding cwd: `(used, total)`
/// bytes as `df` counts them (used = total − free).
pub(crate) fn disk(content: &str) -> Result<(u64, u64)> {
    let bad = || malformed("the output of `stat -f` (disk)", content);
    let n: Vec<u64> =
        content.split_whitespace().map(|w| number("disk", w)).collect::<Result<_>>().map_err(|_| bad())?;
    let [block, blocks, free] = n[..] else { return Err(bad()) };
    let total = blocks.checked_mul(block).ok_or_else(bad)?;
    let used = blocks.checked_sub(free).and_then(|u| u.checked_mul(block)).ok_or_else(bad)?;
    Ok((used, total))
}

/// ASCII digits only (no sign, no blanks), at most 38 of them.
fn digits(s: &str) -> Option<u128> {
    if s.is_empty() || s.len() > 38 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn output_splits_into_readings_and_files() {
        let out = "cgroup1\n@@100\n@/c/cpuacct.usage\n5\n@@200\n@/c/cpuacct.usage\n7\n!/c/pids.max\n@/m/memory.stat\n\
                   cache 1\ntotal_inactive_file 2\n@disk\n4096 10 4\n";
        let (source, r) = parse_output(out).unwrap();
        assert_eq!(source, Source::Cgroup1);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].time_ns().unwrap(), 100);
        assert_eq!(r[1].required("cpuacct.usage").unwrap(), ("/c/cpuacct.usage", "7\n"));
        assert_eq!(r[1].optional("pids.max"), None);
        let e = r[1].required("pids.max").unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("\"/c/pids.max\""), "{e}");
        assert_eq!(r[1].required("memory.current").unwrap_err().code, ErrorCode::Unsupported);
        assert_eq!(keyed("/m/memory.stat", r[1].required("memory.stat").unwrap().1, "total_inactive_file").unwrap(), 2);
        assert_eq!(disk(r[1].required("disk").unwrap().1).unwrap(), (6 * 4096, 10 * 4096));
        // A name matches whole path components only.
        assert_eq!(r[1].file("usage"), None);
        for bad in ["", "cgroup3\n@@1\n", "cgroup2\n", "cgroup2\nstray\n", "cgroup2\n@@1\nstray\n"] {
            assert_eq!(parse_output(bad).unwrap_err().code, ErrorCode::Internal, "{bad:?}");
        }
    }

    /// Contents as this VM's kernel (6.18, hybrid v1) and a cgroup v2 kernel
    /// write them.
    #[test]
    fn real_files() {
        let v1_stat = "cache 14794752\nrss 6004736\nrss_huge 0\nshmem 9580544\nmapped_file 8048640\n\
            inactive_anon 685600768\nactive_anon 28672\ninactive_file 523366400\nactive_file 565444608\n\
            hierarchical_memory_limit 9223372036854771712\ntotal_cache 1089232896\ntotal_rss 685633536\n\
            total_inactive_anon 685600768\ntotal_inactive_file 523456512\ntotal_active_file 565776384\n";
        assert_eq!(keyed("memory.stat", v1_stat, "total_inactive_file").unwrap(), 523_456_512);
        assert_eq!(keyed("memory.stat", v1_stat, "inactive_file").unwrap(), 523_366_400);
        assert_eq!(v1_memory_limit("l", "9223372036854771712\n").unwrap(), None);
        assert_eq!(v1_memory_limit("l", "2147483648\n").unwrap(), Some(2 << 30));
        assert_eq!(keyed("o", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill").unwrap(), 3);
        assert_eq!(number("cpuacct.usage", "3314480844687\n").unwrap(), 3_314_480_844_687);
        assert_eq!(cfs_quota("q", "-1\n", "p", "100000\n").unwrap(), None);
        assert_eq!(cfs_quota("q", "50000\n", "p", "100000\n").unwrap(), Some(0.5));
        assert_eq!(max_or_number("pids.max", "max\n").unwrap(), None);
        assert_eq!(max_or_number("pids.max", "4096\n").unwrap(), Some(4096));

        let v2_cpu = "usage_usec 3268548724\nuser_usec 2700589048\nsystem_usec 567959676\nnice_usec 0\n\
            nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(keyed("cpu.stat", v2_cpu, "usage_usec").unwrap(), 3_268_548_724);
        assert_eq!(cpu_max("cpu.max", "max 100000\n").unwrap(), None);
        assert_eq!(cpu_max("cpu.max", "150000 100000\n").unwrap(), Some(1.5));
        let v2_events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed("memory.events", v2_events, "oom_kill").unwrap(), 1);
        let v2_stat = "anon 1327104\nfile 209715200\nkernel 1069056\nkernel_stack 49152\npagetables 73728\n\
            sec_pagetables 0\npercpu 720\nsock 0\nvmalloc 0\nshmem 0\nfile_mapped 0\nfile_dirty 0\n\
            file_writeback 0\nswapcached 0\nanon_thp 0\ninactive_anon 1318912\nactive_anon 8192\n\
            inactive_file 209715200\nactive_file 0\nunevictable 0\nslab_reclaimable 608168\n";
        assert_eq!(keyed("memory.stat", v2_stat, "inactive_file").unwrap(), 209_715_200);
        assert_eq!(max_or_number("memory.max", "max\n").unwrap(), None);
        assert_eq!(max_or_number("memory.max", "536870912\n").unwrap(), Some(512 << 20));
    }

    #[test]
    fn malformed_files_name_the_file() {
        for (what, e) in [
            ("memory.current", number("/x/memory.current", "12k\n").unwrap_err()),
            ("memory.current", number("/x/memory.current", "-1\n").unwrap_err()),
            ("memory.current", number("/x/memory.current", "").unwrap_err()),
            ("cpu.stat (no usage_usec)", keyed("/x/cpu.stat", "user_usec 1\n", "usage_usec").unwrap_err()),
            ("cpu.stat (usage_usec)", keyed("/x/cpu.stat", "usage_usec x\n", "usage_usec").unwrap_err()),
            ("cpu.max", cpu_max("/x/cpu.max", "max\n").unwrap_err()),
            ("cpu.max", cpu_max("/x/cpu.max", "5 0\n").unwrap_err()),
            ("cpu.max", cpu_max("/x/cpu.max", "5 6 7\n").unwrap_err()),
            ("cpu.cfs_period_us", cfs_quota("/x/cpu.cfs_quota_us", "5", "/x/cpu.cfs_period_us", "0").unwrap_err()),
            ("disk", disk("4096 10 11\n").unwrap_err()),
            ("disk", disk("4096 10\n").unwrap_err()),
            ("disk", disk("18446744073709551615 2 0").unwrap_err()),
        ] {
            assert_eq!(e.code, ErrorCode::Internal, "{what}: {e}");
            assert!(e.message.contains(what), "{what}: {e}");
        }
        assert_eq!(number("p", &"9".repeat(21)).unwrap_err().code, ErrorCode::Internal, "over u64");
    }

    proptest! {
        /// Whatever the kernel can write round-trips.
        #[test]
        fn kernel_values_round_trip(n in any::<u64>(), quota in 1_000u64..10_000_000, period in 1_000u64..1_000_000,
                                    other in "[a-z_]{1,20}", m in any::<u64>()) {
            prop_assert_eq!(number("f", &format!("{n}\n")).unwrap(), n);
            prop_assert_eq!(max_or_number("f", &format!("{n}\n")).unwrap(), Some(n));
            let stat = format!("{other}x {m}\nusage_usec {n}\n{other} {m}\n");
            prop_assert_eq!(keyed("cpu.stat", &stat, "usage_usec").unwrap(), n);
            let cores = quota as f64 / period as f64;
            prop_assert_eq!(cpu_max("cpu.max", &format!("{quota} {period}\n")).unwrap(), Some(cores));
            prop_assert_eq!(cfs_quota("q", &format!("{quota}\n"), "p", &format!("{period}\n")).unwrap(), Some(cores));
            prop_assert_eq!(v1_memory_limit("l", &format!("{n}\n")).unwrap(), (n < 1 << 62).then_some(n));
            let (block, blocks, free) = (4096u64, n >> 20, (n >> 20) / 3);
            prop_assert_eq!(disk(&format!("{block} {blocks} {free}\n")).unwrap(), ((blocks - free) * block, blocks * block));
        }

        /// Any bytes in any file: a value or an error naming it, never a panic.
        #[test]
        fn any_content_is_parsed_or_named(content in ".{0,200}", key in "[a-z_]{1,12}") {
            let named = |r: Result<()>| match r {
                Ok(()) => Ok(()),
                Err(e) if e.code == ErrorCode::Internal && e.message.contains("/cg/file") => Ok(()),
                Err(e) => Err(TestCaseError::fail(format!("{e}"))),
            };
            named(number("/cg/file", &content).map(drop))?;
            named(max_or_number("/cg/file", &content).map(drop))?;
            named(v1_memory_limit("/cg/file", &content).map(drop))?;
            named(keyed("/cg/file", &content, &key).map(drop))?;
            named(cpu_max("/cg/file", &content).map(drop))?;
            named(cfs_quota("/cg/file", &content, "/cg/file", &content).map(drop))?;
            let _ = disk(&content);
            // And as the whole output: parsed or internal.
            if let Err(e) = parse_output(&content) {
                prop_assert_eq!(e.code, ErrorCode::Internal);
            }
        }
    }
}
