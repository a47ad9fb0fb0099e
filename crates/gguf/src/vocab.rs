//! Builds a deterministic byte-level BPE vocabulary (GPT-2 style) of any size
//! for generated models: three ChatML control tokens, all 256 byte tokens (so
//! any text tokenizes), then merged tokens learned from a small built-in
//! English text and, for large vocabularies, synthetic letter extensions.
//! Every merge "a b" has `a`, `b` and `ab` in the vocabulary, and no token
//! text appears twice (llama.cpp aborts the process on duplicates).

use std::collections::{BTreeMap, HashSet};

/// Token ids of the control tokens, fixed for every generated vocabulary.
pub(crate) const ENDOFTEXT_ID: u32 = 0;
pub(crate) const IM_START_ID: u32 = 1;
pub(crate) const IM_END_ID: u32 = 2;

const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// llama.cpp's token type values (`llama_token_type`).
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;

/// The smallest vocabulary: the control tokens plus one token per byte.
pub(crate) const MIN_VOCAB: usize = SPECIALS.len() + 256;

/// A tokenizer as GGUF stores it.
#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    pub(crate) tokens: Vec<String>,
    pub(crate) token_types: Vec<i32>,
    pub(crate) scores: Vec<f32>,
    pub(crate) merges: Vec<String>,
}

/// Original text written for this crate; its only job is to make the learned
/// merges look like English (" the", "ing", ...), so prompts tokenize to
/// realistic lengths.
const CORPUS: &str = "\
The quick answer is often the one that arrives first, but the best answer is the one \
that is right. When a small model runs on the device in your hand and a large model \
waits in the cloud, you have to decide which one to ask, and when to stop waiting. \
This is a story about time, about deadlines, and about the things we learn when we \
measure them with care. A request comes in. It has a question, a few messages of \
context, and a promise that the user will not wait forever. The local engine starts \
at once: it reads the prompt, it thinks for a moment, and then it writes one token \
after another. The cloud engine opens a connection, sends the same messages, and \
listens for the first words to come back over the network. Sometimes the network is \
fast and the large model answers well before the small one has finished. Sometimes \
the network is slow, or down, and the local answer is the only one there is. In \
every case the caller wants an answer by the deadline, and wants to know what \
happened: which engine won, how long each one took, how many tokens were read and \
written, and whether anything was left running in the background. We think that \
good tools should be honest about these numbers. They should not hide the time \
spent loading a model, or the time spent waiting for a slow server, and they should \
never claim a result they did not measure. When something goes wrong, the error \
should say what went wrong and where, so that the person reading it can fix the \
problem without guessing. People who build things for phones, for small boards, \
for laptops and for large machines with many processors all have the same \
questions. How fast is it here? How much memory does it need? What happens when \
two requests arrive at the same time? What happens when the user gives up and \
cancels? These questions have answers, and the answers come from running the \
program on the hardware that matters, many times, and reading the results with \
patience. Then we write down what we found, with the date and the machine, and we \
keep it next to the code so that the next person can check it again. There is \
nothing magic in any of this. There is only the work of making each part small, \
clear and tested, and of putting the parts together in a way that a reader can \
follow from the first line to the last. Because the world is full of surprises, \
we also test what happens when the input is wrong: an empty file, a file that ends \
too soon, a header that claims more entries than any file could hold, or a list of \
words in which the same word appears twice. Each of these should produce a clear \
message, and the program should keep running. That is what we mean by quality, \
and that is why we take the time to check it.";

/// The GPT-2 byte-to-unicode table: printable bytes map to themselves, the
/// rest to code points from U+0100 up, so every byte is one visible char.
pub(crate) fn byte_to_unicode() -> [char; 256] {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let cp = if printable(b) {
            b
        } else {
            next += 1;
            next - 1
        };
        table[b as usize] = char::from_u32(cp).expect("code points below 0x200 are valid chars");
    }
    table
}

/// Encodes text the way a byte-level tokenizer sees it.
fn encode(table: &[char; 256], text: &str) -> Vec<String> {
    text.bytes()
        .map(|b| table[b as usize].to_string())
        .collect()
}

/// Builds a vocabulary of exactly `size` tokens (`size >= MIN_VOCAB`).
pub(crate) fn build(size: usize) -> Vocab {
    assert!(
        size >= MIN_VOCAB,
        "vocabulary must hold the specials and 256 bytes"
    );
    let table = byte_to_unicode();
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    tokens.extend(table.iter().map(|c| c.to_string()));
    let mut known: HashSet<String> = tokens.iter().cloned().collect();
    let mut merges = Vec::new();

    learn_from_corpus(&table, size, &mut tokens, &mut known, &mut merges);
    extend_synthetically(size, &mut tokens, &mut known, &mut merges);
    debug_assert_eq!(tokens.len(), size);

    let token_types = (0..tokens.len())
        .map(|i| {
            if i < SPECIALS.len() {
                TOKEN_CONTROL
            } else {
                TOKEN_NORMAL
            }
        })
        .collect();
    let scores = (0..tokens.len())
        .map(|i| if i < SPECIALS.len() { 0.0 } else { -(i as f32) })
        .collect();
    Vocab {
        tokens,
        token_types,
        scores,
        merges,
    }
}

