//! Client JWTs (`[gateway.jwt]`): checking a bearer token against the identity provider's
//! signing keys (its JWKS) and turning it into the caller it names.
//!
//! - The JWKS is fetched through the SSRF-guarded client (`[network] allow` applies), with a
//!   timeout and a body cap, and kept [`Timing::ttl`] (10 min). A token whose `kid` the cache
//!   lacks triggers a refetch, but fetch attempts are at least [`Timing::refetch_interval`]
//!   (30 s) apart, 5 s after a failure, and only one runs at a time: a flood of made-up `kid`s
//!   costs the identity provider one request per interval, not one per token.
//! - When a refetch fails, the keys already held keep serving for up to [`Timing::stale_limit`]
//!   (1 h), so a short outage of the identity provider does not lock every client out; with
//!   no keys, or older ones, requests get 503 ([`Rejection::KeysUnavailable`]).
//! - Only the configured asymmetric algorithms. `none` does not even parse as a header, and
//!   HMAC is refused here as well as in config validation: a JWKS may carry `oct` keys, and
//!   "HS256 signed with the public key" is the classic confusion attack. `oct` keys are
//!   dropped from the key set.
//! - Claims: `iss` equals the issuer exactly (a string, not a list), `aud` holds one of the
//!   audiences, `exp` is required and not past, `nbf` (if present) is not ahead (both with the
//!   configured leeway), `sub` is a non-empty string.
//! - The profile claim (a string, or a list whose first defined name wins) must name a profile
//!   `[[profiles]]` defines; a token naming only unknown ones is refused with 403
//!   ([`Rejection::UnknownProfile`]): the token is genuine, the caller is known, but this
//!   gateway has no rules for them, and falling back to the default profile could grant more
//!   than the identity provider meant. An absent claim or an empty list means the default.
//! - The token never reaches a log line, an error or a response; rejections are fixed texts.

use std::{
    fmt,
    str::FromStr,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use anyhow::Context;
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation,
    errors::ErrorKind,
    jwk::{AlgorithmParameters, Jwk, PublicKeyUse},
};
use netguard::Policy;
use serde_json::{Map, Value};

/// Who a verified token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    /// The defined profile the profile claim names, if the claim is configured and present.
    pub profile: Option<String>,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// 401 `invalid_token`: a client should get a new token.
    Invalid(Invalid),
    /// 403: a genuine token whose profile claim names no profile this gateway defines.
    UnknownProfile { subject: String },
    /// 503: the identity provider's keys could not be fetched, so no token can be checked.
    KeysUnavailable,
}

/// Which check a token failed. Each has a fixed description, safe to put in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    Malformed,
    Algorithm,
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    BadTime,
    NoExpiry,
    WrongIssuer,
    WrongAudience,
    NoSubject,
    BadProfileClaim,
}

impl Invalid {
    /// The `error_description` of the 401 (RFC 6750 section 3): plain ASCII, no quotes.
    pub fn description(self) -> &'static str {
        match self {
            Invalid::Malformed => {
                "the token is not a well-formed JWT, or its algorithm is unknown (such as none)"
            }
            Invalid::Algorithm => "the token's signature algorithm is not accepted",
            Invalid::UnknownKey => {
                "the token is signed with an unknown key (no key of the identity provider has its kid and algorithm)"
            }
            Invalid::BadSignature => "the token's signature is not valid",
            Invalid::Expired => "the token has expired",
            Invalid::NotYetValid => "the token is not valid yet (nbf)",
            Invalid::BadTime => "the token's nbf is not a number",
            Invalid::NoExpiry => "the token has no exp claim, or it is not a number",
            Invalid::WrongIssuer => "the token is from the wrong issuer",
            Invalid::WrongAudience => "the token is for the wrong audience",
            Invalid::NoSubject => "the token has no sub claim",
            Invalid::BadProfileClaim => {
                "the token's profile claim is not a string or a list of strings"
            }
        }
    }
}

impl From<Invalid> for Rejection {
    fn from(invalid: Invalid) -> Self {
        Rejection::Invalid(invalid)
    }
}

