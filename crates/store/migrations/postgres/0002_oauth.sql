-- PostgreSQL twin of ../0002_oauth.sql (sealed columns and their format are the same).
CREATE TABLE oauth_clients (
    issuer        TEXT   NOT NULL,
    redirect_uri  TEXT   NOT NULL,
    client_id     TEXT   NOT NULL,
    client_secret BYTEA,            -- sealed; NULL for a public client
    metadata      TEXT   NOT NULL,  -- the registration's metadata, JSON
    created_at    BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT),
    PRIMARY KEY (issuer, redirect_uri)
);

CREATE TABLE oauth_credentials (
    server      TEXT   NOT NULL,
    principal   TEXT   NOT NULL,
    issuer      TEXT   NOT NULL,
    credentials BYTEA  NOT NULL,    -- sealed JSON
    expires_at  BIGINT,             -- NULL when unknown
    updated_at  BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT),
    PRIMARY KEY (server, principal)
);

CREATE TABLE oauth_states (
    state      TEXT   NOT NULL PRIMARY KEY,
    server     TEXT   NOT NULL,
    principal  TEXT   NOT NULL,
    payload    BYTEA  NOT NULL,     -- sealed (PKCE verifier and the like)
    created_at BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT)
);

CREATE INDEX oauth_states_created_at ON oauth_states (created_at);
