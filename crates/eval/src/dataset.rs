//! Reading one labelled set: `tools.json`, `queries.jsonl` and `qrels.tsv` in a folder.
//!
//! - `tools.json`: `[{"server": NAME, "description": TEXT, "tools": [MCP Tool objects]}]`,
//!   tools exactly as an upstream's `tools/list` returns them.
//! - `queries.jsonl`: one `{"id": ID, "text": TEXT}` per line (the id a string or a number).
//! - `qrels.tsv`: `query_id  server  tool  relevance`, tab-separated, header first; a tool is
//!   named by its server and its upstream name; a relevance above 0 means relevant.
//!
//! Server names in the sets are free text ("Nutrition by API-Ninjas"), while the catalog, like
//! the config, takes only valid server names; they are sanitised the way `mcpgw import` does
//! (other characters become `-`, at most 32 characters, unique), and [`Dataset::servers`]
//! remembers the original so qrels still resolve.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use catalog::ServerTools;

use crate::Error;

/// One query of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: String,
    pub text: String,
}

/// A tool as the qrels name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolRef {
    /// The server name as written in the set (before sanitising).
    pub server: String,
    /// The upstream tool name.
    pub tool: String,
}

/// A labelled set, loaded.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The folder's name, e.g. `toollens`.
    pub name: String,
    pub path: PathBuf,
    /// Tool lists as the catalog takes them, with sanitised server names.
    pub servers: Vec<ServerTools>,
    /// Original server name -> sanitised name, for every server in `servers`.
    pub server_names: HashMap<String, String>,
    /// In file order.
    pub queries: Vec<Query>,
    /// Query id -> its relevant tools, in file order.
    pub qrels: HashMap<String, Vec<ToolRef>>,
    /// Servers renamed on the way in, and other oddities worth a line in a report.
    pub warnings: Vec<String>,
}

impl Dataset {
    /// Reads the set in `dir`.
    pub fn load(dir: &Path) -> Result<Dataset, Error> {
        let name = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .file_name()
            .map_or_else(|| "set".to_string(), |n| n.to_string_lossy().into_owned());
        let mut warnings = Vec::new();
        let (servers, server_names) = read_tools(&dir.join("tools.json"), &mut warnings)?;
        let queries = read_queries(&dir.join("queries.jsonl"))?;
        let qrels = read_qrels(&dir.join("qrels.tsv"))?;
        Ok(Dataset {
            name,
            path: dir.to_path_buf(),
            servers,
            server_names,
            queries,
            qrels,
            warnings,
        })
    }
}

#[derive(Deserialize)]
struct ServerFile {
    server: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tools: Vec<Arc<Value>>,
}

