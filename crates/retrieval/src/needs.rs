//! Splitting one request into its needs: "find the paper, summarise it and then save the
//! summary to my notes" asks for three tools, and one ranking of the whole sentence tends to
//! fill its head with tools for whichever need has the rarest words. Ranking each need on its
//! own and merging the rankings so every need is served before any gets a second tool
//! finds more of them (docs/retrieval.md has the figures).
//!
//! The split is deliberately shallow, with no parser and no model: it cuts at sentence ends,
//! at connectives that start a new step ("and then", "also", "as well as", "after that";
//! Chinese `然后`, `同时`, `并且`, `另外`, ...), and at "and" or a comma when a request verb or
//! a new clause ("and I", "and what") follows, since "and" alone joins nouns as often as it
//! joins steps ("latitude and longitude"). A piece with fewer than two content words
//! ("please", "and show me") is no need of its own and joins its neighbour. Everything is
//! lower-cased ASCII matching on word boundaries, so the cost is one pass over the query.

use crate::english;

/// At most this many needs; a longer request is mostly details, not more tools.
pub const MAX_NEEDS: usize = 6;

/// The needs of `query`, in order, each a piece of the query's own text; a single need (the
/// query itself, trimmed) when it does not split into two or more pieces of substance.
pub fn split_needs(query: &str) -> Vec<String> {
    let mut pieces: Vec<&str> = Vec::new();
    for sentence in sentences(query) {
        clauses(sentence, &mut pieces);
    }
    let mut needs: Vec<String> = Vec::new();
    let mut pending = String::new();
    for piece in pieces {
        let piece = trim_piece(piece);
        if piece.is_empty() {
            continue;
        }
        if !pending.is_empty() {
            pending.push(' ');
        }
        pending.push_str(piece);
        if content_words(&pending) >= 2 {
            needs.push(std::mem::take(&mut pending));
        }
    }
    // A short tail ("please") belongs to the last need.
    if !pending.is_empty() {
        match needs.last_mut() {
            Some(last) => {
                last.push(' ');
                last.push_str(&pending);
            }
            None => needs.push(pending),
        }
    }
    if needs.len() < 2 {
        return vec![query.trim().to_string()];
    }
    needs.truncate(MAX_NEEDS);
    needs
}

/// Connectives that start a new step wherever they stand (lower case, matched as whole words).
const STEP_CONNECTIVES: &[&str] = &[
    "and then",
    "and also",
    "and finally",
    "and afterwards",
    "as well as",
    "after that",
    "afterwards",
    "followed by",
    "additionally",
    "furthermore",
    "moreover",
    "in addition",
    "then",
    "also",
    "finally",
    "plus",
];

/// Chinese connectives that start a new step (matched anywhere: Chinese has no spaces).
const CJK_CONNECTIVES: &[&str] = &[
    "然后",
    "并且",
    "同时",
    "另外",
    "此外",
    "接着",
    "随后",
    "之后",
    "以及",
    "而且",
    "还要",
    "还需要",
    "还想",
    "也要",
    "最后",
    "再帮",
];

/// Words that, after "and" or a comma, start a new clause rather than continue a list of
/// nouns: request verbs in their base form, and the openings of a new question or clause.
const CLAUSE_STARTS: &[&str] = &[
    "add",
    "analyse",
    "analyze",
    "book",
    "calculate",
    "call",
    "can",
    "cancel",
    "change",
    "check",
    "compare",
    "convert",
    "could",
    "create",
    "delete",
    "display",
    "download",
    "draw",
    "edit",
    "email",
    "estimate",
    "explain",
    "export",
    "extract",
    "fetch",
    "find",
    "generate",
    "get",
    "give",
    "how",
    "i",
    "identify",
    "i'd",
    "i'm",
    "import",
    "let",
    "list",
    "look",
    "make",
    "message",
    "modify",
    "notify",
    "open",
    "order",
    "play",
    "please",
    "post",
    "predict",
    "print",
    "provide",
    "read",
    "recommend",
    "record",
    "remind",
    "remove",
    "reserve",
    "retrieve",
    "save",
    "schedule",
    "search",
    "see",
    "send",
    "set",
    "share",
    "show",
    "store",
    "suggest",
    "summarise",
    "summarize",
    "tell",
    "track",
    "translate",
    "update",
    "upload",
    "verify",
    "we",
    "what",
    "when",
    "where",
    "which",
    "who",
    "whether",
    "would",
    "write",
];

/// Sentences of `text`: cut after `.`, `?`, `!` or `;` followed by a space (so `6.30` and
/// `example.com` stay whole), and after Chinese full stops and question marks.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let end = match c {
            '。' | '？' | '！' | '；' | '?' | '!' | ';' => true,
            '.' => next.is_none_or(char::is_whitespace),
            _ => false,
        };
        if end {
            let cut = at + c.len_utf8();
            out.push(&text[start..cut]);
            start = cut;
        }
    }
    out.push(&text[start..]);
    out
}

