//! Changes to the `[[servers]]` of an mcpgw.toml, made with `toml_edit` so that every part of
//! the file not changed keeps its comments, order and layout: what the admin API's server
//! writes do to the file. Text in, text out, no IO: the caller reads the file, checks the result
//! with the start-up loader ([`crate::parse`]) and writes it.
//!
//! A server arrives as JSON in the shape of a `[[servers]]` table (`{"name": ..., "transport":
//! {...}}`): objects become inline tables (one too long for a line of its own, such as a
//! transport with its environment, becomes a `[servers.transport]` table, as `mcpgw import`
//! writes it), and JSON `null` is refused (TOML has none: leave the key out). A change (PATCH)
//! is a JSON merge patch (RFC 7396) applied to the table as written: `null` removes a key, an
//! object merges into the table it names, anything else replaces the value and keeps the
//! comment beside it. Servers pasted as `mcpServers` JSON go through [`crate::import`] first
//! and are added as the TOML it writes ([`ConfigEdit::add_imported`]).
//!
//! This module checks only what it needs to find its way (a name to look a server up by, the
//! shape of `servers`); whether the result is a valid configuration is the loader's to say.
//!
//! Rejected: rendering the whole file again from the parsed configuration (every comment and
//! the operator's layout would be lost), and editing the text line by line (tables, inline
//! tables and dotted keys make "a server's lines" ambiguous).

use std::path::Path;

use serde_json::{Map, Value as Json};
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike, Value};

use crate::error::one_line;

/// A `key = { ... }` line longer than this is written as a table of its own instead (as
/// `mcpgw import` does).
const MAX_INLINE: usize = 120;

/// An mcpgw.toml being changed.
pub struct ConfigEdit {
    doc: DocumentMut,
}

/// Why a change cannot be made to the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file is `mcpServers` JSON, served as it is.
    #[error(
        "the gateway serves {file}, an mcpServers JSON file, as it is: convert it to mcpgw.toml with `mcpgw import` to change its servers here"
    )]
    McpServersJson { file: String },
    /// The file does not parse as TOML (it changed since it was loaded).
    #[error("the configuration file is not valid TOML now: {0}")]
    NotToml(String),
    /// `servers` is written in a shape this module does not edit.
    #[error(
        "`servers` is written as {0}; write each server as a [[servers]] table to change servers here"
    )]
    ServersNotTables(&'static str),
    #[error("no server named '{0}' in the configuration")]
    NoSuchServer(String),
    #[error("a server named '{0}' is configured already")]
    Exists(String),
    /// What was given is not a server table.
    #[error("{0}")]
    NotAServer(String),
}

impl ConfigEdit {
    /// The file `path` holds `text`; refused when it is `mcpServers` JSON or not TOML.
    pub fn parse(text: &str, path: &Path) -> Result<ConfigEdit, EditError> {
        if crate::is_json(path, text) {
            return Err(EditError::McpServersJson {
                file: path.display().to_string(),
            });
        }
        let doc = text
            .parse::<DocumentMut>()
            .map_err(|error| EditError::NotToml(one_line(&error.to_string())))?;
        Ok(ConfigEdit { doc })
    }

    /// The file's text with the changes made.
    pub fn text(&self) -> String {
        self.doc.to_string()
    }

    /// The names of the servers, in file order (a table without a string `name` is skipped).
    pub fn server_names(&self) -> Result<Vec<String>, EditError> {
        Ok(self
            .servers()?
            .map(|servers| servers.iter().filter_map(name_of_table).collect())
            .unwrap_or_default())
    }

    /// Adds `server` (a `[[servers]]` table as JSON) after the last server; returns its name.
    pub fn add(&mut self, server: &Map<String, Json>) -> Result<String, EditError> {
        let name = match server.get("name") {
            Some(Json::String(name)) => name.clone(),
            _ => {
                return Err(EditError::NotAServer(
                    "a server needs a `name`, a string such as \"github\"".to_owned(),
                ));
            }
        };
        if self.index_of(&name).is_ok() {
            return Err(EditError::Exists(name));
        }
        let mut table = table_from(server, "")?;
        table.decor_mut().set_prefix("\n");
        self.servers_mut()?.push(table);
        Ok(name)
    }

