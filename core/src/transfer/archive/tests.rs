use proptest::prelude::*;

use super::*;

pub(crate) fn entry(path: &[u8], kind: Kind, link: &[u8], size: u64) -> Entry {
    Entry { path: path.to_vec(), link: link.to_vec(), kind, mode: 0o644, size, mtime: 1_700_000_000 }
}

/// An archive of `entries`, each file filled with its size's worth of a
/// byte pattern, as the upload sends it.
fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        encode_header(e, &mut out);
        out.extend((0..e.size).map(|i| (i % 251) as u8));
        encode_padding(e.size, &mut out);
    }
    let written = out.len() as u64;
    encode_end(written, &mut out);
    out
}

/// Parses `data` fed in pieces of `piece` bytes, applying `rules` (to
/// each entry, then [`Rules::finish`]) if given.
fn parse(data: &[u8], piece: usize, mut rules: Option<&mut Rules>) -> Result<Vec<(Entry, Vec<u8>)>> {
    let mut parser = Parser::new(1000, 1 << 30);
    let mut got: Vec<(Entry, Vec<u8>)> = Vec::new();
    for chunk in data.chunks(piece.max(1)) {
        parser.feed(chunk, &mut |event| {
            match event {
                Event::Entry(mut e) => {
                    if let Some(r) = rules.as_deref_mut() {
                        if !r.check(&mut e)? {
                            return Ok(());
                        }
                    }
                    got.push((e, Vec::new()));
                }
                Event::Data(d) => got.last_mut().unwrap().1.extend_from_slice(d),
            }
            Ok(())
        })?;
    }
    parser.finish()?;
    if let Some(r) = rules {
        r.finish()?;
    }
    Ok(got)
}

fn refused(entries: &[Entry]) -> Error {
    parse(&archive(entries), 512, Some(&mut Rules::new(ErrorCode::InvalidRequest))).unwrap_err()
}

#[test]
fn odd_names_round_trip_exactly() {
    let long_dir = b"d".repeat(200);
    let name255 = vec![b'n'; 255];
    let mut deep = long_dir.clone();
    deep.extend_from_slice(b"/");
    deep.extend_from_slice(&name255);
    let entries = vec![
        entry(b"new\nline", Kind::File, b"", 3),
        entry(b"caf\xe9\xff", Kind::File, b"", 0),
        entry(&name255, Kind::File, b"", 1000),
        entry(&long_dir, Kind::Directory, b"", 0),
        entry(&deep, Kind::File, b"", 513),
        entry(b"link", Kind::Symlink, &[b'x'; 150], 0),
        entry(b"hard", Kind::HardLink, &deep, 0),
    ];
    let data = archive(&entries);
    assert_eq!(data.len() % RECORD, 0);
    for piece in [1, 7, 512, 4096, data.len()] {
        let got = parse(&data, piece, None).unwrap();
        assert_eq!(got.len(), entries.len());
        for ((e, d), want) in got.iter().zip(&entries) {
            let mut want = want.clone();
            if want.kind == Kind::Directory {
                want.path.push(b'/');
            }
            assert_eq!(e, &want);
            assert_eq!(d.len() as u64, want.size);
        }
    }
}

#[test]
fn each_hostile_entry_is_refused() {
    let cases: Vec<(Vec<Entry>, &str)> = vec![
        (vec![entry(b"/etc/passwd", Kind::File, b"", 1)], "absolute"),
        (vec![entry(b"a/../../x", Kind::File, b"", 1)], "`..`"),
        (vec![entry(b"l", Kind::Symlink, b"/etc", 0)], "absolute path"),
        (vec![entry(b"a/l", Kind::Symlink, b"../../etc", 0)], "out of the tree"),
        (vec![entry(b"l", Kind::Symlink, b"sub", 0), entry(b"l/x", Kind::File, b"", 1)], "through the symlink"),
        (vec![entry(b"h", Kind::HardLink, b"../x", 0)], "hard link out"),
        (vec![entry(b"h", Kind::HardLink, b"/etc/shadow", 0)], "hard link out"),
        (vec![entry(b"l", Kind::Symlink, b"x", 0), entry(b"h", Kind::HardLink, b"l", 0)], "symlink"),
        (vec![entry(b".", Kind::File, b"", 0)], "target directory itself"),
        (vec![entry(&[b'n'; 256], Kind::File, b"", 0)], "over 255"),
    ];
    for (entries, why) in cases {
        let e = refused(&entries);
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{why}: {}", e.message);
        assert!(e.message.contains(why), "{why}: {}", e.message);
    }
    // A symlink that stays inside is fine, as is replacing it with a file.
    let ok = [
        entry(b"a/l", Kind::Symlink, b"../b/./c", 0),
        entry(b"a/l", Kind::File, b"", 0),
        entry(b"a/l/x", Kind::File, b"", 0),
    ];
    // ...but not a write under it while it is one: here it was replaced first.
    parse(&archive(&ok), 512, Some(&mut Rules::new(ErrorCode::InvalidRequest))).unwrap();
}

