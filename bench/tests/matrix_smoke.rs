//! Smoke run of `edge-bench matrix --groups a,c` (DESIGN.md, Fault matrix): the sender cases and
//! the capacity cases against the real `edge` binary, bounded to about 2 minutes.
//!
//! The edge binary is the one cargo built for this test run (`target/<profile>/edge`, next to
//! `edge-bench`; `cargo test --workspace` builds it), else `cargo build -p edge-frontend --bin edge`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole run must end within this.
const LIMIT: Duration = Duration::from_secs(150);

fn edge_bin() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_edge-bench"));
    let sibling = bench.with_file_name("edge");
    if !sibling.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let st = Command::new(cargo)
            .args(["build", "-p", "edge-frontend", "--bin", "edge"])
            .current_dir(root)
            .status()
            .expect("run cargo build");
        assert!(st.success(), "building edge failed");
    }
    assert!(sibling.is_file(), "no edge binary at {}", sibling.display());
    sibling
}

#[test]
fn matrix_groups_a_and_c_pass() {
    let out = std::env::temp_dir().join(format!(
        "edge-bench-matrix-smoke-{}.txt",
        std::process::id()
    ));
    let file = std::fs::File::create(&out).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge-bench"))
        .args(["matrix", "--groups", "a,c", "--edge-bin"])
        .arg(edge_bin())
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("spawn edge-bench");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let status = status.unwrap_or_else(|| panic!("matrix ran over {LIMIT:?}:\n{text}"));
    assert!(status.success(), "matrix failed ({status}):\n{text}");
    assert!(text.contains("matrix: ") && text.contains("PASS"), "{text}");
    for case in [
        "garbage bytes",
        "burst of twice the limit",
        "health behind 128 slow requests",
    ] {
        assert!(text.contains(case), "no row for {case}:\n{text}");
    }
}
