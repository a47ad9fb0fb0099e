//! `tiny-think`: a reasoning model whose every answer is known, for
//! testing how thinking is kept apart from answers without a real
//! reasoning GGUF (none small enough is packaged).
//!
//! Its chat template opens `<think>` for the model, as Qwen3's and
//! DeepSeek-R1's do, and its weights are not random but scripted: every
//! layer's output projections are zero, so the hidden state is the current
//! token's embedding, each token of the script has an embedding of its own
//! (one dimension set), and the untied output head maps that dimension to
//! the next token of the script. Greedy decoding therefore writes
//! [`THINKING`], `</think>`, [`ANSWER`] and ends the turn, whatever the
//! prompt. The thinking's tokens are unlikely (each about -3.1 nats) and
//! the answer's near certain (about -1e-6), so a scorer judging the whole
//! text and one judging the answer alone disagree: the tests use that.

use super::super::vocab::{CHATML_TEMPLATE, IM_END_ID, MIN_VOCAB};

/// The thinking the model writes.
pub const THINKING: &str = "Sum=4?";
/// The answer it writes after `</think>`.
pub const ANSWER: &str = "FOUR";

/// ChatML, with the assistant's turn opened inside `<think>`.
pub(super) fn template() -> String {
    CHATML_TEMPLATE.replace(
        "'<|im_start|>assistant\\n'",
        "'<|im_start|>assistant\\n<think>\\n'",
    )
}

/// Output weights: thinking tokens get logit 8 * 0.4 = 3.2 over 511 zeros
/// (p ~ 0.046); answer tokens and the end logit 8 * 2.5 = 20 (p ~ 1).
const W_THINKING: f32 = 0.4;
const W_ANSWER: f32 = 2.5;

/// The script's token ids: one byte token per character (ids 3 + byte in
/// the generated vocabulary), no token twice, none a newline (the
/// prompt's last token, which must start the script).
fn script() -> Vec<u32> {
    let text = format!("{THINKING}</think>{ANSWER}");
    let ids: Vec<u32> = text.bytes().map(|b| 3 + u32::from(b)).collect();
    debug_assert!(ids.iter().all(|&id| (id as usize) < MIN_VOCAB));
    debug_assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len(),
        ids.len(),
        "a scripted token appears twice"
    );
    ids
}

/// The scripted values of a tensor of shape `dims` (ggml order: row
/// length first), or `None` for one the preset fills as `tiny` does
/// (norms of 1, small random values).
pub(super) fn values(name: &str, dims: &[u64]) -> Option<Vec<f32>> {
    let n: usize = dims.iter().product::<u64>() as usize;
    // The layers add nothing to the residual stream.
    if name.ends_with("attn_output.weight") || name.ends_with("ffn_down.weight") {
        return Some(vec![0.0; n]);
    }
    if name != "token_embd.weight" && name != "output.weight" {
        return None;
    }
    let (n_embd, n_vocab) = (dims[0] as usize, dims[1] as usize);
    let script = script();
    assert!(
        script.len() < n_embd,
        "the script needs a dimension per token"
    );
    // Dimension 0 is every token off the script; script token i has i + 1.
    let slot = |id: u32| script.iter().position(|&s| s == id).map_or(0, |i| i + 1);
    let mut v = vec![0.0; n_vocab * n_embd];
    if name == "token_embd.weight" {
        for t in 0..n_vocab {
            v[t * n_embd + slot(t as u32)] = 1.0;
        }
        return Some(v);
    }
    // From off the script (the prompt) to its first token; along the
    // script; from its last token to the end of the turn.
    let thinking_len = script.len() - ANSWER.len();
    let mut next = |to: u32, from_slot: usize, w: f32| v[to as usize * n_embd + from_slot] = w;
    next(script[0], 0, W_THINKING);
    for (i, &to) in script.iter().enumerate().skip(1) {
        next(
            to,
            i,
            if i < thinking_len {
                W_THINKING
            } else {
                W_ANSWER
            },
        );
    }
    next(IM_END_ID, script.len(), W_ANSWER);
    Some(v)
}
