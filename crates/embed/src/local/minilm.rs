//! all-MiniLM-L6-v2 with candle's `BertModel`, reproducing sentence-transformers' pipeline:
//! WordPiece with `[CLS]`/`[SEP]`, truncation at 256 tokens, mean pooling over the attention
//! mask, L2 normalisation. No query/passage prefixes (the model was not trained with them).

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::BertModel;
use tokenizers::Tokenizer;

use super::{Encoder, transformer};
use crate::{EmbedError, TextKind};

/// sentence-transformers' `max_seq_length` for this model. The shipped tokenizer.json says
/// `Fixed(128)` padding and 128-token truncation, which would cost 128 tokens for every short
/// tool description and cut long ones early, so both are overridden.
const MAX_TOKENS: usize = 256;

pub(crate) struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    pad_id: u32,
    batch_size: usize,
    device: Device,
}

impl MiniLm {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from `dir` (already
    /// verified by sha256, so a parse error here means a bug, not a bad download).
    pub(crate) fn load(dir: &Path, batch_size: usize) -> Result<Self, EmbedError> {
        // Reading 91 MB once costs ~30 ms.
        let (config, tokenizer, weights) = transformer::read_bert_files(dir)?;
        let device = Device::Cpu;
        let model = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .and_then(|vb| BertModel::load(vb, &config))
            .map_err(|e| transformer::bad_file(dir, "model.safetensors", e))?;
        Self::new(model, tokenizer, batch_size)
            .map_err(|reason| transformer::bad_file(dir, "tokenizer.json", reason))
    }

    /// Wraps an already built model; also how tests run a tiny random BERT.
    pub(crate) fn new(
        model: BertModel,
        mut tokenizer: Tokenizer,
        batch_size: usize,
    ) -> Result<Self, EmbedError> {
        let pad_id = transformer::prepare_tokenizer(&mut tokenizer, MAX_TOKENS)
            .map_err(EmbedError::Model)?;
        Ok(MiniLm {
            device: model.device.clone(),
            model,
            tokenizer,
            pad_id,
            batch_size,
        })
    }
}

impl Encoder for MiniLm {
    fn encode(&self, texts: &[String], _kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let tokens = transformer::token_ids(&self.tokenizer, inputs)?;
        transformer::embed_sorted_batches(
            &tokens,
            self.batch_size,
            self.pad_id,
            &self.device,
            |batch| {
                let type_ids = batch.ids.zeros_like()?;
                self.model.forward(&batch.ids, &type_ids, Some(&batch.mask))
            },
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use candle_core::Tensor;
    use candle_transformers::models::bert::{Config, HiddenAct};

    use super::*;

    const VOCAB: &[&str] = &[
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "search", "the", "web", "for", "news", "read", "a",
        "file", "from", "disk", "weather", "in", "paris", "send", "mail", "##s",
    ];

    /// Deterministic pseudo-random weights (a tiny LCG), so failures reproduce.
    fn weights(seed: u64, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
            })
            .collect();
        Tensor::from_vec(values, shape, &Device::Cpu).expect("tensor")
    }

    pub(crate) fn tiny_config() -> Config {
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

    /// A random 2-layer BERT with HF tensor names, loaded through `VarBuilder::from_tensors`.
    pub(crate) fn tiny_bert() -> BertModel {
        let c = tiny_config();
        let (h, ff) = (c.hidden_size, c.intermediate_size);
        let mut seed = 0;
        let mut next = |shape: &[usize]| {
            seed += 1;
            weights(seed, shape)
        };
        let mut ts: HashMap<String, Tensor> = HashMap::new();
        ts.insert(
            "embeddings.word_embeddings.weight".into(),
            next(&[c.vocab_size, h]),
        );
        ts.insert(
            "embeddings.position_embeddings.weight".into(),
            next(&[c.max_position_embeddings, h]),
        );
        ts.insert(
            "embeddings.token_type_embeddings.weight".into(),
            next(&[c.type_vocab_size, h]),
        );
        let layer_norm = |ts: &mut HashMap<String, Tensor>, prefix: String| {
            ts.insert(
                format!("{prefix}.weight"),
                Tensor::ones(h, DType::F32, &Device::Cpu).expect("ones"),
            );
            ts.insert(
                format!("{prefix}.bias"),
                Tensor::zeros(h, DType::F32, &Device::Cpu).expect("zeros"),
            );
        };
        layer_norm(&mut ts, "embeddings.LayerNorm".into());
        for i in 0..c.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            for (name, out, inp) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", ff, h),
                ("output.dense", h, ff),
            ] {
                ts.insert(format!("{p}.{name}.weight"), next(&[out, inp]));
                ts.insert(format!("{p}.{name}.bias"), next(&[out]));
            }
            layer_norm(&mut ts, format!("{p}.attention.output.LayerNorm"));
            layer_norm(&mut ts, format!("{p}.output.LayerNorm"));
        }
        let vb = VarBuilder::from_tensors(ts, DType::F32, &Device::Cpu);
        BertModel::load(vb, &c).expect("tiny bert loads")
    }

