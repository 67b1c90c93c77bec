-- The audit log: one row per tool call that reached the gateway, whatever became of it. It holds
-- who called what, what the gateway decided and how the call ended, never the arguments (only
-- the SHA-256 of their canonical JSON) and never an upstream's own words: `error` is a short
-- message the gateway wrote, scrubbed of anything shaped like a credential before it is stored.
-- Rows are never updated; nothing deletes them yet (retention is a later feature).
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY,  -- insertion order; breaks ties between equal times
    at_ms       INTEGER NOT NULL,     -- when the call arrived, unix milliseconds
    principal   TEXT    NOT NULL,     -- `local`, `client:NAME` or `user:SUBJECT`
    server      TEXT    NOT NULL,
    tool        TEXT    NOT NULL,     -- the qualified name, `server__tool`
    args_sha256 TEXT    NOT NULL,     -- lower-case hex
    decision    TEXT    NOT NULL,     -- allowed, approved, rejected, denied, rate_limited, held, timed_out
    approver    TEXT,                 -- who approved or rejected, when a person decided
    outcome     TEXT    NOT NULL,     -- ok, tool_error, upstream_error, not_run
    latency_ms  INTEGER NOT NULL,
    error       TEXT                  -- at most 200 characters, written by the gateway
);
CREATE INDEX audit_by_time ON audit (at_ms);
CREATE INDEX audit_by_principal ON audit (principal, at_ms);
