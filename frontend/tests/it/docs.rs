//! The user documentation against the real binary: README.md and the guides in docs/ (docs/DESIGN.md,
//! the design contract, is not checked here).
//!
//! Conventions these tests hold the documents to:
//!
//! - Every ```` ```toml ```` block is a whole configuration file and must pass `edge --check --config
//!   FILE` (exit 0), unless its first line is the marker `# part of a config file`: such a fragment is
//!   checked with [`FRAGMENT_BASE`] appended (one upstream, `docs-base`, and a route `/` to it), so it
//!   needs no `[[upstreams]]` or `[[routes]]` of its own and may add its own. A fragment must not use a
//!   table the base has (none but the arrays of tables).
//! - Files an example names are made here: the string value of every `cert`, `key` (but a rate limit's), `tls_ca`,
//!   `tls_client_cert` and `tls_client_key` key is replaced by a file generated at test time (a CA, a
//!   leaf for `localhost` signed by it, a client certificate), and `access_path` by a path in the test's
//!   directory, so an example may write any path.
//! - Endpoint and listener addresses in examples are IP literals (or `localhost`): `edge --check`
//!   resolves names, and a name that does not resolve is an error.
//! - Every relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) outside code blocks
//!   resolves to a file or directory of the repository, and an anchor to a heading of the target
//!   Markdown file, by GitHub's rule (lower case; letters, digits, `-` and `_` kept, spaces become `-`,
//!   the rest dropped; a repeated heading gets `-1`, `-2`, ...).
//! - docs/configuration.md has a table under a heading naming each section (`` ## `[server]` ``,
//!   `` ## `[[upstreams]]` ``, ...), one row per key (`` | `key` | default | meaning | ``). Every key of
//!   the default configuration (`edge --print-default-config`, and the keys commented out in
//!   deploy/edge.toml) has its row, and for the keys the default file sets to their default the default
//!   column shows that value as written in TOML.
//!
//! Examples that use keys the binary does not accept yet fail here, with the file and line of the block.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use crate::harness::{check_config, run_edge, Ca, TempDir};

/// The first line of a fragment.
const FRAGMENT_MARKER: &str = "# part of a config file";

/// Appended to a fragment before it is checked.
const FRAGMENT_BASE: &str = "\n[[upstreams]]\nname = \"docs-base\"\nendpoints = [\"127.0.0.1:9\"]\n\n[[routes]]\npath_prefix = \"/\"\nupstream = \"docs-base\"\n";

