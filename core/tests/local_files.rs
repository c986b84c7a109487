//! The file scripts over [`common::LocalRuntime`] (the real scripts, run by
//! this machine's dash): ranged `read_file` (pages that add up to the file,
//! ranges at and past the end, a range deep into a sparse file that is not
//! read up to it, the limit applied to what would be returned), and
//! `write_file`, `mkdir`, `stat`, `readdir`, `exists` and `remove` with their
//! error codes, names starting with `-`, symlinks and odd bytes.
//! `__test__/files.test.mjs` tests the same against the cluster.

mod common;

use common::{local_engine, target};
use sandbox_core::ByteRange;
use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use sandbox_core::testing::{files, ExecEngine};
use sandbox_core::{Call, ErrorCode, RemoveOptions};

async fn read(
    engine: &ExecEngine,
    path: &std::path::Path,
    max: u64,
    offset: u64,
    length: Option<u64>,
) -> sandbox_core::Result<Vec<u8>> {
    files::read_file(engine, target(), &Call::default(), path.to_str().unwrap(), max, ByteRange { offset, length })
        .await
}

#[tokio::test]
async fn pages_add_up_to_the_file() {
    let (engine, dir) = local_engine("f-pages");
    // Every byte value, in a pattern that does not repeat at page size.
    let data: Vec<u8> = (0..3_000_017u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let path = dir.join("blob");
    std::fs::write(&path, &data).unwrap();
    let page = 1 << 20;
    let mut joined = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = read(&engine, &path, page, offset, Some(page)).await.unwrap();
        if chunk.is_empty() {
            break;
        }
        offset += chunk.len() as u64;
        joined.extend(chunk);
    }
    assert_eq!(joined, data);
    assert_eq!(read(&engine, &path, 10, 3_000_010, None).await.unwrap(), &data[3_000_010..], "shorter at the end");
    assert_eq!(read(&engine, &path, 10, 5, Some(0)).await.unwrap(), b"", "length 0");
    for past in [3_000_017, 3_000_018, 1 << 50] {
        assert_eq!(read(&engine, &path, 10, past, Some(4)).await.unwrap(), b"", "offset {past}");
    }
}

#[tokio::test]
async fn the_limit_applies_to_the_range() {
    let (engine, dir) = local_engine("f-limit");
    let path = dir.join("f");
    std::fs::write(&path, vec![7u8; 1000]).unwrap();
    assert_eq!(read(&engine, &path, 100, 900, None).await.unwrap().len(), 100, "100 bytes left, limit 100");
    let e = read(&engine, &path, 99, 900, None).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge);
    assert!(e.message.contains("range") && e.message.contains("100 bytes"), "{}", e.message);
    assert_eq!(read(&engine, &path, 10, 0, Some(10)).await.unwrap(), vec![7u8; 10], "a page of a larger file");
}

#[tokio::test]
async fn a_range_at_the_end_of_a_sparse_terabyte_reads_only_the_range() {
    let (engine, dir) = local_engine("f-sparse");
    let path = dir.join("sparse");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(1 << 40).unwrap();
    drop(file);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| {
            use std::io::{Seek, SeekFrom, Write};
            f.seek(SeekFrom::Start((1 << 40) - 8192))?;
            f.write_all(b"needle")
        })
        .unwrap();
    // Reading the 1 TiB of zeros before the range would take many minutes;
    // the call's timeout (a minute, a thousand times what a seek takes)
    // fails the read if it does.
    let call = Call::within(std::time::Duration::from_secs(60));
    let got = files::read_file(
        &engine,
        target(),
        &call,
        path.to_str().unwrap(),
        4096,
        ByteRange { offset: (1 << 40) - 8192, length: Some(4096) },
    )
    .await
    .unwrap();
    assert_eq!(&got[..6], b"needle");
    assert_eq!(got.len(), 4096);
}

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

#[tokio::test]
async fn write_replaces_whole_files_keeps_their_mode_and_writes_through_symlinks() {
    let (engine, dir) = local_engine("f-write");
    let call = Call::default();
    let file = dir.join("-a file");
    let data: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    files::write_file(&engine, target(), &call, p(&file), Bytes::from(data.clone())).await.unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), data);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).unwrap();
    files::write_file(&engine, target(), &call, p(&file), Bytes::from_static(b"")).await.unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o751);
    let link = dir.join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    files::write_file(&engine, target(), &call, p(&link), Bytes::from_static(b"via link")).await.unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"via link");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let e = files::write_file(&engine, target(), &call, p(&dir), Bytes::from_static(b"x")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IsDirectory);
    let e = files::write_file(&engine, target(), &call, p(&dir.join("no/such")), Bytes::from_static(b"x")).await;
    assert_eq!(e.unwrap_err().code, ErrorCode::NotFound);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!names.iter().any(|n| n.to_string_lossy().contains("agent-sandbox-write")), "{names:?}");
}