fn read(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|error| Error::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn parse_error(path: &Path, line: usize, reason: impl ToString) -> Error {
    Error::Parse {
        path: path.to_path_buf(),
        line,
        reason: reason.to_string(),
    }
}

type Servers = (Vec<ServerTools>, HashMap<String, String>);

fn read_tools(path: &Path, warnings: &mut Vec<String>) -> Result<Servers, Error> {
    let files: Vec<ServerFile> =
        serde_json::from_str(&read(path)?).map_err(|e| parse_error(path, e.line(), e))?;
    let mut servers = Vec::with_capacity(files.len());
    let mut names: HashMap<String, String> = HashMap::new();
    let mut taken: Vec<String> = Vec::new();
    for file in files {
        if names.contains_key(&file.server) {
            warnings.push(format!(
                "server {:?} is listed more than once; only its first tool list is used",
                file.server
            ));
            continue;
        }
        let name = config::ServerName::unused(&server_name(&file.server), &taken);
        if name != file.server {
            warnings.push(format!("server {:?} renamed to `{name}`", file.server));
        }
        taken.push(name.clone());
        names.insert(file.server.clone(), name.clone());
        servers.push(ServerTools {
            server: name.into(),
            description: file.description,
            tools: file.tools,
        });
    }
    Ok((servers, names))
}

/// `raw` as a valid server name, sanitised the way `mcpgw import` does.
fn server_name(raw: &str) -> String {
    config::ServerName::sanitize(raw).as_str().to_owned()
}

#[derive(Deserialize)]
struct QueryLine {
    id: Value,
    text: String,
}

fn read_queries(path: &Path) -> Result<Vec<Query>, Error> {
    let text = read(path)?;
    let mut queries = Vec::new();
    for (at, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: QueryLine =
            serde_json::from_str(line).map_err(|e| parse_error(path, at + 1, e))?;
        let id = match parsed.id {
            Value::String(id) => id,
            Value::Number(id) => id.to_string(),
            other => {
                return Err(parse_error(
                    path,
                    at + 1,
                    format!("id {other} is not a string or number"),
                ));
            }
        };
        queries.push(Query {
            id,
            text: parsed.text,
        });
    }
    Ok(queries)
}

fn read_qrels(path: &Path) -> Result<HashMap<String, Vec<ToolRef>>, Error> {
    let text = read(path)?;
    let mut qrels: HashMap<String, Vec<ToolRef>> = HashMap::new();
    for (at, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let [query, server, tool, relevance] = fields[..] else {
            return Err(parse_error(
                path,
                at + 1,
                format!("expected 4 tab-separated fields, found {}", fields.len()),
            ));
        };
        let relevance: f64 = relevance.trim().parse().map_err(|_| {
            parse_error(
                path,
                at + 1,
                format!("relevance {relevance:?} is not a number"),
            )
        })?;
        if relevance > 0.0 {
            let tool = ToolRef {
                server: server.to_string(),
                tool: tool.to_string(),
            };
            let entry = qrels.entry(query.to_string()).or_default();
            if !entry.contains(&tool) {
                entry.push(tool);
            }
        }
    }
    Ok(qrels)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::*;

    #[test]
    fn server_names_are_sanitised_like_import() {
        let check = |raw: &str, want: &str| assert_eq!(server_name(raw), want, "{raw:?}");
        check("Worldwide Recipes", "Worldwide-Recipes");
        check("Nutrition by API-Ninjas", "Nutrition-by-API-Ninjas");
        check("plugins", "plugins");
        check("a__b", "a_b");
        check("  spaced  ", "spaced");
        check("天气", "server");
        check(
            "A very long server name that goes past the limit",
            "A-very-long-server-name-that-goe",
        );
        let taken = vec!["x".to_string(), "x-2".to_string()];
        assert_eq!(config::ServerName::unused("x", &taken), "x-3");
        assert_eq!(config::ServerName::unused("y", &taken), "y");
    }

    #[test]
    fn loads_a_set_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tools = r#"[
            {"server": "Weather API", "description": "Forecasts", "tools": [
                {"name": "forecast", "description": "Forecast for a city", "inputSchema": {"type": "object"}}
            ]},
            {"server": "Weather API", "tools": []},
            {"server": "Weather-API", "tools": [{"name": "other", "inputSchema": {}}]}
        ]"#;
        fs::write(dir.path().join("tools.json"), tools).expect("write");
        fs::write(
            dir.path().join("queries.jsonl"),
            "{\"id\": \"q1\", \"text\": \"rain tomorrow?\"}\n\n{\"id\": 2, \"text\": \"sun\"}\n",
        )
        .expect("write");
        fs::write(
            dir.path().join("qrels.tsv"),
            "query_id\tserver\ttool\trelevance\nq1\tWeather API\tforecast\t1\nq1\tWeather API\tforecast\t1\n2\tWeather API\tforecast\t0\n",
        )
        .expect("write");
        let set = Dataset::load(dir.path()).expect("loads");
        let servers: Vec<&str> = set.servers.iter().map(|s| s.server.as_str()).collect();
        assert_eq!(servers, ["Weather-API", "Weather-API-2"]);
        assert_eq!(set.server_names["Weather API"], "Weather-API");
        assert_eq!(
            set.queries,
            [
                Query {
                    id: "q1".into(),
                    text: "rain tomorrow?".into()
                },
                Query {
                    id: "2".into(),
                    text: "sun".into()
                },
            ]
        );
        assert_eq!(set.qrels.len(), 1);
        assert_eq!(
            set.qrels["q1"],
            [ToolRef {
                server: "Weather API".into(),
                tool: "forecast".into()
            }]
        );
        expect![[r#"
            server "Weather API" renamed to `Weather-API`
            server "Weather API" is listed more than once; only its first tool list is used
            server "Weather-API" renamed to `Weather-API-2`"#]]
        .assert_eq(&set.warnings.join("\n"));
    }

    #[test]
    fn malformed_files_say_where() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("tools.json"), "[]").expect("write");
        fs::write(
            dir.path().join("queries.jsonl"),
            "{\"id\": \"a\", \"text\": \"x\"}\nnot json\n",
        )
        .expect("write");
        fs::write(dir.path().join("qrels.tsv"), "header\n").expect("write");
        let error = Dataset::load(dir.path()).expect_err("bad line").to_string();
        assert!(error.contains("queries.jsonl:2:"), "{error}");

        fs::write(dir.path().join("queries.jsonl"), "").expect("write");
        fs::write(dir.path().join("qrels.tsv"), "header\nq\ts\tt\n").expect("write");
        let error = Dataset::load(dir.path())
            .expect_err("bad qrels")
            .to_string();
        assert!(
            error.contains("qrels.tsv:2: expected 4 tab-separated fields, found 3"),
            "{error}"
        );

        let missing = Dataset::load(&dir.path().join("nope"))
            .expect_err("missing")
            .to_string();
        assert!(missing.contains("tools.json"), "{missing}");
    }
}
