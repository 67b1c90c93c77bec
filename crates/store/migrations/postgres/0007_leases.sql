-- PostgreSQL twin of ../0007_leases.sql. A lease is taken by one `INSERT ... ON CONFLICT DO
-- UPDATE ... WHERE expired`, which PostgreSQL runs under the row's lock: of two replicas
-- racing for an expired lease, one updates it and the other sees the winner's row.
CREATE TABLE leases (
    key        TEXT   NOT NULL PRIMARY KEY,
    holder     TEXT   NOT NULL,
    expires_ms BIGINT NOT NULL
);