/// Keys of the default configuration whose values there are examples, not defaults.
const EXAMPLE_VALUES: [&str; 4] = [
    "upstreams.name",
    "upstreams.endpoints",
    "routes.path_prefix",
    "routes.upstream",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and docs/*.md but DESIGN.md.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| p.file_name().is_some_and(|n| n != "DESIGN.md"))
        .collect();
    guides.sort();
    out.extend(guides);
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The name of `p` relative to the repository, for messages.
fn shown(p: &Path) -> String {
    p.strip_prefix(repo()).unwrap_or(p).display().to_string()
}

/// A fenced code block: its info string, the line of its opening fence (1-based), its text.
struct Block {
    info: String,
    line: usize,
    text: String,
}

/// Every fenced code block of a Markdown text.
fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        if let Some(b) = open.as_mut().filter(|_| !fence) {
            b.text.push_str(line);
            b.text.push('\n');
        } else if open.is_some() {
            out.extend(open.take());
        } else if fence {
            open = Some(Block {
                info: line.trim_start().trim_start_matches('`').trim().to_string(),
                line: i + 1,
                text: String::new(),
            });
        }
    }
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
fn prose(md: &str) -> Vec<(usize, &str)> {
    let mut inside = false;
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if !inside {
            out.push((i + 1, line));
        }
    }
    out
}

/// `text` with the string value of every `key = "..."` replaced by `value` (a key preceded by a
/// letter, digit or `_` is another key: `tls_client_key` is not `key`), except a rate limit's `key`
/// (`"client_ip"`, `"route"`, `"header:NAME"`), which names no file.
fn is_limit_key(value: &str) -> bool {
    matches!(value, "client_ip" | "route") || value.starts_with("header:")
}

fn substitute(text: &str, key: &str, value: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + key.len()..].trim_start();
        let own_key = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        match after
            .strip_prefix('=')
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix('"'))
        {
            Some(quoted) if own_key && !is_limit_key(&quoted[..quoted.find('"').unwrap_or(0)]) => {
                let end = quoted.find('"').expect("a closed string");
                let value_start = rest.len() - quoted.len();
                out.push_str(&rest[..value_start]);
                out.push_str(value);
                rest = &quoted[end..];
            }
            _ => {
                out.push_str(&rest[..at + key.len()]);
                rest = &rest[at + key.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn every_toml_example_passes_edge_check() {
    let dir = TempDir::new();
    let ca = Ca::new("docs test CA");
    let (cert, key) = ca
        .chain("localhost", &["localhost", "127.0.0.1"])
        .write(&dir, "leaf");
    let (client_cert, client_key) = ca.client("docs-client").write(&dir, "client");
    let ca_path = ca.write(&dir, "ca");
    let files = [
        ("cert", cert),
        ("key", key),
        ("tls_ca", ca_path),
        ("tls_client_cert", client_cert),
        ("tls_client_key", client_key),
        ("access_path", dir.0.join("access.log")),
    ];
    let mut checked = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        for (n, b) in blocks(&read(&doc)).into_iter().enumerate() {
            if b.info != "toml" {
                continue;
            }
            let mut text = b.text.clone();
            for (k, path) in &files {
                text = substitute(&text, k, path.to_str().unwrap());
            }
            if b.text.lines().next() == Some(FRAGMENT_MARKER) {
                text.push_str(FRAGMENT_BASE);
            }
            let file = dir.0.join(format!(
                "{}-{n}.toml",
                doc.file_stem().unwrap().to_string_lossy()
            ));
            std::fs::write(&file, &text).unwrap();
            let out = check_config(&file);
            checked += 1;
            if out.status.code() != Some(0) {
                failures.push(format!(
                    "{}:{}: edge --check exited {:?}:\n{}",
                    shown(&doc),
                    b.line,
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim_end()
                ));
            }
        }
    }
    assert!(checked >= 10, "only {checked} toml blocks found");
    assert!(
        failures.is_empty(),
        "{} of {checked} toml blocks fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of a Markdown text (outside code blocks).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(md) {
        let Some(text) = line
            .strip_prefix('#')
            .map(|t| t.trim_start_matches('#'))
            .filter(|t| t.starts_with(' '))
        else {
            continue;
        };
        let base = slug(text.trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(match *n {
            0 => base,
            k => format!("{base}-{k}"),
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links of a line: what is between `](` and the matching `)`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        let Some(end) = tail.find(')') else { break };
        out.push(&tail[..end]);
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in documents() {
        let md = read(&doc);
        for (line_no, line) in prose(&md) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target, None),
                };
                let file = match path {
                    "" => doc.clone(),
                    p => doc.parent().unwrap().join(p),
                };
                let here = format!("{}:{line_no}: ({target})", shown(&doc));
                if !file.exists() {
                    broken.push(format!("{here}: no such file {}", shown(&file)));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    broken.push(format!(
                        "{here}: an anchor into a file that is not Markdown"
                    ));
                } else if !anchors(&read(&file)).contains(anchor) {
                    broken.push(format!("{here}: no heading #{anchor} in {}", shown(&file)));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `section.key` → value of every key of a TOML table, sections named by their dotted path (an
/// element of an array of tables is named like the array).
fn flatten(section: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
    for (k, v) in table {
        let path = match section {
            "" => k.clone(),
            s => format!("{s}.{k}"),
        };
        match v {
            toml::Value::Table(t) => flatten(&path, t, out),
            toml::Value::Array(a) if !a.is_empty() && a.iter().all(toml::Value::is_table) => {
                for t in a.iter().filter_map(toml::Value::as_table) {
                    flatten(&path, t, out);
                }
            }
            v => {
                out.insert(path, v.clone());
            }
        }
    }
}

/// The `section.key` of every line of `edge_toml` that sets a key, commented out or not, under the
/// table header (commented out or not) before it.
fn keys_in_comments(edge_toml: &str) -> BTreeSet<String> {
    let mut section = String::new();
    let mut out = BTreeSet::new();
    for line in edge_toml.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix('#').map_or(line, str::trim_start);
        if let Some(header) = line.strip_prefix('[') {
            if let Some(end) = header.find(']') {
                section = header[..end].trim_matches(['[', ']']).to_string();
            }
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() && line[name.len()..].trim_start().starts_with('=') {
            out.insert(format!("{section}.{name}"));
        }
    }
    out
}

/// The rows of docs/configuration.md: `section.key` → the default column.
fn documented_keys(md: &str) -> BTreeMap<String, String> {
    let mut section = None;
    let mut out = BTreeMap::new();
    for (_, line) in prose(md) {
        if line.starts_with('#') {
            section = line
                .split('`')
                .nth(1)
                .filter(|s| s.starts_with('['))
                .map(|s| s.trim_matches(['[', ']']).to_string());
            continue;
        }
        let (Some(section), Some(row)) = (&section, line.strip_prefix("| `")) else {
            continue;
        };
        let Some((key, rest)) = row.split_once('`') else {
            continue;
        };
        let default = rest.split('|').nth(1).unwrap_or_default().trim();
        out.insert(format!("{section}.{key}"), default.to_string());
    }
    out
}

#[test]
fn configuration_md_lists_every_key_of_the_default_config() {
    let out = run_edge(["--print-default-config"]);
    assert_eq!(out.status.code(), Some(0));
    let default: toml::Table = toml::from_str(&String::from_utf8(out.stdout).unwrap())
        .expect("the default configuration is TOML");
    let mut values = BTreeMap::new();
    flatten("", &default, &mut values);
    let commented = keys_in_comments(&read(&repo().join("deploy/edge.toml")));
    let doc = documented_keys(&read(&repo().join("docs/configuration.md")));

    let mut problems = Vec::new();
    for key in values.keys().chain(&commented) {
        if !doc.contains_key(key) {
            problems.push(format!("{key}: no row in docs/configuration.md"));
        }
    }
    for (key, value) in &values {
        let Some(cell) = doc.get(key) else { continue };
        let written = value.to_string();
        if !EXAMPLE_VALUES.contains(&key.as_str()) && !cell.contains(&written) {
            problems.push(format!(
                "{key}: the default config has {written}, docs/configuration.md says {cell}"
            ));
        }
    }
    assert!(values.len() > 40, "only {} keys found", values.len());
    assert!(commented.len() > 15, "only {} keys found", commented.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_docs_test_helpers_read_what_they_should() {
    assert_eq!(slug("`[server.tls]`"), "servertls");
    assert_eq!(slug("io_uring ring setup"), "io_uring-ring-setup");
    assert_eq!(
        slug("Configuration (TOML)"),
        "configuration-toml",
        "punctuation dropped"
    );
    assert_eq!(
        substitute(
            "certificates = [{ cert = \"a.pem\", key = \"a.key\" }]\ntls_client_key = \"c.key\"\n",
            "key",
            "/k"
        ),
        "certificates = [{ cert = \"a.pem\", key = \"/k\" }]\ntls_client_key = \"c.key\"\n"
    );
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and [`b`](#y)."),
        ["docs/a.md#x", "#y"]
    );
    let md = "# T\n```toml\n# not a heading\n```\n## A b\n## A b\n";
    assert_eq!(
        anchors(md).into_iter().collect::<Vec<_>>(),
        ["a-b", "a-b-1", "t"]
    );
    assert_eq!(
        keys_in_comments("[server]\nlisten = 1\n# [server.tls]\n# alpn = []\n#   { cert = 1 }\n"),
        BTreeSet::from(["server.listen".to_string(), "server.tls.alpn".to_string()])
    );
}
