//! The built-in prompt compressor ([`KeepRecent`]) and the token estimate
//! it uses. It decides what the cloud lane receives; it must not call any
//! tokenizer or lane (its counts are estimates, reported as such).

use super::callbacks::{Compressed, Compressor};
use crate::request::{ChatMessage, Role};

/// Per-message overhead of chat formatting (role markers, separators), in
/// estimated tokens.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// A tokenizer-free estimate of a text's token count: one token per four
/// characters, rounded up. Close enough for English with BPE vocabularies;
/// reported as `compressor_*` so it is never confused with a real count.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Estimated tokens of a message list, formatting included.
pub fn estimate_messages(messages: &[ChatMessage]) -> u64 {
    messages
        .iter()
        .map(|m| MESSAGE_OVERHEAD_TOKENS + estimate_tokens(&m.content))
        .sum()
}

/// Keeps every system message and the newest turns that fit a token budget.
///
/// Rules, in order: system messages always stay (they frame the answer);
/// then turns are taken newest first while the estimate stays within
/// `max_tokens`; the newest turn (the question) always stays, even alone
/// over budget; a kept history never starts with an assistant turn (a
/// reply without its question confuses models). Order is preserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepRecent {
    /// Budget in estimated tokens, formatting included.
    pub max_tokens: u64,
}

impl KeepRecent {
    /// A compressor with the given budget.
    pub fn new(max_tokens: u64) -> Self {
        Self { max_tokens }
    }
}

impl Compressor for KeepRecent {
    fn compress(&self, messages: &[ChatMessage]) -> Compressed {
        let before = estimate_messages(messages);
        let cost = |m: &ChatMessage| MESSAGE_OVERHEAD_TOKENS + estimate_tokens(&m.content);
        let mut used: u64 = messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(cost)
            .sum();
        let turns: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i].role != Role::System)
            .collect();
        let mut keep = vec![false; messages.len()];
        for (n, &i) in turns.iter().rev().enumerate() {
            let c = cost(&messages[i]);
            if n > 0 && used + c > self.max_tokens {
                break;
            }
            used += c;
            keep[i] = true;
        }
        // Drop assistant turns left at the head of the kept history, unless
        // that would leave no turn at all.
        let kept_turns: Vec<usize> = turns.iter().copied().filter(|&i| keep[i]).collect();
        for &i in kept_turns.iter().take(kept_turns.len().saturating_sub(1)) {
            if messages[i].role == Role::Assistant {
                keep[i] = false;
            } else {
                break;
            }
        }
        let out: Vec<ChatMessage> = messages
            .iter()
            .enumerate()
            .filter(|(i, m)| m.role == Role::System || keep[*i])
            .map(|(_, m)| m.clone())
            .collect();
        let after = estimate_messages(&out);
        Compressed {
            messages: out,
            tokens_before: Some(before),
            tokens_after: Some(after),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convo() -> Vec<ChatMessage> {
        vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user("a".repeat(400)),
            ChatMessage::assistant("b".repeat(400)),
            ChatMessage::user("c".repeat(40)),
            ChatMessage::assistant("d".repeat(40)),
            ChatMessage::user("Last question?"),
        ]
    }

    #[test]
    fn keeps_system_and_newest_turns_within_budget() {
        let c = KeepRecent::new(60).compress(&convo());
        let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
        assert_eq!(c.messages[1].content, "c".repeat(40));
        assert!(c.tokens_after.unwrap() <= 60);
        assert_eq!(c.tokens_before, Some(estimate_messages(&convo())));
        assert!(c.tokens_before > c.tokens_after);
    }

    #[test]
    fn never_starts_history_with_an_assistant_turn() {
        // System (8) + last question (8) + the assistant reply before it
        // (14) fit in 30; the reply must still go, its question did not fit.
        let c = KeepRecent::new(30).compress(&convo());
        assert_eq!(c.messages, [convo()[0].clone(), convo()[5].clone()]);
    }

    #[test]
    fn keeps_the_question_even_over_budget() {
        let msgs = vec![ChatMessage::user("x".repeat(1000))];
        let c = KeepRecent::new(1).compress(&msgs);
        assert_eq!(c.messages, msgs);
    }

    #[test]
    fn everything_fits_means_nothing_changes() {
        let c = KeepRecent::new(10_000).compress(&convo());
        assert_eq!(c.messages, convo());
        assert_eq!(c.tokens_before, c.tokens_after);
    }
}
