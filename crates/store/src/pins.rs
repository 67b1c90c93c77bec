//! Tool pins: per (server, upstream tool name), the definition trusted on first use and a
//! changed definition held until someone approves it.
//!
//! The caller (the gateway) decides what a definition is and hashes it; this module stores the
//! hash and the JSON document beside it, and never looks inside either.
//!
//! - The check on every catalog refresh reads hashes only ([`Store::pin_states`]); the
//!   definitions are read to show a change ([`Store::held_pins`], [`Store::tool_pin`]).
//! - An approval is a conditional `UPDATE` that moves the pending definition to trusted, in
//!   one transaction with a bump of the pins generation ([`Store::pins_generation`]), so a
//!   gateway in another process notices it with one cheap read.
//! - A stored hash that does not decode fails closed: an unreadable trusted hash reads as all
//!   zeros, which no definition hashes to, so the tool is held until approved rather than
//!   trusted anew; an unreadable pending hash reads as none (the change is held again, and
//!   recorded afresh, on the next check).

use std::collections::HashMap;
use std::time::SystemTime;

use crate::backend::{Record, on_pool};
use crate::time::{from_unix_seconds, unix_seconds};
use crate::{Store, StoreError};
use ids::{QualifiedName, ServerName};
use serde_json::Value;

/// SHA-256 of a tool definition's canonical form, computed by the caller.
pub type PinHash = [u8; 32];

/// What the check needs of a pin: the trusted hash, and the held one if a change is waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinState {
    pub trusted: PinHash,
    pub pending: Option<PinHash>,
}

/// A definition as the gateway saw it, to be recorded.
#[derive(Clone, Copy, Debug)]
pub struct SeenTool<'a> {
    pub server: &'a str,
    /// The upstream's own tool name.
    pub tool: &'a str,
    /// The name clients see, kept so a change can be approved by it without connecting.
    pub qualified: &'a str,
    pub hash: PinHash,
    pub definition: &'a Value,
}

/// One pinned tool with its definitions.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolPin {
    pub server: ServerName,
    pub tool: String,
    pub qualified: QualifiedName,
    pub trusted: TrustedDefinition,
    /// The changed definition waiting for approval, if any.
    pub pending: Option<TrustedDefinition>,
}

/// A definition, its hash, and since when it is trusted (or, for a pending one, held).
#[derive(Clone, Debug, PartialEq)]
pub struct TrustedDefinition {
    pub hash: PinHash,
    /// The JSON document as the caller stored it; `null` if it no longer decodes.
    pub definition: Value,
    pub since: SystemTime,
}

/// The `SELECT` of every column [`tool_pin`] reads (a macro so queries stay literals).
macro_rules! pin_columns {
    () => {
        "SELECT server, tool, qualified, trusted_hash, trusted_definition, trusted_at, \
         pending_hash, pending_definition, pending_since"
    };
}

impl Store {
    /// The hashes of every pin, by (server, upstream tool name).
    pub async fn pin_states(&self) -> Result<HashMap<(String, String), PinState>, StoreError> {
        on_pool!(&self.pool, pool => {
            let rows =
                sqlx::query("SELECT server, tool, trusted_hash, pending_hash FROM tool_pins")
                    .fetch_all(pool)
                    .await?;
            let mut states = HashMap::with_capacity(rows.len());
            for row in rows {
                let server = row.text("server")?;
                let tool = row.text("tool")?;
                let state = PinState {
                    trusted: trusted_hash(&row, &server, &tool)?,
                    pending: pending_hash(&row, &server, &tool)?,
                };
                states.insert((server, tool), state);
            }
            Ok(states)
        })
    }

    /// Since when each pinned tool's definition is trusted (first use, or its last approval),
    /// by (server, upstream tool name): what the admin API shows beside a tool.
    pub async fn trusted_since(&self) -> Result<HashMap<(String, String), SystemTime>, StoreError> {
        on_pool!(&self.pool, pool => {
            let rows = sqlx::query("SELECT server, tool, trusted_at FROM tool_pins")
                .fetch_all(pool)
                .await?;
            let mut since = HashMap::with_capacity(rows.len());
            for row in rows {
                let key = (row.text("server")?, row.text("tool")?);
                since.insert(key, from_unix_seconds(row.int("trusted_at")?));
            }
            Ok(since)
        })
    }

