-- PostgreSQL twin of ../0005_approvals.sql.
CREATE TABLE approvals (
    id                TEXT   NOT NULL PRIMARY KEY,
    principal         TEXT   NOT NULL,
    server            TEXT   NOT NULL,
    tool              TEXT   NOT NULL,
    arguments         TEXT   NOT NULL,
    created_ms        BIGINT NOT NULL,
    expires_ms        BIGINT NOT NULL,
    status            TEXT   NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
    decided_by        TEXT,
    decided_ms        BIGINT,
    decided_arguments TEXT,
    reason            TEXT
);

CREATE INDEX approvals_pending ON approvals (status, created_ms);
