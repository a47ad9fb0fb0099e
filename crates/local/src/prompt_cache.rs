//! The prompt cache (llama-server's `--cache-ram`): the KV cells of
//! conversations a sequence moved on from, kept in host memory, so that a
//! later request sharing more of its prompt with one of them than with
//! what its own sequence holds starts from there instead of decoding that
//! prefix again.
//!
//! A sequence keeps its last conversation in its cells and reuses the
//! prefix a new prompt shares with it (`batch::Engine::reuse_prefix`).
//! Without this cache, a lane (or a pool's instance) that alternates
//! between conversations (two agents, two system prompts, a client
//! sending the same few prompts) decodes each of them again every time
//! it comes back. With it:
//!
//! ```text
//!  job starts on sequence s:  own = prefix the prompt shares with s's cells
//!    s would lose >= WORTH tokens?  ->  its cells (llama_state_seq_get)
//!                                       + their tokens go into the cache
//!    an entry shares >= own + WORTH? -> it leaves the cache, its cells are
//!                                       restored into s (llama_state_seq_set)
//!    then the usual prefix reuse on what s holds
//! ```
//!
//! An entry moves into the sequence that takes it (it is not kept twice),
//! and is stored again when that sequence moves on. Entries are dropped
//! least recently used first to stay within the byte budget; an entry
//! whose tokens begin another's is dropped when the longer one is stored
//! (it adds nothing). The restored cells are the very bytes the earlier
//! job computed at the same positions, so a restored prefix decodes what
//! the sequence's own cached prefix would have (prefix reuse's own
//! caveat applies: the prompt's remaining tokens, decoded after a cached
//! prefix, take other kernels than a whole prompt pass; docs/pool.md).
//!
//! The state type is a parameter so the bookkeeping is tested without a
//! model; the engine stores llama.cpp's [`SeqState`].

use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::SeqState;

/// Tokens a save or a restore must be worth: a sequence saves its cells
/// only when a job would drop at least this many of them, and an entry is
/// restored only when it gives at least this many more prompt tokens than
/// the sequence's own cells (copying the cells costs far less than
/// decoding them, but not nothing: on a 2-core VM a save of a hundred
/// tokens of SmolLM2 took 1.1 ms, a restore 0.3 ms).
pub(super) const WORTH: usize = 8;

/// What an entry's state weighs.
pub(super) trait Weighed {
    fn bytes(&self) -> usize;
}

impl Weighed for SeqState {
    fn bytes(&self) -> usize {
        self.byte_len()
    }
}

/// The tokens of `prompt` that cells holding `held` can give: those the
/// two share from their start, all but the prompt's last token at most
/// (it is decoded for fresh logits anyway).
pub(super) fn reusable(held: &[LlamaToken], prompt: &[LlamaToken]) -> usize {
    held.iter()
        .zip(prompt)
        .take_while(|(x, y)| x == y)
        .count()
        .min(prompt.len().saturating_sub(1))
}

struct Stored<S> {
    tokens: Vec<LlamaToken>,
    state: S,
    used_at: u64,
}

/// Saved conversations within a byte budget.
pub(super) struct PromptCache<S> {
    budget: usize,
    used: usize,
    clock: u64,
    entries: Vec<Stored<S>>,
}

impl<S: Weighed> PromptCache<S> {
    /// A cache of at most `budget` bytes; `None` for 0 (no cache).
    pub(super) fn new(budget: usize) -> Option<Self> {
        (budget > 0).then(|| Self {
            budget,
            used: 0,
            clock: 0,
            entries: Vec::new(),
        })
    }

    /// Whether a sequence holding `held` tokens, of which a job keeps
    /// `kept`, should save them first: enough would be lost, and no entry
    /// already holds them (an entry whose tokens begin with them).
    pub(super) fn wants(&self, held: &[LlamaToken], kept: usize) -> bool {
        held.len() >= kept + WORTH
            && !self
                .entries
                .iter()
                .any(|e| e.tokens.len() >= held.len() && e.tokens.starts_with(held))
    }