    /// Adds every server of `toml`, the text [`crate::import_mcp_servers_json`] wrote, as it
    /// wrote them; returns their names. None is added when one of them exists already.
    pub fn add_imported(&mut self, toml: &str) -> Result<Vec<String>, EditError> {
        let imported = toml
            .parse::<DocumentMut>()
            .map_err(|error| EditError::NotAServer(one_line(&error.to_string())))?;
        let tables: Vec<Table> = match imported.get("servers") {
            Some(Item::ArrayOfTables(servers)) => servers.iter().cloned().collect(),
            _ => Vec::new(),
        };
        if tables.is_empty() {
            return Err(EditError::NotAServer("the JSON names no server".to_owned()));
        }
        let names: Vec<String> = tables.iter().filter_map(name_of_table).collect();
        if let Some(taken) = names.iter().find(|name| self.index_of(name).is_ok()) {
            return Err(EditError::Exists(taken.clone()));
        }
        let servers = self.servers_mut()?;
        for mut table in tables {
            forget_positions(&mut table);
            table.decor_mut().set_prefix("\n");
            servers.push(table);
        }
        Ok(names)
    }

    /// Replaces the table of server `name` with `server`, which may leave its name out. The
    /// comment above the table stays.
    pub fn replace(&mut self, name: &str, server: &Map<String, Json>) -> Result<(), EditError> {
        same_name(name, server)?;
        let at = self.index_of(name)?;
        let mut named = server.clone();
        named.insert("name".to_owned(), Json::String(name.to_owned()));
        let mut table = table_from(&named, "")?;
        let servers = self.servers_mut()?;
        if let Some(old) = servers.get(at) {
            table.set_position(old.position());
            *table.decor_mut() = old.decor().clone();
        }
        servers.replace(at, table);
        Ok(())
    }

    /// Applies `patch` to server `name`'s table as a JSON merge patch (see the module docs).
    pub fn patch(&mut self, name: &str, patch: &Map<String, Json>) -> Result<(), EditError> {
        same_name(name, patch)?;
        let mut patch = patch.clone();
        patch.remove("name");
        let table = self.table_mut(name)?;
        merge(table, Shape::Table, &patch, "")
    }

    /// Removes server `name`'s table, with the comment above it.
    pub fn remove(&mut self, name: &str) -> Result<(), EditError> {
        let at = self.index_of(name)?;
        let servers = self.servers_mut()?;
        servers.remove(at);
        if servers.is_empty() {
            self.doc.remove("servers");
        }
        Ok(())
    }

    /// Sets server `name`'s `enabled`: `enabled = false` to disable it; to enable it, an
    /// existing `enabled` is set to `true` (none is added: true is the default).
    pub fn set_enabled(&mut self, name: &str, enabled: bool) -> Result<(), EditError> {
        let table = self.table_mut(name)?;
        if enabled && !table.contains_key("enabled") {
            return Ok(());
        }
        set(table, Shape::Table, "enabled", Value::from(enabled));
        Ok(())
    }

    /// The `[[servers]]` tables; `None` when the file has none.
    fn servers(&self) -> Result<Option<&ArrayOfTables>, EditError> {
        match self.doc.get("servers") {
            None => Ok(None),
            Some(Item::ArrayOfTables(servers)) => Ok(Some(servers)),
            Some(Item::Value(Value::Array(array))) if array.is_empty() => Ok(None),
            Some(Item::Value(Value::Array(_))) => Err(EditError::ServersNotTables(
                "an inline array (servers = [...])",
            )),
            Some(_) => Err(EditError::ServersNotTables("something other than tables")),
        }
    }

