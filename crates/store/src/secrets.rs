//! Secrets at rest: the key they are sealed with, where it comes from, and the sealed format.
//!
//! A sealed value is `version (1 byte) || nonce (12 bytes) || ciphertext || tag (16 bytes)`,
//! AES-256-GCM under the store's secret key with a fresh random nonce from the OS RNG. Version 1
//! is the only one; an unknown version reads as undecryptable, so a later format is a new
//! version byte, never a reinterpretation of old rows.
//!
//! The associated data binds a sealed value to its place: the format version, the table, the
//! column and the row's key columns. A value copied into another row or column, or a row whose
//! key columns were edited, fails authentication exactly like a tampered or foreign-key value.
//!
//! The key is loaded on the first secret use, not on open: a gateway that never meets OAuth
//! never creates a key file, and the embedding cache works without any key. Sources, in order:
//! `$MCPGW_SECRET_KEY` (base64 of 32 bytes), else a key file (`secret.key` beside the database
//! by default) created on first use. A PostgreSQL store, shared by replicas, takes its key only
//! from outside ([`KeySource::external`]): the variable or a key file that already exists, never
//! one made up beside a database that has no "beside". A key file that group or others can access is refused
//! rather than warned about, as `ssh` refuses such a private key: a warning in a log nobody
//! reads would leave every stored token readable by any local user.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::common::getrandom;
use aes_gcm::aead::{AeadInOut, KeyInit, Nonce, Tag};
use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::{DecodePaddingMode, general_purpose};
use secrecy::SecretString;
use zeroize::Zeroizing;

use crate::StoreError;

/// The environment variable that holds the secret key (base64 of 32 bytes). It wins over the
/// key file.
pub const SECRET_KEY_VAR: &str = "MCPGW_SECRET_KEY";

/// The key file's name beside the database when no other path is given.
pub const SECRET_KEY_FILE: &str = "secret.key";

/// Where the store's secret key comes from. Nothing is read until a secret is first used.
#[derive(Clone)]
pub struct KeySource(Origin);

impl KeySource {
    /// `$MCPGW_SECRET_KEY` when set, else `key_file`, created (with its directory) on first use.
    pub fn new(key_file: impl Into<PathBuf>) -> KeySource {
        KeySource(Origin::EnvOrFile {
            env: Arc::new(|name: &str| std::env::var_os(name)),
            key_file: key_file.into(),
        })
    }

    /// A key from outside the database's own storage, as a shared database (PostgreSQL) needs:
    /// `$MCPGW_SECRET_KEY` when set, else `key_file`, which must exist (it is never created: a
    /// key made up by one replica would seal values no other replica can open). With neither,
    /// [`KeySource::check_external`] refuses.
    pub fn external(key_file: Option<PathBuf>) -> KeySource {
        KeySource(Origin::External {
            env: Arc::new(|name: &str| std::env::var_os(name)),
            key_file,
        })
    }

    /// Whether this source can give a key without creating one beside the database: the
    /// variable is set, or the key file exists. What opening a PostgreSQL store requires.
    pub fn check_external(&self) -> Result<(), StoreError> {
        match &self.0 {
            Origin::Ephemeral => Ok(()),
            Origin::EnvOrFile { .. } => Err(StoreError::NoExternalKey),
            Origin::External { env, key_file } => {
                if env(SECRET_KEY_VAR).is_some() {
                    return Ok(());
                }
                match key_file {
                    None => Err(StoreError::NoExternalKey),
                    Some(path) if path.exists() => Ok(()),
                    Some(path) => Err(StoreError::MissingKeyFile { path: path.clone() }),
                }
            }
        }
    }

    /// The default for a database file: `$MCPGW_SECRET_KEY`, else `secret.key` in the
    /// database's directory.
    pub fn beside(database: &Path) -> KeySource {
        let dir = database.parent().unwrap_or(Path::new(""));
        KeySource::new(dir.join(SECRET_KEY_FILE))
    }

    /// A random key that lives as long as the process (in-memory databases, whose secrets die
    /// with them anyway).
    pub fn ephemeral() -> KeySource {
        KeySource(Origin::Ephemeral)
    }