/// How long keys are kept and how often they may be fetched.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long a fetched key set is used before it is fetched again.
    pub ttl: Duration,
    /// Least time between fetch attempts (the limit on refetches for unknown `kid`s).
    pub refetch_interval: Duration,
    /// Least time between attempts after one failed.
    pub retry_after_failure: Duration,
    /// How long keys keep serving past their `ttl` while refetches fail.
    pub stale_limit: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            ttl: Duration::from_secs(600),
            refetch_interval: Duration::from_secs(30),
            retry_after_failure: Duration::from_secs(5),
            stale_limit: Duration::from_secs(3600),
        }
    }
}

/// Checks bearer JWTs for one `[gateway.jwt]`.
pub struct Verifier {
    config: config::JwtConfig,
    algorithms: Vec<Algorithm>,
    /// The names `[[profiles]]` defines.
    profiles: Vec<String>,
    network: Arc<Policy>,
    client: reqwest::Client,
    timing: Timing,
    keys: RwLock<Arc<KeySet>>,
    /// The last fetch attempt and whether it failed. Held across a fetch: one at a time.
    fetch: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

/// Largest JWKS body read; real ones are a few kilobytes.
const MAX_JWKS_BYTES: usize = 256 * 1024;
/// Keys beyond this many in one JWKS are ignored.
const MAX_KEYS: usize = 64;
/// A token without `kid` is tried against at most this many keys of its algorithm.
const MAX_KIDLESS_CANDIDATES: usize = 4;
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

impl Verifier {
    /// A verifier for `config`, whose profile claim is resolved against `policy`'s profiles
    /// and whose JWKS is fetched under `network`. Nothing is fetched yet.
    pub fn new(
        config: &config::JwtConfig,
        policy: &config::PolicyConfig,
        network: Arc<Policy>,
    ) -> anyhow::Result<Verifier> {
        Verifier::with_timing(config, policy, network, Timing::default())
    }