    /// The `[[servers]]` tables, made when the file has none.
    fn servers_mut(&mut self) -> Result<&mut ArrayOfTables, EditError> {
        if self.servers()?.is_none() {
            if self.doc.as_table().is_empty() {
                // A file of comments only keeps them at its top, not after the new tables (and
                // gets them back as they were once its servers are removed again).
                let trailing = self.doc.trailing().as_str().unwrap_or_default().to_owned();
                self.doc.as_table_mut().decor_mut().set_prefix(trailing);
                self.doc.set_trailing("");
            }
            self.doc
                .insert("servers", Item::ArrayOfTables(ArrayOfTables::new()));
        }
        match self.doc.get_mut("servers") {
            Some(Item::ArrayOfTables(servers)) => Ok(servers),
            _ => Err(EditError::ServersNotTables("something other than tables")),
        }
    }

    fn index_of(&self, name: &str) -> Result<usize, EditError> {
        self.servers()?
            .and_then(|servers| {
                servers
                    .iter()
                    .position(|table| name_of_table(table).as_deref() == Some(name))
            })
            .ok_or_else(|| EditError::NoSuchServer(name.to_owned()))
    }

    fn table_mut(&mut self, name: &str) -> Result<&mut Table, EditError> {
        let at = self.index_of(name)?;
        self.servers_mut()?
            .get_mut(at)
            .ok_or_else(|| EditError::NoSuchServer(name.to_owned()))
    }
}

fn name_of_table(table: &Table) -> Option<String> {
    table.get("name")?.as_str().map(str::to_owned)
}

/// A `name` in `fields`, if any, must be `name`: a server is not renamed in place.
fn same_name(name: &str, fields: &Map<String, Json>) -> Result<(), EditError> {
    match fields.get("name") {
        None => Ok(()),
        Some(Json::String(given)) if given == name => Ok(()),
        Some(_) => Err(EditError::NotAServer(format!(
            "the name of server '{name}' cannot change: remove it and add it under the new name"
        ))),
    }
}

/// `fields` as a table: `name` and `type` first, `transport` last, objects inline unless their
/// line would be too long.
fn table_from(fields: &Map<String, Json>, at: &str) -> Result<Table, EditError> {
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort_by_key(|key| match key.as_str() {
        "name" | "type" => 0,
        "transport" => 2,
        _ => 1,
    });
    let mut table = Table::new();
    for key in keys {
        let path = join(at, key);
        let item = match &fields[key] {
            Json::Object(inner) => {
                let value = toml_value(&fields[key], &path)?;
                if key.len() + 3 + value.to_string().len() > MAX_INLINE {
                    Item::Table(table_from(inner, &path)?)
                } else {
                    Item::Value(value)
                }
            }
            other => Item::Value(toml_value(other, &path)?),
        };
        table.insert(key, item);
    }
    Ok(table)
}

/// JSON as a TOML value; `at` names it in an error.
fn toml_value(json: &Json, at: &str) -> Result<Value, EditError> {
    Ok(match json {
        Json::Null => {
            return Err(EditError::NotAServer(format!(
                "{at}: null is not a TOML value; leave the key out"
            )));
        }
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) if n.is_f64() => Value::from(f),
            _ => {
                return Err(EditError::NotAServer(format!(
                    "{at}: {n} is too large for a TOML integer"
                )));
            }
        },
        Json::String(text) => Value::from(text.as_str()),
        Json::Array(items) => {
            let mut array = toml_edit::Array::new();
            for (i, item) in items.iter().enumerate() {
                array.push(toml_value(item, &format!("{at}[{i}]"))?);
            }
            Value::Array(array)
        }
        Json::Object(fields) => {
            let mut inline = InlineTable::new();
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort_by_key(|key| key.as_str() != "type");
            for key in keys {
                inline.insert(key, toml_value(&fields[key], &join(at, key))?);
            }
            Value::InlineTable(inline)
        }
    })
}

/// Whether a table is written inline (`{ a = 1, b = 2 }`) or as lines of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Inline,
    Table,
}

