//! Text analysis: turns document fields and queries into the same stream of index terms.
//!
//! One analyzer serves both sides, so a query token always means what the indexed token
//! means. The pipeline, in order:
//!
//! 1. **Width folding.** Fullwidth ASCII (`ＧｉｔＨｕｂ`, `，`) becomes ASCII; Chinese text
//!    often carries it.
//! 2. **Segmentation.** Characters are word characters (alphanumeric, plus combining marks
//!    so a decomposed `é` stays one word), CJK characters (Han, Hiragana, Katakana, Hangul),
//!    connectors (`_`, `-`, `.`) or separators (everything else). An apostrophe between
//!    two word characters is elided (`user's` -> `users`, `don't` -> `dont`) rather than
//!    splitting off one-letter noise tokens.
//! 3. **Identifier splitting.** A word splits at case boundaries: `getHTTPResponse` ->
//!    `get http response`. A piece that mixes letters and digits is kept whole *and*
//!    split at letter/digit steps (`files2` -> `files2 files 2`, `base64Encode` ->
//!    `base64encode base 64 encode`), so `gpt4` matches `GPT-4` and `files` matches
//!    `files2`, while `s3`/`ec2` stay exact terms. Digits never start a case boundary:
//!    that keeps `A3D` and `a3d` the same tokens.
//! 4. **Compounds.** Words joined by single connectors form a compound; a compound (or a
//!    single word) of two or more pieces also yields its pieces concatenated:
//!    `get_current_time`, `getCurrentTime` and `get-current-time` all yield
//!    `getcurrenttime`, and `GitHub` yields `github`. The concatenation (rather than the
//!    snake_case spelling) is what makes every naming convention meet, and lets the query
//!    `github` find `GitHub`; as a rare term it lifts exact-name matches above docs that
//!    merely share the words. Two connectors in a row (`server__tool`, the qualified-name
//!    separator) end a compound, so `github__create_issue` yields `createissue`, the
//!    compound of the bare tool name.
//! 5. **Case folding.** Unicode lowercase plus the two full case folds that lowercase
//!    misses (`ς` -> `σ`, `ß` -> `ss`), so `ΟΔΟΣ` finds `οδος` and `STRASSE` finds `straße`.
//! 6. **CJK.** A run of CJK characters yields every character (unigram) and every
//!    overlapping pair (bigram): `天气预报` -> `天 气 预 报 天气 气预 预报`. Chinese has no
//!    spaces and no dictionary segmenter is wanted here; bigrams recover most word
//!    boundaries and unigrams keep recall for one-character words. Latin words inside
//!    mixed text (`搜索GitHub仓库`) tokenize as above.
//!
//! 7. **Optional, off by default: stop words and stemming** ([`Analyzer::stop_words`],
//!    [`Analyzer::stemming`]). Applied last, to every token, so a compound is still built
//!    from all its pieces (`get_the_time` -> `getthetime`) and only the emitted tokens
//!    change. English only for now ([`crate::english`]), with a short list of Chinese
//!    function words; with them, a CJK bigram across a particle or pronoun (`的文` in
//!    `新的文件`) is not emitted either, since it spans a word boundary. Off in the
//!    analyzer's own default; the catalog turns stop words and stemming on, as `mcpgw eval`
//!    showed they help on the labelled sets.
//!
//! Rejected for now: NFC normalisation (a precomposed and a decomposed `é` differ) and
//! dictionary segmentation of Thai, Lao, Khmer or Burmese (their runs stay whole words).

use crate::english;

/// Tokenizes `text` with the default [`Analyzer`]: the tokenizer used for both documents
/// and queries by [`crate::Bm25Index::build`].
pub fn tokenize(text: &str) -> Vec<String> {
    Analyzer::default().tokenize(text)
}

