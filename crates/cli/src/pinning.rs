//! `mcpgw tools held` and `mcpgw tools approve`: tools held because their definitions changed
//! since they were first trusted.
//!
//! Both work on the database alone: no upstream is contacted, so a held tool can be approved
//! while its server is down, and approving never runs anything. A running gateway notices an
//! approval within a second (it polls the pins generation) and serves the new definition.

use std::{path::Path, time::SystemTime};

use anyhow::{Context, anyhow};
use gateway::HeldTool;

use store::time::duration_words;

use crate::{
    Failure,
    command::{load_config, open_database},
};

pub(crate) async fn held(config_path: Option<&Path>, json: bool) -> Result<(), Failure> {
    let held = held_tools(&open_store(config_path).await?).await?;
    if json {
        let rows: Vec<serde_json::Value> = held.iter().map(gateway::held_json).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if held.is_empty() {
        println!("no held tools: every tool definition seen is the trusted one");
        return Ok(());
    }
    for (i, tool) in held.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!(
            "{} (server '{}', tool '{}'): {} changed, held for {}",
            tool.qualified,
            tool.server,
            tool.upstream_name,
            changed_words(tool),
            age(tool.since),
        );
        print!("{}", tool.diff());
    }
    println!(
        "\n{} held; approve with `mcpgw tools approve NAME` (or --all)",
        held.len()
    );
    Ok(())
}

pub(crate) async fn approve(
    config_path: Option<&Path>,
    name: Option<&str>,
    all: bool,
) -> Result<(), Failure> {
    let store = open_store(config_path).await?;
    let held = held_tools(&store).await?;
    let chosen: Vec<&HeldTool> = match name {
        _ if all => held.iter().collect(),
        Some(name) => {
            let matching: Vec<&HeldTool> = held.iter().filter(|t| t.qualified == name).collect();
            if matching.is_empty() {
                return Err(Failure::usage(anyhow!(
                    "no held tool named '{name}'; `mcpgw tools held` lists them"
                )));
            }
            matching
        }
        None => return Err(Failure::usage(anyhow!("name a held tool, or pass --all"))),
    };
    if chosen.is_empty() {
        println!("no held tools");
        return Ok(());
    }
    for tool in chosen {
        // Only the change `tools held` shows: a newer one recorded meanwhile stays held.
        let approved = store
            .approve_pin(&tool.server, &tool.upstream_name, Some(&tool.hash))
            .await
            .context("cannot record the approval")?;
        if approved {
            println!(
                "approved {}: its new definition is trusted; a running gateway serves it within a second",
                tool.qualified
            );
        } else {
            eprintln!(
                "warning: {} changed again or was approved meanwhile; see `mcpgw tools held`",
                tool.qualified
            );
        }
    }
    Ok(())
}

async fn held_tools(store: &store::Store) -> Result<Vec<HeldTool>, Failure> {
    let pins = store
        .held_pins()
        .await
        .context("cannot read the held tools")?;
    Ok(pins.into_iter().filter_map(HeldTool::from_pin).collect())
}

async fn open_store(config_path: Option<&Path>) -> Result<store::Store, Failure> {
    open_database(&load_config(config_path)?, "the tool pins").await
}

fn changed_words(tool: &HeldTool) -> String {
    let fields = tool.changed_fields();
    if fields.is_empty() {
        "definition".to_owned()
    } else {
        fields.join(", ")
    }
}

fn age(since: SystemTime) -> String {
    match SystemTime::now().duration_since(since) {
        Ok(age) => duration_words(age),
        Err(_) => "a moment".to_owned(),
    }
}