    /// BERT's uncased WordPiece pipeline over `words` (ids in order), through the same JSON
    /// form a tokenizer.json has (the builder API wants an `ahash` map we do not depend on).
    pub(crate) fn wordpiece_tokenizer(words: &[&str], cls_sep: Option<(u32, u32)>) -> Tokenizer {
        let vocab: serde_json::Map<String, serde_json::Value> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), i.into()))
            .collect();
        let post_processor = cls_sep.map(|(cls, sep)| {
            serde_json::json!({
                "type": "BertProcessing", "sep": ["[SEP]", sep], "cls": ["[CLS]", cls]
            })
        });
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": post_processor,
            "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab},
        });
        json.to_string().parse().expect("tokenizer json")
    }

    pub(crate) fn tiny_tokenizer() -> Tokenizer {
        wordpiece_tokenizer(VOCAB, Some((2, 3)))
    }

    pub(crate) fn tiny_minilm(batch_size: usize) -> MiniLm {
        MiniLm::new(tiny_bert(), tiny_tokenizer(), batch_size).expect("tiny minilm")
    }

    fn embed(model: &MiniLm, texts: &[&str]) -> Vec<Vec<f32>> {
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        model.encode(&texts, TextKind::Query).expect("encode")
    }

    fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        let max = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(max < tol, "max |Δ| {max} ≥ {tol}\n{a:?}\n{b:?}");
    }

    #[test]
    fn padding_in_a_batch_does_not_change_a_vector() {
        let model = tiny_minilm(32);
        let alone = embed(&model, &["search the web"]);
        let padded = embed(
            &model,
            &["search the web", "read a file from disk in paris for news"],
        );
        assert_close(&alone[0], &padded[0], 1e-5);
    }

    #[test]
    fn vectors_are_unit_length_and_in_input_order_across_batches() {
        let words = [
            "search", "the", "web", "news", "weather", "paris", "mail", "files",
        ];
        // 70 texts of varied lengths with batch size 8: several length-sorted batches whose
        // order differs from the input order.
        let texts: Vec<String> = (0..70)
            .map(|i| {
                (0..(i * 7 % 11) + 1)
                    .map(|j| words[(i + j) % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let model = tiny_minilm(8);
        let together = model.encode(&texts, TextKind::Passage).expect("encode");
        assert_eq!(together.len(), texts.len());
        for (text, vector) in texts.iter().zip(&together) {
            let one = embed(&model, &[text]);
            assert_close(vector, &one[0], 1e-5);
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm} for {text:?}");
        }
    }

    #[test]
    fn long_texts_are_truncated_to_256_tokens() {
        let model = tiny_minilm(4);
        // 400 words: without truncation the 300-row position table would be exceeded.
        let long = vec!["news"; 400].join(" ");
        let tokens = model
            .tokenizer
            .encode(long.as_str(), true)
            .expect("tokenize");
        assert_eq!(tokens.get_ids().len(), MAX_TOKENS);
        let vectors = embed(&model, &[&long, "web"]);
        assert_eq!(vectors.len(), 2);
    }

    #[test]
    fn unknown_and_empty_texts_still_embed() {
        let model = tiny_minilm(32);
        let vectors = embed(&model, &["", "搜索网页", "web"]);
        for vector in vectors {
            assert_eq!(vector.len(), tiny_config().hidden_size);
            assert!(vector.iter().all(|x| x.is_finite()));
        }
    }
}