    /// Stores a conversation's cells. Entries it makes useless (their
    /// tokens begin its own) go; then the least recently used ones, until
    /// it fits. One larger than the whole budget is not stored.
    pub(super) fn insert(&mut self, tokens: Vec<LlamaToken>, state: S) {
        let bytes = state.bytes();
        if bytes > self.budget {
            return;
        }
        let mut used = self.used;
        self.entries.retain(|e| {
            let covered = tokens.starts_with(&e.tokens);
            if covered {
                used -= e.state.bytes();
            }
            !covered
        });
        self.used = used;
        while self.used + bytes > self.budget {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used_at)
                .map(|(i, _)| i)
            else {
                break;
            };
            let gone = self.entries.swap_remove(oldest);
            self.used -= gone.state.bytes();
        }
        self.clock += 1;
        self.used += bytes;
        self.entries.push(Stored {
            tokens,
            state,
            used_at: self.clock,
        });
    }

    /// Takes out the entry sharing the most of `prompt` (counting at most
    /// all but its last token: that one is decoded for fresh logits
    /// anyway), when it shares at least `own + WORTH`; `own` is what the
    /// sequence's own cells give. Ties go to the most recently stored.
    pub(super) fn take_best(
        &mut self,
        prompt: &[LlamaToken],
        own: usize,
    ) -> Option<(Vec<LlamaToken>, S)> {
        let (best, shared) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, reusable(&e.tokens, prompt)))
            .max_by_key(|&(i, shared)| (shared, self.entries[i].used_at))?;
        if shared < own + WORTH {
            return None;
        }
        let taken = self.entries.swap_remove(best);
        self.used -= taken.state.bytes();
        Some((taken.tokens, taken.state))
    }

    /// Drops every entry (the context's cells can no longer be trusted).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.used = 0;
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in state: only its weight matters to the cache.
    #[derive(Debug, PartialEq)]
    struct Fake(usize);

    impl Weighed for Fake {
        fn bytes(&self) -> usize {
            self.0
        }
    }

    fn toks(range: std::ops::Range<i32>) -> Vec<LlamaToken> {
        range.map(LlamaToken).collect()
    }

    #[test]
    fn no_budget_is_no_cache() {
        assert!(PromptCache::<Fake>::new(0).is_none());
    }

    #[test]
    fn the_entry_sharing_most_is_taken_out_when_it_gives_enough() {
        let mut cache = PromptCache::new(1000).unwrap();
        cache.insert(toks(0..40), Fake(10));
        cache.insert(toks(0..20), Fake(10));
        // A prompt of 0..30 then other tokens: the first entry shares 30.
        let mut prompt = toks(0..30);
        prompt.extend(toks(100..110));
        // Not enough more than the sequence's own 25 tokens.
        assert!(cache.take_best(&prompt, 25).is_none());
        let (tokens, state) = cache.take_best(&prompt, 5).unwrap();
        assert_eq!(tokens, toks(0..40));
        assert_eq!(state, Fake(10));
        assert_eq!((cache.len(), cache.bytes()), (1, 10));
        // The same prompt again: the entry moved out; the other gives 20.
        assert_eq!(cache.take_best(&prompt, 5).unwrap().0, toks(0..20));
        assert!(cache.take_best(&prompt, 0).is_none());
    }

    #[test]
    fn the_prompt_s_last_token_is_never_counted_as_shared() {
        let mut cache = PromptCache::new(1000).unwrap();
        cache.insert(toks(0..50), Fake(1));
        // Shares all 9 tokens, of which 8 count: just worth it from 0.
        assert!(cache.take_best(&toks(0..9), 1).is_none());
        assert!(cache.take_best(&toks(0..9), 0).is_some());
    }

    #[test]
    fn the_least_recently_stored_goes_first_and_an_oversized_state_is_not_stored() {
        let mut cache = PromptCache::new(100).unwrap();
        cache.insert(toks(0..10), Fake(40));
        cache.insert(toks(100..110), Fake(40));
        cache.insert(toks(200..210), Fake(40));
        assert_eq!((cache.len(), cache.bytes()), (2, 80));
        assert!(
            cache.take_best(&toks(0..11), 0).is_none(),
            "the oldest went"
        );
        assert!(cache.take_best(&toks(100..111), 0).is_some());
        cache.insert(toks(300..310), Fake(101));
        assert_eq!((cache.len(), cache.bytes()), (1, 40));
    }

    #[test]
    fn a_longer_conversation_replaces_the_entries_it_begins_with() {
        let mut cache = PromptCache::new(1000).unwrap();
        cache.insert(toks(0..20), Fake(20));
        cache.insert(toks(0..10), Fake(10));
        cache.insert(toks(0..30), Fake(30));
        assert_eq!((cache.len(), cache.bytes()), (1, 30));
    }

    #[test]
    fn a_sequence_saves_only_what_it_would_lose_and_no_entry_holds() {
        let mut cache = PromptCache::<Fake>::new(1000).unwrap();
        let held = toks(0..40);
        assert!(cache.wants(&held, 0));
        assert!(cache.wants(&held, 32));
        assert!(
            !cache.wants(&held, 33),
            "7 tokens lost are not worth a save"
        );
        cache.insert(toks(0..60), Fake(1));
        assert!(!cache.wants(&held, 0), "an entry already holds them");
    }
}