/// How text becomes terms. A struct of options rather than flags on functions, so stemming
/// and stop words can be added as fields without changing any signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analyzer {
    /// Emit the concatenation of a compound's pieces (`get_current_time` -> `getcurrenttime`).
    pub compounds: bool,
    /// Emit overlapping CJK bigrams in addition to unigrams.
    pub cjk_bigrams: bool,
    /// Tokens longer than this many bytes are dropped (hashes, base64 blobs, minified
    /// code); they never help a search and would only grow the vocabulary.
    pub max_token_bytes: usize,
    /// Drop this language's stop words (`the`, `for`, `my`, ...). Off by default.
    pub stop_words: Option<Language>,
    /// Reduce tokens to their stem in this language (`creating` -> `creat`). Off by default.
    pub stemming: Option<Language>,
}

/// A language with stop words and a stemmer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    /// Porter2 (Snowball English) stems and a short list of function words.
    English,
}

impl Default for Analyzer {
    fn default() -> Self {
        Analyzer {
            compounds: true,
            cjk_bigrams: true,
            max_token_bytes: 128,
            stop_words: None,
            stemming: None,
        }
    }
}

impl Analyzer {
    /// Tokens of `text`, in text order: within a compound the pieces come first, then the
    /// concatenation; within a CJK run the unigrams, then the bigrams.
    pub fn tokenize(&self, text: &str) -> Vec<String> {
        let mut tokens = Vec::new();
        self.for_each_token(text, |token| tokens.push(token.to_owned()));
        tokens
    }

    /// Calls `emit` with every token of `text`, in the order of [`Analyzer::tokenize`],
    /// without allocating a `String` per token. Tokens are never empty.
    pub fn for_each_token(&self, text: &str, emit: impl FnMut(&str)) {
        let mut scanner = Scanner {
            analyzer: self,
            emit,
            word: Vec::new(),
            cjk: Vec::new(),
            compound: String::new(),
            compound_pieces: 0,
            piece: String::new(),
        };
        // Each character is classified once; the loop looks one character ahead because
        // a connector or apostrophe joins only when a word character follows.
        let mut chars = text.chars().map(|c| {
            let c = fold_width(c);
            (c, classify(c))
        });
        let mut next = chars.next();
        while let Some((c, class)) = next {
            next = chars.next();
            let next_is_word = matches!(next, Some((_, Class::Word)));
            match class {
                Class::Word => {
                    scanner.end_cjk();
                    scanner.word.push(c);
                }
                Class::Cjk => {
                    scanner.end_word();
                    scanner.end_compound();
                    scanner.cjk.push(c);
                }
                Class::Apostrophe if !scanner.word.is_empty() && next_is_word => {}
                Class::Connector if !scanner.word.is_empty() && next_is_word => {
                    scanner.end_word();
                }
                Class::Apostrophe | Class::Connector | Class::Separator => {
                    scanner.end_word();
                    scanner.end_compound();
                    scanner.end_cjk();
                }
            }
        }
        scanner.end_word();
        scanner.end_compound();
        scanner.end_cjk();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Word,
    Cjk,
    Connector,
    Apostrophe,
    Separator,
}

fn classify(c: char) -> Class {
    if c.is_ascii() {
        return match c {
            _ if c.is_ascii_alphanumeric() => Class::Word,
            '_' | '-' | '.' => Class::Connector,
            '\'' => Class::Apostrophe,
            _ => Class::Separator,
        };
    }
    // CJK first: Han and kana are alphabetic too.
    if is_cjk(c) {
        Class::Cjk
    } else if c.is_alphanumeric() || is_combining_mark(c) {
        Class::Word
    } else if c == '\u{2019}' {
        Class::Apostrophe
    } else {
        Class::Separator
    }
}

pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'     // Hangul Jamo
        | '\u{2E80}'..='\u{2FDF}'   // CJK radicals, Kangxi radicals
        | '\u{3005}'..='\u{3007}'   // 々 〆 〇
        | '\u{3040}'..='\u{30FA}'   // Hiragana, Katakana (30FB ・ is punctuation)
        | '\u{30FC}'..='\u{30FF}'   // ー and kana iteration marks
        | '\u{3130}'..='\u{318F}'   // Hangul compatibility Jamo
        | '\u{31F0}'..='\u{31FF}'   // Katakana phonetic extensions
        | '\u{3400}'..='\u{4DBF}'   // CJK extension A
        | '\u{4E00}'..='\u{9FFF}'   // CJK unified ideographs
        | '\u{A960}'..='\u{A97F}'   // Hangul Jamo extended A
        | '\u{AC00}'..='\u{D7FF}'   // Hangul syllables, Jamo extended B
        | '\u{F900}'..='\u{FAFF}'   // CJK compatibility ideographs
        | '\u{FF66}'..='\u{FF9F}'   // halfwidth Katakana
        | '\u{FFA0}'..='\u{FFDC}'   // halfwidth Hangul
        | '\u{20000}'..='\u{3FFFF}' // CJK extensions B.. (planes 2 and 3)
    )
}