    /// Reads environment variables through `lookup` instead of the process environment (tests,
    /// or a caller that resolved its environment elsewhere). No effect on an ephemeral source.
    pub fn with_env(
        self,
        lookup: impl Fn(&str) -> Option<OsString> + Send + Sync + 'static,
    ) -> KeySource {
        match self.0 {
            Origin::EnvOrFile { key_file, .. } => KeySource(Origin::EnvOrFile {
                env: Arc::new(lookup),
                key_file,
            }),
            Origin::External { key_file, .. } => KeySource(Origin::External {
                env: Arc::new(lookup),
                key_file,
            }),
            Origin::Ephemeral => KeySource(Origin::Ephemeral),
        }
    }

    /// The key file this source falls back to, if any.
    pub fn key_file(&self) -> Option<&Path> {
        match &self.0 {
            Origin::EnvOrFile { key_file, .. } => Some(key_file),
            Origin::External { key_file, .. } => key_file.as_deref(),
            Origin::Ephemeral => None,
        }
    }

    fn load(&self) -> Result<SecretKey, StoreError> {
        match &self.0 {
            Origin::Ephemeral => SecretKey::generate(),
            Origin::EnvOrFile { env, key_file, .. } => match env(SECRET_KEY_VAR) {
                Some(value) => key_from_var(value),
                None => load_or_create_key_file(key_file),
            },
            Origin::External { env, key_file } => match (env(SECRET_KEY_VAR), key_file) {
                (Some(value), _) => key_from_var(value),
                (None, Some(path)) => match File::open(path) {
                    Ok(file) => read_key_file(path, file),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        Err(StoreError::MissingKeyFile { path: path.clone() })
                    }
                    Err(source) => Err(StoreError::KeyFile {
                        path: path.clone(),
                        source,
                    }),
                },
                (None, None) => Err(StoreError::NoExternalKey),
            },
        }
    }
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Origin::EnvOrFile { key_file, .. } => f
                .debug_struct("KeySource")
                .field("var", &SECRET_KEY_VAR)
                .field("key_file", key_file)
                .finish(),
            Origin::External { key_file, .. } => f
                .debug_struct("KeySource::External")
                .field("var", &SECRET_KEY_VAR)
                .field("key_file", key_file)
                .finish(),
            Origin::Ephemeral => f.write_str("KeySource::Ephemeral"),
        }
    }
}

#[derive(Clone)]
enum Origin {
    /// The variable, else the key file, created on first use.
    EnvOrFile {
        env: EnvLookup,
        key_file: PathBuf,
    },
    /// The variable, else an existing key file; never created.
    External {
        env: EnvLookup,
        key_file: Option<PathBuf>,
    },
    Ephemeral,
}

fn key_from_var(value: OsString) -> Result<SecretKey, StoreError> {
    let malformed = || StoreError::MalformedKeyVar {
        var: SECRET_KEY_VAR,
    };
    // `into_string` moves the bytes, so the zeroized copy is the only one we made (the process
    // environment keeps its own).
    let value = Zeroizing::new(value.into_string().map_err(|_| malformed())?);
    SecretKey::from_base64(value.as_bytes()).ok_or_else(malformed)
}

type EnvLookup = Arc<dyn Fn(&str) -> Option<OsString> + Send + Sync>;

/// The place of a sealed value: what its associated data is made of and how a failure is logged.
pub(crate) struct Row<'a> {
    pub table: &'static str,
    pub column: &'static str,
    /// The row's key columns, in a fixed order per table; authenticated, never logged.
    pub key: Vec<&'a str>,
    /// What a warning names the row by (no secret, no state id).
    pub shown: Vec<(&'static str, &'a str)>,
}

impl Row<'_> {
    /// Length-prefixed, so no two different rows encode alike.
    fn associated_data(&self, version: u8) -> Vec<u8> {
        let mut aad = b"mcpgw-store\0".to_vec();
        aad.push(version);
        for part in [self.table, self.column]
            .into_iter()
            .chain(self.key.iter().copied())
        {
            aad.extend_from_slice(&(part.len() as u64).to_le_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad
    }

    fn identity(&self) -> String {
        let mut id = format!("{}.{}", self.table, self.column);
        for part in &self.key {
            id.push('\u{1f}');
            id.push_str(part);
        }
        id
    }
}

impl fmt::Display for Row<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.shown.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value:?}")?;
        }
        Ok(())
    }
}

/// The store's secret-handling state: the key source, the key once loaded, and which rows have
/// already been reported as undecryptable.
pub(crate) struct Secrets {
    source: KeySource,
    key: OnceLock<SecretKey>,
    /// Serialises the first load, so concurrent first uses create one key file, not two.
    loading: Mutex<()>,
    reported: Mutex<HashSet<String>>,
}