/// RFC 7396 on a TOML table: `null` removes, an object merges into the table it names (or
/// replaces a value that is not one), anything else replaces the value.
fn merge(
    table: &mut dyn TableLike,
    shape: Shape,
    patch: &Map<String, Json>,
    at: &str,
) -> Result<(), EditError> {
    for (key, value) in patch {
        let path = join(at, key);
        match value {
            Json::Null => {
                table.remove(key);
            }
            Json::Object(fields) => match table.get_mut(key) {
                Some(Item::Value(Value::InlineTable(inner))) => {
                    merge(inner, Shape::Inline, fields, &path)?
                }
                Some(Item::Table(inner)) => merge(inner, Shape::Table, fields, &path)?,
                _ => {
                    let mut inline = InlineTable::new();
                    merge(&mut inline, Shape::Inline, fields, &path)?;
                    set(table, shape, key, Value::InlineTable(inline));
                }
            },
            other => set(table, shape, key, toml_value(other, &path)?),
        }
    }
    Ok(())
}

/// Sets `key` to `value`, keeping the spacing and comment around the value it replaces; a key
/// added to an inline table takes over the spacing before its `}`.
fn set(table: &mut dyn TableLike, shape: Shape, key: &str, mut value: Value) {
    match table.get_mut(key) {
        Some(Item::Value(old)) => {
            *value.decor_mut() = old.decor().clone();
            *old = value;
        }
        Some(item) => *item = Item::Value(value),
        None => {
            let last = table.iter_mut().last().map(|(_, item)| item);
            if shape == Shape::Inline
                && let Some(Item::Value(last)) = last
                && let Some(closing) = last.decor().suffix().cloned()
            {
                last.decor_mut().set_suffix("");
                value.decor_mut().set_suffix(closing);
            }
            table.insert(key, Item::Value(value));
        }
    }
}

/// Tables from another document carry their places in it; without one, a table is written
/// after the one before it.
fn forget_positions(table: &mut Table) {
    table.set_position(None);
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(inner) => forget_positions(inner),
            Item::ArrayOfTables(array) => array.iter_mut().for_each(forget_positions),
            _ => {}
        }
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    const FILE: &str = r#"# The gateway's settings.
[gateway]
exposure = "passthrough"   # every tool listed

# Upstreams.
[[servers]]
name = "time"   # the clock
timeout_s = 10  # seconds
transport = { type = "stdio", command = "mcp-server-time" }

# Notes, kept by hand.
[[servers]]
name = "notes"

[servers.transport]
type = "stdio"
command = "notes-mcp"   # from PyPI