    /// Trusts each definition on first use: records it unless its tool is pinned already
    /// (by another process since the caller looked). `true` for each one recorded.
    pub async fn pin_first_use(&self, seen: &[SeenTool<'_>]) -> Result<Vec<bool>, StoreError> {
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            let mut recorded = Vec::with_capacity(seen.len());
            for tool in seen {
                let done = sqlx::query(
                    "INSERT INTO tool_pins
                         (server, tool, qualified, trusted_hash, trusted_definition, trusted_at)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (server, tool) DO NOTHING",
                )
                .bind(tool.server)
                .bind(tool.tool)
                .bind(tool.qualified)
                .bind(&tool.hash[..])
                .bind(tool.definition.to_string())
                .bind(now)
                .execute(&mut *tx)
                .await?;
                recorded.push(done.rows_affected() > 0);
            }
            tx.commit().await?;
            Ok(recorded)
        })
    }

    /// Trusts each definition as it is (a server whose changes are trusted): it replaces the
    /// trusted one, and a held change is dropped.
    pub async fn trust_pins(&self, seen: &[SeenTool<'_>]) -> Result<(), StoreError> {
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            for tool in seen {
                sqlx::query(
                    "INSERT INTO tool_pins
                         (server, tool, qualified, trusted_hash, trusted_definition, trusted_at)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (server, tool) DO UPDATE SET
                         qualified = excluded.qualified,
                         trusted_hash = excluded.trusted_hash,
                         trusted_definition = excluded.trusted_definition,
                         trusted_at = excluded.trusted_at,
                         pending_hash = NULL, pending_definition = NULL, pending_since = NULL",
                )
                .bind(tool.server)
                .bind(tool.tool)
                .bind(tool.qualified)
                .bind(&tool.hash[..])
                .bind(tool.definition.to_string())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Holds each changed definition for approval. A tool already holding the same change
    /// keeps it (and the time it was first seen); another change replaces it. `true` for each
    /// change newly recorded; `false` also for a tool that is not pinned.
    pub async fn hold_pins(&self, seen: &[SeenTool<'_>]) -> Result<Vec<bool>, StoreError> {
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            let mut recorded = Vec::with_capacity(seen.len());
            for tool in seen {
                let done = sqlx::query(
                    "UPDATE tool_pins
                     SET pending_hash = $1, pending_definition = $2, pending_since = $6,
                         qualified = $3
                     WHERE server = $4 AND tool = $5
                       AND (pending_hash IS NULL OR pending_hash != $1)",
                )
                .bind(&tool.hash[..])
                .bind(tool.definition.to_string())
                .bind(tool.qualified)
                .bind(tool.server)
                .bind(tool.tool)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                recorded.push(done.rows_affected() > 0);
            }
            tx.commit().await?;
            Ok(recorded)
        })
    }

    /// Drops the held change of each (server, tool): its server went back to the trusted
    /// definition.
    pub async fn drop_pending_pins(&self, tools: &[(&str, &str)]) -> Result<(), StoreError> {
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            for (server, tool) in tools {
                sqlx::query(
                    "UPDATE tool_pins
                     SET pending_hash = NULL, pending_definition = NULL, pending_since = NULL
                     WHERE server = $1 AND tool = $2 AND pending_hash IS NOT NULL",
                )
                .bind(server)
                .bind(tool)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The pin of one tool, with its definitions.
    pub async fn tool_pin(&self, server: &str, tool: &str) -> Result<Option<ToolPin>, StoreError> {
        on_pool!(&self.pool, pool => {
            let row = sqlx::query(concat!(
                pin_columns!(),
                " FROM tool_pins WHERE server = $1 AND tool = $2"
            ))
            .bind(server)
            .bind(tool)
            .fetch_optional(pool)
            .await?;
            row.as_ref().map(tool_pin).transpose()
        })
    }

    /// Every pin holding a change, by qualified name.
    pub async fn held_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        on_pool!(&self.pool, pool => {
            let rows = sqlx::query(concat!(
                pin_columns!(),
                " FROM tool_pins WHERE pending_hash IS NOT NULL ORDER BY qualified, server, tool"
            ))
            .fetch_all(pool)
            .await?;
            rows.iter().map(tool_pin).collect()
        })
    }

    /// Approves the held change of (server, tool): its definition becomes the trusted one, and
    /// the pins generation moves on. With `expected`, only if that is the change held (so what
    /// is approved is what was shown). `false` when no such change is held.
    pub async fn approve_pin(
        &self,
        server: &str,
        tool: &str,
        expected: Option<&PinHash>,
    ) -> Result<bool, StoreError> {
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            let done = sqlx::query(
                "UPDATE tool_pins
                 SET trusted_hash = pending_hash, trusted_definition = pending_definition,
                     trusted_at = $4,
                     pending_hash = NULL, pending_definition = NULL, pending_since = NULL
                 WHERE server = $1 AND tool = $2 AND pending_hash IS NOT NULL
                   AND ($3 IS NULL OR pending_hash = $3)",
            )
            .bind(server)
            .bind(tool)
            .bind(expected.map(|hash| &hash[..]))
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(
                "UPDATE tool_pins_generation SET generation = generation + 1 WHERE id = 1",
            )
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// A number that changes with every approval, in any process using this database.
    pub async fn pins_generation(&self) -> Result<i64, StoreError> {
        let generation: Option<i64> = on_pool!(&self.pool, pool => {
            sqlx::query_scalar("SELECT generation FROM tool_pins_generation WHERE id = 1")
                .fetch_optional(pool)
                .await?
        });
        Ok(generation.unwrap_or_default())
    }
}

fn tool_pin(row: &impl Record) -> Result<ToolPin, StoreError> {
    let server = row.text("server")?;
    let tool = row.text("tool")?;
    let trusted = TrustedDefinition {
        hash: trusted_hash(row, &server, &tool)?,
        definition: definition(row.text("trusted_definition")?, &server, &tool),
        since: from_unix_seconds(row.int("trusted_at")?),
    };
    let pending = match pending_hash(row, &server, &tool)? {
        Some(hash) => Some(TrustedDefinition {
            hash,
            definition: definition(
                row.text_opt("pending_definition")?.unwrap_or_default(),
                &server,
                &tool,
            ),
            since: from_unix_seconds(row.int_opt("pending_since")?.unwrap_or_default()),
        }),
        None => None,
    };
    Ok(ToolPin {
        qualified: row.text("qualified")?.into(),
        server: server.into(),
        tool,
        trusted,
        pending,
    })
}

fn trusted_hash(row: &impl Record, server: &str, tool: &str) -> Result<PinHash, StoreError> {
    let bytes = row.bytes("trusted_hash")?;
    Ok(PinHash::try_from(bytes.as_slice()).unwrap_or_else(|_| {
        tracing::warn!(
            server,
            tool,
            "unreadable trusted tool hash; the tool is held until approved"
        );
        [0; 32]
    }))
}

fn pending_hash(
    row: &impl Record,
    server: &str,
    tool: &str,
) -> Result<Option<PinHash>, StoreError> {
    let bytes = row.bytes_opt("pending_hash")?;
    Ok(bytes.and_then(|bytes| {
        let hash = PinHash::try_from(bytes.as_slice()).ok();
        if hash.is_none() {
            tracing::warn!(server, tool, "ignoring an unreadable held tool hash");
        }
        hash
    }))
}

fn definition(text: String, server: &str, tool: &str) -> Value {
    serde_json::from_str(&text).unwrap_or_else(|_| {
        tracing::warn!(
            server,
            tool,
            "ignoring an undecodable pinned tool definition"
        );
        Value::Null
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn seen<'a>(tool: &'a str, hash: u8, definition: &'a Value) -> SeenTool<'a> {
        SeenTool {
            server: "srv",
            tool,
            qualified: "srv__echo",
            hash: [hash; 32],
            definition,
        }
    }

    fn state(trusted: u8, pending: Option<u8>) -> PinState {
        PinState {
            trusted: [trusted; 32],
            pending: pending.map(|p| [p; 32]),
        }
    }

    async fn state_of(store: &Store, tool: &str) -> Option<PinState> {
        store
            .pin_states()
            .await
            .expect("states")
            .get(&("srv".to_owned(), tool.to_owned()))
            .copied()
    }

    crate::testing::backend_tests! {
    async fn first_use_records_once_and_keeps_the_first_definition(db) {
        let store = db.open().await;
        let (v1, v2) = (json!({"description": "one"}), json!({"description": "two"}));
        let recorded = store
            .pin_first_use(&[seen("echo", 1, &v1)])
            .await
            .expect("first use");
        assert_eq!(recorded, [true]);
        let again = store
            .pin_first_use(&[seen("echo", 2, &v2)])
            .await
            .expect("first use");
        assert_eq!(again, [false], "a pinned tool is not re-trusted");
        assert_eq!(state_of(&store, "echo").await, Some(state(1, None)));
        let pin = store
            .tool_pin("srv", "echo")
            .await
            .expect("read")
            .expect("pinned");
        assert_eq!(pin.trusted.definition, v1);
        assert_eq!(pin.qualified, "srv__echo");
        assert!(pin.pending.is_none());
        assert_eq!(store.tool_pin("srv", "other").await.expect("read"), None);
        let since = store.trusted_since().await.expect("since");
        assert_eq!(
            since.get(&("srv".to_owned(), "echo".to_owned())),
            Some(&pin.trusted.since)
        );
        assert_eq!(since.len(), 1);
    }

    async fn a_held_change_is_kept_until_approved_and_approval_moves_the_generation(db) {
        let store = db.open().await;
        let (v1, v2, v3) = (json!({"d": 1}), json!({"d": 2}), json!({"d": 3}));
        store
            .pin_first_use(&[seen("echo", 1, &v1)])
            .await
            .expect("pin");
        assert_eq!(
            store
                .hold_pins(&[seen("echo", 2, &v2)])
                .await
                .expect("hold"),
            [true]
        );
        assert_eq!(
            store
                .hold_pins(&[seen("echo", 2, &v2)])
                .await
                .expect("hold"),
            [false],
            "the same change is recorded once"
        );
        assert_eq!(
            store
                .hold_pins(&[seen("unpinned", 2, &v2)])
                .await
                .expect("hold"),
            [false]
        );
        assert_eq!(state_of(&store, "echo").await, Some(state(1, Some(2))));
        let held = store.held_pins().await.expect("held");
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].trusted.definition, v1);
        assert_eq!(held[0].pending.as_ref().map(|p| &p.definition), Some(&v2));

        let before = store.pins_generation().await.expect("generation");
        assert!(
            !store
                .approve_pin("srv", "echo", Some(&[3; 32]))
                .await
                .expect("approve"),
            "another change than the one shown is not approved"
        );
        assert!(
            store
                .approve_pin("srv", "echo", Some(&[2; 32]))
                .await
                .expect("approve")
        );
        assert!(
            !store
                .approve_pin("srv", "echo", None)
                .await
                .expect("approve"),
            "nothing left to approve"
        );
        assert_eq!(
            store.pins_generation().await.expect("generation"),
            before + 1
        );
        assert_eq!(state_of(&store, "echo").await, Some(state(2, None)));
        let pin = store
            .tool_pin("srv", "echo")
            .await
            .expect("read")
            .expect("pinned");
        assert_eq!(pin.trusted.definition, v2);
        assert!(store.held_pins().await.expect("held").is_empty());

        // A change then a revert: the held change is dropped, nothing moves.
        store
            .hold_pins(&[seen("echo", 3, &v3)])
            .await
            .expect("hold");
        store
            .drop_pending_pins(&[("srv", "echo")])
            .await
            .expect("drop");
        assert_eq!(state_of(&store, "echo").await, Some(state(2, None)));
        assert_eq!(
            store.pins_generation().await.expect("generation"),
            before + 1
        );
    }

    async fn trusting_a_change_replaces_the_definition_and_drops_a_held_one(db) {
        let store = db.open().await;
        let (v1, v2, v3) = (json!({"d": 1}), json!({"d": 2}), json!({"d": 3}));
        store
            .pin_first_use(&[seen("echo", 1, &v1)])
            .await
            .expect("pin");
        store
            .hold_pins(&[seen("echo", 2, &v2)])
            .await
            .expect("hold");
        store
            .trust_pins(&[seen("echo", 3, &v3), seen("new", 4, &v1)])
            .await
            .expect("trust");
        assert_eq!(state_of(&store, "echo").await, Some(state(3, None)));
        assert_eq!(state_of(&store, "new").await, Some(state(4, None)));
    }

    async fn pins_survive_a_reopen(db) {
        let v1 = json!({"description": "one"});
        let store = db.open().await;
        store
            .pin_first_use(&[seen("echo", 1, &v1)])
            .await
            .expect("pin");
        store
            .hold_pins(&[seen("echo", 2, &v1)])
            .await
            .expect("hold");
        store.close().await;
        let store = db.open().await;
        assert_eq!(state_of(&store, "echo").await, Some(state(1, Some(2))));
        assert_eq!(store.pins_generation().await.expect("generation"), 0);
    }

    async fn an_unreadable_trusted_hash_matches_nothing(db) {
        let store = db.open().await;
        let v1 = json!({"d": 1});
        store
            .pin_first_use(&[seen("echo", 1, &v1)])
            .await
            .expect("pin");
        on_pool!(&store.pool, pool => {
            sqlx::query("UPDATE tool_pins SET trusted_hash = $1, pending_hash = $2")
                .bind(&[1u8, 2][..])
                .bind(&[3u8][..])
                .execute(pool)
                .await
                .expect("corrupt");
        });
        assert_eq!(state_of(&store, "echo").await, Some(state(0, None)));
    }
    }
}
