//! The browser's return from an authorization server to a listener of its own, for
//! `mcpgw auth login` (the gateway's HTTP listener takes its returns at `/oauth/callback`, in
//! `login`). One small axum app: the redirect URI's path with this login's `state` is passed
//! on and held open until [`Callback::answer`] tells the browser how it went; anything else (a
//! favicon, a stale tab, a forged callback) is answered at once and ignored, so it cannot end
//! the login. Every connection is served on its own task, so a browser's idle pre-connection
//! holds nothing up.

use std::time::Duration;

use axum::{Router, extract::State, http::StatusCode, http::Uri, response::Html, routing::get};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::browser_page;

/// The browser's return to the redirect URI, its connection held until answered.
pub struct Callback {
    /// The full redirect URL, with the code: never printed or logged.
    pub url: String,
    reply: oneshot::Sender<(StatusCode, String)>,
}

impl Callback {
    /// Tells the browser how the sign-in to `server` went; the details are in the terminal.
    pub fn answer(self, server: &str, ok: bool) {
        // Server names are [A-Za-z0-9_-]: nothing to escape; `browser_page` escapes anyway.
        let answer = if ok {
            (
                StatusCode::OK,
                format!("Signed in to '{server}'. You can close this tab."),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                format!(
                    "Signing in to '{server}' failed; the terminal says why. You can close this tab."
                ),
            )
        };
        let _ = self.reply.send(answer);
    }
}

/// The returns of one login, as they arrive; the listener stops when this is dropped (or,
/// with every answer written first, at [`Callbacks::close`]).
pub struct Callbacks {
    arrived: mpsc::Receiver<Callback>,
    server: Option<JoinHandle<()>>,
    stop: CancellationToken,
}

impl Callbacks {
    /// The next return carrying this login's `state`; `None` if the listener failed.
    pub async fn recv(&mut self) -> Option<Callback> {
        self.arrived.recv().await
    }

    /// Stops listening once the answers given are written (at most [`CLOSE_GRACE`]): a
    /// process that exits right after [`Callback::answer`] would otherwise cut the browser's
    /// page off.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(CLOSE_GRACE, server).await;
        }
    }
}

/// Longest [`Callbacks::close`] waits for answers to be written.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

impl Drop for Callbacks {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

#[derive(Clone)]
struct Expected {
    redirect_uri: Url,
    state: String,
    arrived: mpsc::Sender<Callback>,
}

/// Serves `listener` for the returns to `redirect_uri` of the login whose `state` is given.
pub fn serve_callbacks(listener: TcpListener, redirect_uri: Url, state: String) -> Callbacks {
    let (sender, arrived) = mpsc::channel(1);
    let path = redirect_uri.path().to_owned();
    let app = Router::new()
        .route(&path, get(returned))
        .fallback(|| async { page(StatusCode::NOT_FOUND, "Not found.") })
        .with_state(Expected {
            redirect_uri,
            state,
            arrived: sender,
        });
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let server = tokio::spawn(async move {
        let serving = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await });
        if let Err(error) = serving.await {
            tracing::warn!(%error, "the sign-in callback listener stopped");
        }
    });
    Callbacks {
        arrived,
        server: Some(server),
        stop,
    }
}

async fn returned(State(expected): State<Expected>, uri: Uri) -> (StatusCode, Html<String>) {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(url) = expected.redirect_uri.join(target) else {
        return page(StatusCode::BAD_REQUEST, "Unreadable address.");
    };
    if state_of(url.as_str()).as_deref() != Some(expected.state.as_str()) {
        return page(
            StatusCode::BAD_REQUEST,
            "This is not the sign-in mcpgw is waiting for. Start it again with `mcpgw auth login`.",
        );
    }
    let (reply, answer) = oneshot::channel();
    let callback = Callback {
        url: url.into(),
        reply,
    };
    if expected.arrived.send(callback).await.is_err() {
        return page(StatusCode::GONE, "This sign-in is over.");
    }
    match answer.await {
        Ok((status, text)) => page(status, &text),
        Err(_) => page(StatusCode::GONE, "This sign-in is over."),
    }
}

fn page(status: StatusCode, text: &str) -> (StatusCode, Html<String>) {
    (status, Html(browser_page(text)))
}

/// The `state` query parameter of `url` (an authorization URL or a redirect).
pub fn state_of(url: &str) -> Option<String> {
    Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    use super::*;

    #[tokio::test]
    async fn only_the_redirect_with_this_logins_state_is_taken() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let redirect_uri = Url::parse(&format!("http://127.0.0.1:{port}/callback")).expect("url");
        let mut callbacks = serve_callbacks(listener, redirect_uri, "s-1".into());

        let get = |target: &'static str| async move {
            let mut stream = TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            let request =
                format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.expect("write");
            stream
        };
        let read = |mut stream: TcpStream| async move {
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text).await;
            text
        };
        // An idle connection (a browser's pre-connection) holds nothing up.
        let _idle = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let favicon = read(get("/favicon.ico").await).await;
        assert!(favicon.starts_with("HTTP/1.1 404"), "{favicon}");
        let forged = read(get("/callback?code=c&state=forged").await).await;
        assert!(forged.starts_with("HTTP/1.1 400"), "{forged}");
        let browser = get("/callback?code=the-code&state=s-1&iss=x").await;
        let callback = tokio::time::timeout(Duration::from_secs(5), callbacks.recv())
            .await
            .expect("in time")
            .expect("a callback");
        assert_eq!(
            callback.url,
            format!("http://127.0.0.1:{port}/callback?code=the-code&state=s-1&iss=x")
        );
        callback.answer("docs", true);
        callbacks.close().await;
        let page = read(browser).await;
        assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
        assert!(page.contains("You can close this tab"), "{page}");
    }

    #[test]
    fn the_state_is_read_from_a_url() {
        assert_eq!(
            state_of("https://as.example/authorize?client_id=a&state=x%20y").as_deref(),
            Some("x y")
        );
        assert_eq!(state_of("https://as.example/authorize"), None);
        assert_eq!(state_of("not a url"), None);
    }
}
