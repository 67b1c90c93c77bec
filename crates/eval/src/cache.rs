//! An embedding cache for evaluation runs, so a rerun does not embed 21k queries again.
//!
//! Keys are sha256 of (model id, text kind, text): the kind is part of the key because models
//! such as E5 embed a query and a passage of the same text differently. [`EmbeddingCache`] is
//! the seam; [`FileCache`] is the implementation used until the SQLite store (which will hold
//! the gateway's embedding cache) exists, and [`MemoryCache`] serves tests and `--no-cache`.
//!
//! File format, one file per (model, set) under the cache folder
//! (`<dir>/<model id, sanitised>/<set>.bin`): an 8-byte magic, then records of
//! `[32-byte key][u32 LE dimension][dimension x f32 LE]`. New records are appended on
//! [`EmbeddingCache::flush`], so an interrupted run keeps what it had flushed; a torn last
//! record is ignored on load. A file with another magic is treated as empty and rewritten.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use embed::TextKind;

use crate::Error;

/// The cache key of one embedded text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    pub fn new(model_id: &str, kind: TextKind, text: &str) -> CacheKey {
        let kind = match kind {
            TextKind::Query => "query",
            TextKind::Passage => "passage",
        };
        let mut hasher = Sha256::new();
        for part in [model_id, kind, text] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        CacheKey(hasher.finalize().into())
    }
}

/// Where evaluation keeps embeddings between runs.
pub trait EmbeddingCache {
    fn get(&self, key: &CacheKey) -> Option<&[f32]>;
    fn put(&mut self, key: CacheKey, vector: Vec<f32>);
    /// Makes every `put` so far durable (a no-op for caches that are not).
    fn flush(&mut self) -> Result<(), Error>;
    /// Number of cached vectors.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A cache that forgets everything when dropped.
#[derive(Debug, Default)]
pub struct MemoryCache {
    vectors: HashMap<CacheKey, Vec<f32>>,
}

impl EmbeddingCache for MemoryCache {
    fn get(&self, key: &CacheKey) -> Option<&[f32]> {
        self.vectors.get(key).map(Vec::as_slice)
    }

    fn put(&mut self, key: CacheKey, vector: Vec<f32>) {
        self.vectors.insert(key, vector);
    }

    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn len(&self) -> usize {
        self.vectors.len()
    }
}

const MAGIC: &[u8; 8] = b"MCPGWEV1";

/// An append-only file of embeddings; see the module docs for the format.
#[derive(Debug)]
pub struct FileCache {
    path: PathBuf,
    vectors: HashMap<CacheKey, Vec<f32>>,
    /// Keys put since the last flush, in order.
    pending: Vec<CacheKey>,
    /// Whether the file must be started over (missing, or not ours).
    fresh: bool,
}

impl FileCache {
    /// The cache of `set` embedded by `model_id`, under `dir`. A missing file is an empty
    /// cache; nothing is written until [`EmbeddingCache::flush`].
    pub fn open(dir: &Path, model_id: &str, set: &str) -> Result<FileCache, Error> {
        let path = dir
            .join(file_name(model_id))
            .join(format!("{}.bin", file_name(set)));
        let mut cache = FileCache {
            path,
            vectors: HashMap::new(),
            pending: Vec::new(),
            fresh: true,
        };
        let bytes = match fs::read(&cache.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(cache),
            Err(source) => return Err(cache.error(source)),
        };
        let Some(mut rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
            return Ok(cache);
        };
        cache.fresh = false;
        while let Some((key, vector, tail)) = record(rest) {
            cache.vectors.insert(key, vector);
            rest = tail;
        }
        if !rest.is_empty() {
            // A torn record from an interrupted flush: rewrite the file without it, or the
            // next append would land after garbage.
            cache.fresh = true;
            cache.pending = cache.vectors.keys().copied().collect();
        }
        Ok(cache)
    }

    /// The file this cache reads and appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, error: std::io::Error) -> Error {
        Error::Cache {
            path: self.path.clone(),
            error,
        }
    }

    fn write_pending(&self) -> std::io::Result<()> {
        if let Some(parent) = self.path.parent() {
            fs::create_dir_all(parent)?;
        }
        let file = if self.fresh {
            File::create(&self.path)?
        } else {
            OpenOptions::new().append(true).open(&self.path)?
        };
        let mut out = BufWriter::new(file);
        if self.fresh {
            out.write_all(MAGIC)?;
        }
        for key in &self.pending {
            let Some(vector) = self.vectors.get(key) else {
                continue;
            };
            out.write_all(&key.0)?;
            out.write_all(&(vector.len() as u32).to_le_bytes())?;
            for x in vector {
                out.write_all(&x.to_le_bytes())?;
            }
        }
        out.flush()?;
        out.into_inner().map_err(|e| e.into_error())?.sync_data()
    }
}

impl EmbeddingCache for FileCache {
    fn get(&self, key: &CacheKey) -> Option<&[f32]> {
        self.vectors.get(key).map(Vec::as_slice)
    }

