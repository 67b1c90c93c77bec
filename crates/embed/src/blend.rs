//! Two embedders as one: the vector search then compares texts by a weighted sum of the two
//! models' cosines.
//!
//! A text's blended vector is both models' vectors, each at unit length, scaled and laid end to
//! end: `[√(1 − w) · a, √w · b]`. Its length is 1, and the dot product of two blended vectors is
//! `(1 − w) · cos(a, a′) + w · cos(b, b′)`, so the vector index, the embedding cache and vector
//! feedback work on blended vectors unchanged. A zero vector from either model stays zero in
//! its part.
//!
//! Why: two models that err differently average out part of each other's errors. MiniLM (a
//! contextual encoder) and potion-base-8M (a static model distilled from another one) blended
//! at 0.3 find MetaTool's tools better than either alone (docs/retrieval.md, round six).

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{EmbedError, Embedder, TextKind};

/// Two embedders behind one [`Embedder`]; see the module docs.
pub struct Blend {
    first: Arc<dyn Embedder>,
    second: Arc<dyn Embedder>,
    /// The second model's weight, strictly between 0 and 1.
    weight: f32,
    id: String,
}

impl Blend {
    /// `first` at weight `1 − weight` and `second` at `weight`. The weight must lie strictly
    /// between 0 and 1 (at either end one model is not there, and the caller should use the
    /// other alone).
    pub fn new(
        first: Arc<dyn Embedder>,
        second: Arc<dyn Embedder>,
        weight: f32,
    ) -> Result<Blend, EmbedError> {
        if !(weight > 0.0 && weight < 1.0) {
            return Err(EmbedError::Model(format!(
                "a blend weight lies strictly between 0 and 1, got {weight}"
            )));
        }
        // The id names both models and the weight, so the embedding cache never mixes blends.
        let id = format!("{}+{}@{weight}", first.id(), second.id());
        Ok(Blend {
            first,
            second,
            weight,
            id,
        })
    }

    /// The second model's weight.
    pub fn weight(&self) -> f32 {
        self.weight
    }
}

impl Embedder for Blend {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.first.dim() + self.second.dim()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
        kind: TextKind,
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            let firsts = self.first.embed(texts, kind).await?;
            let seconds = self.second.embed(texts, kind).await?;
            if firsts.len() != texts.len() || seconds.len() != texts.len() {
                return Err(EmbedError::Model(format!(
                    "a blended model returned {} and {} vectors for {} texts",
                    firsts.len(),
                    seconds.len(),
                    texts.len()
                )));
            }
            Ok(blend_vectors(&firsts, &seconds, self.weight))
        })
    }
}

/// The blended vectors of texts the two models embedded apart (`firsts[i]` and `seconds[i]`
/// of the same text), the second at `weight`: what [`Blend`] returns, for callers that cache
/// each model's vectors on their own (`mcpgw eval`). Extra vectors in either list are ignored.
pub fn blend_vectors(firsts: &[Vec<f32>], seconds: &[Vec<f32>], weight: f32) -> Vec<Vec<f32>> {
    let (scale_first, scale_second) = ((1.0 - weight).sqrt(), weight.sqrt());
    firsts
        .iter()
        .zip(seconds)
        .map(|(a, b)| {
            let mut blended = Vec::with_capacity(a.len() + b.len());
            blended.extend(scaled_unit(a, scale_first));
            blended.extend(scaled_unit(b, scale_second));
            blended
        })
        .collect()
}

/// `v` at length `scale`; a zero or non-finite length leaves zeros.
fn scaled_unit(v: &[f32], scale: f32) -> impl Iterator<Item = f32> + '_ {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let factor = if norm > 0.0 && norm.is_finite() {
        scale / norm
    } else {
        0.0
    };
    v.iter().map(move |x| x * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns fixed vectors by text: "a" → `a`, anything else → `other`.
    struct Fixed {
        id: &'static str,
        a: Vec<f32>,
        other: Vec<f32>,
    }

    impl Embedder for Fixed {
        fn id(&self) -> &str {
            self.id
        }

        fn dim(&self) -> usize {
            self.a.len()
        }

        fn embed<'a>(
            &'a self,
            texts: &'a [String],
            _kind: TextKind,
        ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
            Box::pin(async move {
                Ok(texts
                    .iter()
                    .map(|t| match t.as_str() {
                        "a" => self.a.clone(),
                        _ => self.other.clone(),
                    })
                    .collect())
            })
        }
    }

    fn fixed(id: &'static str, a: &[f32], other: &[f32]) -> Arc<dyn Embedder> {
        Arc::new(Fixed {
            id,
            a: a.to_vec(),
            other: other.to_vec(),
        })
    }

    fn dot(x: &[f32], y: &[f32]) -> f32 {
        x.iter().zip(y).map(|(a, b)| a * b).sum()
    }

    #[tokio::test]
    async fn blended_cosine_is_the_weighted_sum_of_the_models_cosines() {
        // Model one: cos(a, b) = 0.6; model two: cos(a, b) = 0 (orthogonal); the second's
        // vectors are not unit length, and the blend scales them.
        let one = fixed("one", &[1.0, 0.0], &[0.6, 0.8]);
        let two = fixed("two", &[0.0, 0.0, 3.0], &[2.0, 0.0, 0.0]);
        let blend = Blend::new(one, two, 0.25).expect("weight");
        assert_eq!(blend.id(), "one+two@0.25");
        assert_eq!(blend.dim(), 5);
        let texts = ["a".to_string(), "b".to_string()];
        let vectors = blend.embed(&texts, TextKind::Query).await.expect("embed");
        assert_eq!(vectors.len(), 2);
        for v in &vectors {
            assert_eq!(v.len(), 5);
            assert!((dot(v, v) - 1.0).abs() < 1e-6, "unit length: {v:?}");
        }
        let cosine = dot(&vectors[0], &vectors[1]);
        assert!((cosine - 0.75 * 0.6).abs() < 1e-6, "{cosine}");
    }

    #[tokio::test]
    async fn a_zero_vector_stays_zero_in_its_part() {
        let one = fixed("one", &[0.0, 0.0], &[1.0, 0.0]);
        let two = fixed("two", &[0.0, 1.0], &[0.0, 1.0]);
        let blend = Blend::new(one, two, 0.5).expect("weight");
        let vectors = blend
            .embed(&["a".to_string()], TextKind::Passage)
            .await
            .expect("embed");
        let half = 0.5f32.sqrt();
        assert_eq!(vectors[0][..2], [0.0, 0.0]);
        assert!((vectors[0][3] - half).abs() < 1e-6, "{vectors:?}");
    }

    #[test]
    fn weights_outside_zero_to_one_are_refused() {
        for weight in [0.0, 1.0, -0.1, 1.5, f32::NAN] {
            let one = fixed("one", &[1.0], &[1.0]);
            let two = fixed("two", &[1.0], &[1.0]);
            let error = Blend::new(one, two, weight).err().expect("refused");
            assert!(
                error.to_string().contains("strictly between 0 and 1"),
                "{error}"
            );
        }
    }
}
