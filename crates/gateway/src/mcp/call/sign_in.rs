//! A call that reaches an OAuth server without a usable token hands the user a sign-in, in
//! the best way the client supports ([`Handoff`]): a URL-mode elicitation, after which the
//! call resumes by itself (2025-11-25 clients that declared `elicitation.url`); an
//! `input_required` result carrying that elicitation, answered by a retry (2026-07-28 clients
//! that declared it); else a tool error with a link. The `-32042` URL-elicitation-required
//! error is not used: a tool error reaches every client, and 2026-07-28 forbids that code.

use std::{collections::BTreeMap, sync::Arc, time::Instant};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest, InputRequiredResult,
    },
    service::RequestContext,
};
use tokio_util::sync::CancellationToken;
use upstream::{Server, UpstreamError, oauth::LOGIN_TTL};

use super::{Attempt, Call, Found, Pipeline, ToolCall};
use crate::{
    mcp::result,
    oauth::login::{self, Waited},
    principal::Principal,
};

/// How a sign-in reaches the person behind one `tools/call`.
pub(crate) enum Handoff {
    /// A tool error with a link that starts the sign-in when opened.
    Text,
    /// A 2025-11-25 client that declared `elicitation.url`: `elicitation/create` on its
    /// session, then the call waits for the sign-in and resumes.
    Elicit {
        peer: Peer<RoleServer>,
        ct: CancellationToken,
    },
    /// A 2026-07-28 client that declared `elicitation.url`: an `input_required` result; the
    /// retry (`retry`) carries the answer, and waits for the sign-in.
    InputRequired { retry: Option<Retry> },
}

/// The MRTR retry of a call that asked for a sign-in.
pub(crate) struct Retry {
    request_state: String,
    /// The user's answer to the sign-in elicitation, if the retry carries a readable one.
    answer: Option<ElicitationAction>,
}

impl Handoff {
    pub(crate) fn of(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Self {
        let url_elicitation = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some());
        if !url_elicitation {
            return Self::Text;
        }
        if !crate::mcp::is_modern(context) {
            return Self::Elicit {
                peer: context.peer.clone(),
                ct: context.ct.clone(),
            };
        }
        let retry = request.request_state.as_ref().map(|state| Retry {
            request_state: state.clone(),
            answer: request
                .input_responses
                .as_ref()
                .and_then(|responses| responses.get(login::SIGNIN_INPUT))
                .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok())
                .map(|answer| answer.action),
        });
        Self::InputRequired { retry }
    }
}

