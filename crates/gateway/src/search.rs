//! What a search asks and finds, as the front end and the cli pass it to and take it from
//! [`crate::Gateway::search`] (which runs it: BM25, vectors or both over the current catalog).

use catalog::{Filter, SearchHit};
use ids::{QualifiedName, ServerName};

/// One `search_tools` call, as the front end and the CLI describe it.
#[derive(Debug, Clone)]
pub struct Search {
    pub queries: Vec<String>,
    pub top_k: usize,
    pub filter: Filter,
    /// Also say what stands behind each hit ([`Found::explanation`]): `mcpgw search --explain`.
    pub explain: bool,
    /// Rank with this strategy rather than `[retrieval] strategy` (the admin API's search
    /// playground compares them); `None` for the configured one.
    pub strategy: Option<catalog::Strategy>,
}

/// The hits of a search, owned (the catalog they came from may be replaced meanwhile).
#[derive(Debug, Clone)]
pub struct Found {
    pub hits: Vec<FoundTool>,
    /// Set when the search ran with less than the configured strategy, and why.
    pub degraded: Option<String>,
    pub strategy: catalog::Strategy,
    /// Servers still making their first connection: their tools are not in the catalog yet.
    pub starting: Vec<ServerName>,
    /// Tools of the searched servers held for approval (pinning): not in the catalog either.
    pub held: usize,
    /// When [`Search::explain`] asked: how the scores were made and each hit's rank and score
    /// in the BM25 and the vector list.
    pub explanation: Option<catalog::Explanation>,
}

#[derive(Debug, Clone)]
pub struct FoundTool {
    pub name: QualifiedName,
    pub server: ServerName,
    pub description: String,
    pub score: f32,
    /// `name(param: type, optional?: type)`, within [`catalog::signature::MAX_CHARS`].
    pub signature: String,
    /// `read-only` or `destructive` when the upstream's annotations say so.
    pub effects: Option<&'static str>,
}

impl FoundTool {
    pub(crate) fn from_hit(hit: &SearchHit<'_>) -> Self {
        Self {
            name: hit.tool.qualified.clone(),
            server: hit.tool.server.clone(),
            description: hit.tool.one_line_description(),
            score: hit.score,
            signature: catalog::signature::signature(hit.tool),
            effects: catalog::signature::effects(hit.tool),
        }
    }
}