/// Combining marks that continue a word. Not the full `Mn` category (std does not expose
/// it), but the blocks that occur in Latin, Greek and Cyrillic text.
fn is_combining_mark(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036F}'
        | '\u{1AB0}'..='\u{1AFF}'
        | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}'
        | '\u{FE20}'..='\u{FE2F}'
    )
}

/// Fullwidth ASCII variants (U+FF01..=U+FF5E) and the ideographic space to ASCII.
fn fold_width(c: char) -> char {
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        '\u{3000}' => ' ',
        _ => c,
    }
}

/// Appends the case fold of `c` to `out`.
fn fold_case(c: char, out: &mut String) {
    match c {
        'ς' => out.push('σ'),
        'ß' | 'ẞ' => out.push_str("ss"),
        _ if c.is_ascii() => out.push(c.to_ascii_lowercase()),
        _ => out.extend(c.to_lowercase()),
    }
}

/// Streaming state of one `for_each_token` call; buffers are reused across words.
struct Scanner<'a, F> {
    analyzer: &'a Analyzer,
    emit: F,
    /// The current word, original case, apostrophes elided.
    word: Vec<char>,
    /// The current CJK run.
    cjk: Vec<char>,
    /// Case-folded pieces of the current compound, concatenated.
    compound: String,
    compound_pieces: usize,
    /// Scratch for one case-folded token.
    piece: String,
}

impl<F: FnMut(&str)> Scanner<'_, F> {
    fn emit(&mut self, token: &str) {
        if token.is_empty() || token.len() > self.analyzer.max_token_bytes {
            return;
        }
        if self.analyzer.stop_words == Some(Language::English)
            && (english::is_stop_word(token) || is_cjk_function_word(token))
        {
            return;
        }
        match self.analyzer.stemming {
            Some(Language::English) => (self.emit)(&english::stem(token)),
            None => (self.emit)(token),
        }
    }

    /// Splits the current word into pieces at case boundaries and emits them.
    fn end_word(&mut self) {
        if self.word.is_empty() {
            return;
        }
        let word = std::mem::take(&mut self.word);
        let mut start = 0;
        for i in 1..=word.len() {
            if i == word.len() || is_case_boundary(&word, i) {
                self.emit_piece(&word[start..i]);
                start = i;
            }
        }
        self.word = word;
        self.word.clear();
    }

    fn emit_piece(&mut self, piece: &[char]) {
        let mut folded = std::mem::take(&mut self.piece);
        folded.clear();
        for &c in piece {
            fold_case(c, &mut folded);
        }
        self.emit(&folded);
        if piece.iter().any(|c| c.is_numeric()) && !piece.iter().all(|c| c.is_numeric()) {
            // Letter and digit runs of a mixed piece. Splitting the folded text is safe:
            // folding never turns a letter into a digit or back.
            let mut run_start = 0;
            let mut run_numeric = None;
            for (at, c) in folded.char_indices() {
                let numeric = c.is_numeric();
                if run_numeric.is_some_and(|n| n != numeric) {
                    let run = &folded[run_start..at];
                    self.emit(run);
                    run_start = at;
                }
                run_numeric = Some(numeric);
            }
            let run = &folded[run_start..];
            self.emit(run);
        }
        if self.analyzer.compounds {
            self.compound.push_str(&folded);
            self.compound_pieces += 1;
        }
        self.piece = folded;
    }

    fn end_compound(&mut self) {
        if self.compound_pieces > 1 {
            let compound = std::mem::take(&mut self.compound);
            self.emit(&compound);
            self.compound = compound;
        }
        self.compound.clear();
        self.compound_pieces = 0;
    }

    fn end_cjk(&mut self) {
        if self.cjk.is_empty() {
            return;
        }
        let run = std::mem::take(&mut self.cjk);
        let mut gram = std::mem::take(&mut self.piece);
        for &c in &run {
            gram.clear();
            gram.push(c);
            self.emit(&gram);
        }
        if self.analyzer.cjk_bigrams {
            let stop_words = self.analyzer.stop_words == Some(Language::English);
            for pair in run.windows(2) {
                if stop_words && pair.iter().any(|&c| is_cjk_particle(c)) {
                    continue;
                }
                gram.clear();
                gram.extend(pair);
                self.emit(&gram);
            }
        }
        self.piece = gram;
        self.cjk = run;
        self.cjk.clear();
    }
}