    pub fn with_timing(
        config: &config::JwtConfig,
        policy: &config::PolicyConfig,
        network: Arc<Policy>,
        timing: Timing,
    ) -> anyhow::Result<Verifier> {
        let mut algorithms = Vec::new();
        for name in &config.algorithms {
            let algorithm = Algorithm::from_str(name)
                .ok()
                .filter(|a| !is_hmac(*a))
                .with_context(|| format!("`[gateway.jwt] algorithms`: `{name}` is not accepted"))?;
            algorithms.push(algorithm);
        }
        anyhow::ensure!(
            !algorithms.is_empty(),
            "`[gateway.jwt] algorithms` names no algorithm"
        );
        let client = netguard::guarded_client_builder(network.clone())
            .timeout(FETCH_TIMEOUT)
            .build()
            .context("cannot build the HTTP client for the identity provider's keys")?;
        Ok(Verifier {
            config: config.clone(),
            algorithms,
            profiles: policy.profiles.iter().map(|p| p.name.clone()).collect(),
            network,
            client,
            timing,
            keys: RwLock::new(Arc::new(KeySet::default())),
            fetch: tokio::sync::Mutex::new(None),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    /// Checks `token` and returns who it names.
    pub async fn verify(&self, token: &str) -> Result<Identity, Rejection> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Invalid::Malformed)?;
        let algorithm = header.alg;
        if is_hmac(algorithm) || !self.algorithms.contains(&algorithm) {
            return Err(Invalid::Algorithm.into());
        }
        let kid = header.kid.as_deref();
        let keys = self.keys_for(kid, algorithm).await?;
        let candidates = keys.matching(kid, algorithm);
        if candidates.is_empty() {
            return Err(Invalid::UnknownKey.into());
        }
        let validation = self.validation(algorithm);
        let mut claims = Err(Invalid::BadSignature);
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => {
                    claims = Ok(data.claims);
                    break;
                }
                Err(error) if matches!(error.kind(), ErrorKind::InvalidSignature) => {}
                Err(error) => {
                    claims = Err(invalid_of(error.kind()));
                    break;
                }
            }
        }
        let claims = claims?;
        // The crate accepts an `iss` list that contains the issuer, and any string as `sub`.
        if claims.get("iss").and_then(Value::as_str) != Some(self.config.issuer.as_str()) {
            return Err(Invalid::WrongIssuer.into());
        }
        let subject = match claims.get("sub").and_then(Value::as_str) {
            Some(sub) if !sub.is_empty() => sub.to_owned(),
            _ => return Err(Invalid::NoSubject.into()),
        };
        let profile = self.profile(&claims, &subject)?;
        Ok(Identity { subject, profile })
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&self.config.audience);
        validation
    }

    fn profile(
        &self,
        claims: &Map<String, Value>,
        subject: &str,
    ) -> Result<Option<String>, Rejection> {
        let Some(claim) = &self.config.profile_claim else {
            return Ok(None);
        };
        let names: Vec<&str> = match claims.get(claim) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(name)) => vec![name],
            Some(Value::Array(items)) => items
                .iter()
                .map(Value::as_str)
                .collect::<Option<_>>()
                .ok_or(Invalid::BadProfileClaim)?,
            Some(_) => return Err(Invalid::BadProfileClaim.into()),
        };
        if names.is_empty() {
            return Ok(None);
        }
        match names
            .iter()
            .find(|name| self.profiles.iter().any(|p| p == *name))
        {
            Some(name) => Ok(Some((*name).to_owned())),
            None => Err(Rejection::UnknownProfile {
                subject: subject.to_owned(),
            }),
        }
    }

    fn current(&self) -> Arc<KeySet> {
        self.keys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The key set to check a token of `kid` and `algorithm` with: the cached one while it is
    /// fresh and knows the key, else a refetched one if a fetch is due, else the cached one
    /// if it is not too old.
    async fn keys_for(
        &self,
        kid: Option<&str>,
        algorithm: Algorithm,
    ) -> Result<Arc<KeySet>, Rejection> {
        let usable = |keys: &KeySet| {
            keys.is_fresh(self.timing.ttl) && !keys.matching(kid, algorithm).is_empty()
        };
        let keys = self.current();
        if usable(&keys) {
            return Ok(keys);
        }
        let mut last = self.fetch.lock().await;
        // Another request may have fetched while this one waited.
        let keys = self.current();
        if usable(&keys) {
            return Ok(keys);
        }
        let due = match *last {
            None => true,
            Some((at, failed)) => {
                let interval = if failed {
                    self.timing.retry_after_failure
                } else {
                    self.timing.refetch_interval
                };
                at.elapsed() >= interval
            }
        };
        if due {
            let fetched = self.fetch_keys().await;
            *last = Some((Instant::now(), fetched.is_err()));
            match fetched {
                Ok(keys) => {
                    tracing::debug!(keys = keys.keys.len(), url = %self.config.jwks_url, "fetched the identity provider's keys");
                    let keys = Arc::new(keys);
                    *self
                        .keys
                        .write()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = keys.clone();
                    return Ok(keys);
                }
                Err(error) => {
                    tracing::warn!(url = %self.config.jwks_url, %error, "cannot fetch the identity provider's keys (JWKS)");
                }
            }
        }
        drop(last);
        let keys = self.current();
        match keys.fetched_at {
            Some(at) if at.elapsed() < self.timing.ttl + self.timing.stale_limit => Ok(keys),
            _ => Err(Rejection::KeysUnavailable),
        }
    }

    async fn fetch_keys(&self) -> Result<KeySet, String> {
        let url = &self.config.jwks_url;
        // IP literals never reach the guarded resolver: judge the URL itself first.
        netguard::check_url(url, &self.network).map_err(|refusal| refusal.to_string())?;
        let mut response = self
            .client
            .get(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| error.to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let too_large = || format!("the JWKS is larger than {} KiB", MAX_JWKS_BYTES / 1024);
        if response
            .content_length()
            .is_some_and(|length| length > MAX_JWKS_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| error.to_string())? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        KeySet::parse(&body, Instant::now())
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.config.issuer)
            .field("jwks_url", &self.config.jwks_url.as_str())
            .finish_non_exhaustive()
    }
}

