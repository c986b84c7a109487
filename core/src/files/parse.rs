//! Parsing the output of the file scripts.

use crate::error::{Error, Result};

/// What `stat` reports about a path (symlinks followed, like `fs.stat`).
#[derive(Debug, Clone, PartialEq)]
pub struct FileStat {
    /// The target is a directory.
    pub is_directory: bool,
    /// The target is a regular file.
    pub is_file: bool,
    /// The path itself is a symbolic link.
    pub is_symbolic_link: bool,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, milliseconds since the epoch.
    pub mtime_ms: f64,
    /// `st_mode`, file type bits included (as Node's `stats.mode`).
    pub mode: u32,
    /// `file`, `directory`, `symlink` (never, as links are followed) or `other`.
    pub kind: &'static str,
}

/// `S_IFMT` and the types we name.
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

/// Parses `<0|1> <mode hex> <size> <mtime seconds[.fraction]>`.
pub(crate) fn parse_stat(line: &str) -> Result<FileStat> {
    let bad = || Error::internal(format!("unexpected stat output {line:?}"));
    let mut fields = line.split_whitespace();
    let link = fields.next().ok_or_else(bad)?;
    let mode = u32::from_str_radix(fields.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
    let size = fields.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let mtime: f64 = fields.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let kind = match mode & S_IFMT {
        S_IFREG => "file",
        S_IFDIR => "directory",
        S_IFLNK => "symlink",
        _ => "other",
    };
    Ok(FileStat {
        is_directory: kind == "directory",
        is_file: kind == "file",
        is_symbolic_link: link == "1",
        size,
        mtime_ms: (mtime * 1000.0).round(),
        mode,
        kind,
    })
}

/// Splits NUL-terminated names.
pub(crate) fn split_names(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split(|&b| b == 0).filter(|n| !n.is_empty()).map(<[u8]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        let s = parse_stat("0 81a4 1221 1779294449.123\n").unwrap();
        assert!(s.is_file && !s.is_directory && !s.is_symbolic_link);
        assert_eq!((s.size, s.mtime_ms, s.mode, s.kind), (1221, 1779294449123.0, 0o100644, "file"));
        let d = parse_stat("1 41ed 4096 1700000000").unwrap();
        assert!(d.is_directory && d.is_symbolic_link && !d.is_file);
        assert_eq!((d.kind, d.mtime_ms), ("directory", 1700000000000.0));
        assert_eq!(parse_stat("0 2190 0 1").unwrap().kind, "other");
        assert!(parse_stat("0 zz 1 1").is_err());
        assert!(parse_stat("0 81a4 1").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(split_names(b"a\0b c\0\xff\n-x\0"), vec![b"a".to_vec(), b"b c".to_vec(), b"\xff\n-x".to_vec()]);
        assert!(split_names(b"").is_empty());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn stat_fields_round_trip(
            link in any::<bool>(),
            mode in any::<u32>(),
            size in any::<u64>(),
            secs in 0u64..=4_102_444_800,
            millis in 0u32..1000,
        ) {
            let line = format!("{} {mode:x} {size} {secs}.{millis:03}000000\n", u8::from(link));
            let stat = parse_stat(&line).unwrap();
            prop_assert_eq!(stat.is_symbolic_link, link);
            prop_assert_eq!((stat.mode, stat.size), (mode, size));
            prop_assert_eq!(stat.mtime_ms, (secs * 1000 + u64::from(millis)) as f64);
            prop_assert_eq!(stat.is_file, mode & S_IFMT == S_IFREG);
            prop_assert_eq!(stat.is_directory, mode & S_IFMT == S_IFDIR);
        }

        #[test]
        fn listed_names_round_trip(names in prop::collection::vec(prop::collection::vec(1u8..=255, 1..40), 0..20)) {
            let listing: Vec<u8> = names.iter().flat_map(|n| n.iter().copied().chain([0])).collect();
            prop_assert_eq!(split_names(&listing), names);
        }
    }
}
