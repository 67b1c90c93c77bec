//! mcpgw.toml as text with positions: reading it into the file types while collecting every
//! unknown key and mistyped value, and finding the line and column a problem's path names.
//!
//! serde's derived `deny_unknown_fields` reports one error and stops. To report them all, the
//! text is parsed once into a spanned tree (`toml::de::DeTable`) and deserialised from it again
//! after each error, with the entry the error is about taken out of the tree: an unknown key
//! close to a known one is renamed to it (so `comand = "x"` is not also reported as a missing
//! `command`), an unknown value close to a known one is replaced by it, and anything else is
//! removed, together with the problems validation would then report beneath it (a removed
//! `transport` is not also "missing"). Rejected: a hand-written list of each table's keys,
//! which would drift from the serde types; serde's error names the keys it expected.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::Location;
use crate::file::ConfigFile;
use crate::validate::{self, ServerPaths};
use crate::{Config, ConfigError, Problem};

/// Deserialisation rounds before giving up: each round takes one entry out, so this bounds the
/// problems reported from one file, not its size.
const MAX_ROUNDS: usize = 200;

/// A config file read and validated as far as it goes.
pub(crate) struct Checked {
    /// The configuration as far as it is valid (every server that resolved); `None` when the
    /// file could not be read into the file types at all.
    pub config: Option<Config>,
    /// Where each of `config.servers` is written, in the same order.
    pub paths: Vec<ServerPaths>,
    /// Every problem, located and in line order.
    pub problems: Vec<Problem>,
    pub positions: Positions,
}

/// Where each path of a file is: its key, or an array item. Empty for JSON.
#[derive(Debug, Default)]
pub(crate) struct Positions(HashMap<String, Location>);

impl Positions {
    /// The location of `path`, else of the nearest table above it that the file has.
    pub(crate) fn locate(&self, path: &str) -> Option<Location> {
        let mut path = path;
        loop {
            if let Some(location) = self.0.get(path) {
                return Some(*location);
            }
            path = parent(path)?;
        }
    }
}

/// Read and validate mcpgw.toml text. `Err` only for a syntax error, which leaves no
/// document to read.
pub(crate) fn resolve(text: &str, source: &Path) -> Result<Checked, ConfigError> {
    let mut read = read(text, source)?;
    let mut problems = std::mem::take(&mut read.problems);
    let positions = Positions(
        read.index
            .iter()
            .map(|(path, offset)| (path.clone(), position(text, *offset)))
            .collect(),
    );
    let (config, paths) = match read.file.take() {
        Some(file) => {
            let resolved = validate::validate_partial(file, source);
            problems.extend(
                resolved
                    .problems
                    .into_iter()
                    .filter(|problem| !read.removed.iter().any(|path| beneath(&problem.path, path)))
                    .map(|mut problem| {
                        problem.location = positions.locate(&problem.path);
                        problem
                    }),
            );
            (Some(resolved.config), resolved.paths)
        }
        None => (None, Vec::new()),
    };
    sort(&mut problems);
    Ok(Checked {
        config,
        paths,
        problems,
        positions,
    })
}

/// In line order; problems without a location last, in the order they were found.
pub(crate) fn sort(problems: &mut [Problem]) {
    problems.sort_by_key(|problem| (problem.location.is_none(), problem.location));
}

/// The file types read from the text, and what had to be taken out to get them.
struct Read<'t> {
    text: &'t str,
    /// `None` when an error could not be traced to an entry (nothing to take out).
    file: Option<ConfigFile>,
    problems: Vec<Problem>,
    /// Paths of entries removed after an error; validation problems at or beneath them are
    /// consequences of that error, not news.
    removed: Vec<String>,
    /// Every path in the original text and the offset of its key (or array item).
    index: HashMap<String, usize>,
}

