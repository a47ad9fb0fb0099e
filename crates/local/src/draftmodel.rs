//! Draft-model drafting (`--spec-type draft`, `--model-draft`): a second,
//! smaller GGUF with the same vocabulary, on its own llama.cpp context on
//! the lane's worker thread, proposes the next tokens greedily; the decode
//! loop (`batch`) verifies them exactly as it verifies prompt-lookup
//! drafts, so the answer never depends on the draft model.
//!
//! The draft context holds one sequence: the tokens of the sequence being
//! drafted for (prompt, answer so far, its pending token). Before each
//! proposal it keeps the longest common prefix of what it holds and the
//! sequence's tokens, cuts the rest (the previous proposal's rejected
//! drafts, or another lane's tokens in a pool) and decodes what is
//! missing, then decodes its own picks one at a time. Its steps are not
//! covered by the lane's abort callback: a draft model is small, and its
//! steps between two of the lane's are the lane's own latency, bounded by
//! `--draft-max` single-row steps (and, once per job, the prompt in
//! `batch_size` chunks).
//!
//! The vocabularies must agree (`check_vocab`): the same vocabulary type,
//! the same size and the same text for every token; otherwise the lane
//! refuses to start, naming both files ([`LocalError::DraftVocab`]).
//!
//! This module must not pick, stream or count the lane's tokens.

use super::LocalError;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use std::path::Path;

/// The draft model's context and what it holds.
pub(super) struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    /// Tokens whose cells the draft context holds, at positions 0..len.
    cached: Vec<LlamaToken>,
    n_ctx: usize,
}

impl<'m> DraftModel<'m> {
    pub(super) fn new(ctx: LlamaContext<'m>, batch_size: usize) -> Self {
        let batch_size = batch_size.max(1);
        let n_ctx = ctx.n_ctx() as usize;
        Self {
            ctx,
            batch: LlamaBatch::new(batch_size, 1),
            batch_size,
            cached: Vec::new(),
            n_ctx,
        }
    }

    /// Up to `k` greedy drafts following `history` into `out` (cleared
    /// first); none when `history` does not fit the draft context or a
    /// decode fails (drafting is only ever a guess). On a sequence's
    /// `first` proposal, returns the time spent bringing the draft context
    /// to its prompt: a one-time entry cost, not what its drafts cost (the
    /// caller leaves it out of a draft row's measured cost; catching up on
    /// tokens kept since the last proposal stays in).
    pub(super) fn propose(
        &mut self,
        history: &[LlamaToken],
        k: usize,
        out: &mut Vec<LlamaToken>,
        first: bool,
    ) -> std::time::Duration {
        out.clear();
        let started = std::time::Instant::now();
        if k == 0 || history.is_empty() || history.len() + k >= self.n_ctx {
            return std::time::Duration::ZERO;
        }
        let synced = self.sync(history);
        let fill = if first {
            started.elapsed()
        } else {
            std::time::Duration::ZERO
        };
        if synced.is_none() {
            self.forget();
            return fill;
        }
        let mut logits_row = self.batch.n_tokens() - 1;
        for i in 0..k {
            let logits = self.ctx.get_logits_ith(logits_row);
            let pick = argmax(logits);
            out.push(LlamaToken(pick as i32));
            if i + 1 == k {
                break;
            }
            self.batch.clear();
            let pos = self.cached.len() as i32;
            if self
                .batch
                .add(LlamaToken(pick as i32), pos, &[0], true)
                .is_err()
                || self.ctx.decode(&mut self.batch).is_err()
            {
                self.forget();
                return fill;
            }
            self.cached.push(LlamaToken(pick as i32));
            logits_row = 0;
        }
        fill
    }

    /// Makes the context hold `history`, the last token's logits in the
    /// batch's last row.
    fn sync(&mut self, history: &[LlamaToken]) -> Option<()> {
        let common = self
            .cached
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            // At least the last token is decoded again, for its logits.
            .min(history.len() - 1);
        if common < self.cached.len() {
            self.ctx
                .kv_cache_seq_rm(0, Some(common as u32), None)
                .ok()?;
            self.cached.truncate(common);
        }
        let rest = &history[common..];
        for chunk in rest.chunks(self.batch_size) {
            self.batch.clear();
            let last_chunk = self.cached.len() + chunk.len() == history.len();
            for (j, &t) in chunk.iter().enumerate() {
                let pos = (self.cached.len() + j) as i32;
                let logits = last_chunk && j + 1 == chunk.len();
                self.batch.add(t, pos, &[0], logits).ok()?;
            }
            self.ctx.decode(&mut self.batch).ok()?;
            self.cached.extend_from_slice(chunk);
        }
        Some(())
    }

    fn forget(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
    }
}

/// The first largest logit.
fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best
}

/// The draft model's vocabulary must be the lane model's: the same type,
/// size and token texts (a draft in another vocabulary would be other
/// tokens). Checks every token's text, as bytes.
pub(super) fn check_vocab(
    model: &LlamaModel,
    model_path: &Path,
    draft: &LlamaModel,
    draft_path: &Path,
) -> Result<(), LocalError> {
    let refuse = |detail: String| LocalError::DraftVocab {
        model: model_path.to_path_buf(),
        draft: draft_path.to_path_buf(),
        detail,
    };
    let (kind, draft_kind) = (model.vocab().vocab_type(), draft.vocab().vocab_type());
    if kind != draft_kind {
        return Err(refuse(format!(
            "vocabulary types differ ({kind:?} and {draft_kind:?})"
        )));
    }
    let (n, m) = (model.n_vocab(), draft.n_vocab());
    if n != m {
        return Err(refuse(format!("{n} tokens and {m} tokens")));
    }
    let (mut a, mut b) = (Vec::with_capacity(32), Vec::with_capacity(32));
    for id in 0..n {
        let t = LlamaToken(id);
        a.clear();
        b.clear();
        model.vocab().token_to_piece_into(t, &mut a, true, None);
        draft.vocab().token_to_piece_into(t, &mut b, true, None);
        if a != b {
            return Err(refuse(format!(
                "token {id} is {:?} in one and {:?} in the other",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            )));
        }
    }
    Ok(())
}
