//! "Did you mean": the closest qualified names for a tool name the catalog does not know.
//!
//! Candidates are ranked in tiers, best first:
//! 1. the same name up to ASCII case;
//! 2. the unknown name (or its part after the first `__`) equals a tool's upstream name,
//!    across all servers: the model dropped or guessed the server prefix;
//! 3. one name contains the other;
//! 4. a plausible typo: small edit distance (Levenshtein over characters, at most a third of
//!    the length, min 1). For a `server__tool` shape the tool parts must be that close and the
//!    server distance is added on top, so `everything__ecko` suggests `everything__echo` but not
//!    `everything__add`.
//!
//! Within a tier, smaller edit distance first, then the qualified name, so results are stable.

use crate::naming::SEPARATOR;

/// Longest unknown name we compute edit distances for; a longer one is not a typo and would
/// make the quadratic distance expensive.
const MAX_TYPO_LEN: usize = 256;

/// Shortest name that counts in a substring match.
const MIN_SUBSTRING_LEN: usize = 3;

/// A qualified and an upstream name to match against.
pub(crate) struct Candidate<'a> {
    pub qualified: &'a str,
    pub upstream: &'a str,
}

/// The qualified names closest to `unknown`, best first, at most `limit`.
pub(crate) fn suggest<'a>(
    unknown: &str,
    candidates: impl Iterator<Item = Candidate<'a>>,
    limit: usize,
) -> Vec<&'a str> {
    let unknown = unknown.trim().to_lowercase();
    if unknown.is_empty() || limit == 0 {
        return Vec::new();
    }
    let tool_part = unknown
        .split_once(SEPARATOR)
        .map(|(_, tool)| tool)
        .filter(|tool| !tool.is_empty());

    let mut ranked: Vec<(u8, usize, &str)> = candidates
        .filter_map(|c| {
            let qualified = c.qualified.to_lowercase();
            let upstream = c.upstream.to_lowercase();
            let typo = typo_distance(&unknown, &qualified, &upstream);
            let tier = if unknown == qualified {
                0
            } else if unknown == upstream || tool_part.is_some_and(|t| t == upstream) {
                1
            } else if (long_enough(&unknown) && qualified.contains(&unknown))
                || unknown.contains(&qualified)
                || (long_enough(&upstream) && unknown.contains(&upstream))
            {
                2
            } else if typo.is_some() {
                3
            } else {
                return None;
            };
            let distance = typo.unwrap_or_else(|| {
                if unknown.len() > MAX_TYPO_LEN {
                    usize::MAX
                } else {
                    levenshtein(&unknown, &qualified).min(levenshtein(&unknown, &upstream))
                }
            });
            Some((tier, distance, c.qualified))
        })
        .collect();
    ranked.sort_unstable();
    ranked.dedup_by_key(|(_, _, name)| *name);
    ranked
        .into_iter()
        .take(limit)
        .map(|(_, _, name)| name)
        .collect()
}

/// The edit distance of a plausible typo, `None` when `unknown` is too far from the candidate.
///
/// With a `server__tool` shape, the tool parts must be close (a third of the length, min 1) and
/// the server distance is added on top: `everything__ecko` is a typo of `everything__echo` but
/// not of `everything__add`, even though a third of the whole name would allow both. Without
/// the separator, the whole unknown is compared with the upstream and the qualified name.
fn typo_distance(unknown: &str, qualified: &str, upstream: &str) -> Option<usize> {
    if unknown.len() > MAX_TYPO_LEN {
        return None;
    }
    let allowed = |s: &str| (s.chars().count() / 3).max(1);
    let within = |d: usize, s: &str| (d <= allowed(s)).then_some(d);
    let Some((server, tool)) = unknown.split_once(SEPARATOR) else {
        let to_upstream = within(levenshtein(unknown, upstream), unknown);
        let to_qualified = within(levenshtein(unknown, qualified), unknown);
        return to_upstream.into_iter().chain(to_qualified).min();
    };
    let (their_server, their_tool) = qualified.split_once(SEPARATOR).unwrap_or(("", qualified));
    let tool_distance = levenshtein(tool, their_tool).min(levenshtein(tool, upstream));
    within(tool_distance, tool).map(|d| d + levenshtein(server, their_server))
}

/// Substring matches of one or two characters are noise (`a` is in most names).
fn long_enough(s: &str) -> bool {
    s.chars().count() >= MIN_SUBSTRING_LEN
}

/// Levenshtein distance over `char`s (insert, delete, substitute all cost 1).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // `row[j]` is the distance between the prefix of `a` seen so far and `b[..j]`.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    const NAMES: &[(&str, &str)] = &[
        ("everything__echo", "echo"),
        ("everything__add", "add"),
        ("everything__longRunningOperation", "longRunningOperation"),
        ("fs__read_file", "read_file"),
        ("fs__write_file", "write_file"),
        ("other__echo", "echo"),
    ];

    fn check(unknown: &str, expect: Expect) {
        let candidates = NAMES.iter().map(|(qualified, upstream)| Candidate {
            qualified,
            upstream,
        });
        expect.assert_eq(&format!("{:?}", suggest(unknown, candidates, 3)));
    }

    #[test]
    fn suggests_close_names() {
        check("echo", expect![[r#"["everything__echo", "other__echo"]"#]]);
        check(
            "everything__ecko",
            expect![[r#"["everything__echo", "other__echo"]"#]],
        );
        check(
            "everythng__echo",
            expect![[r#"["everything__echo", "other__echo"]"#]],
        );
        check(
            "EVERYTHING__ECHO",
            expect![[r#"["everything__echo", "other__echo"]"#]],
        );
        check("github__read_file", expect![[r#"["fs__read_file"]"#]]);
        check("file", expect![[r#"["fs__read_file", "fs__write_file"]"#]]);
        check(
            "longrunning",
            expect![[r#"["everything__longRunningOperation"]"#]],
        );
        check("", expect!["[]"]);
        check("zzzzzzzz", expect!["[]"]);
    }

    #[test]
    fn levenshtein_known_values() {
        let check = |a: &str, b: &str, want: usize| assert_eq!(levenshtein(a, b), want, "{a} {b}");
        check("", "", 0);
        check("", "abc", 3);
        check("kitten", "sitting", 3);
        check("echo", "ecko", 1);
        check("flaw", "lawn", 2);
        check("héllo", "hello", 1);
    }

    proptest! {
        #[test]
        fn levenshtein_is_a_metric(a in "\\PC{0,12}", b in "\\PC{0,12}", c in "\\PC{0,12}") {
            prop_assert_eq!(levenshtein(&a, &b), levenshtein(&b, &a));
            prop_assert_eq!(levenshtein(&a, &a), 0);
            prop_assert!(levenshtein(&a, &c) <= levenshtein(&a, &b) + levenshtein(&b, &c));
        }
    }
}