/// Trees of the security review (F1) whose symlinks each stay in the tree
/// by their own text but resolve out of it through another one, to
/// `outside/secret` beside the tree (or `outside`). Also used by the
/// extraction's tests (`local.rs`).
pub(crate) fn escaping_trees() -> Vec<(&'static str, Vec<Entry>)> {
    let link = |path: &[u8], target: &[u8]| entry(path, Kind::Symlink, target, 0);
    let dir = |path: &[u8]| entry(path, Kind::Directory, b"", 0);
    let deep_target = [b"a/".repeat(16), b"../".repeat(16), b"outside/secret".to_vec()].concat();
    vec![
        ("a chain", vec![link(b"a", b"."), link(b"r", b"a/../outside/secret")]),
        ("a chain, reversed", vec![link(b"r", b"a/../outside/secret"), link(b"a", b".")]),
        ("nested", vec![dir(b"x"), dir(b"x/y"), link(b"x/y/up", b"../.."), link(b"n", b"x/y/up/../outside/secret")]),
        ("a directory link", vec![link(b"a", b"."), link(b"d", b"a/../outside")]),
        ("deep", vec![link(b"a", b"."), link(b"report.html", &deep_target)]),
        ("a link to one that escapes", vec![link(b"a", b"."), link(b"r", b"a/../outside/secret"), link(b"s", b"r")]),
        ("a loop", vec![link(b"p", b"q"), link(b"q", b"p")]),
    ]
}

/// Relative links that stay inside, as a workspace holds them (five links,
/// one file of 3 bytes; `b` reads it through `a -> .`, `c` and `dangling`
/// lead nowhere). Also used by the extraction's tests.
pub(crate) fn staying_tree() -> Vec<Entry> {
    let link = |path: &[u8], target: &[u8]| entry(path, Kind::Symlink, target, 0);
    vec![
        entry(b"node_modules/typescript/bin/tsc", Kind::File, b"", 3),
        link(b"node_modules/.bin/tsc", b"../typescript/bin/tsc"),
        link(b"a", b"."),
        link(b"b", b"a/a/node_modules/.bin/tsc"),
        link(b"c", b"a/missing/../b"),
        link(b"dangling", b"no/such/file"),
    ]
}

#[test]
fn symlinks_that_leave_through_other_symlinks_are_refused() {
    for (name, entries) in escaping_trees() {
        let e = refused(&entries);
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{name}: {}", e.message);
        assert!(e.message.contains("resolves out of the tree"), "{name}: {}", e.message);
    }
    parse(&archive(&staying_tree()), 512, Some(&mut Rules::new(ErrorCode::InvalidRequest))).unwrap();
}

#[test]
fn devices_fifos_and_unknown_types_are_refused() {
    for (kind, what) in [(b'3', "device node"), (b'4', "device node"), (b'6', "FIFO"), (b'S', "entry type")] {
        let mut data = archive(&[entry(b"x", Kind::File, b"", 0)]);
        data[156] = kind;
        let header = Header::from_byte_slice(&data[..512]);
        let mut header = header.clone();
        header.set_cksum();
        data[..512].copy_from_slice(header.as_bytes());
        let e = parse(&data, 512, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains(what), "{}", e.message);
    }
}

#[test]
fn setuid_and_setgid_are_dropped() {
    let mut e = entry(b"x", Kind::File, b"", 0);
    e.mode = 0o7755;
    Rules::new(ErrorCode::InvalidRequest).check(&mut e).unwrap();
    assert_eq!(e.mode, 0o1755);
}

