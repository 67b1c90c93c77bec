//! Qualified tool names: `server__tool`, sanitised, at most 64 characters, unique and stable.
//!
//! Rules (DESIGN.md section 1):
//! - `server + "__" + tool`, every character outside `[A-Za-z0-9_.-]` replaced by `_` (one `_`
//!   per character, not per byte); a tool name that is empty becomes `_`.
//! - At most [`MAX_LEN`] characters. A longer name keeps a prefix and ends in `_` plus eight
//!   lowercase hex digits of a stable hash of the full *unsanitised* `server\0tool`, so two long
//!   names that share a prefix (or sanitise alike) still differ.
//! - Unique: the first registration keeps its name, later duplicates get `_2`, `_3`, ... and the
//!   base is shortened to make room, so the result never exceeds [`MAX_LEN`].
//!
//! With [`Prefix::WhenNeeded`] (`[gateway] prefix = "when-needed"`) a name that no other server
//! uses keeps its bare upstream form (`echo` rather than `everything__echo`), so a gateway in
//! front of one server is transparent. A name stays bare only when it is already a valid
//! qualified name ([`can_stay_bare`]: within [`MAX_LEN`], only `[A-Za-z0-9_.-]`, no `__`) and is
//! neither *contested* (used by two or more servers: then every one of them is qualified) nor
//! reserved by the caller (the gateway's meta-tools). Bare names contain no `__` and every
//! qualified name does (server names are at most 32 characters, so even a shortened name keeps
//! its separator), so the two kinds never meet and uniqueness holds. Every name also has its
//! [`Assigned::prefixed`] form, the one `always` would give; the catalog accepts it as an alias.
//! The price: a bare name changes to `server__name` when another server with the same name
//! joins, so under `when-needed` names depend on the other servers.
//!
//! The hash is FNV-1a 64, written out here because `std`'s `DefaultHasher` is explicitly not
//! stable across Rust releases, and a name that changes after a toolchain upgrade would break
//! every client that remembered it.
//!
//! Stability: names depend only on the server name, the tool name and the tools registered
//! before them. Server names are unique and contain no `__`, so collisions happen within one
//! server (`a.b` vs `a b`), and a server's names do not change when other servers come or go.
//! The one exception is a server name ending in `_` (`a_`): its `a___x` can meet server `a`'s
//! tool `_x`. Uniqueness still holds (the later one gets `_2`), only stability across
//! reordering is lost; forbidding a trailing `_` in config would close that gap.

use std::collections::HashSet;

/// Longest qualified name we hand out; several clients reject longer tool names.
pub const MAX_LEN: usize = 64;

/// Separator between the server and the tool part of a qualified name.
pub const SEPARATOR: &str = "__";

/// Length of the `_xxxxxxxx` hash tail that replaces an overflow.
const HASH_TAIL: usize = 9;

/// The qualified name of `tool` on `server`, before deduplication.
pub fn qualify(server: &str, tool: &str) -> String {
    qualify_with_suffix(server, tool, "")
}

/// FNV-1a, 64 bit. Stable by definition (unlike `std::hash::DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(PRIME))
}

/// Replace every character outside `[A-Za-z0-9_.-]` with `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if is_allowed(c) { c } else { '_' })
        .collect()
}

/// Whether `c` may appear in a qualified name.
pub fn is_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// When names get their `server__` prefix (`[gateway] prefix`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Prefix {
    /// Every name is `server__name`: stable whatever other servers come and go.
    #[default]
    Always,
    /// Only names that two or more servers use (or that are reserved) are prefixed; the rest
    /// keep their upstream name.
    WhenNeeded,
}

/// How a [`Namer`] names things: the prefix mode, and the names that must never be handed out
/// bare (the gateway's own meta-tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules<'a> {
    pub prefix: Prefix,
    pub reserved: &'a [&'a str],
}

/// The names of one tool or prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// The name clients see.
    pub name: String,
    /// The `server__name` form [`Prefix::Always`] would give; equal to `name` unless `name`
    /// is bare.
    pub prefixed: String,
}

