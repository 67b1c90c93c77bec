//! `mcpgw clients`: the clients allowed on the HTTP listener and their API keys.
//!
//! A key is printed once, on stdout, when its client is added; the store keeps only its hash,
//! so it can never be shown again (a lost key is replaced by removing and re-adding the
//! client). Nothing here logs a key, and `list` cannot show one.

use std::{path::Path, time::SystemTime};

use anyhow::{Context, anyhow};
use secrecy::ExposeSecret;

use store::time::duration_words;

use crate::{
    Failure,
    command::{load_config, open_database},
};

pub(crate) async fn add(config_path: Option<&Path>, name: &str) -> Result<(), Failure> {
    if !store::is_valid_client_name(name) {
        return Err(Failure::usage(anyhow!(
            "'{name}' is not a valid client name: use 1 to 64 of letters, digits, '_', '.', '-'"
        )));
    }
    let store = open_store(config_path).await?;
    let key = store.add_client(name).await.map_err(|error| match error {
        store::StoreError::ClientExists { .. } => Failure::usage(error),
        other => Failure::from(anyhow::Error::new(other).context("cannot add the client")),
    })?;
    eprintln!(
        "Added client '{name}'. Its key follows on stdout, shown this once: only its hash is stored.\nThe client sends it as `Authorization: Bearer <key>`. From its next start, `mcpgw serve` requires a key from every HTTP client."
    );
    println!("{}", key.expose_secret());
    Ok(())
}

pub(crate) async fn list(config_path: Option<&Path>, json: bool) -> Result<(), Failure> {
    let store = open_store(config_path).await?;
    let clients = store.clients().await.context("cannot list the clients")?;
    if json {
        let rows: Vec<serde_json::Value> = clients
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name,
                    "created_at": gateway::oauth::unix_seconds(c.created_at),
                    "last_used_at": c.last_used_at.map(gateway::oauth::unix_seconds),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if clients.is_empty() {
        println!(
            "no clients: the HTTP listener serves loopback without keys (add one with `mcpgw clients add NAME`)"
        );
        return Ok(());
    }
    let mut table = crate::render::table();
    table.set_header(["client", "created", "last used"]);
    for client in &clients {
        table.add_row([
            client.name.clone(),
            ago(client.created_at),
            client.last_used_at.map_or_else(|| "never".to_owned(), ago),
        ]);
    }
    println!("{table}");
    Ok(())
}

pub(crate) async fn remove(config_path: Option<&Path>, name: &str) -> Result<(), Failure> {
    let store = open_store(config_path).await?;
    let removed = store
        .remove_client(name)
        .await
        .context("cannot remove the client")?;
    if !removed {
        return Err(Failure::usage(anyhow!("no client named '{name}'")));
    }
    println!("removed client '{name}'; its key no longer works");
    Ok(())
}

async fn open_store(config_path: Option<&Path>) -> Result<store::Store, Failure> {
    open_database(&load_config(config_path)?, "client keys").await
}

fn ago(time: SystemTime) -> String {
    match SystemTime::now().duration_since(time) {
        Ok(age) => format!("{} ago", duration_words(age)),
        Err(_) => "just now".to_owned(),
    }
}
