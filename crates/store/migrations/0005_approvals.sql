-- Tool calls that wait for a human, and what was decided. A row is created `pending` and
-- leaves that state exactly once (the decision is a conditional UPDATE). Times are unix
-- milliseconds. `arguments` are what the caller sent; `decided_arguments` is set only when an
-- approver replaced them (always a JSON object).
CREATE TABLE approvals (
    id                TEXT    NOT NULL PRIMARY KEY,
    principal         TEXT    NOT NULL,
    server            TEXT    NOT NULL,
    tool              TEXT    NOT NULL,
    arguments         TEXT    NOT NULL,
    created_ms        INTEGER NOT NULL,
    expires_ms        INTEGER NOT NULL,
    status            TEXT    NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
    decided_by        TEXT,
    decided_ms        INTEGER,
    decided_arguments TEXT,
    reason            TEXT
) WITHOUT ROWID;

CREATE INDEX approvals_pending ON approvals (status, created_ms);