/// Whether `name` can be shown as it is under [`Prefix::WhenNeeded`]: it is a valid qualified
/// name by itself and cannot be mistaken for a prefixed one.
pub fn can_stay_bare(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && name.chars().all(is_allowed)
        && !name.contains(SEPARATOR)
}

/// The upstream names that more than one list uses, each list being one server's names (a
/// name repeated within one list counts once).
pub fn contested<'a, L, N>(lists: L) -> HashSet<String>
where
    L: IntoIterator<Item = N>,
    N: IntoIterator<Item = &'a str>,
{
    let mut seen: HashSet<&str> = HashSet::new();
    let mut contested = HashSet::new();
    for list in lists {
        let mine: HashSet<&str> = list.into_iter().collect();
        for name in mine {
            if !seen.insert(name) {
                contested.insert(name.to_owned());
            }
        }
    }
    contested
}

/// Hands out unique qualified names in registration order.
#[derive(Debug, Default)]
pub struct Namer {
    /// Names handed out (shown names).
    taken: HashSet<String>,
    /// Under [`Prefix::WhenNeeded`]: the prefixed names handed out, and the names that may not
    /// stay bare. `None` under [`Prefix::Always`], where both kinds coincide.
    bare: Option<Bare>,
}

#[derive(Debug, Default)]
struct Bare {
    prefixed: HashSet<String>,
    not_bare: HashSet<String>,
}

impl Namer {
    /// A namer for [`Prefix::Always`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A namer under `rules`; `contested` are the names more than one server uses (see
    /// [`contested`]), ignored under [`Prefix::Always`].
    pub fn with_rules(rules: Rules<'_>, contested: HashSet<String>) -> Self {
        match rules.prefix {
            Prefix::Always => Self::new(),
            Prefix::WhenNeeded => {
                let mut not_bare = contested;
                not_bare.extend(rules.reserved.iter().map(|name| (*name).to_owned()));
                Self {
                    taken: HashSet::new(),
                    bare: Some(Bare {
                        prefixed: HashSet::new(),
                        not_bare,
                    }),
                }
            }
        }
    }

    /// The qualified name for `tool` on `server`, unique among all names handed out so far.
    pub fn assign(&mut self, server: &str, tool: &str) -> String {
        self.assign_both(server, tool).name
    }

    /// The shown and the prefixed name of `tool` on `server`.
    pub fn assign_both(&mut self, server: &str, tool: &str) -> Assigned {
        let Some(bare) = &mut self.bare else {
            let name = unique(&mut self.taken, server, tool);
            return Assigned {
                prefixed: name.clone(),
                name,
            };
        };
        let prefixed = unique(&mut bare.prefixed, server, tool);
        let name = if can_stay_bare(tool)
            && !bare.not_bare.contains(tool)
            && self.taken.insert(tool.to_owned())
        {
            tool.to_owned()
        } else if self.taken.insert(prefixed.clone()) {
            prefixed.clone()
        } else {
            // Unreachable while server names obey their rules (a bare name has no `__`); kept
            // so that uniqueness never rests on a precondition.
            unique(&mut self.taken, server, tool)
        };
        Assigned { name, prefixed }
    }
}