[network]
allow = ["127.0.0.1"]
"#;

    fn edit() -> ConfigEdit {
        ConfigEdit::parse(FILE, Path::new("mcpgw.toml")).expect("parses")
    }

    fn object(json: Json) -> Map<String, Json> {
        match json {
            Json::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    /// The text after `change`, which must load, or the error.
    fn check(change: impl FnOnce(&mut ConfigEdit) -> Result<(), EditError>, expect: Expect) {
        let mut edit = edit();
        let actual = match change(&mut edit) {
            Ok(()) => {
                let text = edit.text();
                if let Err(error) = crate::parse_toml(&text, Path::new("mcpgw.toml")) {
                    panic!("{error}\n{text}");
                }
                text
            }
            Err(error) => format!("error: {error}"),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn an_added_server_follows_the_last_and_everything_else_stays_as_written() {
        check(
            |edit| {
                let added = edit.add(&object(json!({
                    "transport": {"command": "uvx", "args": ["mcp-server-fetch"], "type": "stdio"},
                    "timeout_s": 20,
                    "name": "fetch",
                })))?;
                assert_eq!(added, "fetch");
                Ok(())
            },
            expect![[r#"
                # The gateway's settings.
                [gateway]
                exposure = "passthrough"   # every tool listed

                # Upstreams.
                [[servers]]
                name = "time"   # the clock
                timeout_s = 10  # seconds
                transport = { type = "stdio", command = "mcp-server-time" }

                # Notes, kept by hand.
                [[servers]]
                name = "notes"

                [servers.transport]
                type = "stdio"
                command = "notes-mcp"   # from PyPI

                [[servers]]
                name = "fetch"
                timeout_s = 20
                transport = { type = "stdio", args = ["mcp-server-fetch"], command = "uvx" }

                [network]
                allow = ["127.0.0.1"]
            "#]],
        );
    }

    #[test]
    fn adding_then_removing_a_server_gives_back_the_file_byte_for_byte() {
        let mut edit = edit();
        let server = json!({"name": "x", "transport": {"type": "http", "url": "https://x.example/mcp", "headers": {"Authorization": {"env": "X_TOKEN", "prefix": "Bearer "}, "X-Team": "infra", "X-Tenant": "a-rather-long-tenant-name"}}});
        edit.add(&object(server)).expect("added");
        assert!(
            edit.text().contains("[servers.transport.headers]"),
            "long transports become tables:\n{}",
            edit.text()
        );
        edit.remove("x").expect("removed");
        assert_eq!(edit.text(), FILE);
    }

    #[test]
    fn a_patch_merges_into_the_table_as_written_and_keeps_its_comments() {
        check(
            |edit| {
                edit.patch("time", &object(json!({"name": "time", "timeout_s": 45, "transport": {"args": ["--local-timezone", "UTC"]}})))?;
                edit.patch(
                    "notes",
                    &object(json!({"transport": {"command": "notes2"}, "description": "my notes"})),
                )?;
                edit.set_enabled("notes", false)?;
                edit.set_enabled("time", true)
            },
            expect![[r#"
                # The gateway's settings.
                [gateway]
                exposure = "passthrough"   # every tool listed

                # Upstreams.
                [[servers]]
                name = "time"   # the clock
                timeout_s = 45  # seconds
                transport = { type = "stdio", command = "mcp-server-time", args = ["--local-timezone", "UTC"] }

                # Notes, kept by hand.
                [[servers]]
                name = "notes"
                description = "my notes"
                enabled = false

                [servers.transport]
                type = "stdio"
                command = "notes2"   # from PyPI

                [network]
                allow = ["127.0.0.1"]
            "#]],
        );
    }

    #[test]
    fn null_removes_a_key_and_enabling_sets_an_existing_enabled_back() {
        let mut edit = edit();
        edit.set_enabled("time", false).expect("disabled");
        assert!(edit.text().contains("enabled = false"));
        edit.set_enabled("time", true).expect("enabled");
        assert!(edit.text().contains("enabled = true"));
        edit.patch("time", &object(json!({"enabled": null, "timeout_s": null})))
            .expect("patched");
        let text = edit.text();
        assert!(
            !text.contains("enabled") && !text.contains("timeout_s = 10"),
            "{text}"
        );
    }

    #[test]
    fn a_replaced_server_keeps_the_comment_above_it() {
        check(
            |edit| {
                edit.replace(
                    "notes",
                    &object(
                        json!({"transport": {"type": "http", "url": "https://notes.example/mcp"}}),
                    ),
                )
            },
            expect![[r#"
                # The gateway's settings.
                [gateway]
                exposure = "passthrough"   # every tool listed

                # Upstreams.
                [[servers]]
                name = "time"   # the clock
                timeout_s = 10  # seconds
                transport = { type = "stdio", command = "mcp-server-time" }

                # Notes, kept by hand.
                [[servers]]
                name = "notes"
                transport = { type = "http", url = "https://notes.example/mcp" }

                [network]
                allow = ["127.0.0.1"]
            "#]],
        );
    }

    #[test]
    fn imported_servers_are_added_as_import_writes_them() {
        let imported = crate::import_mcp_servers_json(
            r#"{"mcpServers": {"gh": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "ghp_SECRET", "LOG_LEVEL": "debug", "GITHUB_HOST": "github.example.com"}}}}"#,
        )
        .expect("imports");
        let mut edit = edit();
        assert_eq!(edit.add_imported(&imported.toml), Ok(vec!["gh".to_owned()]));
        let text = edit.text();
        assert!(!text.contains("SECRET"), "{text}");
        assert!(!text.contains("Generated by"), "{text}");
        let config = crate::parse_toml(&text, Path::new("mcpgw.toml")).expect("loads");
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["time", "notes", "gh"]);
        assert!(
            text.ends_with("[servers.transport.env]\nGITHUB_HOST = \"github.example.com\"\nGITHUB_TOKEN = { env = \"GITHUB_TOKEN\" }\nLOG_LEVEL = \"debug\"\n\n[network]\nallow = [\"127.0.0.1\"]\n"),
            "{text}"
        );
        assert_eq!(
            edit.add_imported(&imported.toml),
            Err(EditError::Exists("gh".to_owned()))
        );
    }

    #[test]
    fn a_file_without_servers_gets_its_first() {
        let mut edit =
            ConfigEdit::parse("# nothing yet\n", Path::new("mcpgw.toml")).expect("parses");
        assert_eq!(edit.server_names(), Ok(Vec::new()));
        edit.add(&object(
            json!({"name": "a", "transport": {"type": "stdio", "command": "a"}}),
        ))
        .expect("added");
        assert_eq!(
            edit.text(),
            "# nothing yet\n\n[[servers]]\nname = \"a\"\ntransport = { type = \"stdio\", command = \"a\" }\n"
        );
        edit.remove("a").expect("removed");
        assert_eq!(edit.text(), "# nothing yet\n");
    }

    #[test]
    fn what_cannot_be_done_says_why() {
        let check = |change: &dyn Fn(&mut ConfigEdit) -> Result<(), EditError>, says: &str| {
            let mut edit = edit();
            let error = change(&mut edit).expect_err(says).to_string();
            assert!(error.contains(says), "{error}");
            assert_eq!(edit.text(), FILE, "nothing changed");
        };
        check(
            &|e| e.add(&object(json!({"name": "time"}))).map(drop),
            "a server named 'time' is configured already",
        );
        check(
            &|e| e.add(&object(json!({"transport": {}}))).map(drop),
            "a server needs a `name`",
        );
        check(
            &|e| {
                e.add(&object(json!({"name": "n", "description": null})))
                    .map(drop)
            },
            "description: null is not a TOML value",
        );
        check(
            &|e| {
                e.add(&object(json!({"name": "n", "timeout_s": u64::MAX})))
                    .map(drop)
            },
            "timeout_s: 18446744073709551615 is too large",
        );
        check(&|e| e.patch("nope", &Map::new()), "no server named 'nope'");
        check(&|e| e.remove("nope"), "no server named 'nope'");
        check(&|e| e.set_enabled("nope", false), "no server named 'nope'");
        check(
            &|e| e.patch("time", &object(json!({"name": "clock"}))),
            "the name of server 'time' cannot change",
        );
        check(
            &|e| e.replace("time", &object(json!({"name": 3}))),
            "cannot change",
        );
        let json = ConfigEdit::parse("{\"mcpServers\": {}}", Path::new("claude.json")).err();
        assert!(
            matches!(json, Some(EditError::McpServersJson { .. })),
            "{json:?}"
        );
        let broken = ConfigEdit::parse("[gateway\n", Path::new("mcpgw.toml")).err();
        assert!(matches!(broken, Some(EditError::NotToml(_))), "{broken:?}");
        let inline = ConfigEdit::parse(
            "servers = [{ name = \"a\", transport = { type = \"stdio\", command = \"a\" } }]\n",
            Path::new("mcpgw.toml"),
        )
        .expect("parses");
        assert_eq!(
            inline
                .server_names()
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some(
                "`servers` is written as an inline array (servers = [...]); write each server as a [[servers]] table to change servers here"
            )
        );
    }
}