/// Whether a bearer value is shaped like a JWS in compact form: three dot-separated base64url
/// parts, the signature possibly empty (an `alg: none` token, refused as a JWT rather than as
/// an unknown client key). Client keys (`mcpgw_...`) have no dots.
pub fn is_jwt_shaped(value: &str) -> bool {
    let base64url = |part: &str| {
        part.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let parts: Vec<&str> = value.split('.').collect();
    matches!(parts.as_slice(), [header, payload, signature]
        if !header.is_empty() && !payload.is_empty()
            && base64url(header) && base64url(payload) && base64url(signature))
}

fn is_hmac(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
    )
}

fn invalid_of(kind: &ErrorKind) -> Invalid {
    match kind {
        ErrorKind::InvalidSignature | ErrorKind::InvalidKeyFormat => Invalid::BadSignature,
        ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidEddsaKey | ErrorKind::InvalidRsaKey(_) => {
            Invalid::BadSignature
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => Invalid::Algorithm,
        ErrorKind::ExpiredSignature => Invalid::Expired,
        ErrorKind::ImmatureSignature => Invalid::NotYetValid,
        ErrorKind::InvalidIssuer => Invalid::WrongIssuer,
        ErrorKind::InvalidAudience => Invalid::WrongAudience,
        ErrorKind::InvalidSubject => Invalid::NoSubject,
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "exp" => Invalid::NoExpiry,
            "iss" => Invalid::WrongIssuer,
            "aud" => Invalid::WrongAudience,
            "sub" => Invalid::NoSubject,
            _ => Invalid::Malformed,
        },
        ErrorKind::InvalidClaimFormat(_) => Invalid::BadTime,
        _ => Invalid::Malformed,
    }
}

/// The usable keys of one JWKS and when it was fetched.
#[derive(Default)]
struct KeySet {
    keys: Vec<Key>,
    fetched_at: Option<Instant>,
}

struct Key {
    kid: Option<String>,
    /// The JWK's `alg`, when it names one: the key is then used for that algorithm only.
    algorithm: Option<Algorithm>,
    key: DecodingKey,
}

impl KeySet {
    /// The signature keys of a JWKS document. Keys that cannot be used (encryption keys,
    /// shared secrets, unknown types or algorithms) are skipped, not fatal: an identity
    /// provider may publish kinds this gateway does not check tokens with.
    fn parse(body: &[u8], fetched_at: Instant) -> Result<KeySet, String> {
        #[derive(serde::Deserialize)]
        struct Document {
            keys: Vec<Value>,
        }
        let document: Document = serde_json::from_slice(body)
            .map_err(|error| format!("the response is not a JWKS: {error}"))?;
        let keys = document
            .keys
            .into_iter()
            .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
            .filter(|jwk| {
                !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
                    && !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
            })
            .filter_map(|jwk| {
                let algorithm = match jwk.common.key_algorithm {
                    None => None,
                    Some(alg) => Some(Algorithm::from_str(&alg.to_string()).ok()?),
                };
                Some(Key {
                    kid: jwk.common.key_id.clone(),
                    algorithm,
                    key: DecodingKey::from_jwk(&jwk).ok()?,
                })
            })
            .take(MAX_KEYS)
            .collect();
        Ok(KeySet {
            keys,
            fetched_at: Some(fetched_at),
        })
    }

    fn is_fresh(&self, ttl: Duration) -> bool {
        self.fetched_at.is_some_and(|at| at.elapsed() < ttl)
    }

    /// The keys a token of `kid` and `algorithm` may be checked with: the key of that `kid`,
    /// or without one, the first few keys of the algorithm's family.
    fn matching(&self, kid: Option<&str>, algorithm: Algorithm) -> Vec<&DecodingKey> {
        let fits = |key: &&Key| {
            key.key.family() == algorithm.family()
                && key.algorithm.is_none_or(|a| a == algorithm)
                && kid.is_none_or(|kid| key.kid.as_deref() == Some(kid))
        };
        let limit = if kid.is_some() {
            1
        } else {
            MAX_KIDLESS_CANDIDATES
        };
        self.keys
            .iter()
            .filter(fits)
            .take(limit)
            .map(|key| &key.key)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    };

    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;

