//! Where the config file is: an explicit path, `./mcpgw.toml`, or the user config directory.

use std::path::{Path, PathBuf};

use crate::ConfigError;

const FILE_NAME: &str = "mcpgw.toml";

/// Find the config file to load.
///
/// Order: `explicit` (which must exist); `./mcpgw.toml`; `$XDG_CONFIG_HOME/mcpgw/mcpgw.toml`,
/// or `$HOME/.config/mcpgw/mcpgw.toml` when `XDG_CONFIG_HOME` is unset. The same
/// `~/.config` path is used on macOS, as most command-line tools do. When nothing is found
/// the error lists every place looked at.
pub fn discover(explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let places = Places {
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        xdg_config_home: std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
        home: std::env::var_os("HOME").map(PathBuf::from),
    };
    discover_in(explicit, &places)
}

/// The environment `discover` depends on, passed in so tests need not change the process's
/// working directory or environment (both global, and `set_var` is `unsafe`).
struct Places {
    cwd: PathBuf,
    xdg_config_home: Option<PathBuf>,
    home: Option<PathBuf>,
}

fn discover_in(explicit: Option<&Path>, places: &Places) -> Result<PathBuf, ConfigError> {
    if let Some(path) = explicit {
        if path.exists() {
            return Ok(path.to_owned());
        }
        return Err(ConfigError::NoSuchFile {
            path: path.to_owned(),
        });
    }
    let mut searched = vec![places.cwd.join(FILE_NAME)];
    // The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    let config_home = match &places.xdg_config_home {
        Some(dir) if dir.is_absolute() => Some(dir.clone()),
        _ => places.home.as_ref().map(|home| home.join(".config")),
    };
    if let Some(dir) = config_home {
        searched.push(dir.join("mcpgw").join(FILE_NAME));
    }
    match searched.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => Err(ConfigError::NotFound { searched }),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use expect_test::{Expect, expect};

    use super::*;

    /// Lays out `files` (relative to a temp root) and runs discovery with `cwd`, `xdg` and
    /// `home` relative to that root; prints the result with the root replaced by `$ROOT`.
    fn check(files: &[&str], explicit: Option<&str>, xdg: Option<&str>, expect: Expect) {
        let root = tempfile::tempdir().expect("create temp dir");
        let at = |rel: &str| root.path().join(rel);
        for file in files {
            let path = at(file);
            fs::create_dir_all(path.parent().expect("file has a parent")).expect("create dirs");
            fs::write(&path, "").expect("write file");
        }
        let places = Places {
            cwd: at("work"),
            // "/x" means "x under the temp root"; anything else is taken literally (relative).
            xdg_config_home: xdg
                .map(|dir| dir.strip_prefix('/').map_or_else(|| PathBuf::from(dir), at)),
            home: Some(at("home")),
        };
        let explicit = explicit.map(at);
        let actual = match discover_in(explicit.as_deref(), &places) {
            Ok(path) => format!("found {}", path.display()),
            Err(err) => format!("error {err}"),
        };
        let root = root.path().display().to_string();
        expect.assert_eq(&actual.replace(&root, "$ROOT"));
    }

    #[test]
    fn explicit_path_wins_and_must_exist() {
        let everywhere = [
            "work/mcpgw.toml",
            "home/.config/mcpgw/mcpgw.toml",
            "other.toml",
        ];
        check(
            &everywhere,
            Some("other.toml"),
            None,
            expect!["found $ROOT/other.toml"],
        );
        check(
            &everywhere,
            Some("missing.toml"),
            None,
            expect!["error config file $ROOT/missing.toml does not exist"],
        );
    }

    #[test]
    fn working_directory_before_user_config() {
        let both = ["work/mcpgw.toml", "home/.config/mcpgw/mcpgw.toml"];
        check(&both, None, None, expect!["found $ROOT/work/mcpgw.toml"]);
        check(
            &both[1..],
            None,
            None,
            expect!["found $ROOT/home/.config/mcpgw/mcpgw.toml"],
        );
    }

    #[test]
    fn xdg_config_home_replaces_dot_config() {
        let files = ["xdg/mcpgw/mcpgw.toml", "home/.config/mcpgw/mcpgw.toml"];
        check(
            &files,
            None,
            Some("/xdg"),
            expect!["found $ROOT/xdg/mcpgw/mcpgw.toml"],
        );
        // A relative XDG_CONFIG_HOME is ignored, as the XDG spec requires.
        check(
            &files,
            None,
            Some("xdg"),
            expect!["found $ROOT/home/.config/mcpgw/mcpgw.toml"],
        );
    }

    #[test]
    fn nothing_found_lists_places_and_suggests_import() {
        check(
            &[],
            None,
            None,
            expect![[r#"
                error no config file found; looked at: $ROOT/work/mcpgw.toml, $ROOT/home/.config/mcpgw/mcpgw.toml
                (hint: run `mcpgw import <claude_desktop_config.json>` to convert an existing mcpServers file, or start from the example mcpgw.toml)"#]],
        );
    }
}
