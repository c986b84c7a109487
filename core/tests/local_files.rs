//! Ranged `read_file` over [`common::LocalRuntime`] (the real file script):
//! pages that add up to the file, ranges at and past the end, a range deep
//! into a sparse file that is not read up to it, and the limit applied to
//! what would be returned. `__test__/files.test.mjs` tests the same against
//! the cluster.

mod common;

use common::{local_engine, target};
use sandbox_core::args::ByteRange;
use sandbox_core::exec::{Call, ExecEngine};
use sandbox_core::files;
use sandbox_core::ErrorCode;

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
