//! The prompt's stages in the decode loop, from a job's start to its
//! first answer token: the cells it starts from (the sequence's cached
//! prefix, or a conversation the prompt cache kept, `prompt_cache`), its
//! chunks put into each step's batch in turn (with the job's prompt
//! progress), the scores of a job that scores its prompt, and the
//! prompt's last row, where a consensus's samples get their sequences and
//! every sample its first token.
//!
//! It owns the prompt cache and whose prompt goes first into a step. It
//! must not decode or sample itself: the loop (`batch`) decodes the
//! batch, and every first token goes through its `sample` and `advance`.

use super::{Active, Branch, Engine, Entry};
use crate::prepare;
use crate::prompt_cache::{reusable, PromptCache};
use crate::signals;
use crate::utf8::Utf8Stream;
use crate::{LocalError, PromptProgress};
use edgecloud_core::lane::PromptScore;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::LlamaStateSeqFlags;
use std::time::Instant;

impl Engine<'_> {
    /// Keeps up to `bytes` of the conversations sequences move on from
    /// (`prompt_cache`; 0: none).
    pub(crate) fn with_prompt_cache(mut self, bytes: usize) -> Self {
        self.prompt_cache = PromptCache::new(bytes);
        self
    }

    /// Before a starting job's first step: the cells its prompt starts
    /// from on `seq`. A job that scores its prompt starts from none; any
    /// other reads its prompt's length out (a two-stage cascade) and
    /// starts from the longest prefix the sequence or the prompt cache
    /// holds.
    pub(super) fn enter_prompt(&mut self, seq: usize, active: &mut Active) {
        if active.job.sampling.score_prompt {
            // Every prompt token is scored, so none is taken from the cache.
            self.recall(seq, &active.tokens, false);
            self.forget_cells(seq);
        } else {
            // A two-stage cascade on the prompt's length reads it before
            // any of the prompt is decoded.
            if let Some(sink) = active.job.on_prompt_score.take() {
                sink(PromptScore {
                    tokens: active.tokens.len() as u32,
                    logprob: None,
                });
            }
            if active.job.stop_reason().is_none() {
                self.recall(seq, &active.tokens, true);
                active.branches[0].out.reused = self.reuse_prefix(seq, &active.tokens);
            }
        }
        active.branches[0].len = self.seqs[seq].cached.len();
    }

    /// Before a job's prompt on `seq` (see `prompt_cache`): saves the
    /// sequence's cells when the job would drop enough of them, then,
    /// when the job reuses cells at all (`reuse`; one that scores its
    /// prompt does not), restores the saved conversation that shares the
    /// most with `prompt`, when it shares enough more than the sequence.
    fn recall(&mut self, seq: usize, prompt: &[LlamaToken], reuse: bool) {
        let Some(cache) = self.prompt_cache.as_mut() else {
            return;
        };
        let id = seq as i32;
        let held = &self.seqs[seq].cached;
        let own = if reuse { reusable(held, prompt) } else { 0 };
        if cache.wants(held, own) {
            let started = Instant::now();
            match self.ctx.state_seq_get(id, LlamaStateSeqFlags::empty()) {
                Ok(state) => {
                    tracing::debug!(
                        target: "edgecloud::local::prompt_cache",
                        seq,
                        tokens = held.len(),
                        bytes = state.byte_len(),
                        took_us = started.elapsed().as_micros() as u64,
                        "saved a conversation"
                    );
                    cache.insert(held.clone(), state);
                }
                Err(e) => tracing::debug!(seq, error = %e, "a sequence's cells could not be saved"),
            }
        }
        if !reuse {
            return;
        }
        let Some((tokens, state)) = cache.take_best(prompt, own) else {
            return;
        };
        let started = Instant::now();
        let _ = self.ctx.kv_cache_seq_rm(id, None, None);
        self.seqs[seq].cached.clear();
        match self.ctx.state_seq_set(&state, id) {
            Ok(()) => {
                tracing::debug!(
                    target: "edgecloud::local::prompt_cache",
                    seq,
                    restored = tokens.len(),
                    own,
                    took_us = started.elapsed().as_micros() as u64,
                    entries = cache.len(),
                    bytes = cache.bytes(),
                    "restored a saved conversation"
                );
                self.seqs[seq].cached = tokens;
            }
            Err(e) => {
                let _ = self.ctx.kv_cache_seq_rm(id, None, None);
                tracing::warn!(seq, error = %e, "a saved conversation could not be restored");
            }
        }
    }

    /// Keeps the longest common prefix of the sequence's cache and
    /// `tokens` (leaving at least one token to decode, for fresh logits)
    /// and drops the rest of its cells. Returns how many are reused.
    fn reuse_prefix(&mut self, seq: usize, tokens: &[LlamaToken]) -> usize {
        let cached = &self.seqs[seq].cached;
        let common = reusable(cached, tokens);
        if common < cached.len() && !self.cut(seq, common) {
            return 0;
        }
        self.seqs[seq].cached.truncate(common);
        common
    }

    /// Drops every cell of the sequence.
    fn forget_cells(&mut self, seq: usize) {
        if !self.seqs[seq].cached.is_empty() {
            self.cut(seq, 0);
            self.seqs[seq].cached.clear();
        }
    }

    /// Puts prompt chunks into the batch after the generating branches'
    /// tokens, one per sequence whose prompt is not yet decoded, in turn,
    /// up to `batch_size` prompt tokens; each job hears its prompt
    /// progress first.
    pub(super) fn add_prompt_chunks(&mut self, entries: &mut Vec<Entry>) {
        // With layers on a GPU device, as many as keep the step near its
        // time target (`step_size`).
        let rows = usize::try_from(self.batch.n_tokens()).unwrap_or(0);
        let mut budget = self.step_size.prompt_tokens(self.batch_size, rows);
        let n = self.seqs.len();
        for turn in 0..n {
            if budget == 0 {
                break;
            }
            let seq = (self.prompt_turn + turn) % n;
            let s = &mut self.seqs[seq];
            let Some(active) = s.active.as_mut().filter(|a| !a.prompt_done) else {
                continue;
            };
            let done = s.cached.len();
            let total = active.tokens.len();
            if let Some(report) = active.progress.as_mut() {
                report(PromptProgress {
                    done: done as u32,
                    total: total as u32,
                });
            }
            let take = (total - done).min(budget);
            let chunk = active.tokens[done..done + take].to_vec();
            let last = done + take == total;
            let scores = active.job.sampling.score_prompt;
            let first_row = self.batch.n_tokens();
            for (j, &token) in chunk.iter().enumerate() {
                self.batch
                    .add(
                        token,
                        (done + j) as i32,
                        &[seq as i32],
                        scores || (last && j + 1 == take),
                    )
                    .expect("prompt chunks fit the batch's prompt budget");
            }
            budget -= take;
            entries.push(Entry {
                seq,
                branch: 0,
                logits: last.then(|| first_row + take as i32 - 1),
                tokens: chunk,
                drafts: Vec::new(),
                draft_row: 0,
                score_row: scores.then_some(first_row),
            });
        }
        self.prompt_turn = (self.prompt_turn + 1) % n;
    }

    /// A prompt chunk of a job that scores its prompt is decoded: each of
    /// its rows gives the log-probability of the prompt token that follows
    /// it (the prompt's last row predicts the answer, not the prompt, and
    /// is left out). Runs before the chunk joins the cache, so the cache's
    /// length is the chunk's first position.
    pub(super) fn score_prompt_chunk(&mut self, entry: &Entry, first_row: i32) {
        let start = self.seqs[entry.seq].cached.len();
        let Some(a) = self.seqs[entry.seq].active.as_mut() else {
            return;
        };
        for j in 0..entry.tokens.len() {
            let Some(&next) = a.tokens.get(start + j + 1) else {
                break;
            };
            let logits = self.ctx.get_logits_ith(first_row + j as i32);
            let logprob = signals::token_logprob(logits, next.0 as usize);
            a.branches[0].out.prompt_token_scored(logprob);
        }
    }

    /// The prompt's last row of logits is in: the prompt's figures, the
    /// other samples' sequences (sharing the prompt's cells), and every
    /// sample's first token from that one row.
    pub(super) fn prompt_decoded(&mut self, seq: usize, row: i32) -> Result<(), LocalError> {
        let cached = self.seqs[seq].cached.len();
        let ids: Vec<i32> = {
            let a = self.seqs[seq]
                .active
                .as_ref()
                .expect("checked by the caller");
            (1..a.samples).map(|i| self.sample_id(seq, i)).collect()
        };
        for &id in &ids {
            // Nothing of an earlier job may be left on these ids.
            let _ = self.ctx.kv_cache_seq_rm(id, None, None);
            // Each id has a stream of its own, and llama.cpp copies
            // between streams whole: the source's stream holds the prompt
            // and nothing else (a reused prefix's tail was cut before it).
            self.ctx
                .kv_cache_seq_cp(seq as i32, id, None, None)
                .map_err(|e| LocalError::Decode {
                    detail: format!("sharing the prompt's cells with a sample: {e}"),
                })?;
        }
        let model = self.model;
        let a = self.seqs[seq]
            .active
            .as_mut()
            .expect("checked by the caller");
        a.prompt_done = true;
        let first = &mut a.branches[0];
        first.out.prompt_eval = a.prompt_started.elapsed();
        first.out.prompt_decoded = cached.saturating_sub(first.out.reused);
        if let Some(report) = a.progress.as_mut() {
            let total = a.tokens.len() as u32;
            report(PromptProgress { done: total, total });
        }
        // A two-stage cascade reads the prompt's score before any answer
        // token exists.
        if let (Some(score), Some(sink)) = (
            a.branches[0].out.prompt_logprob(),
            a.job.on_prompt_score.take(),
        ) {
            sink(PromptScore {
                tokens: a.tokens.len() as u32,
                logprob: Some(score),
            });
        }
        for (i, &id) in ids.iter().enumerate() {
            let (picker, stops) = prepare::sample_parts(
                model,
                self.grammar_pass,
                &a.job,
                a.grammar.as_ref(),
                a.tools.as_ref(),
                i as u32 + 1,
            )?;
            let out = a.branches[0].out.clone();
            a.branches.push(Branch {
                seq_id: id,
                len: cached,
                think: out.stream_splitter(),
                out,
                pending: None,
                picker,
                stops,
                utf8: Utf8Stream::default(),
                ended: None,
                drafter: None,
            });
        }
        for branch in 0..a.branches.len() {
            let next = self.sample(seq, branch, row, None);
            self.advance(seq, branch, next);
            if self.seqs[seq].active.is_none() {
                break;
            }
        }
        Ok(())
    }
}
