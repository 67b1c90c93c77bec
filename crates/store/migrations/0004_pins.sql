-- Tool pinning: per (server, upstream tool name), the definition trusted on first use and a
-- changed definition waiting for approval. Hashes are SHA-256 of the caller's canonical JSON of
-- the definition; definitions are that JSON, kept to show what changed. Times are unix seconds.
CREATE TABLE tool_pins (
    server             TEXT    NOT NULL,
    tool               TEXT    NOT NULL, -- the upstream's own name
    qualified          TEXT    NOT NULL, -- the name clients see, to approve by it offline
    trusted_hash       BLOB    NOT NULL,
    trusted_definition TEXT    NOT NULL,
    trusted_at         INTEGER NOT NULL DEFAULT (unixepoch()),
    pending_hash       BLOB,             -- NULL unless a changed definition is held
    pending_definition TEXT,
    pending_since      INTEGER,
    PRIMARY KEY (server, tool)
) WITHOUT ROWID;

CREATE INDEX tool_pins_qualified ON tool_pins (qualified);

-- One row, bumped by every approval, so a running gateway notices an approval made by another
-- process (`mcpgw tools approve`) with one cheap read.
CREATE TABLE tool_pins_generation (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
INSERT INTO tool_pins_generation (id, generation) VALUES (1, 0);