impl Pipeline<'_> {
    /// Hands the user a sign-in to `server` and, where the client allows, waits for it and runs
    /// the call.
    pub(crate) async fn sign_in(
        &self,
        server: &Arc<Server>,
        error: &UpstreamError,
        tool: &ToolCall,
        found: &Found,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let principal = &call.access.principal;
        let complete = |result| Ok(CallToolResponse::Complete(result));
        if !self.logins.available() {
            // No listener for the browser to come back to: whatever the client could take,
            // the server's own failure says what to run (`mcpgw auth login`, which signs in
            // the local user); another principal can only ask the operator.
            if *principal == Principal::Local {
                return complete(result::upstream_failure(error));
            }
            return complete(result::tool_error(format!(
                "tool call failed: {}; this gateway has no sign-in endpoint to send you to (ask its operator)",
                failure(error, server.name(), principal)
            )));
        }
        match &call.handoff {
            Handoff::Text => complete(self.sign_in_text(server, error, principal).await),
            Handoff::InputRequired { .. } => {
                self.sign_in_input(server, error, tool, principal).await
            }
            Handoff::Elicit { peer, ct } => {
                let signed_in = self
                    .sign_in_elicited(server, error, &tool.name, principal, peer, ct)
                    .await;
                if let Err(result) = signed_in {
                    return complete(result);
                }
                match self.attempt(tool, found, call).await? {
                    Attempt::SignIn { server, error } => {
                        complete(self.sign_in_text(&server, &error, principal).await)
                    }
                    attempt => attempt.respond(),
                }
            }
        }
    }

    /// A 2026-07-28 client: an `input_required` result with the URL elicitation.
    async fn sign_in_input(
        &self,
        server: &Server,
        error: &UpstreamError,
        tool: &ToolCall,
        principal: &Principal,
    ) -> Result<CallToolResponse, McpError> {
        let name = server.name();
        let serial = self.logins.watch(name, principal).borrow().serial;
        let started = match self.logins.begin(self.gateway, name, principal).await {
            Ok(started) => started,
            Err(why) => {
                let result = not_started(&failure(error, name, principal), &why);
                return Ok(CallToolResponse::Complete(result));
            }
        };
        let request = InputRequest::Elicitation(ElicitRequest::new(
            ElicitRequestParams::UrlElicitationParams {
                meta: None,
                message: sign_in_message(name, &tool.name),
                url: started.authorization_url,
                elicitation_id: elicitation_id(name, serial),
            },
        ));
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(BTreeMap::from([(login::SIGNIN_INPUT.to_owned(), request)])),
            Some(login::request_state(name, serial)),
        )))
    }

    /// A 2025-11-25 client: `elicitation/create` with the URL, then the wait for the browser's
    /// return. `Err` is the answer when the user is not signed in at the end.
    async fn sign_in_elicited(
        &self,
        server: &Server,
        error: &UpstreamError,
        tool: &str,
        principal: &Principal,
        peer: &Peer<RoleServer>,
        ct: &CancellationToken,
    ) -> Result<(), CallToolResult> {
        let name = server.name();
        let mut finished = self.logins.watch(name, principal);
        let serial = finished.borrow().serial;
        let started = self
            .logins
            .begin(self.gateway, name, principal)
            .await
            .map_err(|why| not_started(&failure(error, name, principal), &why))?;
        let open = || {
            open_this(
                &failure(error, name, principal),
                name,
                &started.authorization_url,
            )
        };
        let url = url::Url::parse(&started.authorization_url).map_err(|_| open())?;
        let remaining = started.deadline.saturating_duration_since(Instant::now());
        let asking = peer.elicit_url_with_timeout(
            sign_in_message(name, tool),
            url,
            elicitation_id(name, serial),
            Some(remaining),
        );
        let answer = tokio::select! {
            answer = asking => answer,
            () = ct.cancelled() => return Err(not_signed_in(name, Waited::Cancelled)),
        };
        match answer {
            Ok(ElicitationAction::Accept) => {}
            Ok(action) => return Err(refused(name, &action)),
            Err(why) => {
                tracing::warn!(server = %name, error = %why, "the client did not take the sign-in elicitation");
                return Err(open());
            }
        }
        match login::wait_for_sign_in(&mut finished, serial, started.deadline, ct).await {
            Waited::SignedIn => Ok(()),
            other => Err(not_signed_in(name, other)),
        }
    }

    /// The retry of a call that asked a 2026-07-28 client for a sign-in to `server`: waits for
    /// the sign-in it accepted. `None` lets the call go ahead (signed in, or a `requestState`
    /// that is not ours, or not about this server: then the call runs as if new).
    pub(crate) async fn settle_sign_in(
        &self,
        server: &str,
        call: &Call<'_>,
    ) -> Option<CallToolResult> {
        let Handoff::InputRequired { retry: Some(retry) } = &call.handoff else {
            return None;
        };
        let (name, serial) = login::parse_request_state(&retry.request_state)?;
        if server != name {
            return None;
        }
        match retry.answer.as_ref()? {
            ElicitationAction::Accept => {}
            action => return Some(refused(name, action)),
        }
        let mut finished = self.logins.watch(name, &call.access.principal);
        let deadline = Instant::now() + LOGIN_TTL;
        match Box::pin(login::wait_for_sign_in(
            &mut finished,
            serial,
            deadline,
            &call.ct,
        ))
        .await
        {
            Waited::SignedIn => None,
            other => Some(not_signed_in(name, other)),
        }
    }

    /// The tool error a client that cannot take an elicitation gets: the server's failure and,
    /// where the gateway can take the browser's return, where to sign in. The local user gets
    /// a link that starts the sign-in when opened; anyone else the authorization URL of a
    /// sign-in started now for them, since a browser sends no client key and so could not
    /// open `/oauth/start` as them.
    async fn sign_in_text(
        &self,
        server: &Server,
        error: &UpstreamError,
        principal: &Principal,
    ) -> CallToolResult {
        let name = server.name();
        let Some(link) = self.logins.start_link(&self.gateway.config(), name) else {
            return result::upstream_failure(error);
        };
        if *principal == Principal::Local {
            return open_this(&failure(error, name, principal), name, &link);
        }
        match self.logins.begin(self.gateway, name, principal).await {
            Ok(started) => open_this(
                &failure(error, name, principal),
                name,
                &started.authorization_url,
            ),
            Err(why) => not_started(&failure(error, name, principal), &why),
        }
    }
}

