//! English-specific analysis, both optional: the Porter2 ("Snowball English") stemmer and a
//! short stop-word list.
//!
//! The stemmer is written out here (about 200 lines) rather than taken from `rust-stemmers`,
//! so `retrieval` keeps its std-only invariant. It follows the published algorithm
//! (<https://snowballstem.org/algorithms/english/stemmer.html>) and only touches tokens made
//! of ASCII lowercase letters: identifiers with digits, CJK and other scripts pass unchanged.
//! Both sides of a search go through the same analyzer, so a stem only needs to be the same
//! for related words (`creates`, `creating`, `create` -> `creat`), not to be a word.
//!
//! The stop words are the function words of English tool queries ("I'm looking for a tool
//! that can ..."): articles, pronouns, auxiliaries, prepositions and conjunctions. Words that
//! carry meaning for tools (`get`, `list`, `all`, `new`, `not`) are deliberately absent.

use std::borrow::Cow;

/// Whether `token` (already case-folded) is an English stop word.
pub(crate) fn is_stop_word(token: &str) -> bool {
    STOP_WORDS.binary_search(&token).is_ok()
}

/// Sorted, so [`is_stop_word`] can binary-search it.
const STOP_WORDS: &[&str] = &[
    "a", "about", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his",
    "how", "i", "if", "im", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our",
    "please", "she", "should", "so", "some", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "us", "was", "we", "were", "what", "when", "where",
    "which", "who", "will", "with", "would", "you", "your",
];

/// The Porter2 stem of `word`. Words of one or two letters, and words with anything but ASCII
/// lowercase letters, come back unchanged.
pub(crate) fn stem(word: &str) -> Cow<'_, str> {
    if word.len() <= 2 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return Cow::Borrowed(word);
    }
    if let Some(special) = exception(word) {
        return Cow::Borrowed(special);
    }
    let mut w = Word::new(word);
    w.step_1a();
    if matches!(
        w.as_str(),
        "inning" | "outing" | "canning" | "herring" | "earring" | "proceed" | "exceed" | "succeed"
    ) {
        return Cow::Owned(w.finish());
    }
    w.step_1b();
    w.step_1c();
    w.step_2();
    w.step_3();
    w.step_4();
    w.step_5();
    let stem = w.finish();
    if stem == word {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(stem)
    }
}

/// Irregular forms the rules would get wrong, and words the rules must leave alone.
fn exception(word: &str) -> Option<&'static str> {
    Some(match word {
        "skis" => "ski",
        "skies" => "sky",
        "dying" => "die",
        "lying" => "lie",
        "tying" => "tie",
        "idly" => "idl",
        "gently" => "gentl",
        "ugly" => "ugli",
        "early" => "earli",
        "only" => "onli",
        "singly" => "singl",
        "sky" => "sky",
        "news" => "news",
        "howe" => "howe",
        "atlas" => "atlas",
        "cosmos" => "cosmos",
        "bias" => "bias",
        "andes" => "andes",
        _ => return None,
    })
}

/// A word being stemmed: ASCII bytes, with `Y` marking a consonant `y`, and the start of the
/// regions R1 and R2 (fixed on the original word, as the algorithm specifies).
struct Word {
    b: Vec<u8>,
    r1: usize,
    r2: usize,
}

fn is_vowel(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u' | b'y')
}

fn is_double(pair: &[u8]) -> bool {
    pair.len() == 2
        && pair[0] == pair[1]
        && matches!(
            pair[0],
            b'b' | b'd' | b'f' | b'g' | b'm' | b'n' | b'p' | b'r' | b't'
        )
}

fn is_li_ending(c: u8) -> bool {
    matches!(
        c,
        b'c' | b'd' | b'e' | b'g' | b'h' | b'k' | b'm' | b'n' | b'r' | b't'
    )
}

/// Just past the first non-vowel that follows a vowel at or after `start`.
fn region_after(b: &[u8], start: usize) -> usize {
    (start + 1..b.len())
        .find(|&i| is_vowel(b[i - 1]) && !is_vowel(b[i]))
        .map_or(b.len(), |i| i + 1)
}

