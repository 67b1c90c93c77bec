//! What the transformer encoders (MiniLM, E5, splade-tiny) share: reading a BERT model's files,
//! length-sorted padded batches and sentence-transformers' mean pooling + L2 normalisation.
//!
//! Texts are tokenised once without padding, sorted by token count and cut into batches, so
//! each batch is padded only to its own longest text (the `BatchLongest` strategy) and short
//! texts never pay for a long neighbour. Vectors come back in input order.

use std::{fs, path::Path};

use candle_core::{D, DType, Device, Tensor};
use candle_transformers::models::bert::Config;
use tokenizers::Tokenizer;

use crate::EmbedError;

/// A BERT model's three files in `dir` (already verified by sha256, so a parse error here
/// means a bug, not a bad download): its `config.json`, its `tokenizer.json`, and the bytes of
/// its `model.safetensors` (read, not mmapped: that is `unsafe` in candle, the file could
/// change under us, and the workspace denies unsafe code).
pub(crate) fn read_bert_files(dir: &Path) -> Result<(Config, Tokenizer, Vec<u8>), EmbedError> {
    let config = fs::read(dir.join("config.json")).map_err(|e| bad_file(dir, "config.json", e))?;
    let config: Config =
        serde_json::from_slice(&config).map_err(|e| bad_file(dir, "config.json", e))?;
    let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
        .map_err(|e| bad_file(dir, "tokenizer.json", e))?;
    let weights = fs::read(dir.join("model.safetensors"))
        .map_err(|e| bad_file(dir, "model.safetensors", e))?;
    Ok((config, tokenizer, weights))
}

/// The error for `file` in `dir` that could not be read or used.
pub(crate) fn bad_file(dir: &Path, file: &str, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::BadModelFile {
        path: dir.join(file).display().to_string(),
        reason: reason.to_string(),
    }
}

/// Token ids of one batch, padded to the batch's longest text.
pub(crate) struct PaddedBatch {
    /// `(batch, seq_len)` u32 token ids.
    pub(crate) ids: Tensor,
    /// `(batch, seq_len)` u32, 1 for real tokens, 0 for padding.
    pub(crate) mask: Tensor,
}

/// Token ids of each input, special tokens included, as the model's tokenizer makes them.
pub(crate) fn token_ids<'s, E>(
    tokenizer: &tokenizers::Tokenizer,
    inputs: Vec<E>,
) -> Result<Vec<Vec<u32>>, EmbedError>
where
    E: Into<tokenizers::EncodeInput<'s>> + Send,
{
    Ok(tokenizer
        .encode_batch(inputs, true)
        .map_err(|e| EmbedError::Model(format!("tokenizer failed: {e}")))?
        .iter()
        .map(|encoding| encoding.get_ids().to_vec())
        .collect())
}

/// Runs `forward` (padded ids → `(batch, seq_len, hidden)` states) over length-sorted batches
/// and returns one pooled, normalised vector per input, in input order.
pub(crate) fn embed_sorted_batches(
    tokens: &[Vec<u32>],
    batch_size: usize,
    pad_id: u32,
    device: &Device,
    mut forward: impl FnMut(&PaddedBatch) -> candle_core::Result<Tensor>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    in_sorted_batches(tokens, batch_size, |members| {
        let padded = pad(members, pad_id, device)?;
        let hidden = forward(&padded)?;
        mean_pool_normalize(&hidden, &padded.mask)?.to_vec2::<f32>()
    })
}

/// Runs `encode` (a batch's token ids → one output per member) over length-sorted batches and
/// returns the outputs in input order.
pub(crate) fn in_sorted_batches<T>(
    tokens: &[Vec<u32>],
    batch_size: usize,
    mut encode: impl FnMut(&[&[u32]]) -> candle_core::Result<Vec<T>>,
) -> Result<Vec<T>, EmbedError> {
    let mut out: Vec<Option<T>> = std::iter::repeat_with(|| None).take(tokens.len()).collect();
    for batch in length_sorted_batches(tokens, batch_size) {
        let members: Vec<&[u32]> = batch.iter().map(|&i| tokens[i].as_slice()).collect();
        let outputs = encode(&members)
            .map_err(|error| EmbedError::Model(format!("forward pass failed: {error}")))?;
        for (index, output) in batch.into_iter().zip(outputs) {
            out[index] = Some(output);
        }
    }
    // Every index is in exactly one batch, so every slot is filled.
    out.into_iter()
        .map(|output| output.ok_or_else(|| EmbedError::Model("a text was not encoded".into())))
        .collect()
}

/// Makes `tokenizer` ready for [`token_ids`]: no padding (batches are padded to their own
/// longest text by [`pad`]) and truncation at `max_tokens`. Returns the id to pad with.
pub(crate) fn prepare_tokenizer(
    tokenizer: &mut Tokenizer,
    max_tokens: usize,
) -> Result<u32, String> {
    let pad_id = tokenizer
        .get_padding()
        .map(|padding| padding.pad_id)
        .or_else(|| tokenizer.token_to_id("[PAD]"))
        .unwrap_or(0);
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: max_tokens,
            ..tokenizers::TruncationParams::default()
        }))
        .map_err(|e| format!("cannot set truncation: {e}"))?;
    Ok(pad_id)
}

