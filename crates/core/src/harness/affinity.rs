//! Which idle instance of a pool a request prefers: the one whose last
//! request shares the longest beginning with it. That instance's local
//! sequence has that conversation's prompt in its KV cache, so the new
//! prompt decodes only what is new (the local lane reuses a sequence's
//! cached prefix); another instance would decode it all again.
//! llama-server picks a slot the same way (the longest common prefix of
//! the slot's cached prompt). It pays twice over: a conversation's next
//! turn goes back to the instance holding its history, and requests that
//! repeat a prompt (a benchmark, a retry, a fixed instruction with short
//! inputs) skip its prompt pass.
//!
//! This module only remembers and compares conversations; which instances
//! are free and claiming one is the harness's (`api`). The comparison is
//! on the messages, not tokens: the leading messages both have, whole,
//! then the common beginning of the first pair that differs, in bytes.

use crate::request::ChatMessage;
use std::sync::Mutex;

/// The last conversation each instance took.
pub(crate) struct Affinity {
    last: Vec<Mutex<Vec<ChatMessage>>>,
}

impl Affinity {
    pub(crate) fn new(instances: usize) -> Self {
        Self {
            last: (0..instances).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Instance `index` takes a request with these messages.
    pub(crate) fn record(&self, index: usize, messages: &[ChatMessage]) {
        if let Some(last) = self.last.get(index) {
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            last.clear();
            last.extend_from_slice(messages);
        }
    }

    /// Orders `candidates` (instance indices, in the order the harness
    /// would try them) by how much of `messages` each one's last request
    /// shares, most first; equal ones keep their order.
    pub(crate) fn prefer(&self, candidates: &mut [usize], messages: &[ChatMessage]) {
        if candidates.len() < 2 {
            return;
        }
        // Stable: equal shares keep the harness's order.
        candidates.sort_by_cached_key(|&i| {
            std::cmp::Reverse(self.last.get(i).map_or(0, |last| {
                shared_bytes(&last.lock().unwrap_or_else(|p| p.into_inner()), messages)
            }))
        });
    }
}

/// How much two conversations share from their beginning, in bytes of
/// content: the leading messages equal in full, then the common beginning
/// of the first two that differ (same role, no tool calls), as the prompt
/// they render to would share it.
fn shared_bytes(a: &[ChatMessage], b: &[ChatMessage]) -> usize {
    let mut bytes = 0;
    for (x, y) in a.iter().zip(b) {
        if x == y {
            bytes += x.content.len() + 1;
            continue;
        }
        if x.role == y.role && x.tool_calls.is_empty() && y.tool_calls.is_empty() {
            bytes += common_prefix(&x.content, &y.content);
        }
        break;
    }
    bytes
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(turns: &[&str]) -> Vec<ChatMessage> {
        let mut m = vec![ChatMessage::system("You are terse.")];
        for (i, t) in turns.iter().enumerate() {
            m.push(if i % 2 == 0 {
                ChatMessage::user(*t)
            } else {
                ChatMessage::assistant(*t)
            });
        }
        m
    }

    #[test]
    fn a_conversations_next_turn_prefers_the_instance_that_had_it() {
        let a = Affinity::new(3);
        a.record(0, &chat(&["What is 2 + 2?"]));
        a.record(1, &chat(&["Name a colour.", "Blue.", "Another?"]));
        a.record(2, &chat(&["Name a colour."]));
        let mut order = vec![0, 1, 2];
        a.prefer(
            &mut order,
            &chat(&["Name a colour.", "Blue.", "Another?", "Green.", "More?"]),
        );
        assert_eq!(order, [1, 2, 0]);
    }

    #[test]
    fn equal_shares_keep_the_harness_order_and_a_repeat_goes_home() {
        let a = Affinity::new(4);
        for i in 0..4 {
            a.record(i, &chat(&[&format!("Question {i}")]));
        }
        // Only the system message in common, everywhere: the order stands.
        let mut order = vec![2, 3, 0, 1];
        a.prefer(&mut order, &chat(&["Something else"]));
        assert_eq!(order, [2, 3, 0, 1]);
        // The same prompt again goes where it was.
        let mut order = vec![2, 3, 0, 1];
        a.prefer(&mut order, &chat(&["Question 0"]));
        assert_eq!(order[0], 0);
    }

    #[test]
    fn shared_bytes_count_whole_messages_then_a_common_beginning() {
        let a = vec![ChatMessage::system("ab"), ChatMessage::user("hello there")];
        let b = vec![ChatMessage::system("ab"), ChatMessage::user("hello world")];
        assert_eq!(shared_bytes(&a, &b), 3 + 6);
        let other_role = vec![ChatMessage::system("ab"), ChatMessage::assistant("hello")];
        assert_eq!(shared_bytes(&a, &other_role), 3);
        assert_eq!(shared_bytes(&a, &[]), 0);
    }
}
