-- Clients of the gateway's HTTP listener, each with one API key. Only the key's SHA-256 is
-- stored: keys are 32 random bytes, so the hash cannot be reversed or guessed, and a stolen
-- database does not let anyone in. Times are unix seconds.
CREATE TABLE clients (
    name         TEXT    NOT NULL PRIMARY KEY,
    key_hash     BLOB    NOT NULL UNIQUE, -- SHA-256 of the whole key, `mcpgw_` prefix included
    created_at   INTEGER NOT NULL DEFAULT (unixepoch()),
    last_used_at INTEGER                  -- NULL until first use; updated at most once a minute
) WITHOUT ROWID;
