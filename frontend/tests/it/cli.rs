//! The CLI and configuration contract: `--check`, unknown keys, the port held by another process.

use std::process::Command;

use crate::harness::{assert_exit, check_config, run_edge};

fn edge_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_edge"))
}

/// A standard output whose reader is already gone: the write end of a pipe whose read end is closed.
fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write.into()
}

#[test]
fn check_and_the_default_config_end_quietly_when_their_reader_stops() {
    // `edge --check | head`: the reader closes the pipe; the check's verdict still stands.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/edge.toml");
    for args in [
        &["--check", "--config", path][..],
        &["--print-default-config"],
    ] {
        let out = edge_cmd()
            .args(args)
            .stdout(closed_pipe())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn check_passes_on_the_default_config_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/edge.toml");
    let out = edge_cmd()
        .args(["--check", "--config", path])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.contains("[server]") && printed.contains("listen = \"127.0.0.1:8080\""),
        "{printed}"
    );
}

#[test]
fn unknown_config_key_exits_2_naming_file_and_key() {
    let dir = crate::harness::TempDir::new();
    let path = dir.0.join("bad.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\nmax_conections = 5\n",
    )
    .unwrap();
    let out = check_config(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_conections"), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
    assert!(err.contains("server"), "{err}");
    // The same config without --check also refuses to start.
    let out = edge_cmd().arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn zero_idle_timeout_is_refused_naming_file_key_and_line() {
    // A value that parses but does not validate (DESIGN.md "Configuration": config errors name the
    // file, the key and the reason), with the line of the key in the file.
    let dir = crate::harness::TempDir::new();
    let path = dir.0.join("idle.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[server.timeouts]\nidle = \"0s\"\n",
    )
    .unwrap();
    for args in [&["--check"][..], &[]] {
        let out = edge_cmd()
            .args(args)
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("idle.toml"), "{err}");
        assert!(err.contains("server.timeouts.idle"), "{err}");
        assert!(err.contains("must be greater than zero (line 5)"), "{err}");
    }
}

#[test]
fn a_bad_flag_value_is_reported_against_the_flag() {
    let out = edge_cmd()
        .args(["--check", "--upstream", "notaport"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("<command line>") && err.contains("--upstream") && err.contains("notaport"),
        "{err}"
    );
    assert!(!err.contains("<embedded default>"), "{err}");
}

#[test]
fn print_default_config_is_the_deploy_file() {
    let out = edge_cmd().arg("--print-default-config").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let want = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/edge.toml"))
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
}

#[test]
fn traffic_port_held_by_another_process_exits_2() {
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    let out = edge_cmd()
        .args([
            "--listen",
            &addr,
            "--admin-listen",
            "",
            "--upstream",
            "127.0.0.1:9",
            "--io-driver",
            "epoll",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
}

#[test]
fn healthcheck_subcommand_reports_status() {
    let origin = crate::harness::Origin::fixed(b"x");
    let cfg = crate::harness::Cfg::new(crate::harness::Driver::Epoll, origin.addr);
    let proxy = crate::harness::Edge::start(&cfg);
    let url = format!("http://{}/_health", proxy.addr);
    assert_exit(&run_edge(["healthcheck", "--url", &url]), 0);
    // Without --url the configured listener and health_path are probed.
    let dir = crate::harness::TempDir::new();
    let path = dir.0.join("hc.toml");
    std::fs::write(&path, cfg.listen(proxy.addr).render()).unwrap();
    assert_exit(
        &run_edge([
            "healthcheck".as_ref(),
            "--config".as_ref(),
            path.as_os_str(),
        ]),
        0,
    );
    // A non-200 answer and a refused connect both fail, saying why.
    let url = format!("http://{}/not-health", proxy.admin);
    let not_found = edge_cmd()
        .args(["healthcheck", "--url", &url])
        .output()
        .unwrap();
    assert_eq!(not_found.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_found.stderr).contains("answered 404"));
    let down = edge_cmd()
        .args(["healthcheck", "--url", "http://127.0.0.1:9/_health"])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("refused"));
}

/// DESIGN.md "CLI": `--upstream` with a file that has upstreams and routes says on stderr which ones it
/// replaces.
#[test]
fn upstream_flag_says_which_upstreams_and_routes_of_the_file_it_replaces() {
    let dir = crate::harness::TempDir::new();
    let path = dir.0.join("two.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [[upstreams]]\nname = \"api\"\nendpoints = [\"127.0.0.1:9\"]\n\
         [[upstreams]]\nname = \"web\"\nendpoints = [\"127.0.0.1:9\"]\n\
         [[routes]]\npath_prefix = \"/api\"\nupstream = \"api\"\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"web\"\n",
    )
    .unwrap();
    let out = edge_cmd()
        .args(["--check", "--config"])
        .arg(&path)
        .args(["--upstream", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--upstream replaces the 2 upstream(s) [api, web] and 2 route(s)"),
        "{err}"
    );
    // Without a file there is nothing to replace, and nothing is said.
    let out = edge_cmd()
        .args(["--check", "--upstream", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("replaces"));
}

/// DESIGN.md "Observability": a name that does not resolve is a warning of `--check` (exit 0), not an
/// error; a malformed endpoint stays an error.
#[test]
fn check_warns_about_a_name_that_does_not_resolve_and_exits_0() {
    let dir = crate::harness::TempDir::new();
    let hosts = dir.0.join("hosts");
    std::fs::write(&hosts, "later.test\n").unwrap();
    let path = dir.0.join("late.toml");
    std::fs::write(
        &path,
        "[[upstreams]]\nname = \"late\"\nendpoints = [\"later.test:8080\"]\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"late\"\n",
    )
    .unwrap();
    let out = edge_cmd()
        .args(["--check", "--config"])
        .arg(&path)
        .env("EDGE_TEST_HOSTS", &hosts)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning")
            && err.contains("upstreams[0].endpoints[0]")
            && err.contains("later.test"),
        "{err}"
    );
    std::fs::write(
        &path,
        "[[upstreams]]\nname = \"late\"\nendpoints = [\"no port here\"]\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"late\"\n",
    )
    .unwrap();
    assert_exit(&check_config(&path), 2);
}
