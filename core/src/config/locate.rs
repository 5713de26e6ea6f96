//! The line of a configuration key in its file, for errors found after parsing (DESIGN.md "Configuration":
//! errors name the file, the key and the reason; a line number gets a reader there faster). Keys are the
//! dotted paths the validation names: `server.timeouts.idle`, `upstreams[1].endpoints[0]`,
//! `routes[2].upstream`.

use toml_edit::{ImDocument, Item, Table, Value};

use super::ConfigError;

/// Appends ` (line N)` to the reason of each error in `errors` that names `file` and a key found in
/// `text` (the file's contents), unless the reason has a line already.
pub fn add_lines(text: &str, file: &str, errors: &mut [ConfigError]) {
    let Ok(doc) = ImDocument::parse(text) else {
        return;
    };
    for e in errors
        .iter_mut()
        .filter(|e| e.file == file && !e.reason.contains("(line "))
    {
        if let Some(at) = offset_of(doc.as_table(), &e.key) {
            let line = text[..at.min(text.len())].matches('\n').count() + 1;
            e.reason = format!("{} (line {line})", e.reason);
        }
    }
}

/// One step of a key path.
enum Step<'k> {
    Name(&'k str),
    Index(usize),
}

/// `a.b[1].c` → `a`, `b`, `1`, `c`; `None` for a malformed index.
fn steps(key: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        out.push(Step::Name(name));
        for i in rest.split(['[', ']']).filter(|s| !s.is_empty()) {
            out.push(Step::Index(i.parse().ok()?));
        }
    }
    Some(out)
}

/// Where the search stands in the document.
#[derive(Clone, Copy)]
enum Node<'d> {
    Item(&'d Item),
    Table(&'d Table),
    Value(&'d Value),
}

/// The byte offset where the entry at `key` starts in the document `root`.
fn offset_of(root: &Table, key: &str) -> Option<usize> {
    let mut node = Node::Table(root);
    for step in steps(key)? {
        node = match (node, step) {
            (Node::Table(t), Step::Name(n)) => Node::Item(t.get(n)?),
            (Node::Item(Item::Table(t)), Step::Name(n)) => Node::Item(t.get(n)?),
            (Node::Item(Item::Value(Value::InlineTable(t))), Step::Name(n))
            | (Node::Value(Value::InlineTable(t)), Step::Name(n)) => Node::Value(t.get(n)?),
            (Node::Item(Item::ArrayOfTables(a)), Step::Index(i)) => Node::Table(a.get(i)?),
            (Node::Item(Item::Value(Value::Array(a))), Step::Index(i))
            | (Node::Value(Value::Array(a)), Step::Index(i)) => Node::Value(a.get(i)?),
            _ => return None,
        };
    }
    let span = match node {
        Node::Item(i) => i.span(),
        Node::Table(t) => t.span(),
        Node::Value(v) => v.span(),
    };
    span.map(|s| s.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(text: &str, key: &str) -> Option<usize> {
        let mut e = [ConfigError {
            file: "f".into(),
            key: key.into(),
            reason: "bad".into(),
        }];
        add_lines(text, "f", &mut e);
        let r = &e[0].reason;
        r.strip_prefix("bad (line ")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|n| n.parse().ok())
    }

    #[test]
    fn keys_of_tables_arrays_of_tables_arrays_and_inline_tables_have_their_lines() {
        let text = "[server]\nlisten = \"x\"\n\n[server.timeouts]\nidle = \"0s\"\n\n\
                    [[upstreams]]\nname = \"a\"\n\n[[upstreams]]\nname = \"b\"\n\
                    endpoints = [\n  \"one:1\",\n  { address = \"two:2\", weight = 0 },\n]\n";
        assert_eq!(line_of(text, "server.timeouts.idle"), Some(5));
        assert_eq!(line_of(text, "server.listen"), Some(2));
        assert_eq!(line_of(text, "upstreams[1].name"), Some(11));
        assert_eq!(line_of(text, "upstreams[1].endpoints[0]"), Some(13));
        assert_eq!(line_of(text, "upstreams[1].endpoints[1].weight"), Some(14));
        assert_eq!(line_of(text, "upstreams[5].name"), None);
        assert_eq!(line_of(text, "routes"), None);
    }
}
