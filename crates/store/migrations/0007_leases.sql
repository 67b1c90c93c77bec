-- Short leases that let one process at a time do something for a key, across every process
-- using this database (the gateway, `mcpgw auth`, a second gateway): refreshing one server's
-- OAuth tokens for one principal. A lease is free once `expires_ms` (unix milliseconds) has
-- passed, so a process that dies holding one holds it up only until then.
CREATE TABLE leases (
    key        TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