/// Chinese function characters and words that occur in almost every request ("我需要你帮我
/// ...的...") and say nothing about the tool wanted. Only these exact unigrams and bigrams
/// are dropped: `上传` keeps its bigram even though `上` alone is dropped. Applied together with
/// the English stop words, since requests mix both.
fn is_cjk_function_word(token: &str) -> bool {
    const WORDS: &[&str] = &[
        "一", "一下", "一个", "下", "个", "么", "也", "了", "些", "你", "你们", "吗", "吧", "呢",
        "和", "在", "她", "如果", "它", "我", "我们", "我的", "或", "或者", "把", "是", "然后",
        "的", "给", "要", "这", "这个", "这些", "那", "那个", "那些", "都", "需", "需要", "帮",
        "帮我", "请", "请帮", "就", "就是", "想", "想要", "可以", "能", "会", "还", "再", "并",
        "将", "被", "让", "对", "为", "与", "及", "以", "以及", "之", "后", "之后", "他", "们",
        "啊", "哦", "呀", "着", "过", "很", "已", "已经", "所", "所有", "该", "其", "此", "希望",
        "有", "中", "里", "上",
    ];
    token.chars().count() <= 2 && token.chars().all(is_cjk) && WORDS.contains(&token)
}

/// Particles and pronouns that are one word on their own: a bigram across one (`的文` in
/// `新的文件`, `我在` in `我在桌面`) spans a word boundary and is noise that matches other
/// texts' noise. Applied with stop words; the characters stay as unigrams where the stop
/// list keeps them. Measured on ultratool-zh in docs/retrieval.md (round seven).
fn is_cjk_particle(c: char) -> bool {
    matches!(c, '的' | '了' | '我' | '你' | '吗' | '呢' | '吧' | '啊')
}