/// Whether `path` is `ancestor` or lies beneath it.
fn beneath(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// `servers[1].transport` for `servers[1].transport.url`, `servers[1]` for that, `servers`
/// for that; `None` at the top.
fn parent(path: &str) -> Option<&str> {
    let cut = path.rfind(['.', '['])?;
    Some(&path[..cut])
}

fn read<'t>(text: &'t str, source: &Path) -> Result<Read<'t>, ConfigError> {
    let root = DeTable::parse(text).map_err(|err| {
        let location = err.span().map_or(Location { line: 1, column: 1 }, |span| {
            position(text, span.start)
        });
        ConfigError::Parse {
            path: source.to_owned(),
            line: location.line,
            column: location.column,
            message: err.message().trim_end().to_owned(),
        }
    })?;
    let mut index = HashMap::new();
    index_table(root.get_ref(), &mut Vec::new(), &mut index);
    let mut read = Read {
        text,
        file: None,
        problems: Vec::new(),
        removed: Vec::new(),
        index,
    };
    let mut doc = root;
    let mut seen = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let err = match ConfigFile::deserialize(toml::de::Deserializer::from(doc.clone())) {
            Ok(file) => {
                read.file = Some(file);
                break;
            }
            Err(err) => err,
        };
        let message = err.message().trim_end().to_owned();
        // A repeat means taking the entry out did not help; stop rather than loop.
        let key = (message.clone(), err.span());
        if seen.contains(&key) {
            break;
        }
        seen.push(key);
        let fixed = err
            .span()
            .is_some_and(|span| read.fix(doc.get_mut(), &span, &message));
        if !fixed {
            let location = err.span().map(|span| position(text, span.start));
            read.problems.push(Problem {
                location,
                ..Problem::new("(file)", plain_words(&message))
            });
            break;
        }
    }
    Ok(read)
}

impl Read<'_> {
    /// Report the error at `span` and take its entry out of `doc`; false when no entry fits.
    fn fix(&mut self, doc: &mut DeTable<'_>, span: &Range<usize>, message: &str) -> bool {
        let Some(hit) = find(doc, span) else {
            return false;
        };
        match Mistake::parse(message) {
            Mistake::UnknownKey { key, expected } => self.unknown_key(doc, &hit, key, &expected),
            Mistake::UnknownValue { value, expected } => {
                self.unknown_value(doc, &hit, value, &expected)
            }
            Mistake::Other => {
                let entry = entry_of(&hit.path);
                self.problems.push(Problem {
                    location: Some(position(self.text, span.start)),
                    ..Problem::new(path_text(entry), plain_words(message))
                });
                self.remove(doc, entry)
            }
        }
    }

    fn unknown_key(
        &mut self,
        doc: &mut DeTable<'_>,
        hit: &Hit,
        key: &str,
        expected: &[&str],
    ) -> bool {
        // serde points at the key itself in a `[table]`, at the table in an inline table or
        // under a `[a.b]` header, and at an enclosing table for a value's own fields.
        let table = match hit.path.split_last() {
            Some((Seg::Key(last), parent)) if hit.on_key && last == key => parent.to_vec(),
            _ => match table_holding(doc, &hit.path, key) {
                Some(table) => table,
                None => return false,
            },
        };
        let Some(table_mut) = table_at(doc, &table) else {
            return false;
        };
        let Some((old_key, value)) = table_mut.remove_entry(key) else {
            return false;
        };
        let mut entry = table.clone();
        entry.push(Seg::Key(key.to_owned()));
        let suggestion = closest(key, expected);
        let hint = match suggestion {
            Some(known) => format!("did you mean `{known}`?"),
            None => known_keys(expected),
        };
        self.problems.push(Problem {
            location: Some(position(self.text, old_key.span().start)),
            ..Problem::new(path_text(&entry), "unknown key").hint(hint)
        });
        // Read on as if the user had written the key they meant.
        if let Some(known) = suggestion
            && !table_mut.contains_key(known)
        {
            let mut renamed = table.clone();
            renamed.push(Seg::Key(known.to_owned()));
            self.index.insert(path_text(&renamed), old_key.span().start);
            table_mut.insert(
                Spanned::new(old_key.span(), Cow::Owned(known.to_owned())),
                value,
            );
        }
        true
    }

    fn unknown_value(
        &mut self,
        doc: &mut DeTable<'_>,
        hit: &Hit,
        value: &str,
        expected: &[&str],
    ) -> bool {
        let entry = entry_of(&hit.path);
        let suggestion = closest(value, expected);
        let hint = match suggestion {
            Some(known) => format!("did you mean `{known}`?"),
            None => one_of(expected),
        };
        let span = hit.span.clone();
        self.problems.push(Problem {
            location: Some(position(self.text, span.start)),
            ..Problem::new(path_text(entry), format!("unknown value `{value}`")).hint(hint)
        });
        if let Some(known) = suggestion
            && let Some(slot) = value_at(doc, entry)
        {
            *slot = DeValue::String(Cow::Owned(known.to_owned()));
            return true;
        }
        // A table of unknown `type` means nothing: take the table out, not only its tag (which
        // would add a "missing field `type`").
        match entry.split_last() {
            Some((Seg::Key(key), parent)) if key == "type" && !parent.is_empty() => {
                self.remove(doc, parent)
            }
            _ => self.remove(doc, entry),
        }
    }

    /// Take the entry at `path` out of `doc` (an array item becomes an empty table, so the
    /// items after it keep their indexes) and remember it.
    fn remove(&mut self, doc: &mut DeTable<'_>, path: &[Seg]) -> bool {
        let removed = match path.split_last() {
            Some((Seg::Key(key), parent)) => table_at(doc, parent)
                .and_then(|table| table.remove(key.as_str()))
                .is_some(),
            Some((Seg::Index(_), _)) => match value_at(doc, path) {
                Some(item) => {
                    *item = DeValue::Table(DeTable::new());
                    true
                }
                None => false,
            },
            None => false,
        };
        if removed {
            self.removed.push(path_text(path));
        }
        removed
    }
}

