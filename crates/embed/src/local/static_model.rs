//! potion-base-8M, a model2vec static model: one learned vector per vocabulary token, and a
//! sentence is the (normalised) mean of its tokens' vectors. No attention, so ~µs per text.
//!
//! Written here instead of depending on `model2vec-rs` (its `fancy-regex` feature still builds
//! tokenizers' C++ `esaxx`, and the algorithm is twenty lines). It follows the reference
//! Python `model2vec.StaticModel.encode` exactly:
//! 1. cut the text to `512 × median token length` characters (a cheap pre-truncation),
//! 2. tokenise *without* special tokens,
//! 3. drop `[UNK]` ids (model2vec does; an unknown word contributes nothing),
//! 4. keep the first 512 ids,
//! 5. average their rows; L2-normalise when `config.json` says `"normalize": true`.
//!
//! A text with no known tokens (empty, or only unknown characters) therefore gives the zero
//! vector, as in model2vec; it has cosine 0 with everything, which is the honest answer.

use std::fs;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tokenizers::Tokenizer;
use tokenizers::models::ModelWrapper;

use super::Encoder;
use crate::{EmbedError, TextKind};

/// model2vec's default `max_length` for `encode`.
const MAX_TOKENS: usize = 512;

pub(crate) struct StaticModel {
    tokenizer: Tokenizer,
    /// Row-major `(vocab, dim)`.
    embeddings: Vec<f32>,
    dim: usize,
    unk_id: Option<u32>,
    normalize: bool,
    /// `MAX_TOKENS × median token length`, in characters.
    max_chars: usize,
}

impl StaticModel {
    pub(crate) fn load(dir: &Path) -> Result<Self, EmbedError> {
        let bad = |file: &str, reason: String| EmbedError::BadModelFile {
            path: dir.join(file).display().to_string(),
            reason,
        };
        let config =
            fs::read(dir.join("config.json")).map_err(|e| bad("config.json", e.to_string()))?;
        let config: serde_json::Value =
            serde_json::from_slice(&config).map_err(|e| bad("config.json", e.to_string()))?;
        // model2vec's default when the key is absent.
        let normalize = config
            .get("normalize")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| bad("tokenizer.json", e.to_string()))?;
        let bytes = fs::read(dir.join("model.safetensors"))
            .map_err(|e| bad("model.safetensors", e.to_string()))?;
        let (embeddings, rows, dim) =
            read_embeddings(&bytes).map_err(|reason| bad("model.safetensors", reason))?;
        Self::new(tokenizer, embeddings, rows, dim, normalize)
            .map_err(|reason| bad("model.safetensors", reason))
    }

    /// Builds the model from parts; `rows` must equal the tokenizer's vocabulary size, as
    /// model2vec requires.
    pub(crate) fn new(
        mut tokenizer: Tokenizer,
        embeddings: Vec<f32>,
        rows: usize,
        dim: usize,
        normalize: bool,
    ) -> Result<Self, String> {
        let vocab = tokenizer.get_vocab(true);
        if vocab.len() != rows || embeddings.len() != rows * dim {
            return Err(format!(
                "{rows}×{dim} embedding table for a {}-token vocabulary",
                vocab.len()
            ));
        }
        // Python's `len(token)` counts characters; `int(np.median(...))` averages the two
        // middle values of an even count and truncates.
        let mut lengths: Vec<usize> = vocab.keys().map(|t| t.chars().count()).collect();
        lengths.sort_unstable();
        let median = match lengths.len() {
            0 => 1,
            n if n % 2 == 1 => lengths[n / 2],
            n => (lengths[n / 2 - 1] + lengths[n / 2]) / 2,
        };
        // model2vec takes the unknown token from the model (WordPiece here); a model without
        // one keeps every id.
        let unk_id = match tokenizer.get_model() {
            ModelWrapper::WordPiece(wordpiece) => tokenizer.token_to_id(&wordpiece.unk_token),
            _ => None,
        };
        // The pipeline is fixed above: the file's own padding/truncation settings must not
        // interfere.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| format!("cannot clear truncation: {e}"))?;
        Ok(StaticModel {
            tokenizer,
            embeddings,
            dim,
            unk_id,
            normalize,
            max_chars: MAX_TOKENS * median.max(1),
        })
    }

    fn pool(&self, ids: &[u32]) -> Vec<f32> {
        let mut sum = vec![0f32; self.dim];
        let mut count = 0usize;
        for &id in ids
            .iter()
            .filter(|&&id| Some(id) != self.unk_id)
            .take(MAX_TOKENS)
        {
            let start = id as usize * self.dim;
            // Ids come from the tokenizer whose vocabulary size was checked against the
            // table; `get` keeps a corrupt tokenizer from panicking anyway.
            if let Some(row) = self.embeddings.get(start..start + self.dim) {
                sum.iter_mut().zip(row).for_each(|(s, r)| *s += r);
                count += 1;
            }
        }
        let count = count.max(1) as f32;
        sum.iter_mut().for_each(|s| *s /= count);
        if self.normalize {
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            sum.iter_mut().for_each(|s| *s /= norm);
        }
        sum
    }
}