impl Secrets {
    pub fn new(source: KeySource) -> Secrets {
        Secrets {
            source,
            key: OnceLock::new(),
            loading: Mutex::new(()),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// The key, loading it on first use. A failed load is not remembered: fixing the variable
    /// or the file's mode takes effect on the next use.
    fn key(&self) -> Result<&SecretKey, StoreError> {
        if let Some(key) = self.key.get() {
            return Ok(key);
        }
        let _loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = self.key.get() {
            return Ok(key);
        }
        let key = self.source.load()?;
        Ok(self.key.get_or_init(|| key))
    }

    /// Seals `plaintext` for `row`; a later write to the row may be reported again if it too
    /// turns out undecryptable.
    pub fn seal(&self, row: &Row<'_>, plaintext: &str) -> Result<Vec<u8>, StoreError> {
        let sealed = self.key()?.seal(row, plaintext.as_bytes())?;
        self.reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&row.identity());
        Ok(sealed)
    }

    /// Opens a value sealed for `row`. A value that does not open (another key, another row,
    /// tampered, unknown version, not UTF-8) is absent, and reported once per row. Only a key
    /// that cannot be loaded is an error.
    pub fn open(&self, row: &Row<'_>, sealed: &[u8]) -> Result<Option<SecretString>, StoreError> {
        let opened = self.key()?.open(row, sealed);
        let text = opened
            .as_deref()
            .and_then(|plain| std::str::from_utf8(plain).ok());
        match text {
            // Copies into an exactly sized buffer owned by the secret; `opened` is zeroized.
            Some(text) => Ok(Some(SecretString::from(text))),
            None => {
                let first = self
                    .reported
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(row.identity());
                if first {
                    tracing::warn!(
                        table = row.table,
                        row = %row,
                        "ignoring a stored secret that cannot be decrypted (the secret key changed, \
                         or the row was altered); it is treated as absent"
                    );
                } else {
                    tracing::debug!(table = row.table, row = %row, "stored secret still undecryptable");
                }
                Ok(None)
            }
        }
    }

    /// Seals raw bytes for `row` (values that are not stored, such as session state).
    pub fn seal_bytes(&self, row: &Row<'_>, plaintext: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.key()?.seal(row, plaintext)
    }

    /// Opens bytes sealed by [`Secrets::seal_bytes`]; `None` when they do not open, never
    /// reported (the caller decides). Only a key that cannot be loaded is an error.
    pub fn open_bytes(&self, row: &Row<'_>, sealed: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.key()?.open(row, sealed).map(|plain| plain.to_vec()))
    }

    /// Forgets that `row` was reported (it was deleted).
    pub fn forget(&self, row: &Row<'_>) {
        self.reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&row.identity());
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("source", &self.source)
            .field("loaded", &self.key.get().is_some())
            .finish_non_exhaustive()
    }
}

/// The one format version written today.
const VERSION: u8 = 1;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + NONCE_LEN;

/// AES-256-GCM keyed with the store's secret. The cipher's key schedule is zeroized on drop
/// (aes-gcm's `zeroize` feature); the raw key bytes only ever live in `Zeroizing` buffers.
struct SecretKey(Aes256Gcm);

impl SecretKey {
    /// `None` unless `bytes` is exactly 32 bytes long.
    fn from_bytes(bytes: &[u8]) -> Option<SecretKey> {
        Aes256Gcm::new_from_slice(bytes).ok().map(SecretKey)
    }

    fn generate() -> Result<SecretKey, StoreError> {
        let bytes = random_key()?;
        SecretKey::from_bytes(&bytes[..]).ok_or(StoreError::Random)
    }

    /// Base64 (standard or URL-safe alphabet, padding optional) of exactly 32 bytes, with
    /// surrounding whitespace ignored.
    fn from_base64(text: &[u8]) -> Option<SecretKey> {
        let text = text.trim_ascii();
        // Room for more than 32 bytes, so a longer key is reported as malformed rather than
        // truncated.
        let mut bytes = Zeroizing::new([0u8; 64]);
        [LENIENT_STANDARD, LENIENT_URL_SAFE]
            .iter()
            .find_map(|engine| engine.decode_slice(text, &mut bytes[..]).ok())
            .filter(|&len| len == 32)
            .and_then(|_| SecretKey::from_bytes(&bytes[..32]))
    }