#[tokio::test]
async fn mkdir_makes_parents_and_is_idempotent_but_not_over_a_file() {
    let (engine, dir) = local_engine("f-mkdir");
    let call = Call::default();
    let deep = dir.join("-a/b c/d");
    files::mkdir(&engine, target(), &call, p(&deep)).await.unwrap();
    files::mkdir(&engine, target(), &call, p(&deep)).await.unwrap();
    assert!(deep.is_dir());
    std::fs::write(dir.join("f"), b"").unwrap();
    let e = files::mkdir(&engine, target(), &call, p(&dir.join("f"))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn stat_follows_symlinks_and_says_it_did() {
    let (engine, dir) = local_engine("f-stat");
    let call = Call::default();
    let file = dir.join("f");
    std::fs::write(&file, b"12345").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let s = files::stat(&engine, target(), &call, p(&file)).await.unwrap();
    assert!(s.is_file && !s.is_directory && !s.is_symbolic_link);
    assert_eq!((s.size, s.mode, s.kind), (5, 0o100640, "file"));
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mtime_ms = mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
    assert!((s.mtime_ms - mtime_ms).abs() <= 1.0, "{} {mtime_ms}", s.mtime_ms);
    std::os::unix::fs::symlink(&dir, dir.join("-link")).unwrap();
    let s = files::stat(&engine, target(), &call, p(&dir.join("-link"))).await.unwrap();
    assert!(s.is_directory && s.is_symbolic_link && s.kind == "directory");
    let e = files::stat(&engine, target(), &call, p(&dir.join("missing"))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
async fn readdir_lists_every_name_once_dotfiles_and_dangling_links_included() {
    let (engine, dir) = local_engine("f-readdir");
    let call = Call::default();
    let list = dir.join("-list");
    std::fs::create_dir(&list).unwrap();
    assert!(files::readdir(&engine, target(), &call, p(&list)).await.unwrap().is_empty());
    let odd = "new\nline \\ * ' \" $x";
    for name in [".hidden", "-dash", "plain", odd, "*"] {
        std::fs::write(list.join(name), b"").unwrap();
    }
    std::fs::create_dir(list.join("sub")).unwrap();
    std::os::unix::fs::symlink("nowhere", list.join("dangling")).unwrap();
    let mut names: Vec<String> = files::readdir(&engine, target(), &call, p(&list))
        .await
        .unwrap()
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    names.sort();
    let mut want = vec![".hidden", "-dash", "plain", odd, "*", "sub", "dangling"];
    want.sort();
    assert_eq!(names, want);
    let e = files::readdir(&engine, target(), &call, p(&list.join("plain"))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    let e = files::readdir(&engine, target(), &call, p(&dir.join("missing"))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
async fn exists_follows_symlinks() {
    let (engine, dir) = local_engine("f-exists");
    let call = Call::default();
    std::fs::write(dir.join("-f"), b"").unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
    assert!(files::exists(&engine, target(), &call, p(&dir.join("-f"))).await.unwrap());
    assert!(files::exists(&engine, target(), &call, p(&dir)).await.unwrap());
    assert!(!files::exists(&engine, target(), &call, p(&dir.join("dangling"))).await.unwrap());
    assert!(!files::exists(&engine, target(), &call, p(&dir.join("missing"))).await.unwrap());
}

#[tokio::test]
async fn remove_is_like_fs_rm() {
    let (engine, dir) = local_engine("f-remove");
    let call = Call::default();
    let plain = RemoveOptions::default();
    let recursive = RemoveOptions { recursive: true, force: false };
    let force = RemoveOptions { recursive: false, force: true };
    let e = files::remove(&engine, target(), &call, p(&dir.join("missing")), plain).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    files::remove(&engine, target(), &call, p(&dir.join("missing")), force).await.unwrap();
    let tree = dir.join("-tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::write(tree.join("a/b/f"), b"x").unwrap();
    let e = files::remove(&engine, target(), &call, p(&tree), plain).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IsDirectory);
    // A symlink to a directory is removed, not the directory.
    std::os::unix::fs::symlink(&tree, dir.join("link")).unwrap();
    files::remove(&engine, target(), &call, p(&dir.join("link")), plain).await.unwrap();
    assert!(tree.join("a/b/f").exists() && !dir.join("link").exists());
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
    files::remove(&engine, target(), &call, p(&dir.join("dangling")), plain).await.unwrap();
    assert!(std::fs::symlink_metadata(dir.join("dangling")).is_err());
    files::remove(&engine, target(), &call, p(&tree), recursive).await.unwrap();
    assert!(!tree.exists());
}