impl Word {
    fn new(word: &str) -> Word {
        let mut b = word.as_bytes().to_vec();
        if b[0] == b'y' {
            b[0] = b'Y';
        }
        for i in 1..b.len() {
            if b[i] == b'y' && is_vowel(b[i - 1]) {
                b[i] = b'Y';
            }
        }
        let r1 = ["gener", "commun", "arsen"]
            .iter()
            .find(|prefix| b.starts_with(prefix.as_bytes()))
            .map_or_else(|| region_after(&b, 0), |prefix| prefix.len());
        let r2 = region_after(&b, r1);
        Word { b, r1, r2 }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.b).unwrap_or_default()
    }

    fn finish(mut self) -> String {
        for c in &mut self.b {
            if *c == b'Y' {
                *c = b'y';
            }
        }
        String::from_utf8(self.b).unwrap_or_default()
    }

    fn ends(&self, suffix: &str) -> bool {
        self.b.ends_with(suffix.as_bytes())
    }

    /// Where `suffix` starts, the word ending with it.
    fn start_of(&self, suffix: &str) -> usize {
        self.b.len() - suffix.len()
    }

    fn replace(&mut self, suffix: &str, with: &str) {
        let at = self.start_of(suffix);
        self.b.truncate(at);
        self.b.extend_from_slice(with.as_bytes());
    }

    /// The longest of `suffixes` the word ends with.
    fn longest<'s>(&self, suffixes: &[&'s str]) -> Option<&'s str> {
        suffixes
            .iter()
            .filter(|s| self.ends(s))
            .max_by_key(|s| s.len())
            .copied()
    }

    /// Whether `self.b[..end]` ends in a short syllable: non-vowel, vowel, non-vowel other
    /// than `w`, `x` or `Y`; or, at the start of the word, vowel then non-vowel.
    fn short_syllable_at(&self, end: usize) -> bool {
        let b = &self.b[..end];
        match b.len() {
            0 | 1 => false,
            2 => is_vowel(b[0]) && !is_vowel(b[1]),
            n => {
                !is_vowel(b[n - 3])
                    && is_vowel(b[n - 2])
                    && !is_vowel(b[n - 1])
                    && !matches!(b[n - 1], b'w' | b'x' | b'Y')
            }
        }
    }

    fn is_short(&self) -> bool {
        self.r1 >= self.b.len() && self.short_syllable_at(self.b.len())
    }

    fn step_1a(&mut self) {
        let Some(suffix) = self.longest(&["sses", "ied", "ies", "us", "ss", "s"]) else {
            return;
        };
        match suffix {
            "sses" => self.replace(suffix, "ss"),
            "ied" | "ies" => {
                let with = if self.start_of(suffix) > 1 { "i" } else { "ie" };
                self.replace(suffix, with);
            }
            "s" => {
                let before = &self.b[..self.b.len() - 1];
                if before.len() >= 2 && before[..before.len() - 1].iter().any(|&c| is_vowel(c)) {
                    self.b.pop();
                }
            }
            _ => {}
        }
    }

    fn step_1b(&mut self) {
        let Some(suffix) = self.longest(&["eed", "eedly", "ed", "edly", "ing", "ingly"]) else {
            return;
        };
        let at = self.start_of(suffix);
        if matches!(suffix, "eed" | "eedly") {
            if at >= self.r1 {
                self.replace(suffix, "ee");
            }
            return;
        }
        if !self.b[..at].iter().any(|&c| is_vowel(c)) {
            return;
        }
        self.b.truncate(at);
        if self.ends("at") || self.ends("bl") || self.ends("iz") {
            self.b.push(b'e');
        } else if self.b.len() >= 2 && is_double(&self.b[self.b.len() - 2..]) {
            self.b.pop();
        } else if self.is_short() {
            self.b.push(b'e');
        }
    }

    fn step_1c(&mut self) {
        let n = self.b.len();
        if n > 2 && matches!(self.b[n - 1], b'y' | b'Y') && !is_vowel(self.b[n - 2]) {
            self.b[n - 1] = b'i';
        }
    }

    fn step_2(&mut self) {
        const RULES: &[(&str, &str)] = &[
            ("tional", "tion"),
            ("enci", "ence"),
            ("anci", "ance"),
            ("abli", "able"),
            ("entli", "ent"),
            ("izer", "ize"),
            ("ization", "ize"),
            ("ational", "ate"),
            ("ation", "ate"),
            ("ator", "ate"),
            ("alism", "al"),
            ("aliti", "al"),
            ("alli", "al"),
            ("fulness", "ful"),
            ("ousli", "ous"),
            ("ousness", "ous"),
            ("iveness", "ive"),
            ("iviti", "ive"),
            ("biliti", "ble"),
            ("bli", "ble"),
            ("ogi", "og"),
            ("fulli", "ful"),
            ("lessli", "less"),
            ("li", ""),
        ];
        let Some(&(suffix, with)) = RULES
            .iter()
            .filter(|(s, _)| self.ends(s))
            .max_by_key(|(s, _)| s.len())
        else {
            return;
        };
        let at = self.start_of(suffix);
        if at < self.r1 {
            return;
        }
        let ok = match suffix {
            "ogi" => at > 0 && self.b[at - 1] == b'l',
            "li" => at > 0 && is_li_ending(self.b[at - 1]),
            _ => true,
        };
        if ok {
            self.replace(suffix, with);
        }
    }

    fn step_3(&mut self) {
        const RULES: &[(&str, &str)] = &[
            ("tional", "tion"),
            ("ational", "ate"),
            ("alize", "al"),
            ("icate", "ic"),
            ("iciti", "ic"),
            ("ical", "ic"),
            ("ful", ""),
            ("ness", ""),
            ("ative", ""),
        ];
        let Some(&(suffix, with)) = RULES
            .iter()
            .filter(|(s, _)| self.ends(s))
            .max_by_key(|(s, _)| s.len())
        else {
            return;
        };
        let at = self.start_of(suffix);
        let region = if suffix == "ative" { self.r2 } else { self.r1 };
        if at >= region {
            self.replace(suffix, with);
        }
    }

    fn step_4(&mut self) {
        let Some(suffix) = self.longest(&[
            "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ism",
            "ate", "iti", "ous", "ive", "ize", "ion",
        ]) else {
            return;
        };
        let at = self.start_of(suffix);
        if at < self.r2 {
            return;
        }
        if suffix == "ion" && !(at > 0 && matches!(self.b[at - 1], b's' | b't')) {
            return;
        }
        self.b.truncate(at);
    }

    fn step_5(&mut self) {
        let n = self.b.len();
        if self.ends("e") {
            let at = n - 1;
            if at >= self.r2 || (at >= self.r1 && !self.short_syllable_at(at)) {
                self.b.pop();
            }
        } else if self.ends("ll") && n > self.r2 {
            self.b.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn stop_words_are_sorted_and_found() {
        assert!(STOP_WORDS.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(is_stop_word("the"));
        assert!(is_stop_word("im"));
        assert!(!is_stop_word("get"));
        assert!(!is_stop_word("list"));
    }

    #[test]
    fn stems_match_the_snowball_reference() {
        // Pairs from the Snowball English sample vocabulary and the algorithm's own examples.
        let cases = [
            ("consign", "consign"),
            ("consigned", "consign"),
            ("consigning", "consign"),
            ("consignment", "consign"),
            ("consistency", "consist"),
            ("consistently", "consist"),
            ("generate", "generat"),
            ("generously", "generous"),
            ("knightly", "knight"),
            ("caresses", "caress"),
            ("flies", "fli"),
            ("dies", "die"),
            ("ties", "tie"),
            ("cries", "cri"),
            ("gas", "gas"),
            ("gaps", "gap"),
            ("kiwis", "kiwi"),
            ("this", "this"),
            ("mules", "mule"),
            ("denied", "deni"),
            ("agreed", "agre"),
            ("owned", "own"),
            ("humbled", "humbl"),
            ("sized", "size"),
            ("meeting", "meet"),
            ("stating", "state"),
            ("itemization", "item"),
            ("sensational", "sensat"),
            ("traditional", "tradit"),
            ("reference", "refer"),
            ("colonizer", "colon"),
            ("plotted", "plot"),
            ("hopping", "hop"),
            ("hoping", "hope"),
            ("luxuriated", "luxuri"),
            ("happy", "happi"),
            ("cry", "cri"),
            ("by", "by"),
            ("say", "say"),
            ("skies", "sky"),
            ("news", "news"),
            ("proceed", "proceed"),
            ("running", "run"),
            ("searching", "search"),
            ("files", "file"),
            ("file", "file"),
            ("recipes", "recip"),
            ("recipe", "recip"),
            ("creates", "creat"),
            ("creating", "creat"),
            ("create", "creat"),
            ("weather", "weather"),
            ("fully", "fulli"),
            ("controlled", "control"),
            ("rolling", "roll"),
            ("communication", "communic"),
            ("yelling", "yell"),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(word, want)| stem(word) != *want)
            .map(|(word, want)| format!("{word}: want {want}, got {}", stem(word)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn non_ascii_short_and_alphanumeric_tokens_pass_unchanged() {
        for token in ["s3", "files2", "天气", "äpfel", "go", "x", "ΟΔΟΣ"] {
            assert_eq!(stem(token), token);
        }
    }

    proptest! {
        #[test]
        fn stemming_never_panics_or_grows_much(word in "[a-z]{0,20}") {
            let stemmed = stem(&word);
            prop_assert!(!stemmed.is_empty() || word.is_empty());
            prop_assert!(stemmed.len() <= word.len() + 1, "{} -> {}", word, stemmed);
        }
    }
}
