//! The semantic half of search: the configured embedder, the embedding cache in the store, and
//! attaching tool vectors to a catalog snapshot.
//!
//! Nothing here may stop the gateway: no model, a broken model file, an unreachable embedding
//! endpoint, an endpoint the network policy refuses, or a broken database each leave search
//! running on BM25, with one warning saying why (see DESIGN.md section 2).
//!
//! A remote embedder runs under the global network policy (`[network] allow`): its `base_url`
//! is checked with `netguard::check_url` before the first request, and its client is built by
//! `netguard::guarded_client_builder`, so its host name resolves only to admitted addresses and
//! every redirect is judged.

use std::sync::Arc;

use catalog::Catalog;
use embed::local::splade::{SparseVector, Splade};
use embed::{EmbedError, Embedder, TextKind};
use netguard::Policy;
use secrecy::SecretString;
use store::{Store, TextHash, text_hash};

use crate::metrics::Metrics;

/// The embedder and, when the database opened, its cache.
pub struct Semantic {
    embedder: Arc<dyn Embedder>,
    store: Option<Store>,
    /// The learned sparse list's encoder (`[retrieval] splade`), when asked for and found.
    splade: Option<Splade>,
    /// Embed each tool's head and parameters apart (`[retrieval] field_vectors`).
    field_vectors: bool,
}

impl Semantic {
    /// Loads the configured embedder, or explains (once, in the log) why search stays lexical.
    /// `network` is the global policy, which a remote embedder's requests must pass.
    pub async fn load(
        config: &config::RetrievalConfig,
        network: &Arc<Policy>,
        store: Option<Store>,
    ) -> Option<Semantic> {
        let wants_vectors = config.strategy != config::Strategy::Bm25;
        if !wants_vectors {
            // BM25 needs no model: do not spend the memory or the start-up time.
            return None;
        }
        let embedder: Result<Arc<dyn Embedder>, String> = match &config.embedder {
            config::EmbedderConfig::None => {
                tracing::warn!(
                    strategy = %config.strategy,
                    "no embedder configured ([retrieval.embedder] type = \"none\"); searching with BM25 only"
                );
                return None;
            }
            config::EmbedderConfig::Local { model, path, blend } => {
                load_local(model.clone(), path.clone(), blend.clone()).await
            }
            config::EmbedderConfig::Remote(remote) => connect_remote(remote, network).await?,
        };
        match embedder {
            Ok(embedder) => {
                tracing::info!(model = embedder.id(), "semantic search enabled");
                let splade = match config.splade {
                    true => load_splade().await,
                    false => None,
                };
                Some(Semantic {
                    embedder,
                    store,
                    splade,
                    field_vectors: config.field_vectors,
                })
            }
            Err(reason) => {
                tracing::warn!(%reason, "no embedding model available; searching with BM25 only (run scripts/fetch-models.sh to install the default model)");
                None
            }
        }
    }

    pub fn model_id(&self) -> &str {
        self.embedder.id()
    }

    /// Whether the model handles Chinese, Japanese and Korean (see [`embed::handles_cjk`]).
    pub fn multilingual(&self) -> bool {
        embed::handles_cjk(self.embedder.id())
    }

    /// One vector per catalog tool, from the cache where possible; only new or changed tool
    /// texts are embedded, and they are cached for the next start. `metrics` counts the cache's
    /// hits and misses and holds the texts being embedded as the embedding queue. With
    /// `field_vectors` each tool's head and parameters are embedded (and cached) apart and
    /// combined ([`catalog::FieldTexts::combine`]).
    pub async fn tool_vectors(
        &self,
        catalog: &Catalog,
        metrics: &Metrics,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self.field_vectors {
            true => {
                let fields = catalog.embedding_fields(None);
                let vectors = self.text_vectors(&fields.texts, metrics).await?;
                Ok(fields.combine(vectors, catalog::FIELD_WEIGHT))
            }
            false => self.text_vectors(&catalog.embedding_texts(), metrics).await,
        }
    }

