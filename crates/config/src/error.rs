//! The crate's one error type, and `Problem`, a single validation finding with its path.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong while finding, reading, checking or using a config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Syntax or type error, reported by the TOML or JSON parser with its position.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file parsed but does not describe a usable gateway; holds every problem found.
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
    #[error("config file {} does not exist", path.display())]
    NoSuchFile { path: PathBuf },
    #[error(
        "no config file found; looked at: {}\n(hint: run `mcpgw import <claude_desktop_config.json>` to convert an existing mcpServers file, or start from the example mcpgw.toml)",
        Paths(searched)
    )]
    NotFound { searched: Vec<PathBuf> },
    /// A secret reference names a variable that is not set. Names the variable, never a value.
    #[error("environment variable {var} is not set (hint: export {var} before starting mcpgw)")]
    MissingEnv { var: String },
    /// A credential variable that is set but empty (or only whitespace).
    #[error(
        "environment variable {var} is empty (hint: export {var} with the credential before starting mcpgw)"
    )]
    EmptyEnv { var: String },
    #[error("environment variable {var} does not hold valid UTF-8")]
    EnvNotUnicode { var: String },
    #[error("invalid server name `{name}`: {reason}")]
    BadServerName { name: String, reason: String },
}

/// One thing wrong with a config, located by a path such as `servers[1].timeout_s` and, in a
/// TOML file, by the line and column of the text it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
    pub hint: Option<String>,
    /// Where in the file; `None` for a JSON file (its parser keeps no positions) or a problem
    /// about something the file does not contain.
    pub location: Option<Location>,
}

/// A 1-based line and column (in characters) in a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

impl Problem {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            path: path.into(),
            message: message.into(),
            hint: None,
            location: None,
        }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Problem {
        self.hint = Some(hint.into());
        self
    }
}

/// `3:1: gateway.exposre: unknown key (hint: did you mean `exposure`?)`; the caller adds the
/// file name where it helps.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = self.location {
            write!(f, "{location}: ")?;
        }
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid configuration ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for problem in self.0 {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

struct Paths<'a>(&'a [PathBuf]);

impl fmt::Display for Paths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, path) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", path.display())?;
        }
        Ok(())
    }
}

/// A message of several lines (a configuration error with its summary) in one line: its
/// non-empty lines, trimmed, joined with "; ".
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
