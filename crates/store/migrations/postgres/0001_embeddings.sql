-- PostgreSQL twin of ../0001_embeddings.sql: the same tables, columns and meaning; only the
-- types differ (BYTEA for bytes, BIGINT for integers, the epoch from now()).
CREATE TABLE embeddings (
    model      TEXT   NOT NULL,
    text_hash  BYTEA  NOT NULL,
    dim        BIGINT NOT NULL,
    vector     BYTEA  NOT NULL, -- dim little-endian f32s
    created_at BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT),
    PRIMARY KEY (model, text_hash)
);