    fn seal(&self, row: &Row<'_>, plaintext: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut nonce = Nonce::<Aes256Gcm>::default();
        getrandom::fill(&mut nonce).map_err(|_| StoreError::Random)?;
        // Sized once, so the plaintext is never left behind in a reallocated buffer: it is
        // encrypted in place.
        let mut out = Vec::with_capacity(HEADER_LEN + plaintext.len() + TAG_LEN);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let tag = self
            .0
            .encrypt_inout_detached(
                &nonce,
                &row.associated_data(VERSION),
                (&mut out[HEADER_LEN..]).into(),
            )
            .map_err(|_| StoreError::Seal { table: row.table })?;
        out.extend_from_slice(&tag);
        Ok(out)
    }

    fn open(&self, row: &Row<'_>, sealed: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        let (&version, rest) = sealed.split_first()?;
        if version != VERSION || rest.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, rest) = rest.split_at(NONCE_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce = Nonce::<Aes256Gcm>::try_from(nonce).ok()?;
        let tag = Tag::<Aes256Gcm>::try_from(tag).ok()?;
        let mut plain = Zeroizing::new(ciphertext.to_vec());
        self.0
            .decrypt_inout_detached(
                &nonce,
                &row.associated_data(version),
                plain.as_mut_slice().into(),
                &tag,
            )
            .ok()?;
        Some(plain)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

const LENIENT: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
const LENIENT_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);

fn random_key() -> Result<Zeroizing<[u8; 32]>, StoreError> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut bytes[..]).map_err(|_| StoreError::Random)?;
    Ok(bytes)
}

/// Reads the key file, creating it first when it does not exist.
fn load_or_create_key_file(path: &Path) -> Result<SecretKey, StoreError> {
    let io = |source| StoreError::KeyFile {
        path: path.to_owned(),
        source,
    };
    match File::open(path) {
        Ok(file) => read_key_file(path, file),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            create_key_file(path)?;
            read_key_file(path, File::open(path).map_err(io)?)
        }
        Err(error) => Err(io(error)),
    }
}

