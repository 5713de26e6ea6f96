//! Tests of path normalisation: one table row per rule of RFC 3986 §6.2.2 as DESIGN.md "Routing" applies
//! it, every split of every row, idempotence, and generated inputs.

use super::*;
use proptest::prelude::*;

/// Normalises `path` whole, checks that every two-piece split and a byte-by-byte feeding agree with
/// it, and that an already-normal result comes back as the input itself.
fn norm(path: &[u8]) -> Result<Vec<u8>, BadPath> {
    let mut scratch = Vec::new();
    let whole = normalise(path, &mut scratch).map(<[u8]>::to_vec);
    if path.first() == Some(&b'/') {
        for at in 0..=path.len() {
            assert_eq!(fed(&[&path[..at], &path[at..]]), whole, "split at {at}");
        }
        let bytes: Vec<&[u8]> = path.chunks(1).collect();
        assert_eq!(fed(&bytes), whole, "byte by byte");
    }
    whole
}

/// The normaliser fed `pieces` in order.
fn fed(pieces: &[&[u8]]) -> Result<Vec<u8>, BadPath> {
    let mut out = Vec::new();
    let mut n = Normaliser::new(&mut out);
    for p in pieces {
        n.feed(p)?;
    }
    n.finish()?;
    Ok(out)
}

#[test]
fn normal_forms() {
    let rows: &[(&str, &str)] = &[
        // Already normal: returned as is.
        ("/", "/"),
        ("/a/b", "/a/b"),
        ("/a/b/", "/a/b/"),
        ("/a//b", "/a//b"),
        ("//", "//"),
        ("/.well-known/x", "/.well-known/x"),
        ("/a..b/.c/..d", "/a..b/.c/..d"),
        ("/a%2Fb", "/a%2Fb"),
        ("/a%20b", "/a%20b"),
        ("/%C3%A9", "/%C3%A9"),
        // Unreserved encodings decoded, the rest upper-cased.
        ("/%7Euser", "/~user"),
        ("/%41%62%2d%5f%2E%7e%30", "/Ab-_.~0"),
        ("/a%2fb", "/a%2Fb"),
        ("/a%5cb", "/a%5Cb"),
        ("/%c3%a9", "/%C3%A9"),
        ("/a%3fb", "/a%3Fb"),
        // Dot segments removed (RFC 3986 §5.2.4 examples and the path-confusion cases).
        ("/x/../v2/a", "/v2/a"),
        ("/a/b/c/./../../g", "/a/g"),
        ("/a/./b", "/a/b"),
        ("/a/.", "/a/"),
        ("/a/..", "/"),
        ("/a/b/..", "/a/"),
        ("/a/../", "/"),
        ("/.", "/"),
        ("/./", "/"),
        ("/./a", "/a"),
        ("/a//..", "/a/"),
        ("//..", "/"),
        ("/a/%2e%2E/b", "/b"),
        ("/a/.%2e", "/"),
        ("/a/%2E/b", "/a/b"),
        // An encoded slash never splits a segment, so `..%2F` is no dot segment.
        ("/a/..%2Fb", "/a/..%2Fb"),
        ("/a/%2E%2E%2Fb", "/a/..%2Fb"),
        // Raw bytes other than `%`, `/` and dots are not touched.
        ("/a;b=c/d", "/a;b=c/d"),
        ("/A/B", "/A/B"),
        // Not origin-form: as it is; empty: "/".
        ("*", "*"),
        ("", "/"),
    ];
    for (input, want) in rows {
        assert_eq!(
            norm(input.as_bytes()),
            Ok(want.as_bytes().to_vec()),
            "{input}"
        );
    }
}

#[test]
fn bad_paths() {
    for input in [
        "/..",
        "/../etc",
        "/a/../..",
        "/a/../../b",
        "/%2e%2e",
        "/%2E%2E/x",
        "/a%00b",
        "/%00",
        "/a%zz",
        "/a%4",
        "/a%",
        "/a%g0",
        "/a%0g",
        "/a/%",
    ] {
        assert_eq!(norm(input.as_bytes()), Err(BadPath), "{input}");
    }
}

#[test]
fn an_already_normal_path_is_not_copied() {
    let path = b"/api/v1/users%2F1".as_slice();
    let mut scratch = Vec::new();
    let out = normalise(path, &mut scratch).unwrap();
    assert!(std::ptr::eq(out, path));
    assert_eq!(scratch.capacity(), 0);
    let changed = b"/api/./v1".as_slice();
    let out = normalise(changed, &mut scratch).unwrap();
    assert!(!std::ptr::eq(out, changed));
    assert_eq!(out, b"/api/v1");
}

#[test]
fn the_fast_check_agrees_with_the_normaliser() {
    for input in [
        "/a/b", "/a/./b", "/a%2f", "/a%2F", "/%41", "/.x", "/..x", "/x.", "/%00",
    ] {
        let slow = fed(&[input.as_bytes()]);
        assert_eq!(
            is_normal(input.as_bytes()),
            slow.as_deref() == Ok(input.as_bytes()),
            "{input}"
        );
    }
}

#[test]
fn a_failed_normaliser_refuses_later_pieces() {
    let mut out = Vec::new();
    let mut n = Normaliser::new(&mut out);
    assert_eq!(n.feed(b"/a%z"), Err(BadPath));
    assert_eq!(n.feed(b"/b"), Err(BadPath));
    assert_eq!(n.finish(), Err(BadPath));
}

fn path_strategy() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"/".to_vec()),
        Just(b".".to_vec()),
        Just(b"..".to_vec()),
        Just(b"%2e".to_vec()),
        Just(b"%2F".to_vec()),
        Just(b"%7e".to_vec()),
        Just(b"%00".to_vec()),
        Just(b"%".to_vec()),
        Just(b"a".to_vec()),
        Just(b"Z".to_vec()),
        Just(b"%c3".to_vec()),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| {
        let mut p = b"/".to_vec();
        pieces.into_iter().for_each(|x| p.extend(x));
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The normal form is normal: normalising it again returns it unchanged, without a copy; and every
    /// split agrees (inside `norm`).
    #[test]
    fn normalising_is_idempotent(path in path_strategy()) {
        if let Ok(once) = norm(&path) {
            prop_assert!(is_normal(&once), "{:?}", String::from_utf8_lossy(&once));
            let mut scratch = Vec::new();
            let twice = normalise(&once, &mut scratch).unwrap();
            prop_assert!(std::ptr::eq(twice, once.as_slice()));
            prop_assert!(memchr::memmem::find(&once, b"/./").is_none());
            prop_assert!(memchr::memmem::find(&once, b"/../").is_none());
        }
    }
}