    /// Test-only P-256 keys, generated once for these tests (`openssl genpkey -algorithm EC
    /// -pkeyopt ec_paramgen_curve:P-256`); they belong to no system.
    const ISSUER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgg5iLGrQpIp7aTd+k
oG062gUlz6OCYA0BgC6in+I+332hRANCAASqkL5PxyKDKy00q7MeogAhb7684oQP
k5BmIcNeUw3H/0rFah64QLogl54XJlpM7Lg2y2KePiZoRMkmHmopjNE9
-----END PRIVATE KEY-----
";
    const ATTACKER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtLCw5Ak76hSJda7l
aP6dESUdBMU0I5Bb2J6IYJryYmWhRANCAATJW1kCZDr9RbUorA8ZfeFC9/5E0mpd
yi9n/9tfpaNmzENsQhUEgWOuVk1ns0VBoqpz9degyBM/H2p5/3boE2+E
-----END PRIVATE KEY-----
";
    const ISSUER: &str = "https://idp.example";
    const AUDIENCE: &str = "mcpgw";

    fn encoding_key(pem: &str) -> EncodingKey {
        EncodingKey::from_ec_pem(pem.as_bytes()).expect("test key")
    }

    fn jwk(pem: &str, kid: &str) -> Value {
        let mut jwk = Jwk::from_encoding_key(&encoding_key(pem), Algorithm::ES256).expect("jwk");
        jwk.common.key_id = Some(kid.to_owned());
        serde_json::to_value(jwk).expect("jwk json")
    }

