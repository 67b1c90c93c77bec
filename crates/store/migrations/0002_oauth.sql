-- OAuth for upstream servers. Every BLOB column named as sealed holds
-- `version || nonce || ciphertext || tag` (AES-256-GCM, see src/secrets.rs), bound to its row's
-- key columns; every other column is plain and holds nothing secret. Times are unix seconds.

-- Client registrations (dynamic or static), reused by every user of the gateway. A registration
-- is only valid for the redirect URI it was made with, so a gateway reachable at a new address
-- registers anew rather than reusing one the authorization server would reject.
CREATE TABLE oauth_clients (
    issuer        TEXT    NOT NULL, -- the authorization server's issuer identifier
    redirect_uri  TEXT    NOT NULL,
    client_id     TEXT    NOT NULL,
    client_secret BLOB,             -- sealed; NULL for a public client
    metadata      TEXT    NOT NULL, -- the registration's metadata, JSON
    created_at    INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (issuer, redirect_uri)
) WITHOUT ROWID;

-- Credentials per (server, principal): the caller's whole credential document, sealed. The
-- access token's expiry is plain so status can be shown without the key.
CREATE TABLE oauth_credentials (
    server      TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    issuer      TEXT    NOT NULL,
    credentials BLOB    NOT NULL,   -- sealed JSON
    expires_at  INTEGER,            -- NULL when unknown
    updated_at  INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (server, principal)
) WITHOUT ROWID;

-- Authorizations in flight, keyed by the `state` parameter sent to the authorization server.
-- Single use; older than ten minutes counts as absent and is purged.
CREATE TABLE oauth_states (
    state      TEXT    NOT NULL PRIMARY KEY,
    server     TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    payload    BLOB    NOT NULL,    -- sealed (PKCE verifier and the like)
    created_at INTEGER NOT NULL DEFAULT (unixepoch())
) WITHOUT ROWID;

CREATE INDEX oauth_states_created_at ON oauth_states (created_at);