impl Encoder for StaticModel {
    fn encode(&self, texts: &[String], _kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs: Vec<&str> = texts
            .iter()
            .map(|text| truncate_chars(text, self.max_chars))
            .collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, false)
            .map_err(|e| EmbedError::Model(format!("tokenizer failed: {e}")))?;
        Ok(encodings
            .iter()
            .map(|encoding| self.pool(encoding.get_ids()))
            .collect())
    }
}

/// The first `max_chars` characters of `text` (Python's `text[:max_chars]`).
fn truncate_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// The `embeddings` tensor as f32 rows: `(values, rows, dim)`.
fn read_embeddings(bytes: &[u8]) -> Result<(Vec<f32>, usize, usize), String> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let tensor = file
        .tensor("embeddings")
        .map_err(|e| format!("no 'embeddings' tensor: {e}"))?;
    let &[rows, dim] = tensor.shape() else {
        return Err(format!("embeddings have shape {:?}", tensor.shape()));
    };
    let values: Vec<f32> = match tensor.dtype() {
        Dtype::F32 => tensor
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => tensor
            .data()
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => return Err(format!("unsupported embeddings dtype {other:?}")),
    };
    Ok((values, rows, dim))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[UNK]`=0, "weather"=1, "paris"=2, "news"=3, "##s"=4 with 2-d rows.
    fn tiny(normalize: bool) -> StaticModel {
        let words = ["[UNK]", "weather", "paris", "news", "##s"];
        let tokenizer = super::super::minilm::tests::wordpiece_tokenizer(&words, None);
        let rows = vec![
            100.0, 100.0, // [UNK]: must never be used
            3.0, 0.0, // weather
            0.0, 4.0, // paris
            1.0, 1.0, // news
            -1.0, 1.0, // ##s
        ];
        StaticModel::new(tokenizer, rows, words.len(), 2, normalize).expect("model")
    }

    fn check(model: &StaticModel, text: &str, expect: [f32; 2]) {
        let got = model
            .encode(&[text.to_string()], TextKind::Query)
            .expect("encode");
        let ok = got[0].iter().zip(expect).all(|(a, b)| (a - b).abs() < 1e-6);
        assert!(ok, "{text:?}: got {:?}, expected {expect:?}", got[0]);
    }

    #[test]
    fn sentence_is_the_normalised_mean_of_known_token_rows() {
        let normalized = tiny(true);
        check(&normalized, "weather paris", [0.6, 0.8]);
        // Unknown words are dropped, not averaged in; case is folded by the normaliser.
        check(&normalized, "Weather in PARIS", [0.6, 0.8]);
        // Subwords count as tokens: news + ##s = (0, 2) → (0, 1).
        check(&normalized, "newss", [0.0, 1.0]);
        // No known token → zero vector (model2vec's behaviour), not NaN.
        check(&normalized, "", [0.0, 0.0]);
        check(&normalized, "zzz", [0.0, 0.0]);

        let raw = tiny(false);
        check(&raw, "weather paris", [1.5, 2.0]);
    }

    #[test]
    fn only_the_first_512_tokens_count() {
        let model = tiny(false);
        let text = format!(
            "{} {}",
            vec!["weather"; 512].join(" "),
            "paris ".repeat(100)
        );
        check(&model, &text, [3.0, 0.0]);
    }

    fn check_truncate(text: &str, max: usize, expect: &str) {
        assert_eq!(truncate_chars(text, max), expect);
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        check_truncate("héllo", 2, "hé");
        check_truncate("搜索网页", 3, "搜索网");
        check_truncate("ab", 5, "ab");
        check_truncate("", 0, "");
    }

    #[test]
    fn table_size_must_match_the_vocabulary() {
        let model = tiny(true);
        let error = StaticModel::new(model.tokenizer.clone(), vec![0.0; 6], 3, 2, true)
            .err()
            .expect("mismatch rejected");
        assert!(error.contains("5-token vocabulary"), "{error}");
    }
}