    /// One vector per text, from the cache where possible (see [`Semantic::tool_vectors`]).
    async fn text_vectors(
        &self,
        texts: &[String],
        metrics: &Metrics,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let hashes: Vec<TextHash> = texts.iter().map(|t| text_hash(t)).collect();
        let model = self.embedder.id().to_owned();
        let mut cached = match &self.store {
            Some(store) => store
                .cached_embeddings(&model, &hashes)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "embedding cache unreadable; embedding everything");
                    Default::default()
                }),
            None => Default::default(),
        };
        let missing: Vec<usize> = (0..texts.len())
            .filter(|&i| !cached.contains_key(&hashes[i]))
            .collect();
        // Without a database every text is a miss: there is no cache to hit.
        metrics.embedding_cache(texts.len() - missing.len(), missing.len());
        if !missing.is_empty() {
            let started = std::time::Instant::now();
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = {
                let _queued = metrics.embedding_queued(batch.len());
                self.embedder.embed(&batch, TextKind::Passage).await?
            };
            tracing::info!(
                model = %model,
                embedded = missing.len(),
                cached = texts.len() - missing.len(),
                ms = started.elapsed().as_millis() as u64,
                "tool embeddings ready"
            );
            let fresh: Vec<(TextHash, Vec<f32>)> = missing
                .iter()
                .zip(vectors)
                .map(|(&i, v)| (hashes[i], v))
                .collect();
            if let Some(store) = &self.store
                && let Err(error) = store.put_embeddings(&model, &fresh).await
            {
                tracing::warn!(%error, "could not cache embeddings");
            }
            cached.extend(fresh);
        }
        hashes
            .iter()
            .map(|h| {
                cached
                    .get(h)
                    .cloned()
                    .ok_or_else(|| EmbedError::Model("an embedding went missing".to_owned()))
            })
            .collect()
    }

    /// Vectors for search queries.
    pub async fn query_vectors(&self, queries: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embedder.embed(queries, TextKind::Query).await
    }

    /// The sparse encoder's id, when `[retrieval] splade` is on and the model loaded.
    pub fn splade_id(&self) -> Option<&'static str> {
        self.splade.as_ref().map(Splade::id)
    }

    /// Each tool's sparse vector (from the embedding text), or `None` without the encoder.
    /// Not cached: splade-tiny encodes a tool in a few milliseconds.
    pub async fn tool_sparse(
        &self,
        catalog: &Catalog,
    ) -> Option<Result<Vec<SparseVector>, EmbedError>> {
        let splade = self.splade.as_ref()?;
        Some(splade.encode(&catalog.embedding_texts()).await)
    }

    /// The queries' sparse vectors, or `None` without the encoder.
    pub async fn query_sparse(
        &self,
        queries: &[String],
    ) -> Option<Result<Vec<SparseVector>, EmbedError>> {
        let splade = self.splade.as_ref()?;
        Some(splade.encode(queries).await)
    }
}

/// Loads splade-tiny, or says once why hybrid search keeps two lists.
async fn load_splade() -> Option<Splade> {
    let loaded = tokio::task::spawn_blocking(|| {
        Splade::load(None, &embed::local::LoadOptions::default()).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("model loader crashed: {e}")));
    match loaded {
        Ok(splade) => {
            tracing::info!(model = splade.id(), "learned sparse list enabled");
            Some(splade)
        }
        Err(reason) => {
            tracing::warn!(%reason, "splade-tiny not available; hybrid search keeps its two lists (run scripts/fetch-models.sh splade)");
            None
        }
    }
}

/// Loads a local model; reading and verifying ~100 MB stays off the async threads.
/// Loads a local model, blended with `blend`'s model when asked for ([`embed::Blend`]). A
/// blend model that cannot be loaded leaves the first model alone, with a warning: the blend
/// refines search, and its absence must not cost the vectors.
async fn load_local(
    model: String,
    path: Option<std::path::PathBuf>,
    blend: Option<config::LocalBlend>,
) -> Result<Arc<dyn Embedder>, String> {
    tokio::task::spawn_blocking(move || {
        let first = load_local_model(&model, path.as_deref())?;
        let Some(blend) = blend else {
            return Ok(first);
        };
        let second = match load_local_model(&blend.model, None) {
            Ok(second) => second,
            Err(reason) => {
                tracing::warn!(
                    blend = %blend.model,
                    %reason,
                    "the blend model did not load; searching with {} alone (scripts/fetch-models.sh installs it)",
                    first.id()
                );
                return Ok(first);
            }
        };
        match embed::Blend::new(first.clone(), second, blend.weight) {
            Ok(blended) => Ok(Arc::new(blended) as Arc<dyn Embedder>),
            Err(error) => {
                tracing::warn!(%error, "cannot blend the models; searching with {} alone", first.id());
                Ok(first)
            }
        }
    })
    .await
    .unwrap_or_else(|e| Err(format!("model loader crashed: {e}")))
}

fn load_local_model(
    model: &str,
    path: Option<&std::path::Path>,
) -> Result<Arc<dyn Embedder>, String> {
    let kind: embed::local::LocalModel = model
        .parse()
        .map_err(|e: embed::local::UnknownModel| e.to_string())?;
    embed::local::load(kind, path).map_err(|e| e.to_string())
}

/// Connects a remote embedder under the global network policy. `None`: refused or not
/// configurable here (logged); `Some(Err)`: the endpoint failed.
async fn connect_remote(
    remote: &config::RemoteEmbedderConfig,
    network: &Arc<Policy>,
) -> Option<Result<Arc<dyn Embedder>, String>> {
    if let Err(refusal) = netguard::check_url(&remote.base_url, network) {
        tracing::warn!(
            %refusal,
            "the embedding endpoint is refused by the network policy; searching with BM25 only"
        );
        return None;
    }
    let client = match netguard::guarded_client_builder(network.clone()).build() {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(%error, "cannot build the embedding endpoint's HTTP client; searching with BM25 only");
            return None;
        }
    };
    let api_key = match &remote.api_key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(value) if !value.is_empty() => Some(SecretString::from(value)),
            _ => {
                tracing::warn!(
                    variable = %var,
                    "the embedding API key variable is not set; searching with BM25 only"
                );
                return None;
            }
        },
    };
    let mut remote_config =
        embed::remote::RemoteConfig::new(remote.base_url.clone(), remote.model.clone());
    remote_config.api_key = api_key;
    remote_config.batch_size = remote.batch_size;
    remote_config.timeout = remote.timeout;
    remote_config.retries = remote.retries;
    remote_config.dimensions = remote.dimensions;
    Some(
        embed::remote::RemoteEmbedder::connect(remote_config, client)
            .await
            .map(|e| Arc::new(e) as Arc<dyn Embedder>)
            .map_err(|e| e.to_string()),
    )
}
