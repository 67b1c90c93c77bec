-- Embedding cache: one vector per (model, text). `text_hash` is the SHA-256 of the exact text
-- embedded, so a changed tool description is a new row and unchanged tools are never
-- re-embedded after a restart.
CREATE TABLE embeddings (
    model      TEXT    NOT NULL,
    text_hash  BLOB    NOT NULL,
    dim        INTEGER NOT NULL,
    vector     BLOB    NOT NULL, -- dim little-endian f32s
    created_at INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (model, text_hash)
) WITHOUT ROWID;
