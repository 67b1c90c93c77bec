//! End-to-end tests: the real `mcpgw` binary between real MCP clients and real MCP servers.

mod approvals;
mod audit_log;
mod auth_headers;
mod bad_input;
mod cli;
mod client_keys;
mod clients;
mod example;
mod exposure;
mod faults;
mod harness;
mod jwt;
mod limits;
mod naming;
mod network;
mod oauth;
mod oauth_fixture;
mod pinning;
mod principals;
mod profiles;
mod relay;
mod resources;
mod search;
mod signin;
mod startup;
mod upstreams;