/// Whether `error` from `server` is one a sign-in cures: the server is configured for OAuth
/// (mcpgw knows how to sign in to it) and answered 401 without a usable token.
pub(crate) fn needs_sign_in(server: &Server, error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::OAuthRequired { .. }) && is_oauth(server)
}

pub(crate) fn is_oauth(server: &Server) -> bool {
    matches!(server.config().auth, config::Auth::OAuth(_))
}

/// What the user is shown with the sign-in URL.
fn sign_in_message(server: &str, tool: &str) -> String {
    format!(
        "mcpgw needs you to sign in to the MCP server '{server}' to run {tool}. Open the link to \
         authorise mcpgw for '{server}'; the call goes on once you are signed in."
    )
}

/// Unique per server and sign-in round (2025-11-25 requires one; 2026-07-28 dropped it).
fn elicitation_id(server: &str, serial: u64) -> String {
    format!("mcpgw-signin-{server}-{serial}")
}

/// Why a call needs a sign-in, in words for `principal`: the server's failure for the local
/// user (it names `mcpgw auth login`, which signs the local user in); for anyone else, who
/// cannot run that command for themselves, that the server needs their own sign-in.
fn failure(error: &UpstreamError, server: &str, principal: &Principal) -> String {
    if *principal == Principal::Local {
        error.to_string()
    } else {
        format!("server '{server}' needs you to sign in (OAuth) before mcpgw can call it for you")
    }
}

/// The failure, then the URL to open. For the local user the failure comes first: it also
/// names `mcpgw auth login`, the way that works without this link.
fn open_this(error: &str, server: &str, url: &str) -> CallToolResult {
    result::tool_error(format!(
        "tool call failed: {error}\nOpen this URL to authorise mcpgw for server '{server}':\n{url}\nthen call the tool again."
    ))
}

fn not_started(error: &str, why: &login::LoginError) -> CallToolResult {
    tracing::warn!(%why, "cannot hand out a sign-in");
    result::tool_error(format!(
        "tool call failed: {error}\n(mcpgw could not start the sign-in itself: {why})"
    ))
}

/// The user said no to the sign-in (`decline`), or dismissed it (`cancel`).
fn refused(server: &str, action: &ElicitationAction) -> CallToolResult {
    let what = match action {
        ElicitationAction::Decline => "declined",
        _ => "cancelled",
    };
    result::tool_error(format!(
        "signing in to '{server}' was {what}, so the tool was not called; call it again to be asked again"
    ))
}

fn not_signed_in(server: &str, waited: Waited) -> CallToolResult {
    result::tool_error(match waited {
        Waited::SignedIn => format!("signed in to '{server}'"),
        Waited::Failed(reason) => format!(
            "signing in to '{server}' failed ({reason}), so the tool was not called; call it again to get a new sign-in link"
        ),
        Waited::TimedOut => format!(
            "no sign-in to '{server}' arrived within {} minutes, so the tool was not called; call it again to get a new sign-in link",
            LOGIN_TTL.as_secs() / 60
        ),
        Waited::Cancelled => format!(
            "the call was cancelled while waiting for the sign-in to '{server}'; the tool was not called"
        ),
    })
}
