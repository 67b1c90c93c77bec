//! Where `mcpgw search`, `tools` and `servers list` get their answers: a gateway already
//! running on this configuration, asked over its admin API (`gateway::AdminClient`), or, with
//! `--offline` or when none answers, a gateway started here that connects every server (a few
//! seconds each). Both give the same documents (`gateway::overview`), so what is printed does
//! not depend on where it came from; a note on stderr says when a running gateway answered.

use std::{io::IsTerminal as _, sync::Arc};

use anyhow::anyhow;
use gateway::{
    AdminClient, Gateway, Unanswered,
    overview::{self, SearchQuery, SearchReport, ServerRow, ToolsQuery, ToolsView},
};

use crate::{Failure, command::started_gateway};

pub(crate) enum Source {
    Running(AdminClient),
    Local(Arc<Gateway>),
}

impl Source {
    /// The gateway running on `config` if it answers (unless `offline`), else one started
    /// here; with every configured server as that gateway sees it. A running gateway that
    /// answers with a refusal, or a program that is not mcpgw, is named in one line on stderr.
    pub(crate) async fn open(config: config::Config, offline: bool) -> (Source, Vec<ServerRow>) {
        if !offline && let Some(client) = AdminClient::for_config(&config) {
            match client.servers().await {
                Ok(servers) => {
                    note(&format!(
                        "asked the gateway at {} (--offline starts the servers here instead)",
                        client.base_url()
                    ));
                    return (Source::Running(client), servers);
                }
                Err(Unanswered::NotRunning) => {}
                Err(Unanswered::Refused(why)) => {
                    eprintln!("note: {why}; starting the servers here instead")
                }
            }
        }
        let gateway = started_gateway(config).await;
        let servers = overview::servers(&gateway).await;
        (Source::Local(gateway), servers)
    }

    pub(crate) async fn tools(&self, query: &ToolsQuery) -> Result<ToolsView, Failure> {
        match self {
            Source::Running(client) => client
                .tools(query)
                .await
                .map_err(|why| stopped(client, why)),
            Source::Local(gateway) => Ok(overview::tools(gateway, query).await),
        }
    }

    pub(crate) async fn search(&self, query: &SearchQuery) -> Result<SearchReport, Failure> {
        match self {
            Source::Running(client) => client
                .search(query)
                .await
                .map_err(|why| stopped(client, why)),
            Source::Local(gateway) => {
                // One search, once: worth waiting for the tool embeddings rather than answering
                // lexically. (A running gateway has had its time.)
                gateway.embedded().await;
                Ok(overview::search(gateway, query).await)
            }
        }
    }

    /// Stops what was started here.
    pub(crate) async fn close(self) {
        if let Source::Local(gateway) = self {
            gateway.shutdown().await;
        }
    }
}

/// The running gateway answered the first question but not the next.
fn stopped(client: &AdminClient, why: Unanswered) -> Failure {
    Failure::from(match why {
        Unanswered::NotRunning => anyhow!(
            "the gateway at {} stopped answering; run again, or with --offline",
            client.base_url()
        ),
        Unanswered::Refused(why) => anyhow!("{why}; run again with --offline"),
    })
}

/// A line on stderr, dim on a terminal: where the answer came from, not part of it.
fn note(text: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("\x1b[2m{text}\x1b[0m");
    } else {
        eprintln!("{text}");
    }
}
