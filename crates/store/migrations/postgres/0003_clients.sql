-- PostgreSQL twin of ../0003_clients.sql.
CREATE TABLE clients (
    name         TEXT   NOT NULL PRIMARY KEY,
    key_hash     BYTEA  NOT NULL UNIQUE, -- SHA-256 of the whole key, `mcpgw_` prefix included
    created_at   BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT),
    last_used_at BIGINT                  -- NULL until first use; updated at most once a minute
);
