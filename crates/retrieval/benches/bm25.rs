//! Benchmarks of BM25F index build and full-depth ranking over synthetic tool catalogs.
//!
//! Documents look like MCP tools: `server__verbNoun` names, a server, a one- or
//! two-sentence description drawn from a word list, and a few parameters with their own
//! descriptions. A fixed-seed generator keeps runs comparable.

use std::sync::OnceLock;

use divan::{Bencher, black_box};
use retrieval::{Bm25Index, Bm25Params, Document, Field};

fn main() {
    divan::main();
}

const SIZES: [usize; 2] = [1_000, 10_000];

const QUERIES: [&str; 5] = [
    "weather",
    "list files in a directory",
    "get_current_time",
    "create github issue with labels",
    "查询天气预报",
];

#[divan::bench(args = SIZES)]
fn build(bencher: Bencher, size: usize) {
    let docs = catalog(size);
    let params = Bm25Params::default();
    bencher.bench(|| Bm25Index::build(black_box(&docs), &params));
}

#[divan::bench(consts = SIZES, args = QUERIES)]
fn rank<const SIZE: usize>(bencher: Bencher, query: &str) {
    let index = index(SIZE);
    bencher.bench(|| index.rank(black_box(query), &|_| true));
}

/// A filter that rejects half the catalog, as a per-principal visibility check would.
#[divan::bench(consts = SIZES)]
fn rank_filtered<const SIZE: usize>(bencher: Bencher) {
    let index = index(SIZE);
    bencher.bench(|| index.rank(black_box("list files in a directory"), &|doc| doc % 2 == 0));
}

fn index(size: usize) -> &'static Bm25Index {
    static INDEXES: [OnceLock<Bm25Index>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = SIZES.iter().position(|&s| s == size).unwrap_or(0);
    INDEXES[slot].get_or_init(|| Bm25Index::build(&catalog(size), &Bm25Params::default()))
}

const SERVERS: &[&str] = &[
    "github",
    "gitlab",
    "slack",
    "filesystem",
    "postgres",
    "weather",
    "time",
    "jira",
    "notion",
    "browser",
    "aws",
    "kubernetes",
    "stripe",
    "calendar",
    "gmail",
    "linear",
    "sentry",
    "docker",
    "figma",
    "search",
];
const VERBS: &[&str] = &[
    "get", "list", "create", "update", "delete", "search", "read", "write", "send", "fetch", "run",
    "query", "find", "add", "remove", "upload", "download", "sync", "describe", "cancel",
];
const NOUNS: &[&str] = &[
    "File",
    "Issue",
    "PullRequest",
    "Message",
    "Channel",
    "Table",
    "Row",
    "Forecast",
    "Time",
    "Page",
    "Database",
    "Bucket",
    "Pod",
    "Invoice",
    "Event",
    "Email",
    "Ticket",
    "Comment",
    "User",
    "Repository",
    "Branch",
    "Commit",
    "Label",
    "Deployment",
    "Container",
    "Image",
    "Document",
    "Folder",
    "Task",
    "Project",
];
const WORDS: &[&str] = &[
    "the",
    "a",
    "of",
    "for",
    "in",
    "with",
    "and",
    "to",
    "from",
    "by",
    "returns",
    "given",
    "list",
    "all",
    "files",
    "directory",
    "current",
    "time",
    "timezone",
    "weather",
    "city",
    "issue",
    "repository",
    "labels",
    "message",
    "channel",
    "user",
    "query",
    "results",
    "optional",
    "filter",
    "page",
    "size",
    "limit",
    "sorted",
    "date",
    "created",
    "updated",
    "status",
    "open",
    "closed",
    "name",
    "id",
    "identifier",
    "content",
    "text",
    "json",
    "url",
    "path",
    "recursive",
    "forecast",
    "temperature",
    "database",
    "sql",
    "table",
    "bucket",
    "object",
    "pod",
    "namespace",
    "cluster",
    "invoice",
    "customer",
    "payment",
    "event",
    "calendar",
    "email",
    "inbox",
    "ticket",
    "project",
    "comment",
    "branch",
    "commit",
    "deploy",
    "container",
    "image",
    "search",
    "web",
    "document",
    "folder",
    "task",
    "assignee",
    "priority",
    "天气",
    "预报",
    "查询",
    "文件",
    "目录",
];
const PARAMS: &[&str] = &[
    "path",
    "query",
    "limit",
    "page",
    "owner",
    "repo",
    "title",
    "body",
    "labels",
    "city",
    "timezone",
    "channel_id",
    "user_id",
    "start_date",
    "end_date",
    "namespace",
    "recursive",
    "format",
    "sql",
    "bucket",
];

/// A small fixed-seed xorshift generator: no `rand` dependency, identical catalogs per run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn sentence(&mut self, min: usize, max: usize) -> String {
        let len = min + self.below(max - min + 1);
        (0..len)
            .map(|_| self.pick(WORDS))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn catalog(size: usize) -> Vec<Document> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..size)
        .map(|at| {
            let server = rng.pick(SERVERS);
            let tool = format!("{}{}", rng.pick(VERBS), rng.pick(NOUNS));
            let mut fields = vec![
                (Field::Name, tool.clone()),
                (Field::Server, server.to_owned()),
                (
                    Field::Description,
                    format!("{}. {}.", rng.sentence(6, 20), rng.sentence(0, 12)),
                ),
                (Field::ServerDescription, format!("{server} MCP server")),
            ];
            for _ in 0..1 + rng.below(4) {
                fields.push((Field::ParamName, rng.pick(PARAMS).to_owned()));
                fields.push((Field::ParamDescription, rng.sentence(3, 10)));
            }
            Document {
                key: format!("{server}__{tool}_{at}"),
                fields,
            }
        })
        .collect()
}