    fn now() -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    fn sign(pem: &str, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &encoding_key(pem)).expect("sign")
    }

    /// Good claims, with `patch`'s members replaced (`null` removes one).
    fn claims(patch: Value) -> Value {
        let mut claims = json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now() + 300,
        });
        for (name, value) in patch.as_object().expect("object") {
            if value.is_null() {
                claims.as_object_mut().expect("object").remove(name);
            } else {
                claims[name] = value.clone();
            }
        }
        claims
    }

    /// A JWKS endpoint on loopback serving what `jwks` holds, counting its fetches.
    struct Idp {
        url: url::Url,
        jwks: Arc<Mutex<Value>>,
        fetches: Arc<AtomicUsize>,
    }

    impl Idp {
        async fn start(jwks: Value) -> Idp {
            let jwks = Arc::new(Mutex::new(jwks));
            let fetches = Arc::new(AtomicUsize::new(0));
            let (served, counted) = (jwks.clone(), fetches.clone());
            let app = axum::Router::new().route(
                "/jwks.json",
                axum::routing::get(move || {
                    let (served, counted) = (served.clone(), counted.clone());
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = served.lock().expect("jwks").to_string();
                        ([(http::header::CONTENT_TYPE, "application/json")], body)
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            tokio::spawn(async move { axum::serve(listener, app).await });
            Idp {
                url: format!("http://{addr}/jwks.json").parse().expect("url"),
                jwks,
                fetches,
            }
        }

        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }
    }

    fn jwt_config(url: url::Url) -> config::JwtConfig {
        config::JwtConfig {
            issuer: ISSUER.to_owned(),
            audience: vec!["other".to_owned(), AUDIENCE.to_owned()],
            jwks_url: url,
            algorithms: vec!["ES256".to_owned(), "RS256".to_owned()],
            leeway: Duration::from_secs(30),
            profile_claim: Some("groups".to_owned()),
        }
    }

    fn verifier(url: url::Url, timing: Timing) -> Verifier {
        let policy = config::PolicyConfig {
            profiles: ["readers", "admins"]
                .into_iter()
                .map(|name| config::Profile {
                    name: name.to_owned(),
                    servers: Vec::new(),
                    allow: Vec::new(),
                    deny: Vec::new(),
                    read_only: false,
                    destructive: true,
                    exposure: None,
                    pinned: None,
                    clients: Vec::new(),
                    admin: false,
                    calls_per_minute: None,
                })
                .collect(),
            ..Default::default()
        };
        let network = Arc::new(Policy::parse(["127.0.0.1"]).expect("policy"));
        Verifier::with_timing(&jwt_config(url), &policy, network, timing).expect("verifier")
    }

    async fn issuer_and_verifier() -> (Idp, Verifier) {
        let idp = Idp::start(json!({"keys": [jwk(ISSUER_KEY, "k1")]})).await;
        let verifier = verifier(idp.url.clone(), Timing::default());
        (idp, verifier)
    }

    fn user(subject: &str, profile: Option<&str>) -> Result<Identity, Rejection> {
        Ok(Identity {
            subject: subject.to_owned(),
            profile: profile.map(str::to_owned),
        })
    }

    #[tokio::test]
    async fn claims_are_checked_one_by_one() {
        let (_idp, verifier) = issuer_and_verifier().await;
        let check = async |patch: Value, expect: Result<Identity, Rejection>| {
            let token = sign(ISSUER_KEY, Some("k1"), &claims(patch.clone()));
            assert_eq!(verifier.verify(&token).await, expect, "{patch}");
        };
        let invalid = |i: Invalid| Err(Rejection::Invalid(i));
        check(json!({}), user("alice", None)).await;
        check(json!({"aud": ["x", AUDIENCE]}), user("alice", None)).await;
        check(json!({"exp": now() - 10}), user("alice", None)).await; // within the leeway
        check(json!({"exp": now() - 120}), invalid(Invalid::Expired)).await;
        check(json!({"exp": null}), invalid(Invalid::NoExpiry)).await;
        check(json!({"exp": "soon"}), invalid(Invalid::NoExpiry)).await;
        check(json!({"nbf": "soon"}), invalid(Invalid::BadTime)).await;
        check(json!({"nbf": now() + 120}), invalid(Invalid::NotYetValid)).await;
        check(json!({"nbf": now() - 120}), user("alice", None)).await;
        check(
            json!({"iss": "https://evil.example"}),
            invalid(Invalid::WrongIssuer),
        )
        .await;
        check(
            json!({"iss": format!("{ISSUER}/")}),
            invalid(Invalid::WrongIssuer),
        )
        .await;
        check(json!({"iss": [ISSUER]}), invalid(Invalid::WrongIssuer)).await;
        check(json!({"iss": null}), invalid(Invalid::WrongIssuer)).await;
        check(
            json!({"aud": "someone-else"}),
            invalid(Invalid::WrongAudience),
        )
        .await;
        check(json!({"aud": ["a", "b"]}), invalid(Invalid::WrongAudience)).await;
        check(json!({"aud": null}), invalid(Invalid::WrongAudience)).await;
        check(json!({"sub": null}), invalid(Invalid::NoSubject)).await;
        check(json!({"sub": ""}), invalid(Invalid::NoSubject)).await;
        check(json!({"sub": 7}), invalid(Invalid::NoSubject)).await;
    }

    #[tokio::test]
    async fn the_profile_claim_names_a_defined_profile_or_the_token_is_refused() {
        let (_idp, verifier) = issuer_and_verifier().await;
        let check = async |groups: Value, expect: Result<Identity, Rejection>| {
            let token = sign(ISSUER_KEY, Some("k1"), &claims(json!({"groups": groups})));
            assert_eq!(verifier.verify(&token).await, expect, "{groups}");
        };
        let unknown = || {
            Err(Rejection::UnknownProfile {
                subject: "alice".to_owned(),
            })
        };
        check(json!("readers"), user("alice", Some("readers"))).await;
        check(
            json!(["staff", "admins", "readers"]),
            user("alice", Some("admins")),
        )
        .await;
        check(json!([]), user("alice", None)).await;
        check(json!(null), user("alice", None)).await;
        check(json!("Readers"), unknown()).await;
        check(json!(["staff"]), unknown()).await;
        let bad = || Err(Rejection::Invalid(Invalid::BadProfileClaim));
        check(json!(["readers", 1]), bad()).await;
        check(json!({"name": "readers"}), bad()).await;
    }

    #[tokio::test]
    async fn only_the_issuers_keys_and_accepted_algorithms_pass() {
        let (_idp, verifier) = issuer_and_verifier().await;
        let check = async |token: &str, expect: Invalid| {
            assert_eq!(
                verifier.verify(token).await,
                Err(Rejection::Invalid(expect)),
                "{expect:?}"
            );
        };
        let good = claims(json!({}));
        // Signed by another key under the issuer's kid, or under a kid of its own.
        check(
            &sign(ATTACKER_KEY, Some("k1"), &good),
            Invalid::BadSignature,
        )
        .await;
        check(
            &sign(ATTACKER_KEY, Some("evil"), &good),
            Invalid::UnknownKey,
        )
        .await;
        check(&sign(ATTACKER_KEY, None, &good), Invalid::BadSignature).await;
        // Unsigned (`alg: none`), and HMAC keyed with something the attacker knows.
        let payload = sign(ISSUER_KEY, Some("k1"), &good)
            .split('.')
            .nth(1)
            .expect("payload")
            .to_owned();
        let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
        assert!(is_jwt_shaped(&none));
        check(&none, Invalid::Malformed).await;
        let hs256 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &good,
            &EncodingKey::from_secret(b"public key bytes"),
        )
        .expect("sign");
        check(&hs256, Invalid::Algorithm).await;
        // An algorithm the configuration does not list.
        let mut header = Header::new(Algorithm::ES384);
        header.kid = Some("k1".to_owned());
        let es384 = format!("{}.{payload}.AAAA", b64_json(&header));
        check(&es384, Invalid::Algorithm).await;
        check("a.b.c", Invalid::Malformed).await;
        // Without a kid, the issuer's only key is tried.
        assert_eq!(
            verifier.verify(&sign(ISSUER_KEY, None, &good)).await,
            user("alice", None)
        );
    }

    /// The encoded header part of a token, for headers no key here can sign.
    fn b64_json(header: &Header) -> String {
        base64url(&serde_json::to_vec(header).expect("header json"))
    }

    fn base64url(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            }
        }
        out
    }

    #[tokio::test]
    async fn unknown_kids_refetch_the_keys_at_most_once_per_interval() {
        let (idp, verifier) = issuer_and_verifier().await;
        let good = claims(json!({}));
        assert_eq!(
            verifier.verify(&sign(ISSUER_KEY, Some("k1"), &good)).await,
            user("alice", None)
        );
        assert_eq!(idp.fetches(), 1);
        // A flood of made-up kids: one refetch at most (the first is due only after 30 s).
        for i in 0..50 {
            let token = sign(ATTACKER_KEY, Some(&format!("kid-{i}")), &good);
            assert_eq!(
                verifier.verify(&token).await,
                Err(Rejection::Invalid(Invalid::UnknownKey))
            );
        }
        assert_eq!(idp.fetches(), 1);
        // Cached: known kids cost nothing.
        verifier
            .verify(&sign(ISSUER_KEY, Some("k1"), &good))
            .await
            .expect("still good");
        assert_eq!(idp.fetches(), 1);
    }

    #[tokio::test]
    async fn a_rotated_key_is_found_by_refetching() {
        let idp = Idp::start(json!({"keys": [jwk(ISSUER_KEY, "k1")]})).await;
        let timing = Timing {
            refetch_interval: Duration::ZERO,
            ..Timing::default()
        };
        let verifier = verifier(idp.url.clone(), timing);
        let good = claims(json!({}));
        verifier
            .verify(&sign(ISSUER_KEY, Some("k1"), &good))
            .await
            .expect("good");
        // The issuer rotates to a new key (here the second test key) under a new kid.
        *idp.jwks.lock().expect("jwks") = json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "k2", "alg": "HS256"},
            jwk(ATTACKER_KEY, "k2"),
        ]});
        assert_eq!(
            verifier
                .verify(&sign(ATTACKER_KEY, Some("k2"), &good))
                .await,
            user("alice", None)
        );
        assert_eq!(idp.fetches(), 2);
        // The old key is gone with the set it came in.
        assert_eq!(
            verifier.verify(&sign(ISSUER_KEY, Some("k1"), &good)).await,
            Err(Rejection::Invalid(Invalid::UnknownKey))
        );
    }

    #[tokio::test]
    async fn held_keys_outlive_a_failed_refetch_up_to_the_stale_limit() {
        let good = claims(json!({}));
        let token = sign(ISSUER_KEY, Some("k1"), &good);
        for (stale_limit, expect) in [
            (Duration::from_secs(3600), user("alice", None)),
            (Duration::ZERO, Err(Rejection::KeysUnavailable)),
        ] {
            let idp = Idp::start(json!({"keys": [jwk(ISSUER_KEY, "k1")]})).await;
            // Every use finds the keys expired and a refetch due.
            let timing = Timing {
                ttl: Duration::ZERO,
                refetch_interval: Duration::ZERO,
                retry_after_failure: Duration::ZERO,
                stale_limit,
            };
            let verifier = verifier(idp.url.clone(), timing);
            assert_eq!(verifier.verify(&token).await, user("alice", None));
            *idp.jwks.lock().expect("jwks") = json!("not a key set");
            assert_eq!(verifier.verify(&token).await, expect, "{stale_limit:?}");
            assert_eq!(idp.fetches(), 2);
        }
    }

    #[tokio::test]
    async fn unreachable_or_oversized_keys_are_unavailable_not_invalid() {
        let good = claims(json!({}));
        let token = sign(ISSUER_KEY, Some("k1"), &good);
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr")
        };
        let verifier = verifier(
            format!("http://{closed}/jwks.json").parse().expect("url"),
            Timing::default(),
        );
        assert_eq!(
            verifier.verify(&token).await,
            Err(Rejection::KeysUnavailable)
        );

        let padding = "x".repeat(MAX_JWKS_BYTES);
        let idp = Idp::start(json!({"keys": [jwk(ISSUER_KEY, "k1")], "padding": padding})).await;
        let verifier = super::tests::verifier(idp.url.clone(), Timing::default());
        assert_eq!(
            verifier.verify(&token).await,
            Err(Rejection::KeysUnavailable)
        );
        // Not retried at once: the failure holds the next attempt back.
        assert_eq!(
            verifier.verify(&token).await,
            Err(Rejection::KeysUnavailable)
        );
        assert_eq!(idp.fetches(), 1);
    }

    #[tokio::test]
    async fn keys_outside_the_network_policy_are_never_fetched() {
        let idp = Idp::start(json!({"keys": [jwk(ISSUER_KEY, "k1")]})).await;
        let network = Arc::new(Policy::parse(Vec::<String>::new()).expect("policy"));
        let verifier = Verifier::new(
            &jwt_config(idp.url.clone()),
            &<config::PolicyConfig as Default>::default(),
            network,
        )
        .expect("verifier");
        let token = sign(ISSUER_KEY, Some("k1"), &claims(json!({})));
        assert_eq!(
            verifier.verify(&token).await,
            Err(Rejection::KeysUnavailable)
        );
        assert_eq!(idp.fetches(), 0);
    }

    #[test]
    fn only_three_base64url_parts_look_like_a_jwt() {
        for jwt in ["a.b.c", "eyJh.eyJz.", "A-_.b_-.c-_"] {
            assert!(is_jwt_shaped(jwt), "{jwt}");
        }
        for other in [
            "mcpgw_abcDEF-_123",
            "a.b",
            "a.b.c.d",
            ".b.c",
            "a..c",
            "a.b.c=",
            "a.b+/.c",
            "",
        ] {
            assert!(!is_jwt_shaped(other), "{other}");
        }
    }
}