    fn put(&mut self, key: CacheKey, vector: Vec<f32>) {
        if self.vectors.insert(key, vector).is_none() {
            self.pending.push(key);
        }
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.pending.is_empty() && !self.fresh {
            return Ok(());
        }
        self.write_pending().map_err(|source| self.error(source))?;
        self.pending.clear();
        self.fresh = false;
        Ok(())
    }

    fn len(&self) -> usize {
        self.vectors.len()
    }
}

/// One record off the front of `bytes`, and the rest; `None` at the end or at a torn record.
fn record(bytes: &[u8]) -> Option<(CacheKey, Vec<f32>, &[u8])> {
    let (key, rest) = bytes.split_first_chunk::<32>()?;
    let (dim, rest) = rest.split_first_chunk::<4>()?;
    let dim = u32::from_le_bytes(*dim) as usize;
    let body = rest.get(..dim.checked_mul(4)?)?;
    let vector = body
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Some((CacheKey(*key), vector, &rest[dim * 4..]))
}

/// `name` as a file name: anything but `[A-Za-z0-9._-]` becomes `_`.
fn file_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match name.trim_start_matches('.') {
        "" => "_".to_string(),
        trimmed => trimmed.to_string(),
    }
}

/// The default cache folder: `$XDG_CACHE_HOME/mcpgw/eval`, else `~/.cache/mcpgw/eval`.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("mcpgw").join("eval"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(path: &Path) -> Vec<u8> {
        fs::read(path).expect("readable")
    }

    fn key(text: &str) -> CacheKey {
        CacheKey::new("local/test", TextKind::Query, text)
    }

    #[test]
    fn keys_depend_on_model_kind_and_text() {
        let base = CacheKey::new("m", TextKind::Query, "hello");
        assert_eq!(base, CacheKey::new("m", TextKind::Query, "hello"));
        assert_ne!(base, CacheKey::new("m2", TextKind::Query, "hello"));
        assert_ne!(base, CacheKey::new("m", TextKind::Passage, "hello"));
        assert_ne!(base, CacheKey::new("m", TextKind::Query, "hello "));
        // Length prefixes: moving a boundary changes the key.
        assert_ne!(
            CacheKey::new("ab", TextKind::Query, "c"),
            CacheKey::new("a", TextKind::Query, "bc")
        );
    }

    #[test]
    fn file_cache_survives_reopening_and_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cache = FileCache::open(dir.path(), "local/test model", "tool lens").expect("open");
        assert!(cache.is_empty());
        cache.put(key("a"), vec![1.0, 2.0]);
        cache.put(key("b"), vec![-0.5, 0.25]);
        cache.flush().expect("flush");
        assert!(
            cache.path().ends_with("local_test_model/tool_lens.bin"),
            "{:?}",
            cache.path()
        );

        let mut again =
            FileCache::open(dir.path(), "local/test model", "tool lens").expect("reopen");
        assert_eq!(again.len(), 2);
        assert_eq!(again.get(&key("b")), Some([-0.5, 0.25].as_slice()));
        again.put(key("c"), vec![3.0, 4.0]);
        again.put(key("a"), vec![9.0, 9.0]);
        again.flush().expect("append");

        let third = FileCache::open(dir.path(), "local/test model", "tool lens").expect("reopen");
        assert_eq!(third.len(), 3);
        assert_eq!(third.get(&key("c")), Some([3.0, 4.0].as_slice()));
        let size = bytes_of(third.path()).len();
        assert_eq!(size, MAGIC.len() + 3 * (32 + 4 + 8));
    }

    #[test]
    fn torn_last_record_is_dropped_and_the_file_repaired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cache = FileCache::open(dir.path(), "m", "s").expect("open");
        cache.put(key("a"), vec![1.0]);
        cache.put(key("b"), vec![2.0]);
        cache.flush().expect("flush");
        let path = cache.path().to_path_buf();
        let bytes = bytes_of(&path);
        fs::write(&path, &bytes[..bytes.len() - 2]).expect("truncate");

        let mut torn = FileCache::open(dir.path(), "m", "s").expect("open torn");
        assert_eq!(torn.len(), 1);
        torn.put(key("c"), vec![3.0]);
        torn.flush().expect("rewrite");
        let repaired = FileCache::open(dir.path(), "m", "s").expect("open repaired");
        assert_eq!(repaired.len(), 2);
        assert_eq!(repaired.get(&key("c")), Some([3.0].as_slice()));
    }

    #[test]
    fn foreign_file_is_treated_as_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cache = FileCache::open(dir.path(), "m", "s").expect("open");
        fs::create_dir_all(cache.path().parent().expect("parent")).expect("mkdir");
        fs::write(cache.path(), b"something else entirely").expect("write");
        cache = FileCache::open(dir.path(), "m", "s").expect("open foreign");
        assert!(cache.is_empty());
        cache.put(key("a"), vec![1.0]);
        cache.flush().expect("flush");
        assert_eq!(
            FileCache::open(dir.path(), "m", "s").expect("reopen").len(),
            1
        );
    }

    #[test]
    fn file_names_are_tamed() {
        assert_eq!(
            file_name("local/all-MiniLM-L6-v2"),
            "local_all-MiniLM-L6-v2"
        );
        assert_eq!(file_name("../etc"), "_etc");
        assert_eq!(file_name(".."), "_");
    }
}