fn read_key_file(path: &Path, file: File) -> Result<SecretKey, StoreError> {
    let io = |source| StoreError::KeyFile {
        path: path.to_owned(),
        source,
    };
    // The opened file's own metadata: no window between checking one file and reading another.
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(StoreError::MalformedKeyFile {
            path: path.to_owned(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(StoreError::InsecureKeyFile {
                path: path.to_owned(),
                mode,
            });
        }
    }
    // A key file is ~45 bytes; reading at most 256 into a buffer that never grows leaves no
    // stray copy behind.
    let mut text = Zeroizing::new(Vec::with_capacity(257));
    file.take(256).read_to_end(&mut text).map_err(io)?;
    SecretKey::from_base64(&text).ok_or_else(|| StoreError::MalformedKeyFile {
        path: path.to_owned(),
    })
}

/// Writes a new random key to a private temporary file and links it into place. The file has
/// mode 0600 from its creation (no chmod after the write), and it appears complete or not at
/// all. The link fails if another process created the key first, and then its key is used:
/// two processes racing on a fresh directory agree on one key (a rename would let the second
/// overwrite the first's key after the first had already sealed with it).
fn create_key_file(path: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::KeyFile {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty());
    if let Some(dir) = dir {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(io)?;
    }
    let key = random_key()?;
    let text = Zeroizing::new(STANDARD.encode(&key[..]));
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|_| StoreError::Random)?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| SECRET_KEY_FILE.to_owned());
    let temp = path.with_file_name(format!(
        ".{name}.{}.tmp",
        general_purpose::URL_SAFE_NO_PAD.encode(suffix)
    ));

    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let linked = options
        .open(&temp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()
        })
        .and_then(|()| std::fs::hard_link(&temp, path));
    // Best effort: a leftover temporary file holds an unused key, readable by the owner only.
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            if let Some(dir) = dir {
                // Make the new name durable before anything is sealed with the key.
                File::open(dir).and_then(|dir| dir.sync_all()).ok();
            }
            tracing::info!(path = %path.display(), "created a new secret key file");
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(io(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(key: &[&'a str]) -> Row<'a> {
        Row {
            table: "t",
            column: "c",
            key: key.to_vec(),
            shown: Vec::new(),
        }
    }

    fn key() -> SecretKey {
        SecretKey::generate().expect("key")
    }

    #[test]
    fn sealed_values_open_only_in_their_own_row() {
        let key = key();
        let sealed = key.seal(&row(&["a", "b"]), b"hunter2").expect("seal");
        assert_eq!(sealed[0], VERSION);
        assert_eq!(sealed.len(), HEADER_LEN + 7 + TAG_LEN);
        let opened = key.open(&row(&["a", "b"]), &sealed).expect("opens");
        assert_eq!(opened.as_slice(), b"hunter2");
        assert!(key.open(&row(&["a", "c"]), &sealed).is_none(), "other row");
        assert!(
            key.open(&row(&["ab", ""]), &sealed).is_none(),
            "parts are delimited"
        );
        let other_column = Row {
            column: "d",
            ..row(&["a", "b"])
        };
        assert!(key.open(&other_column, &sealed).is_none(), "other column");
    }

    #[test]
    fn tampered_truncated_or_unknown_versions_do_not_open() {
        let key = key();
        let sealed = key.seal(&row(&["a"]), b"hunter2").expect("seal");
        for i in 0..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[i] ^= 0x01;
            assert!(
                key.open(&row(&["a"]), &tampered).is_none(),
                "byte {i} flipped"
            );
        }
        assert!(
            key.open(&row(&["a"]), &sealed[..sealed.len() - 1])
                .is_none()
        );
        assert!(key.open(&row(&["a"]), &[]).is_none());
        assert!(key.open(&row(&["a"]), &[VERSION]).is_none());
        assert!(
            SecretKey::generate()
                .expect("key")
                .open(&row(&["a"]), &sealed)
                .is_none(),
            "another key"
        );
    }

    #[test]
    fn nonces_are_fresh_per_seal() {
        let key = key();
        let a = key.seal(&row(&["a"]), b"same").expect("seal");
        let b = key.seal(&row(&["a"]), b"same").expect("seal");
        assert_ne!(a[1..HEADER_LEN], b[1..HEADER_LEN]);
        assert_ne!(a, b);
    }

    #[test]
    fn keys_parse_from_base64_of_exactly_32_bytes() {
        let bytes = [7u8; 32];
        let standard = STANDARD.encode(bytes);
        let url_safe_no_pad = general_purpose::URL_SAFE_NO_PAD.encode([0xfb; 32]);
        assert!(SecretKey::from_base64(standard.as_bytes()).is_some());
        assert!(SecretKey::from_base64(format!("  {standard}\n").as_bytes()).is_some());
        assert!(SecretKey::from_base64(url_safe_no_pad.as_bytes()).is_some());
        for bad in [
            String::new(),
            "not base64 at all!".to_owned(),
            STANDARD.encode([7u8; 16]),
            STANDARD.encode([7u8; 31]),
            STANDARD.encode([7u8; 33]),
            STANDARD.encode([7u8; 64]),
        ] {
            assert!(SecretKey::from_base64(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn an_undecryptable_row_is_reported_once_until_rewritten() {
        let secrets = Secrets::new(KeySource::ephemeral());
        let other = Secrets::new(KeySource::ephemeral());
        let row = row(&["a"]);
        let sealed = other.seal(&row, "v").expect("seal");
        assert!(secrets.open(&row, &sealed).expect("open").is_none());
        assert!(
            secrets
                .reported
                .lock()
                .expect("lock")
                .contains(&row.identity())
        );
        assert!(secrets.open(&row, &sealed).expect("open").is_none());
        assert_eq!(secrets.reported.lock().expect("lock").len(), 1);
        secrets.seal(&row, "new").expect("seal");
        assert!(secrets.reported.lock().expect("lock").is_empty());
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let encoded = STANDARD.encode([42u8; 32]);
        let value = encoded.clone();
        let source = KeySource::new("/nonexistent/secret.key")
            .with_env(move |_| Some(OsString::from(value.clone())));
        let secrets = Secrets::new(source);
        secrets.key().expect("loads from the variable");
        let shown = format!("{secrets:?} {:?}", secrets.key().expect("key"));
        assert!(shown.contains("loaded: true"), "{shown}");
        assert!(!shown.contains(&encoded), "{shown}");
        assert!(!shown.contains("42, 42"), "{shown}");
    }

    #[test]
    fn racing_first_uses_agree_on_one_key_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fresh/secret.key");
        let sealed: Vec<(Vec<u8>, SecretKey)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        let key = load_or_create_key_file(&path).expect("key");
                        (key.seal(&row(&["a"]), b"x").expect("seal"), key)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        for (value, _) in &sealed {
            for (_, key) in &sealed {
                assert!(key.open(&row(&["a"]), value).is_some(), "one key for all");
            }
        }
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("read dir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(leftovers, vec![OsString::from("secret.key")]);
    }
}
