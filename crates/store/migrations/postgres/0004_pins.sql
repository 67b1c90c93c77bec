-- PostgreSQL twin of ../0004_pins.sql.
CREATE TABLE tool_pins (
    server             TEXT   NOT NULL,
    tool               TEXT   NOT NULL,
    qualified          TEXT   NOT NULL,
    trusted_hash       BYTEA  NOT NULL,
    trusted_definition TEXT   NOT NULL,
    trusted_at         BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT),
    pending_hash       BYTEA,
    pending_definition TEXT,
    pending_since      BIGINT,
    PRIMARY KEY (server, tool)
);

CREATE INDEX tool_pins_qualified ON tool_pins (qualified);

CREATE TABLE tool_pins_generation (
    id         BIGINT NOT NULL PRIMARY KEY CHECK (id = 1),
    generation BIGINT NOT NULL
);
INSERT INTO tool_pins_generation (id, generation) VALUES (1, 0);