/// Classic BPE training over the built-in text: repeatedly merge the most
/// frequent adjacent pair (ties broken by the pair's text, so the result is
/// deterministic) until the vocabulary is full or no pair occurs twice.
fn learn_from_corpus(
    table: &[char; 256],
    size: usize,
    tokens: &mut Vec<String>,
    known: &mut HashSet<String>,
    merges: &mut Vec<String>,
) {
    // Words as a GPT-2 pre-tokenizer would cut them: an optional leading
    // space followed by letters.
    let mut words: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut current = String::new();
    for ch in CORPUS.chars() {
        if ch.is_ascii_alphabetic() {
            current.push(ch);
        } else {
            if current.trim_start().len() > 1 {
                *words.entry(encode(table, &current)).or_default() += 1;
            }
            current.clear();
            if ch == ' ' {
                current.push(' ');
            }
        }
    }
    if current.trim_start().len() > 1 {
        *words.entry(encode(table, &current)).or_default() += 1;
    }

    while tokens.len() < size {
        let mut pairs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for (word, count) in &words {
            for w in word.windows(2) {
                *pairs.entry((&w[0], &w[1])).or_default() += count;
            }
        }
        // First maximum in key order wins ties.
        let Some(((a, b), count)) = pairs.iter().fold(
            None,
            |best: Option<(&(&str, &str), &u64)>, (k, v)| match best {
                Some((_, bv)) if bv >= v => best,
                _ => Some((k, v)),
            },
        ) else {
            break;
        };
        if *count < 2 {
            break;
        }
        let (a, b) = (a.to_string(), b.to_string());
        let merged = format!("{a}{b}");
        merges.push(format!("{a} {b}"));
        if known.insert(merged.clone()) {
            tokens.push(merged.clone());
        }
        words = words
            .into_iter()
            .map(|(word, count)| (apply_merge(word, &a, &b, &merged), count))
            .fold(BTreeMap::new(), |mut acc, (word, count)| {
                *acc.entry(word).or_default() += count;
                acc
            });
    }
}

fn apply_merge(word: Vec<String>, a: &str, b: &str, merged: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(word.len());
    let mut i = 0;
    while i < word.len() {
        if i + 1 < word.len() && word[i] == a && word[i + 1] == b {
            out.push(merged.to_string());
            i += 2;
        } else {
            out.push(word[i].clone());
            i += 1;
        }
    }
    out
}

/// Fills the rest of a large vocabulary with word-like tokens: every
/// letters-only token (optionally after the space marker) extended by one
/// more letter, in rounds, most frequent letters first.
fn extend_synthetically(
    size: usize,
    tokens: &mut Vec<String>,
    known: &mut HashSet<String>,
    merges: &mut Vec<String>,
) {
    const LETTERS: &str = "etaoinshrdlcumwfgypbvkjxqz";
    let space = byte_to_unicode()[b' ' as usize];
    let wordlike = |t: &str| {
        let rest = t.strip_prefix(space).unwrap_or(t);
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphabetic())
    };
    while tokens.len() < size {
        // Each round extends a snapshot, so it always adds new, longer tokens
        // (single letters are always word-like): the loop terminates.
        let round: Vec<String> = tokens.iter().filter(|t| wordlike(t)).cloned().collect();
        for t in &round {
            for c in LETTERS.chars() {
                if tokens.len() == size {
                    return;
                }
                let merged = format!("{t}{c}");
                if known.insert(merged.clone()) {
                    merges.push(format!("{t} {c}"));
                    tokens.push(merged);
                }
            }
        }
    }
}

/// The standard ChatML template; llama.cpp's built-in matcher recognises it
/// by its `<|im_start|>` marker.
pub(crate) const CHATML_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[cfg(test)]
mod tests {
    use super::*;

    fn check_consistent(v: &Vocab) {
        let set: HashSet<&str> = v.tokens.iter().map(String::as_str).collect();
        assert_eq!(set.len(), v.tokens.len(), "duplicate token strings");
        for m in &v.merges {
            let (a, b) = m.split_once(' ').expect("merge has a space");
            assert!(set.contains(a), "merge {m:?}: left missing");
            assert!(set.contains(b), "merge {m:?}: right missing");
            assert!(
                set.contains(format!("{a}{b}").as_str()),
                "merge {m:?}: result missing"
            );
        }
        assert_eq!(v.token_types.len(), v.tokens.len());
        assert_eq!(v.scores.len(), v.tokens.len());
    }

    #[test]
    fn byte_table_is_a_bijection_onto_visible_chars() {
        let t = byte_to_unicode();
        let set: HashSet<char> = t.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[b' ' as usize], '\u{120}');
        assert!(t.iter().all(|c| !c.is_whitespace() && !c.is_control()));
    }

    #[test]
    fn small_vocab_is_consistent_and_learns_english() {
        let v = build(512);
        assert_eq!(v.tokens.len(), 512);
        check_consistent(&v);
        assert!(
            v.tokens.iter().any(|t| t == "\u{120}the"),
            "' the' was not learned"
        );
        assert_eq!(v.tokens[IM_END_ID as usize], "<|im_end|>");
    }

    #[test]
    fn large_vocab_is_consistent() {
        let v = build(49152);
        assert_eq!(v.tokens.len(), 49152);
        check_consistent(&v);
    }

    #[test]
    fn minimal_vocab_has_only_bytes() {
        let v = build(MIN_VOCAB);
        assert!(v.merges.is_empty());
        check_consistent(&v);
    }
}