/// `qualify(server, tool)`, or with the first `_n` suffix that makes it new to `taken`; added.
fn unique(taken: &mut HashSet<String>, server: &str, tool: &str) -> String {
    let base = qualify(server, tool);
    if taken.insert(base.clone()) {
        return base;
    }
    // The candidate can itself be taken by an earlier real name (`a`, `a_2`, `a`), so keep
    // counting. Terminates: the set is finite and each `n` gives a different name.
    let mut n: u64 = 2;
    loop {
        let candidate = qualify_with_suffix(server, tool, &format!("_{n}"));
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}

/// `qualify` with `suffix` (ASCII, shorter than `MAX_LEN - HASH_TAIL`) appended, shortening the
/// base so the whole stays within `MAX_LEN`.
fn qualify_with_suffix(server: &str, tool: &str, suffix: &str) -> String {
    let mut tool_part = sanitize(tool);
    if tool_part.is_empty() {
        tool_part.push('_');
    }
    // The server name is valid by precondition; sanitising again costs nothing and keeps the
    // character-set invariant local to this module.
    let full = format!("{}{SEPARATOR}{tool_part}{suffix}", sanitize(server));
    if full.len() <= MAX_LEN {
        return full;
    }
    let hash = fnv1a64(format!("{server}\0{tool}").as_bytes());
    // Fold to 32 bits so all 64 bits influence the eight hex digits.
    let short = (hash ^ (hash >> 32)) as u32;
    // Everything in `full` is ASCII after sanitising, so byte indices are char boundaries.
    let keep = MAX_LEN.saturating_sub(HASH_TAIL + suffix.len());
    format!("{}_{short:08x}{suffix}", &full[..keep])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    /// Assign names for `(server, tool)` pairs in order and render them one per line.
    fn check(pairs: &[(&str, &str)], expect: Expect) {
        let mut namer = Namer::new();
        let got: Vec<String> = pairs
            .iter()
            .map(|(server, tool)| format!("{server} {tool:?} -> {}", namer.assign(server, tool)))
            .collect();
        expect.assert_eq(&got.join("\n"));
    }

    fn assign_all(pairs: &[(String, String)]) -> Vec<String> {
        let mut namer = Namer::new();
        pairs.iter().map(|(s, t)| namer.assign(s, t)).collect()
    }

    #[test]
    fn same_tool_on_two_servers_gets_two_names() {
        check(
            &[("github", "search"), ("gitlab", "search")],
            expect![[r#"
                github "search" -> github__search
                gitlab "search" -> gitlab__search"#]],
        );
    }

    #[test]
    fn characters_outside_the_set_become_underscores() {
        check(
            &[
                ("fs", "read file"),
                ("fs", "ls/dir"),
                ("fs", "héllo"),
                ("fs", "emoji🙂"),
                ("fs", "v1.2-beta_x"),
                ("fs", ""),
            ],
            expect![[r#"
                fs "read file" -> fs__read_file
                fs "ls/dir" -> fs__ls_dir
                fs "héllo" -> fs__h_llo
                fs "emoji🙂" -> fs__emoji_
                fs "v1.2-beta_x" -> fs__v1.2-beta_x
                fs "" -> fs___"#]],
        );
    }

    #[test]
    fn duplicates_within_a_server_get_numbered_suffixes() {
        check(
            &[
                ("s", "a.b"),
                ("s", "a b"),
                ("s", "a/b"),
                ("s", "a_b"),
                ("t", "a b"),
            ],
            expect![[r#"
                s "a.b" -> s__a.b
                s "a b" -> s__a_b
                s "a/b" -> s__a_b_2
                s "a_b" -> s__a_b_3
                t "a b" -> t__a_b"#]],
        );
    }

    #[test]
    fn suffix_that_meets_a_later_real_name_keeps_counting() {
        check(
            &[("s", "a"), ("s", "a"), ("s", "a_2"), ("s", "a")],
            expect![[r#"
                s "a" -> s__a
                s "a" -> s__a_2
                s "a_2" -> s__a_2_2
                s "a" -> s__a_3"#]],
        );
    }

    #[test]
    fn long_names_are_cut_to_64_with_a_stable_hash() {
        let long_a = format!("{}_alpha", "x".repeat(80));
        let long_b = format!("{}_beta", "x".repeat(80));
        let a = qualify("server", &long_a);
        let b = qualify("server", &long_b);
        expect!["server__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_99b9e733"].assert_eq(&a);
        assert_eq!(a.len(), MAX_LEN);
        assert_eq!(b.len(), MAX_LEN);
        assert_ne!(a, b, "same prefix, different names must not collide");
        assert_eq!(a, qualify("server", &long_a), "deterministic");
    }

    #[test]
    fn long_duplicates_keep_the_hash_and_stay_within_64() {
        let long = "y".repeat(100);
        check(
            &[("s", &long), ("s", &long)],
            expect![[r#"
                s "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy" -> s__yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy_aebc7aab
                s "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy" -> s__yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy_aebc7aab_2"#]],
        );
    }

    #[test]
    fn names_that_sanitise_alike_hash_differently_when_long() {
        let base = "z".repeat(70);
        let a = qualify("s", &format!("{base} q"));
        let b = qualify("s", &format!("{base}/q"));
        assert_ne!(a, b);
    }

    #[test]
    fn fnv1a64_matches_reference_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn names_survive_restart_and_a_new_server() {
        let servers = |names: &[&str]| -> Vec<(String, String)> {
            names
                .iter()
                .flat_map(|s| {
                    ["echo", "echo!", "add", "long".repeat(30).as_str()]
                        .map(|t| (s.to_string(), t.to_string()))
                })
                .collect()
        };
        let map = |pairs: &[(String, String)], keep: &[&str]| -> BTreeMap<String, String> {
            let names = assign_all(pairs);
            pairs
                .iter()
                .zip(names)
                .filter(|((s, _), _)| keep.contains(&s.as_str()))
                .map(|((s, t), q)| (format!("{s}/{t}"), q))
                .collect()
        };
        let two = servers(&["everything", "fs"]);
        let before = map(&two, &["everything", "fs"]);
        assert_eq!(before, map(&two, &["everything", "fs"]), "restart");
        for three in [
            servers(&["everything", "fs", "github"]),
            servers(&["github", "everything", "fs"]),
            servers(&["everything", "github", "fs"]),
        ] {
            assert_eq!(before, map(&three, &["everything", "fs"]), "third server");
        }
    }

    /// Assign names under `prefix = "when-needed"` to `(server, tool)` pairs in order, with
    /// `reserved` names, one line per pair: `server tool -> name (prefixed)`.
    fn check_when_needed(pairs: &[(&str, &str)], reserved: &[&str], expect: Expect) {
        let got = when_needed(pairs, reserved)
            .iter()
            .zip(pairs)
            .map(|(a, (server, tool))| format!("{server} {tool:?} -> {} ({})", a.name, a.prefixed))
            .collect::<Vec<_>>();
        expect.assert_eq(&got.join("\n"));
    }

    fn when_needed(pairs: &[(&str, &str)], reserved: &[&str]) -> Vec<Assigned> {
        let mut servers: Vec<&str> = Vec::new();
        for (server, _) in pairs {
            if !servers.contains(server) {
                servers.push(server);
            }
        }
        let lists = servers.iter().map(|server| {
            pairs
                .iter()
                .filter(move |(s, _)| s == server)
                .map(|(_, t)| *t)
        });
        let rules = Rules {
            prefix: Prefix::WhenNeeded,
            reserved,
        };
        let mut namer = Namer::with_rules(rules, contested(lists));
        pairs
            .iter()
            .map(|(server, tool)| namer.assign_both(server, tool))
            .collect()
    }

    #[test]
    fn when_needed_keeps_unshared_names_bare_and_prefixes_every_shared_one() {
        check_when_needed(
            &[
                ("everything", "echo"),
                ("everything", "get-sum"),
                ("time", "get_current_time"),
                ("time", "echo"),
                ("memory", "echo"),
            ],
            &[],
            expect![[r#"
                everything "echo" -> everything__echo (everything__echo)
                everything "get-sum" -> get-sum (everything__get-sum)
                time "get_current_time" -> get_current_time (time__get_current_time)
                time "echo" -> time__echo (time__echo)
                memory "echo" -> memory__echo (memory__echo)"#]],
        );
    }

    #[test]
    fn when_needed_prefixes_names_that_are_not_valid_or_look_prefixed_or_are_reserved() {
        let long = "x".repeat(65);
        check_when_needed(
            &[
                ("s", "read file"),
                ("s", "a__b"),
                ("s", ""),
                ("s", &long),
                ("s", "call_tool"),
                ("s", "ok.v1-x_y"),
            ],
            &["call_tool"],
            expect![[r#"
                s "read file" -> s__read_file (s__read_file)
                s "a__b" -> s__a__b (s__a__b)
                s "" -> s___ (s___)
                s "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" -> s__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_040acb7f (s__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_040acb7f)
                s "call_tool" -> s__call_tool (s__call_tool)
                s "ok.v1-x_y" -> ok.v1-x_y (s__ok.v1-x_y)"#]],
        );
    }

    #[test]
    fn when_needed_names_do_not_depend_on_server_order() {
        let a = when_needed(&[("a", "x"), ("a", "y"), ("b", "y"), ("b", "z")], &[]);
        let b = when_needed(&[("b", "y"), ("b", "z"), ("a", "x"), ("a", "y")], &[]);
        let names = |assigned: &[Assigned]| -> BTreeMap<String, String> {
            assigned
                .iter()
                .map(|a| (a.prefixed.clone(), a.name.clone()))
                .collect()
        };
        assert_eq!(names(&a), names(&b));
        assert_eq!(names(&a)["a__y"], "a__y");
        assert_eq!(names(&a)["a__x"], "x");
    }

    fn server_name() -> impl Strategy<Value = String> {
        // Valid configured server names: [A-Za-z0-9_-], no "__".
        "[A-Za-z0-9-]{1,12}(_[A-Za-z0-9-]{1,12}){0,3}"
    }

    fn tool_name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_]{0,6}",
            "[A-Za-z0-9 ./_-]{0,20}",
            "\\PC{0,90}",
            "[a-z]{60,70}[a-d]{0,3}",
        ]
    }

    proptest! {
        #[test]
        fn names_are_unique_short_allowed_and_deterministic(
            pairs in prop::collection::vec((server_name(), tool_name()), 0..40),
        ) {
            let names = assign_all(&pairs);
            let unique: HashSet<&String> = names.iter().collect();
            prop_assert_eq!(unique.len(), names.len());
            for name in &names {
                prop_assert!(name.len() <= MAX_LEN, "too long: {name}");
                prop_assert!(name.chars().all(is_allowed), "bad char: {name}");
            }
            prop_assert_eq!(&names, &assign_all(&pairs));
        }

        #[test]
        fn when_needed_names_are_unique_short_allowed_and_prefixed_names_match_always(
            pairs in prop::collection::vec((server_name(), tool_name()), 0..40),
        ) {
            // Duplicates within one server are dropped before naming, as the catalog does.
            let mut seen = HashSet::new();
            let pairs: Vec<(String, String)> =
                pairs.into_iter().filter(|p| seen.insert(p.clone())).collect();
            let borrowed: Vec<(&str, &str)> =
                pairs.iter().map(|(s, t)| (s.as_str(), t.as_str())).collect();
            let assigned = when_needed(&borrowed, &[]);
            let unique: HashSet<&String> = assigned.iter().map(|a| &a.name).collect();
            prop_assert_eq!(unique.len(), assigned.len());
            for a in &assigned {
                prop_assert!(a.name.len() <= MAX_LEN, "too long: {}", a.name);
                prop_assert!(a.name.chars().all(is_allowed), "bad char: {}", a.name);
            }
            let prefixed: Vec<String> = assigned.iter().map(|a| a.prefixed.clone()).collect();
            prop_assert_eq!(prefixed, assign_all(&pairs));
        }

        #[test]
        fn servers_do_not_change_each_others_names(
            a in prop::collection::vec(tool_name(), 0..10),
            b in prop::collection::vec(tool_name(), 0..10),
        ) {
            // Servers `a` and `b`: `b`'s names are the same with or without `a` before it.
            let with_a: Vec<(String, String)> = a.iter().map(|t| ("a".to_string(), t.clone()))
                .chain(b.iter().map(|t| ("b".to_string(), t.clone())))
                .collect();
            let alone: Vec<(String, String)> =
                b.iter().map(|t| ("b".to_string(), t.clone())).collect();
            let with_a_names = assign_all(&with_a);
            prop_assert_eq!(&with_a_names[a.len()..], &assign_all(&alone)[..]);
        }
    }
}