/// Indices of `tokens` grouped into batches of at most `batch_size`, shortest texts first
/// (ties keep input order, so batching is deterministic).
pub(crate) fn length_sorted_batches(tokens: &[Vec<u32>], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by_key(|&i| tokens[i].len());
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}

pub(crate) fn pad(
    members: &[&[u32]],
    pad_id: u32,
    device: &Device,
) -> candle_core::Result<PaddedBatch> {
    let seq_len = members.iter().map(|ids| ids.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(members.len() * seq_len);
    let mut mask = Vec::with_capacity(members.len() * seq_len);
    for member in members {
        ids.extend_from_slice(member);
        ids.resize(ids.len() + seq_len - member.len(), pad_id);
        mask.extend(std::iter::repeat_n(1u32, member.len()));
        mask.resize(mask.len() + seq_len - member.len(), 0);
    }
    let shape = (members.len(), seq_len);
    Ok(PaddedBatch {
        ids: Tensor::from_vec(ids, shape, device)?,
        mask: Tensor::from_vec(mask, shape, device)?,
    })
}

/// sentence-transformers' `Pooling(mean)` then `Normalize`: the mean of the hidden states of
/// real tokens (`sum / clamp(count, 1e-9)`), divided by `max(‖v‖, 1e-12)` like
/// `torch.nn.functional.normalize`.
pub(crate) fn mean_pool_normalize(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9, f32::MAX)?;
    let mean = summed.broadcast_div(&counts)?;
    let norms = mean
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12, f32::MAX)?;
    mean.broadcast_div(&norms)
}

/// `(1 − mask) · f32::MIN` shaped `(batch, 1, 1, seq_len)`, the additive attention mask
/// Hugging Face's BERT builds (candle's helper for it is private).
pub(crate) fn additive_attention_mask(mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(1)?.unsqueeze(1)?;
    (mask.ones_like()? - &mask)?.affine(f64::from(f32::MIN), 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_pool(hidden: &[[[f32; 2]; 3]], mask: &[[u32; 3]], expect: &[[f32; 2]]) {
        let device = Device::Cpu;
        let flat: Vec<f32> = hidden.iter().flatten().flatten().copied().collect();
        let hidden = Tensor::from_vec(flat, (expect.len(), 3, 2), &device).expect("hidden");
        let flat: Vec<u32> = mask.iter().flatten().copied().collect();
        let mask = Tensor::from_vec(flat, (expect.len(), 3), &device).expect("mask");
        let got = mean_pool_normalize(&hidden, &mask)
            .and_then(|t| t.to_vec2::<f32>())
            .expect("pool");
        for (g, e) in got.iter().zip(expect) {
            for (a, b) in g.iter().zip(e) {
                assert!((a - b).abs() < 1e-6, "got {got:?}, expected {expect:?}");
            }
        }
    }

    #[test]
    fn mean_pooling_ignores_padding_and_normalises() {
        // Two real tokens (3,0) and (0,4) → mean (1.5, 2) → unit (0.6, 0.8); the padded
        // (100, 100) must not count.
        check_pool(
            &[[[3.0, 0.0], [0.0, 4.0], [100.0, 100.0]]],
            &[[1, 1, 0]],
            &[[0.6, 0.8]],
        );
        // All tokens real; one row per text.
        check_pool(
            &[
                [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]],
                [[0.0, -2.0], [0.0, -2.0], [5.0, 5.0]],
            ],
            &[[1, 1, 1], [1, 1, 0]],
            &[[1.0, 0.0], [0.0, -1.0]],
        );
        // A zero mean stays zero instead of becoming NaN (the 1e-12 clamp).
        check_pool(
            &[[[1.0, 1.0], [-1.0, -1.0], [7.0, 7.0]]],
            &[[1, 1, 0]],
            &[[0.0, 0.0]],
        );
    }

    fn check_batches(lengths: &[usize], batch_size: usize, expect: &[&[usize]]) {
        let tokens: Vec<Vec<u32>> = lengths.iter().map(|&n| vec![7; n]).collect();
        assert_eq!(length_sorted_batches(&tokens, batch_size), expect);
    }

    #[test]
    fn batches_are_length_sorted_and_stable() {
        check_batches(&[5, 1, 3, 1, 9], 2, &[&[1, 3], &[2, 0], &[4]]);
        check_batches(&[2, 2, 2], 32, &[&[0, 1, 2]]);
        check_batches(&[], 32, &[]);
    }

    #[test]
    fn padding_fills_ids_and_mask_to_the_longest_member() {
        let padded = pad(&[&[5, 6, 7], &[8]], 0, &Device::Cpu).expect("pad");
        assert_eq!(
            padded.ids.to_vec2::<u32>().expect("ids"),
            [[5, 6, 7], [8, 0, 0]]
        );
        assert_eq!(
            padded.mask.to_vec2::<u32>().expect("mask"),
            [[1, 1, 1], [1, 0, 0]]
        );
    }

    #[test]
    fn additive_mask_is_zero_for_tokens_and_min_for_padding() {
        let mask = Tensor::new(&[[1u32, 0]], &Device::Cpu).expect("mask");
        let got = additive_attention_mask(&mask)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .expect("mask");
        assert_eq!(got, [0.0, f32::MIN]);
    }
}