#[test]
fn caps_and_truncation_are_errors() {
    let many: Vec<Entry> = (0..20).map(|i| entry(format!("f{i}").as_bytes(), Kind::File, b"", 0)).collect();
    let data = archive(&many);
    let mut parser = Parser::new(10, 1 << 30);
    let e = parser.feed(&data, &mut |_| Ok(())).unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge);
    let mut parser = Parser::new(100, 4096);
    assert_eq!(parser.feed(&data, &mut |_| Ok(())).unwrap_err().code, ErrorCode::TooLarge);
    // Cut anywhere before the end marker: finish fails.
    let one = archive(&[entry(b"f", Kind::File, b"", 2000)]);
    for cut in [0, 100, 512, 1500, 2560, 3072] {
        let mut parser = Parser::new(100, 1 << 30);
        parser.feed(&one[..cut], &mut |_| Ok(())).unwrap();
        assert!(parser.finish().is_err(), "cut at {cut}");
    }
    // A corrupt checksum is malformed, not an entry.
    let mut bad = one.clone();
    bad[0] ^= 1;
    assert!(parse(&bad, 512, None).unwrap_err().message.contains("checksum"));
}

#[test]
fn pax_paths_are_read_and_checked() {
    // A PAX header naming `../x` for the next entry.
    let record = b"15 path=../x/y\n";
    let mut pax = Header::new_ustar();
    pax.set_entry_type(EntryType::XHeader);
    pax.set_size(record.len() as u64);
    pax.set_cksum();
    let mut data = pax.as_bytes().to_vec();
    data.extend_from_slice(record);
    encode_padding(record.len() as u64, &mut data);
    data.extend(archive(&[entry(b"innocent", Kind::File, b"", 0)]));
    let got = parse(&data, 100, None).unwrap();
    assert_eq!(got[0].0.path, b"../x/y");
    let e = parse(&data, 100, Some(&mut Rules::new(ErrorCode::InvalidState))).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
}

fn arb_name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::num::u8::ANY.prop_filter("no / or NUL", |b| *b != b'/' && *b != 0), 1..=255)
        .prop_filter("not . or ..", |n| n != b"." && n != b"..")
}

proptest! {
    #[test]
    fn random_trees_round_trip(
        names in prop::collection::vec((prop::collection::vec(arb_name(), 1..4), 0u64..3000, 0u32..0o7777), 1..12),
        piece in 1usize..5000,
    ) {
        let entries: Vec<Entry> = names
            .iter()
            .map(|(parts, size, mode)| {
                let mut e = entry(&parts.join(&b'/'), Kind::File, b"", *size);
                e.mode = *mode & 0o1777;
                e
            })
            .filter(|e| e.path.len() <= PATH_BYTES)
            .collect();
        let got = parse(&archive(&entries), piece, Some(&mut Rules::new(ErrorCode::InvalidRequest)));
        // Two files where one is the other's parent are fine for the
        // parser; the rules only refuse symlinks in the way.
        let got = got.unwrap();
        prop_assert_eq!(got.len(), entries.len());
        for ((e, d), want) in got.iter().zip(&entries) {
            prop_assert_eq!(e, want);
            prop_assert_eq!(d.len() as u64, want.size);
            prop_assert!(d.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        }
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(prop::num::u8::ANY, 0..4096), piece in 1usize..600) {
        let _ = parse(&data, piece, Some(&mut Rules::new(ErrorCode::InvalidRequest)));
    }
}

#[test]
fn what_is_under_a_symlink_is_found_past_its_siblings() {
    let link = |path: &[u8]| entry(path, Kind::Symlink, b"x", 0);
    let file = |path: &[u8]| entry(path, Kind::File, b"", 0);
    // `a.b` and `a-c` sort between `a` and `a/x` byte by byte.
    for (entries, why) in [
        (vec![link(b"a"), link(b"a.b"), link(b"a-c"), file(b"a/x")], "written through the symlink \"a\""),
        (vec![link(b"d/e/l"), link(b"d")], "over a directory holding other symlinks"),
    ] {
        let e = refused(&entries);
        assert!(e.message.contains(why), "{}", e.message);
    }
    let mut rules = Rules::new(ErrorCode::InvalidRequest);
    parse(&archive(&[link(b"a"), link(b"a.b"), file(b"ab/x"), file(b"a.b.c")]), 512, Some(&mut rules)).unwrap();
}

#[test]
fn resolving_is_paid_by_the_steps_walked() {
    // One link through 2,000 plain names (and the empty one after the last
    // `/`): the link, then 2,001 components.
    let target = b"x/".repeat(2000);
    let lookup = |p: &[u8]| Ok((p == b"l").then(|| target.clone()));
    let mut budget = 2_500;
    assert!(!escapes(b"l", lookup, &mut budget).unwrap());
    assert_eq!(budget, 2_500 - 2_002);
    let e = escapes(b"l", lookup, &mut budget).unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);
}