/// What serde's message says went wrong. Its wording (`unknown field `x`, expected one of `a`,
/// `b``) has been stable since serde 1.0; the tests below pin it.
#[derive(Debug, PartialEq)]
enum Mistake<'m> {
    UnknownKey {
        key: &'m str,
        expected: Vec<&'m str>,
    },
    UnknownValue {
        value: &'m str,
        expected: Vec<&'m str>,
    },
    Other,
}

impl<'m> Mistake<'m> {
    fn parse(message: &'m str) -> Mistake<'m> {
        let (is_key, rest) = if let Some(rest) = message.strip_prefix("unknown field ") {
            (true, rest)
        } else if let Some(rest) = message.strip_prefix("unknown variant ") {
            (false, rest)
        } else {
            return Mistake::Other;
        };
        // The quoted names, in order: the unknown one, then the expected ones.
        let mut quoted = rest.split('`').skip(1).step_by(2);
        let Some(name) = quoted.next() else {
            return Mistake::Other;
        };
        let expected = quoted.collect();
        if is_key {
            Mistake::UnknownKey {
                key: name,
                expected,
            }
        } else {
            Mistake::UnknownValue {
                value: name,
                expected,
            }
        }
    }
}

/// The known name `word` is most likely a typo of: the closest by edit distance (an adjacent
/// transposition counts as one edit), at most a third of its length away (at least one edit),
/// ignoring case. Ties go to the first in serde's order, which is the declaration order.
pub(crate) fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    known
        .iter()
        .map(|candidate| {
            (
                strsim::osa_distance(&word, &candidate.to_lowercase()),
                *candidate,
            )
        })
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn known_keys(expected: &[&str]) -> String {
    if expected.is_empty() {
        "this table takes no other keys; remove the line".to_owned()
    } else {
        format!("the keys here are {}", quoted_list(expected))
    }
}

fn one_of(expected: &[&str]) -> String {
    format!("use one of {}", quoted_list(expected))
}

fn quoted_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// serde's type names in the words of TOML: `i64` is an integer, a map a table. A string value
/// is not repeated: it may be a credential pasted into the wrong place.
fn plain_words(message: &str) -> String {
    let mut message = message.to_owned();
    if let Some(start) = message.find("invalid type: string \"")
        && let Some(end) = message.find("\", expected")
        && end > start
    {
        message.replace_range(start..end + 1, "invalid type: a string");
    }
    let mut out = message
        .replace("expected i64", "expected an integer")
        .replace("expected f64", "expected a number")
        .replace("expected a sequence", "expected an array")
        .replace("invalid type: map", "invalid type: table")
        .replace("expected a map", "expected a table")
        .replace("invalid type: sequence", "invalid type: array")
        .replace(" as i128", "");
    for (prefix, words) in [
        (
            "expected internally tagged enum ",
            "expected a table with a `type`",
        ),
        ("expected struct ", "expected a table"),
        ("expected enum ", "expected a string"),
    ] {
        if let Some(at) = out.find(prefix) {
            let name_end = out[at + prefix.len()..]
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .map_or(out.len(), |end| at + prefix.len() + end);
            out.replace_range(at..name_end, words);
        }
    }
    out
}

/// One step of a path into the document.
#[derive(Clone, Debug, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `servers[1].transport.url`, as validation writes paths.
fn path_text(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// The entry holding the node at `path`: the node itself when it is a key's value, else the
/// nearest key above it (an item of an array belongs to its array's key) — except an item of
/// an array of tables (`[[servers]]`), which is an entry of its own.
fn entry_of(path: &[Seg]) -> &[Seg] {
    match path.split_last() {
        Some((Seg::Index(_), parent)) if parent.len() == 1 => path,
        Some((Seg::Index(_), parent)) => entry_of(parent),
        _ => path,
    }
}

/// The deepest node whose key or value has exactly `span`.
struct Hit {
    path: Vec<Seg>,
    span: Range<usize>,
    /// The span is the key's, not the value's.
    on_key: bool,
}

fn find(doc: &DeTable<'_>, span: &Range<usize>) -> Option<Hit> {
    fn consider(best: &mut Option<Hit>, path: &[Seg], span: &Range<usize>, on_key: bool) {
        if best.as_ref().is_none_or(|hit| path.len() > hit.path.len()) {
            *best = Some(Hit {
                path: path.to_vec(),
                span: span.clone(),
                on_key,
            });
        }
    }
    fn table(
        table: &DeTable<'_>,
        path: &mut Vec<Seg>,
        span: &Range<usize>,
        best: &mut Option<Hit>,
    ) {
        for (key, item) in table.iter() {
            path.push(Seg::Key(key.get_ref().to_string()));
            if key.span() == *span {
                consider(best, path, span, true);
            }
            if item.span() == *span {
                consider(best, path, span, false);
            }
            value(item.get_ref(), path, span, best);
            path.pop();
        }
    }
    fn value(node: &DeValue<'_>, path: &mut Vec<Seg>, span: &Range<usize>, best: &mut Option<Hit>) {
        match node {
            DeValue::Table(inner) => table(inner, path, span, best),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    if item.span() == *span {
                        consider(best, path, span, false);
                    }
                    value(item.get_ref(), path, span, best);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut best = None;
    table(doc, &mut Vec::new(), span, &mut best);
    best
}

/// The table at or beneath `path` that holds `key`, the first in the text.
fn table_holding(doc: &DeTable<'_>, path: &[Seg], key: &str) -> Option<Vec<Seg>> {
    type Found = Option<(usize, Vec<Seg>)>;
    fn table(table: &DeTable<'_>, path: &mut Vec<Seg>, key: &str, found: &mut Found) {
        if let Some((held, _)) = table.get_key_value(key) {
            let at = held.span().start;
            if found.as_ref().is_none_or(|(first, _)| at < *first) {
                *found = Some((at, path.clone()));
            }
        }
        for (name, item) in table.iter() {
            path.push(Seg::Key(name.get_ref().to_string()));
            value(item.get_ref(), path, key, found);
            path.pop();
        }
    }
    fn value(node: &DeValue<'_>, path: &mut Vec<Seg>, key: &str, found: &mut Found) {
        match node {
            DeValue::Table(inner) => table(inner, path, key, found),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    value(item.get_ref(), path, key, found);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut found = None;
    if path.is_empty() {
        table(doc, &mut Vec::new(), key, &mut found);
    } else {
        value(value_ref(doc, path)?, &mut path.to_vec(), key, &mut found);
    }
    found.map(|(_, path)| path)
}

fn value_ref<'a, 'i>(doc: &'a DeTable<'i>, path: &[Seg]) -> Option<&'a DeValue<'i>> {
    let (Seg::Key(first), rest) = path.split_first()? else {
        return None;
    };
    let mut current = doc.get(first.as_str())?.get_ref();
    for seg in rest {
        current = match (seg, current) {
            (Seg::Key(key), DeValue::Table(table)) => table.get(key.as_str())?.get_ref(),
            (Seg::Index(i), DeValue::Array(items)) => items.get(*i)?.get_ref(),
            _ => return None,
        };
    }
    Some(current)
}

fn value_at<'a, 'i>(doc: &'a mut DeTable<'i>, path: &[Seg]) -> Option<&'a mut DeValue<'i>> {
    let (Seg::Key(first), rest) = path.split_first()? else {
        return None;
    };
    let mut current = doc.get_mut(first.as_str())?.get_mut();
    for seg in rest {
        current = match (seg, current) {
            (Seg::Key(key), DeValue::Table(table)) => table.get_mut(key.as_str())?.get_mut(),
            (Seg::Index(i), DeValue::Array(items)) => items.get_mut(*i)?.get_mut(),
            _ => return None,
        };
    }
    Some(current)
}

fn table_at<'a, 'i>(doc: &'a mut DeTable<'i>, path: &[Seg]) -> Option<&'a mut DeTable<'i>> {
    if path.is_empty() {
        return Some(doc);
    }
    match value_at(doc, path)? {
        DeValue::Table(table) => Some(table),
        _ => None,
    }
}

/// Every path in the document and where it starts: a key's offset, or an array item's.
fn index_table(table: &DeTable<'_>, path: &mut Vec<Seg>, index: &mut HashMap<String, usize>) {
    for (key, item) in table.iter() {
        path.push(Seg::Key(key.get_ref().to_string()));
        index.insert(path_text(path), key.span().start);
        index_value(item.get_ref(), path, index);
        path.pop();
    }
}

fn index_value(value: &DeValue<'_>, path: &mut Vec<Seg>, index: &mut HashMap<String, usize>) {
    match value {
        DeValue::Table(table) => index_table(table, path, index),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                index.insert(path_text(path), item.span().start);
                index_value(item.get_ref(), path, index);
                path.pop();
            }
        }
        _ => {}
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn position(text: &str, offset: usize) -> Location {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    Location { line, column }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    /// Every problem of `text`, one a line, as `config check` lists them.
    fn check(text: &str, expect: Expect) {
        let actual = match resolve(text, Path::new("/etc/mcpgw/mcpgw.toml")) {
            Ok(checked) => {
                let mut out: Vec<String> =
                    checked.problems.iter().map(Problem::to_string).collect();
                if checked.config.is_none() {
                    out.push("(not read)".to_owned());
                }
                out.join("\n")
            }
            Err(err) => err.to_string(),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn every_typo_is_reported_in_line_order_with_the_key_it_meant() {
        check(
            r#"[gateway]
exposre = "search"

[[servers]]
name = "everything"
transport = { type = "stdio", comand = "npx", args = ["x"] }

[[servers]]
name = "docs"
timeout = 5
[servers.transport]
type = "http"
url = "https://mcp.example.com/mcp"
header = { A = "b" }

[retrieval]
stratgy = "hybrid"
"#,
            expect![[r#"
                2:1: gateway.exposre: unknown key (hint: did you mean `exposure`?)
                6:31: servers[0].transport.comand: unknown key (hint: did you mean `command`?)
                10:1: servers[1].timeout: unknown key (hint: did you mean `timeout_s`?)
                14:1: servers[1].transport.header: unknown key (hint: did you mean `headers`?)
                17:1: retrieval.stratgy: unknown key (hint: did you mean `strategy`?)"#]],
        );
    }

    #[test]
    fn a_renamed_key_is_read_as_meant_so_its_value_is_still_checked() {
        // `comand` is read as `command`: no "missing command", but its empty value is a problem.
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"stdio\", comand = \"\" }\n",
            expect![[r#"
                3:31: servers[0].transport.comand: unknown key (hint: did you mean `command`?)
                3:31: servers[0].transport.command: command must not be empty"#]],
        );
    }

    #[test]
    fn a_key_without_a_near_miss_lists_the_keys_that_belong() {
        check(
            "[gateway]\nlisten = \"127.0.0.1:1\"\nport = 3\n\n[tls]\ncert = \"x\"\n",
            expect![[r#"
                3:1: gateway.port: unknown key (hint: the keys here are `listen`, `exposure`, `prefix`, `token_budget`, `pinned`, `client_auth`, `allow_unauthenticated_loopback`, `allowed_hosts`, `allowed_origins`, `default_profile`, `jwt`, `log_format`)
                5:2: tls: unknown key (hint: the keys here are `gateway`, `servers`, `retrieval`, `store`, `network`, `profiles`, `approval`, `limits`, `audit`, `telemetry`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"none\", env = \"E\" }\ntransport = { type = \"http\", url = \"https://x.example\" }\n",
            expect![
                "3:25: servers[0].auth.env: unknown key (hint: this table takes no other keys; remove the line)"
            ],
        );
    }

    #[test]
    fn a_key_inside_a_value_is_found_beneath_the_table_serde_names() {
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"sse\", url = \"https://x.example\", headers = { A = { env = \"X\", prefx = \"B\" } } }\n",
            expect![
                "3:85: servers[0].transport.headers.A.prefx: unknown key (hint: did you mean `prefix`?)"
            ],
        );
    }

    #[test]
    fn unknown_values_suggest_the_known_one_and_a_bad_type_drops_its_table() {
        check(
            r#"[gateway]
exposure = "serach"

[[servers]]
name = "a"
transport = { type = "stido", command = "x" }

[[servers]]
name = "b"
transport = { type = "ws", url = "http://x" }

[[servers]]
name = "c"
transport = { url = "http://x" }
"#,
            expect![[r#"
                2:12: gateway.exposure: unknown value `serach` (hint: did you mean `search`?)
                6:22: servers[0].transport.type: unknown value `stido` (hint: did you mean `stdio`?)
                10:22: servers[1].transport.type: unknown value `ws` (hint: use one of `stdio`, `http`, `sse`)
                14:13: servers[2].transport: missing field `type`"#]],
        );
    }

    #[test]
    fn type_errors_are_worded_in_toml_terms_and_each_is_reported() {
        check(
            "[gateway]\ntoken_budget = \"lots\"\n\n[audit]\nmax_rows = 1e6\nretention_days = 99999999999999999999\n\n[[servers]]\nname = \"a\"\ntimeout_s = 0\ntransport = { type = \"stdio\", command = \"x\" }\nauth = { type = \"oauth\", scopes = \"read write\" }\n",
            expect![[r#"
                2:16: gateway.token_budget: invalid type: a string, expected an integer
                5:12: audit.max_rows: invalid type: floating point `1000000.0`, expected an integer
                6:18: audit.retention_days: invalid type: integer `99999999999999999999`, expected an integer
                10:1: servers[0].timeout_s: timeout must be between 1 and 300 seconds, got 0 (hint: leave it out for the default of 30)
                12:8: servers[0].auth: invalid type: a string, expected an array"#]],
        );
    }

    #[test]
    fn a_string_in_the_wrong_place_is_not_repeated() {
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"http\", url = \"https://x.example\", headers = \"Bearer sk-live-123\" }\n",
            expect!["3:13: servers[0].transport: invalid type: a string, expected a table"],
        );
    }

    #[test]
    fn validation_problems_point_at_their_key_or_the_nearest_table() {
        check(
            "[[servers]]\ntransport = { type = \"http\", url = \"ftp://x/mcp\" }\n\n[network]\nallow = [\"localhost\", \"10.0.0.1/8\"]\n",
            expect![[r#"
                1:1: servers[0].name: missing server name (hint: add name = "..." using letters, digits, `-` and `_`)
                2:30: servers[0].transport.url: url scheme `ftp` is not supported (hint: use an http:// or https:// url)
                5:23: network.allow[1]: "10.0.0.1/8" is not a valid CIDR: it has host bits set; did you mean "10.0.0.0/8"? (hint: a CIDR is the first address of a block and its prefix length, such as "10.0.0.0/8" or "fd00::/8")"#]],
        );
    }

    #[test]
    fn a_syntax_error_is_one_error_with_its_position() {
        check(
            "[gateway]\nlisten = \n",
            expect![
                "/etc/mcpgw/mcpgw.toml:2:10: string values must be quoted, expected literal string"
            ],
        );
        check("", expect![""]);
    }

    #[test]
    fn serde_messages_are_understood() {
        assert_eq!(
            Mistake::parse("unknown field `port`, expected one of `listen`, `exposure`"),
            Mistake::UnknownKey {
                key: "port",
                expected: vec!["listen", "exposure"]
            }
        );
        assert_eq!(
            Mistake::parse("unknown field `env`, there are no fields"),
            Mistake::UnknownKey {
                key: "env",
                expected: vec![]
            }
        );
        assert_eq!(
            Mistake::parse("unknown variant `ws`, expected `stdio` or `http`"),
            Mistake::UnknownValue {
                value: "ws",
                expected: vec!["stdio", "http"]
            }
        );
        assert_eq!(Mistake::parse("missing field `type`"), Mistake::Other);
    }

    #[test]
    fn near_misses_are_suggested_and_far_ones_are_not() {
        let gateway = ["listen", "exposure", "prefix", "token_budget", "pinned"];
        for (word, expected) in [
            ("exposre", Some("exposure")),
            ("exposrue", Some("exposure")),
            ("EXPOSURE", Some("exposure")),
            ("lisen", Some("listen")),
            ("token-budget", Some("token_budget")),
            ("port", None),
            ("x", None),
            ("pinnedtools", None),
        ] {
            assert_eq!(closest(word, &gateway), expected, "{word}");
        }
        assert_eq!(
            closest("comand", &["command", "args", "env", "cwd"]),
            Some("command")
        );
        assert_eq!(
            closest("stratgy", &["strategy", "balance"]),
            Some("strategy")
        );
        assert_eq!(closest("timeout", &["timeout_s"]), Some("timeout_s"));
        assert_eq!(closest("a", &[]), None);
    }
}