/// Whether a new piece starts at `word[i]`: `getHttp` (lower -> upper) or `HTTPResponse`
/// (the last capital of an acronym starts the next word). Digits are no boundary in
/// either direction: `utf8`, `s3`, `base64Encode` stay one piece, which `emit_piece` then
/// splits at its letter/digit steps. A digit -> upper boundary was rejected because it
/// made `A3D` and `a3d` tokenize differently.
fn is_case_boundary(word: &[char], i: usize) -> bool {
    let (prev, cur) = (word[i - 1], word[i]);
    if !cur.is_uppercase() {
        return false;
    }
    prev.is_lowercase()
        || (prev.is_uppercase() && word.get(i + 1).is_some_and(|next| next.is_lowercase()))
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    fn check(input: &str, expect: Expect) {
        expect.assert_eq(&tokenize(input).join(" "));
    }

    #[test]
    fn splits_camel_and_pascal_case() {
        check(
            "getCurrentTime",
            expect![["get current time getcurrenttime"]],
        );
        check("ListFiles", expect![["list files listfiles"]]);
        check("GitHub", expect![["git hub github"]]);
    }

    #[test]
    fn splits_acronyms_at_their_last_capital() {
        check(
            "getHTTPResponse",
            expect![["get http response gethttpresponse"]],
        );
        check("HTTPServer", expect![["http server httpserver"]]);
        check("parseJSON", expect![["parse json parsejson"]]);
        check("URL", expect![["url"]]);
        // The known cost of the acronym rule: a two-capital brand splits oddly, and the
        // compound is what still matches a query for `oauth`.
        check("OAuth", expect![["o auth oauth"]]);
    }

    #[test]
    fn snake_kebab_and_dotted_names_share_one_compound() {
        check(
            "get_current_time",
            expect![["get current time getcurrenttime"]],
        );
        check(
            "get-current-time",
            expect![["get current time getcurrenttime"]],
        );
        check("os.path.join", expect![["os path join ospathjoin"]]);
        check(
            "get_HTTPResponse",
            expect![["get http response gethttpresponse"]],
        );
    }

    #[test]
    fn double_connector_ends_a_compound() {
        check(
            "github__create_issue",
            expect![["github create issue createissue"]],
        );
        check("a--b", expect![["a b"]]);
    }

    #[test]
    fn digits_stay_attached_and_are_also_split_off() {
        check("list-files2", expect![["list files2 files 2 listfiles2"]]);
        check("s3", expect![["s3 s 3"]]);
        check("GPT-4", expect![["gpt 4 gpt4"]]);
        check("gpt4", expect![["gpt4 gpt 4"]]);
        check("base64Encode", expect![["base64encode base 64 encode"]]);
        check("HTTP2Server", expect![["http2server http 2 server"]]);
        check("2024", expect![["2024"]]);
        check("v1.2.3", expect![["v1 v 1 2 3 v123"]]);
    }

    #[test]
    fn punctuation_separates_and_is_dropped() {
        check("Hello, world!", expect![["hello world"]]);
        check(
            "path/to/file (read-only)",
            expect![["path to file read only readonly"]],
        );
        check("end. Next", expect![["end next"]]);
        check("_private __dunder__ -x", expect![["private dunder x"]]);
        check("a.b", expect![["a b ab"]]);
        check("", expect![[""]]);
        check("  ,;!? ", expect![[""]]);
    }

    #[test]
    fn apostrophes_inside_words_are_elided() {
        check("user's files don't", expect![["users files dont"]]);
        check("it\u{2019}s 'quoted'", expect![["its quoted"]]);
    }

    #[test]
    fn folds_unicode_case() {
        check("ÄPFEL Äpfel äpfel", expect![["äpfel äpfel äpfel"]]);
        check("ΟΔΟΣ οδος", expect![["οδοσ οδοσ"]]);
        check("STRASSE Straße", expect![["strasse strasse"]]);
        check("ПРИВЕТ Мир", expect![["привет мир"]]);
        // A decomposed accent stays inside its word.
        check("Cafe\u{301} menu", expect![["cafe\u{301} menu"]]);
    }

    #[test]
    fn folds_fullwidth_ascii() {
        check("ＧｉｔＨｕｂ，ＡＰＩ", expect![["git hub github api"]]);
    }

    #[test]
    fn cjk_runs_yield_unigrams_and_bigrams() {
        check(
            "查询天气预报",
            expect![["查 询 天 气 预 报 查询 询天 天气 气预 预报"]],
        );
        check("天", expect![["天"]]);
        check("查询，天气。", expect![["查 询 查询 天 气 天气"]]);
        check(
            "東京タワー",
            expect![["東 京 タ ワ ー 東京 京タ タワ ワー"]],
        );
        check("날씨 검색", expect![["날 씨 날씨 검 색 검색"]]);
    }

    #[test]
    fn latin_inside_cjk_tokenizes_normally() {
        check(
            "搜索GitHub仓库",
            expect![["搜 索 搜索 git hub github 仓 库 仓库"]],
        );
        check(
            "用get_weather查询",
            expect![["用 get weather getweather 查 询 查询"]],
        );
    }

    #[test]
    fn drops_overlong_tokens() {
        let blob = "a".repeat(200);
        check(&format!("keep {blob} this"), expect![["keep this"]]);
        let analyzer = Analyzer {
            max_token_bytes: 4,
            ..Analyzer::default()
        };
        assert_eq!(analyzer.tokenize("tiny enormous"), ["tiny"]);
    }

    #[test]
    fn options_switch_off_compounds_and_bigrams() {
        let analyzer = Analyzer {
            compounds: false,
            cjk_bigrams: false,
            ..Analyzer::default()
        };
        assert_eq!(
            analyzer.tokenize("get_current_time 天气"),
            ["get", "current", "time", "天", "气"]
        );
    }

    fn english() -> Analyzer {
        Analyzer {
            stop_words: Some(Language::English),
            stemming: Some(Language::English),
            ..Analyzer::default()
        }
    }

    #[test]
    fn chinese_function_words_are_dropped_with_stop_words() {
        let analyzer = Analyzer {
            stop_words: Some(Language::English),
            ..Analyzer::default()
        };
        let tokens = analyzer.tokenize("我需要上传文件");
        for dropped in ["我", "需", "需要", "上"] {
            assert!(
                !tokens.iter().any(|t| t == dropped),
                "{dropped} in {tokens:?}"
            );
        }
        // A bigram across a particle or pronoun is no word.
        let tokens = analyzer.tokenize("我的文件");
        assert!(
            !tokens.iter().any(|t| t == "我的" || t == "的文"),
            "{tokens:?}"
        );
        assert!(tokens.iter().any(|t| t == "文件"), "{tokens:?}");
        let tokens = analyzer.tokenize("我需要上传文件");
        for kept in ["上传", "文件", "传", "文", "件"] {
            assert!(
                tokens.iter().any(|t| t == kept),
                "{kept} missing from {tokens:?}"
            );
        }
        // Without the option nothing is dropped.
        assert!(
            Analyzer::default()
                .tokenize("我需要")
                .iter()
                .any(|t| t == "需要")
        );
    }

    #[test]
    fn english_options_drop_stop_words_and_stem() {
        assert_eq!(
            english().tokenize("I'm creating the party recipes for my friends"),
            ["creat", "parti", "recip", "friend"]
        );
        // Compounds are built from every piece, stop words included, then stemmed.
        assert_eq!(
            english().tokenize("get_the_files"),
            ["get", "file", "getthefil"]
        );
        // CJK and identifiers with digits pass through.
        assert_eq!(
            english().tokenize("查询 s3"),
            ["查", "询", "查询", "s3", "s", "3"]
        );
    }

    #[test]
    fn each_english_option_works_alone() {
        let stop_only = Analyzer {
            stop_words: Some(Language::English),
            ..Analyzer::default()
        };
        assert_eq!(
            stop_only.tokenize("search for the files"),
            ["search", "files"]
        );
        let stem_only = Analyzer {
            stemming: Some(Language::English),
            ..Analyzer::default()
        };
        assert_eq!(
            stem_only.tokenize("search for the files"),
            ["search", "for", "the", "file"]
        );
    }

    proptest! {
        #[test]
        fn english_analysis_never_panics_and_emits_nonempty_tokens(text in any::<String>()) {
            for token in english().tokenize(&text) {
                prop_assert!(!token.is_empty());
            }
        }

        #[test]
        fn tokenize_never_panics_and_emits_nonempty_bounded_tokens(text in any::<String>()) {
            for token in tokenize(&text) {
                prop_assert!(!token.is_empty());
                prop_assert!(token.len() <= Analyzer::default().max_token_bytes);
            }
        }

        #[test]
        fn every_token_matches_itself_as_a_query(text in "\\PC{0,40}") {
            // A query made of one indexed token must produce that token again; otherwise
            // the term would be unreachable.
            for token in tokenize(&text) {
                let again = tokenize(&token);
                prop_assert!(again.contains(&token), "{token:?} -> {again:?}");
            }
        }

        #[test]
        fn tokenize_is_case_insensitive_for_ascii(text in "[ -~]{0,40}") {
            prop_assert_eq!(tokenize(&text.to_ascii_uppercase()), tokenize(&text.to_ascii_lowercase()));
        }
    }
}