/// Cuts `sentence` at step connectives, at "and" or a comma before a clause start, and at
/// Chinese connectives; pushes the pieces (connectives left out) onto `out`.
fn clauses<'a>(sentence: &'a str, out: &mut Vec<&'a str>) {
    let lower = sentence.to_ascii_lowercase();
    let mut start = 0;
    let mut at = 0;
    while at < lower.len() {
        if let Some(skip) = cut_at(&lower, at) {
            out.push(&sentence[start..at]);
            at += skip;
            start = at;
            continue;
        }
        at += lower[at..].chars().next().map_or(1, char::len_utf8);
    }
    out.push(&sentence[start..]);
}

/// If a piece ends at byte `at` of `lower`, how many bytes the connective there takes.
fn cut_at(lower: &str, at: usize) -> Option<usize> {
    let rest = &lower[at..];
    if let Some(connective) = CJK_CONNECTIVES.iter().find(|c| rest.starts_with(**c)) {
        return Some(connective.len());
    }
    // Chinese commas before a connective are left in the piece and trimmed later.
    let comma = rest.starts_with(',') || rest.starts_with('，');
    let word_start = at == 0 || !is_word_byte(lower.as_bytes()[at - 1]);
    if !word_start && !comma {
        return None;
    }
    for connective in STEP_CONNECTIVES {
        if starts_with_word(rest, connective) {
            return Some(connective.len());
        }
    }
    let joiner = if comma {
        rest.chars().next().map_or(1, char::len_utf8)
    } else if starts_with_word(rest, "and") {
        "and".len()
    } else {
        return None;
    };
    let after = rest[joiner..].trim_start();
    let next: String = after
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '\'')
        .collect();
    (!next.is_empty() && CLAUSE_STARTS.contains(&next.as_str())).then_some(joiner)
}

/// Whether `text` starts with `word` followed by a non-word character or its end.
fn starts_with_word(text: &str, word: &str) -> bool {
    text.starts_with(word)
        && text
            .as_bytes()
            .get(word.len())
            .is_none_or(|&b| !is_word_byte(b))
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'\''
}

/// `piece` without the separators and joining words left at its ends.
fn trim_piece(piece: &str) -> &str {
    let separators: &[char] = &[
        ',', '，', '、', ' ', '\t', '\n', '.', '。', ';', '；', ':', '：',
    ];
    let mut piece = piece.trim_matches(separators);
    loop {
        let lower = piece.to_ascii_lowercase();
        let Some(word) = ["and", "but", "so"]
            .into_iter()
            .find(|w| starts_with_word(&lower, w))
        else {
            return piece;
        };
        piece = piece[word.len()..].trim_matches(separators);
    }
}

/// Words that carry meaning: Latin words that are not English stop words, plus one for every
/// two CJK characters (a Chinese word is mostly two characters).
fn content_words(text: &str) -> usize {
    let latin = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty() && word.is_ascii())
        .filter(|word| !english::is_stop_word(&word.to_ascii_lowercase()))
        .count();
    let cjk = text
        .chars()
        .filter(|c| !c.is_ascii() && c.is_alphabetic())
        .count();
    latin + cjk / 2
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check(query: &str, expect: Expect) {
        expect.assert_eq(&split_needs(query).join(" | "));
    }

    #[test]
    fn a_request_of_several_steps_splits_into_them() {
        check(
            "Find the paper, summarise it and then save the summary to my notes, message the team",
            expect![
                "Find the paper | summarise it save the summary to my notes | message the team"
            ],
        );
        check(
            "Please help me cancel a washing machine repair request with the request number \
             RQ123456, and check the repair status of my TV after the cancellation.",
            expect![
                "Please help me cancel a washing machine repair request with the request number RQ123456 | check the repair status of my TV after the cancellation"
            ],
        );
        check(
            "Get the weather in Paris. Also book a table for two tonight",
            expect!["Get the weather in Paris | book a table for two tonight"],
        );
    }

    #[test]
    fn lists_of_nouns_and_details_stay_one_need() {
        check(
            "coordinates 38.9 latitude and 77.0 longitude, from January 1 to December 2",
            expect!["coordinates 38.9 latitude and 77.0 longitude, from January 1 to December 2"],
        );
        check(
            "what time is it in Paris",
            expect!["what time is it in Paris"],
        );
        check("search and replace", expect!["search and replace"]);
    }

    #[test]
    fn chinese_requests_split_at_connectives() {
        check(
            "请帮我取消一个洗衣机的维修请求，请求编号为RQ123456，并且查询取消后我的电视机的维修状态。",
            expect![
                "请帮我取消一个洗衣机的维修请求，请求编号为RQ123456 | 查询取消后我的电视机的维修状态"
            ],
        );
        check(
            "我需要调整明早6点的闹钟到6点半。同时，请取消明晚的21:00单次闹钟。",
            expect!["我需要调整明早6点的闹钟到6点半 | 请取消明晚的21:00单次闹钟"],
        );
    }

    #[test]
    fn short_pieces_join_their_neighbours() {
        check("Add numbers, please", expect!["Add numbers, please"]);
        check("then", expect!["then"]);
        check("", expect![""]);
    }
}
